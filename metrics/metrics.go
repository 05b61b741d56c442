// SPDX-License-Identifier: MIT

// Package metrics exports mptun's metrics in the Prometheus text format.
//
// The data path never touches a metric: it bumps plain atomics in a
// PathStats, and WriteText reads them when Prometheus scrapes. The format
// is written here rather than with client_golang, which with its protobuf
// dependencies doubled the daemon's size on CPE routers.
package metrics

import (
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const namespace = "mptun"

// PathStats are one path's counters and gauges, written by the data path
// and read at scrape time.
type PathStats struct {
	TxPackets, TxBytes atomic.Uint64
	RxPackets, RxBytes atomic.Uint64
	Lost               atomic.Uint64 // packets declared lost
	ECNCE              atomic.Uint64 // packets received with CE
	SRTT, MinRTT       atomic.Int64  // nanoseconds
	Cwnd               atomic.Int64  // bytes
	PacingRate         atomic.Uint64 // bytes per second
	Up                 atomic.Bool
}

// SetRTT stores the RTT estimates.
func (p *PathStats) SetRTT(srtt, minRTT time.Duration) {
	p.SRTT.Store(int64(srtt))
	p.MinRTT.Store(int64(minRTT))
}

// PathKey names a path: Conn tells connections apart on a concentrator
// ("" on a client), Path is the configured path name.
type PathKey struct{ Conn, Path string }

// Drop directions and reasons. Reasons are a fixed set so that the label
// stays bounded.
const (
	DirTx = "tx" // TUN towards the paths
	DirRx = "rx" // paths towards the TUN
)

// DropReasons are the known values of the reason label.
var DropReasons = []string{"queue_full", "aqm", "too_big", "no_path", "malformed", "unknown_conn", "auth", "duplicate", "late", "ecn_not_ect", "tun_error", "socket_error",
	"replay", "handshake", "unknown_peer", "downgrade", "rate_limited", "inner_source"}

// Set holds all of mptun's own metrics.
type Set struct {
	mu    sync.Mutex
	paths map[PathKey]*PathStats

	drops map[[2]string]*atomic.Uint64

	// Reorder buffer state, summed over connections.
	ReorderBuffered atomic.Int64
	ReorderTimeouts atomic.Uint64
	ReorderLate     atomic.Uint64

	// TimerLateness is how late the data path's deadline timer fired, in
	// seconds (Observe does not allocate).
	TimerLateness *Histogram
}

// NewSet creates an empty set.
func NewSet() *Set {
	s := &Set{
		paths:         map[PathKey]*PathStats{},
		drops:         map[[2]string]*atomic.Uint64{},
		TimerLateness: NewHistogram([]float64{10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3}),
	}
	for _, dir := range []string{DirTx, DirRx} {
		for _, r := range DropReasons {
			s.drops[[2]string{dir, r}] = new(atomic.Uint64)
		}
	}
	return s
}

// Path returns the stats of a path, creating them on first use. Callers
// keep the pointer; the lookup is not for the per-packet path.
func (s *Set) Path(k PathKey) *PathStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paths[k]
	if p == nil {
		p = new(PathStats)
		s.paths[k] = p
	}
	return p
}

// RemovePath stops exporting a path (e.g. when its connection closes).
func (s *Set) RemovePath(k PathKey) {
	s.mu.Lock()
	delete(s.paths, k)
	s.mu.Unlock()
}

// RetainPaths stops exporting every path not in keep (those of closed
// connections and removed paths), so a reconnecting CPE does not leave a
// label set behind each time. It returns how many went.
func (s *Set) RetainPaths(keep map[PathKey]bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.paths {
		if !keep[k] {
			delete(s.paths, k)
			n++
		}
	}
	return n
}

