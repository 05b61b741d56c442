// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

// TestShortDemo runs the shipped demo scenario at a quarter of its length
// (15 s per peer, the LTE blackhole from 5 to 10 s) with kernel MPTCP and
// mptun, as `make demo` does, and checks the report.
func TestShortDemo(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ethtool", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	out := filepath.Join(tmp, "lab-out", "demo")
	// A relative --out from another working directory, as `make demo` uses.
	cfg, err := filepath.Abs("../configs/lab/demo.toml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "mptun"), "lab", "run", cfg,
		"--scale", "0.25", "--peers", "mptcp,mptun", "--out", "lab-out/demo")
	cmd.Dir = tmp
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mptun lab run: %v\n%s", err, log)
	}
	t.Logf("%s", lastLines(string(log), 14))

	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Runs []struct {
			Peer        string   `json:"peer"`
			Goodput     float64  `json:"goodput_mbps"`
			Capacity    float64  `json:"capacity_sum_mbps"`
			Aggregation float64  `json:"aggregation"`
			VsMPTCP     *float64 `json:"vs_mptcp"`
			Error       string   `json:"error"`
			PeerMetrics *struct {
				Cwnd       map[string][]float64 `json:"cwnd_packets"`
				HoldCounts []uint64             `json:"hold_counts"`
			} `json:"peer_metrics"`
			Probe *struct {
				Lost     int     `json:"lost"`
				MaxGapMs float64 `json:"max_gap_ms"`
				OOO      float64 `json:"ooo_fraction"`
				OWD      struct {
					P50 float64 `json:"p50"`
					P99 float64 `json:"p99"`
				} `json:"owd_ms"`
			} `json:"probe"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs in results.json", len(res.Runs))
	}
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Peer, r.Error)
		}
		if r.Probe == nil {
			t.Fatalf("%s: no probe results", r.Peer)
		}
		if _, err := os.Stat(filepath.Join(out, r.Peer, "throughput.png")); err != nil {
			t.Errorf("%s: %v", r.Peer, err)
		}
	}
	m := res.Runs[1]
	if m.Peer != "mptun" || m.VsMPTCP == nil {
		t.Fatalf("second run %q has no vs_mptcp", m.Peer)
	}
	if pm := m.PeerMetrics; pm == nil || len(pm.Cwnd) != 2 || len(pm.HoldCounts) == 0 {
		t.Errorf("mptun peer_metrics (cwnd per path, reorder hold) missing: %+v", pm)
	}
	// Capacity averages 46 Mbit/s outside the blackhole and 16 inside.
	if m.Aggregation < 0.25 {
		t.Errorf("mptun aggregation %.2f (goodput %.1f of %.1f Mbit/s)", m.Aggregation, m.Goodput, m.Capacity)
	}
	// The LTE path dies silently: the probe may stall for the path
	// timeout, not for the whole outage.
	if m.Probe.MaxGapMs > 4000 {
		t.Errorf("mptun handover gap %.0f ms", m.Probe.MaxGapMs)
	}
	for _, f := range []string{"owd_ccdf.png", "mptun/cwnd.png", "mptun/reorder_hold.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	for _, n := range netns.List() {
		if netns.OwnerPid(n) == cmd.Process.Pid {
			t.Errorf("namespace %s left behind", n)
		}
	}
	t.Logf("mptun %.1f Mbit/s (aggregation %.2f, %.2f x MPTCP), handover gap %.0f ms, probe lost %d",
		m.Goodput, m.Aggregation, *m.VsMPTCP, m.Probe.MaxGapMs, m.Probe.Lost)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
