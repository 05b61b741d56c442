// SPDX-License-Identifier: MIT

package metrics

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads an exposition with Prometheus's own text parser, the
// independent check that what WriteText writes is what a server reads.
func parse(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, text)
	}
	return mfs
}

func write(t *testing.T, s *Set) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if err := WriteRuntime(&buf, "v-test"); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// promlint finds no problem with the names, types, units and help texts.
func TestLint(t *testing.T) {
	set := NewSet()
	set.Path(PathKey{"", "dsl"}).TxPackets.Add(1)
	set.TimerLateness.Observe(0.0002)
	problems, err := promlint.New(bytes.NewReader(write(t, set))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// value finds the sample of family name whose labels include want.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func TestValues(t *testing.T) {
	set := NewSet()
	p := set.Path(PathKey{"", "dsl"})
	p.TxPackets.Add(3)
	p.TxBytes.Add(4500)
	p.SetRTT(25*time.Millisecond, 20*time.Millisecond)
	p.Cwnd.Store(30000)
	p.Up.Store(true)
	if set.Path(PathKey{"", "dsl"}) != p {
		t.Fatal("Path does not return the same stats")
	}
	set.Path(PathKey{"c\"1\\\n", "lte"}).RxPackets.Add(7) // a label value that needs escaping
	set.Drop(DirRx, "unknown_conn").Add(2)
	set.Drop(DirRx, "no-such-reason").Add(1)
	set.ReorderTimeouts.Add(5)
	set.TimerLateness.Observe(0.0003)
	set.TimerLateness.Observe(0.02)

	mfs := parse(t, write(t, set))
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"mptun_path_tx_bytes_total", map[string]string{"path": "dsl"}, 4500},
		{"mptun_path_tx_packets_total", map[string]string{"path": "dsl", "conn": ""}, 3},
		{"mptun_path_srtt_seconds", map[string]string{"path": "dsl"}, 0.025},
		{"mptun_path_min_rtt_seconds", map[string]string{"path": "dsl"}, 0.020},
		{"mptun_path_cwnd_bytes", map[string]string{"path": "dsl"}, 30000},
		{"mptun_path_up", map[string]string{"path": "dsl"}, 1},
		{"mptun_path_rx_packets_total", map[string]string{"conn": "c\"1\\\n", "path": "lte"}, 7},
		{"mptun_reorder_timeouts_total", nil, 5},
		{"mptun_dropped_packets_total", map[string]string{"direction": "rx", "reason": "unknown_conn"}, 2},
		{"mptun_dropped_packets_total", map[string]string{"direction": "rx", "reason": "malformed"}, 1},
		{"mptun_build_info", map[string]string{"version": "v-test"}, 1},
	} {
		if got, ok := value(mfs, tt.name, tt.labels); !ok || got != tt.want {
			t.Errorf("%s%v = %v (found %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	if _, ok := value(mfs, "mptun_dropped_packets_total", map[string]string{"reason": "no-such-reason"}); ok {
		t.Error("unbounded reason label exported")
	}
	if n := len(mfs["mptun_dropped_packets_total"].Metric); n != 2*len(DropReasons) {
		t.Errorf("%d drop series, want %d", n, 2*len(DropReasons))
	}
	h := mfs["mptun_timer_lateness_seconds"].Metric[0].GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-0.0203) > 1e-12 {
		t.Errorf("histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 0.0003 {
			want = 1
		}
		if b.GetUpperBound() >= 0.02 {
			want = 2
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} {
		if v, ok := value(mfs, name, nil); !ok || v <= 0 {
			t.Errorf("%s = %v (found %v)", name, v, ok)
		}
	}

	set.RemovePath(PathKey{"", "dsl"})
	if _, ok := value(parse(t, write(t, set)), "mptun_path_up", map[string]string{"path": "dsl"}); ok {
		t.Error("path_up series after RemovePath")
	}
}

func TestHTTP(t *testing.T) {
	set := NewSet()
	set.Path(PathKey{"c1", "lte"}).RxPackets.Add(7)
	writeAll := func(w io.Writer) error {
		if err := set.WriteText(w); err != nil {
			return err
		}
		return WriteRuntime(w, "v0.1.0-test")
	}
	s, err := ListenHTTP("127.0.0.1:0", writeAll, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != ContentType || resp.StatusCode != 200 {
		t.Errorf("status %d, content type %q", resp.StatusCode, ct)
	}
	for _, want := range []string{
		`mptun_path_rx_packets_total{conn="c1",path="lte"} 7`,
		`mptun_build_info{go="go`,
		`version="v0.1.0-test"} 1`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	parse(t, body)
	resp, err = http.Post("http://"+s.Addr().String()+"/metrics", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d", resp.StatusCode)
	}
	if _, err := ListenHTTP(s.Addr().String(), writeAll, nil); err == nil {
		t.Error("second listener on the same port succeeded")
	}
}

// Scraping allocates, but observing and counting on the data path do not.
func TestObserveDoesNotAllocate(t *testing.T) {
	set := NewSet()
	p := set.Path(PathKey{"", "dsl"})
	drop := set.Drop(DirTx, "aqm")
	if a := testing.AllocsPerRun(1000, func() {
		set.TimerLateness.Observe(0.0001)
		p.TxPackets.Add(1)
		drop.Add(1)
	}); a != 0 {
		t.Errorf("%v allocations", a)
	}
}

func TestRetainPathsDropsClosedConnections(t *testing.T) {
	s := NewSet()
	old := PathKey{Conn: "0000abcd", Path: "1"}
	cur := PathKey{Conn: "0000beef", Path: "1"}
	s.Path(old).Up.Store(true)
	s.Path(cur).Up.Store(true)
	if n := s.RetainPaths(map[PathKey]bool{cur: true}); n != 1 {
		t.Fatalf("removed %d", n)
	}
	if got := s.Paths(); len(got) != 1 || got[0] != cur {
		t.Fatalf("paths %v", got)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), old.Conn) || !strings.Contains(b.String(), `conn="`+cur.Conn+`"`) {
		t.Errorf("exposition after RetainPaths:\n%s", b.String())
	}
}