// Paths lists the known paths in a stable order.
func (s *Set) Paths() []PathKey {
	s.mu.Lock()
	keys := make([]PathKey, 0, len(s.paths))
	for k := range s.paths {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	slices.SortFunc(keys, func(a, b PathKey) int {
		if c := strings.Compare(a.Conn, b.Conn); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return keys
}

// Drop returns the counter for a direction and reason; keep the pointer.
// An unknown reason is counted as "malformed" so that labels stay bounded.
func (s *Set) Drop(direction, reason string) *atomic.Uint64 {
	if c := s.drops[[2]string{direction, reason}]; c != nil {
		return c
	}
	if direction != DirTx {
		direction = DirRx
	}
	return s.drops[[2]string{direction, "malformed"}]
}

// pathMetric is one per-path series family.
type pathMetric struct {
	name, help, typ string
	value           func(p *PathStats) float64
}

var pathMetrics = []pathMetric{
	{"path_tx_packets_total", "Packets sent on the path.", counter, func(p *PathStats) float64 { return float64(p.TxPackets.Load()) }},
	{"path_tx_bytes_total", "Bytes sent on the path (UDP payload).", counter, func(p *PathStats) float64 { return float64(p.TxBytes.Load()) }},
	{"path_rx_packets_total", "Packets received on the path.", counter, func(p *PathStats) float64 { return float64(p.RxPackets.Load()) }},
	{"path_rx_bytes_total", "Bytes received on the path (UDP payload).", counter, func(p *PathStats) float64 { return float64(p.RxBytes.Load()) }},
	{"path_lost_packets_total", "Packets declared lost on the path.", counter, func(p *PathStats) float64 { return float64(p.Lost.Load()) }},
	{"path_ecn_ce_total", "Packets received with ECN CE on the path.", counter, func(p *PathStats) float64 { return float64(p.ECNCE.Load()) }},
	{"path_srtt_seconds", "Smoothed round-trip time.", gauge, func(p *PathStats) float64 { return time.Duration(p.SRTT.Load()).Seconds() }},
	{"path_min_rtt_seconds", "Minimum round-trip time.", gauge, func(p *PathStats) float64 { return time.Duration(p.MinRTT.Load()).Seconds() }},
	{"path_cwnd_bytes", "Congestion window.", gauge, func(p *PathStats) float64 { return float64(p.Cwnd.Load()) }},
	{"path_pacing_rate_bytes_per_second", "Pacing rate.", gauge, func(p *PathStats) float64 { return float64(p.PacingRate.Load()) }},
	{"path_up", "1 if the path is usable.", gauge, func(p *PathStats) float64 {
		if p.Up.Load() {
			return 1
		}
		return 0
	}},
}

// WriteText writes the set in the Prometheus text exposition format.
func (s *Set) WriteText(w io.Writer) error {
	t := newTextWriter(w)
	keys := s.Paths()
	stats := make([]*PathStats, len(keys))
	s.mu.Lock()
	for i, k := range keys {
		stats[i] = s.paths[k]
	}
	s.mu.Unlock()
	for _, m := range pathMetrics {
		name := namespace + "_" + m.name
		t.header(name, m.help, m.typ)
		for i, k := range keys {
			if stats[i] != nil {
				t.sample(name, m.value(stats[i]), "conn", k.Conn, "path", k.Path)
			}
		}
	}
	drops := namespace + "_dropped_packets_total"
	t.header(drops, "Inner packets dropped, by direction and reason.", counter)
	for _, dir := range []string{DirRx, DirTx} {
		reasons := slices.Sorted(slices.Values(DropReasons))
		for _, r := range reasons {
			t.sample(drops, float64(s.drops[[2]string{dir, r}].Load()), "direction", dir, "reason", r)
		}
	}
	t.single(namespace+"_reorder_buffered_packets", "Packets waiting in reorder buffers.", gauge, float64(s.ReorderBuffered.Load()))
	t.single(namespace+"_reorder_timeouts_total", "Reorder gaps skipped after the hold time.", counter, float64(s.ReorderTimeouts.Load()))
	t.single(namespace+"_reorder_late_drops_total", "Packets that arrived after their gap was skipped and were dropped.", counter, float64(s.ReorderLate.Load()))
	s.TimerLateness.write(t, namespace+"_timer_lateness_seconds", "How late the data path's deadline timer fired.")
	return t.flush()
}
