// SPDX-License-Identifier: MIT

package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/lab/traffic"
)

func sample(dir string) *Results {
	owd := make([]float64, 20000)
	for i := range owd {
		owd[i] = 10 + float64(i)/1000
	}
	mk := func(peer string, goodput float64) *Run {
		return &Run{
			Peer: peer, GoodputMbps: goodput, CapacitySumMbps: 40, Dir: filepath.Join(dir, peer), BinWidth: 100 * time.Millisecond,
			Probe:       &traffic.ProbeResult{Sent: 100, Received: 98, Lost: 2, OWD: owd, OWDms: traffic.Quantiles{P50: 20, P99: 29.8}},
			Paths:       []PathRun{{Name: "a", Bins: []float64{1, 2, 3}}, {Name: "b", Bins: []float64{3, 2, 1}}},
			GoodputBins: []float64{4, 4, 4},
			Events:      []Event{{AtS: 0.15, Path: "b", Action: "blackhole"}},
		}
	}
	return &Results{Scenario: "t", Runs: []*Run{mk("none", 10), mk("mptcp", 30), mk("mptun", 36)}}
}

func TestRatiosJSONSummaryPlots(t *testing.T) {
	dir := t.TempDir()
	r := sample(dir)
	for _, run := range r.Runs {
		os.MkdirAll(run.Dir, 0o755)
	}
	r.FillRatios()
	if a := r.Runs[1].Aggregation; a != 0.75 {
		t.Errorf("aggregation %v", a)
	}
	if v := r.Runs[2].VsMPTCP; v == nil || *v != 1.2 {
		t.Errorf("vs_mptcp %v", v)
	}
	if r.Runs[0].VsMPTCP != nil || r.Runs[1].VsMPTCP != nil {
		t.Error("vs_mptcp on a non-mptun run")
	}
	if err := r.WriteJSON(dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "results.json"))
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	run := doc["runs"].([]any)[2].(map[string]any)
	if run["vs_mptcp"].(float64) != 1.2 || run["probe"].(map[string]any)["lost"].(float64) != 2 {
		t.Errorf("json run %v", run)
	}
	var sum bytes.Buffer
	r.WriteSummary(&sum)
	if !strings.Contains(sum.String(), "1.20") || !strings.Contains(sum.String(), "baseline") {
		t.Errorf("summary:\n%s", sum.String())
	}
	files, err := r.Plot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("plots %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

func TestProbeCSV(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.csv")
	pk := []traffic.ProbePacket{{Seq: 0, Sent: 1e9, Recv: 1e9 + 5e6}, {Seq: 1, Sent: 2e9}}
	if err := WriteProbeCSV(f, 0, pk); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	want := "seq,sent_s,recv_s,owd_ms\n0,1.000000,1.005000,5.000\n1,2.000000,,\n"
	if string(b) != want {
		t.Errorf("csv:\n%s\nwant:\n%s", b, want)
	}
}
