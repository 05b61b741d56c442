// SPDX-License-Identifier: MIT

package metrics

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func TestLint(t *testing.T) {
	set := NewSet()
	set.Path(PathKey{"", "dsl"}).TxPackets.Add(1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(set)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
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
	set.Drop(DirRx, "unknown_conn").Add(2)
	set.Drop(DirRx, "no-such-reason").Add(1)
	set.ReorderTimeouts.Add(5)
	set.TimerLateness.Observe(0.0003)

	for _, tt := range []struct {
		name, path string
		want       float64
	}{
		{"mptun_path_tx_bytes_total", "dsl", 4500},
		{"mptun_path_tx_packets_total", "dsl", 3},
		{"mptun_path_srtt_seconds", "dsl", 0.025},
		{"mptun_path_min_rtt_seconds", "dsl", 0.020},
		{"mptun_path_cwnd_bytes", "dsl", 30000},
		{"mptun_path_up", "dsl", 1},
		{"mptun_reorder_timeouts_total", "", 5},
	} {
		vals := values(t, set, tt.name, tt.path)
		if len(vals) != 1 || vals[0] != tt.want {
			t.Errorf("%s{path=%q} = %v, want %v", tt.name, tt.path, vals, tt.want)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(set)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mptun_dropped_packets_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue()
			switch {
			case labels["direction"] == "rx" && labels["reason"] == "unknown_conn" && v != 2,
				labels["direction"] == "rx" && labels["reason"] == "malformed" && v != 1:
				t.Errorf("drops %v = %v", labels, v)
			case labels["reason"] == "no-such-reason":
				t.Error("unbounded reason label exported")
			}
		}
	}
	set.RemovePath(PathKey{"", "dsl"})
	if v := values(t, set, "mptun_path_up", "dsl"); len(v) != 0 {
		t.Errorf("path_up series after RemovePath: %v", v)
	}
}

func TestHTTP(t *testing.T) {
	set := NewSet()
	set.Path(PathKey{"c1", "lte"}).RxPackets.Add(7)
	reg := NewRegistry(set, "v0.1.0-test")
	s, err := ListenHTTP("127.0.0.1:0", reg, nil)
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
	if _, err := ListenHTTP(s.Addr().String(), reg, nil); err == nil {
		t.Error("second listener on the same port succeeded")
	}
}

// values gathers the named metric's values, filtered by the path label
// when path is not empty.
func values(t *testing.T, c prometheus.Collector, name, path string) []float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if path != "" && !hasLabel(m, "path", path) {
				continue
			}
			switch {
			case m.Counter != nil:
				out = append(out, m.Counter.GetValue())
			case m.Gauge != nil:
				out = append(out, m.Gauge.GetValue())
			}
		}
	}
	return out
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "conn" && l.GetValue() == old.Conn {
					t.Errorf("%s still exported for the closed connection", mf.GetName())
				}
			}
		}
	}
}
