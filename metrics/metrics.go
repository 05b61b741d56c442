// SPDX-License-Identifier: MIT

// Package metrics exports mptun's Prometheus metrics and writes its
// structured event log.
//
// The data path never touches a metric vector: it bumps plain atomics in a
// PathStats, and the Collector reads them when Prometheus scrapes.
package metrics

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
var DropReasons = []string{"queue_full", "aqm", "too_big", "no_path", "malformed", "unknown_conn", "auth", "duplicate", "late", "ecn_not_ect", "tun_error", "socket_error"}

// Set holds all of mptun's metrics and is a prometheus.Collector.
type Set struct {
	mu    sync.Mutex
	paths map[PathKey]*PathStats

	drops map[[2]string]*atomic.Uint64

	// Reorder buffer state, summed over connections.
	ReorderBuffered atomic.Int64
	ReorderTimeouts atomic.Uint64
	ReorderLate     atomic.Uint64

	// TimerLateness is how late the data path's deadline timer fired
	// (Observe does not allocate).
	TimerLateness prometheus.Histogram

	descs descs
}

type descs struct {
	txPackets, txBytes, rxPackets, rxBytes, lost, ce *prometheus.Desc
	srtt, minRTT, cwnd, pacing, up                   *prometheus.Desc
	drops, buffered, timeouts, late                  *prometheus.Desc
}

// NewSet creates an empty set.
func NewSet() *Set {
	s := &Set{
		paths: map[PathKey]*PathStats{},
		drops: map[[2]string]*atomic.Uint64{},
		TimerLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "timer_lateness_seconds",
			Help:      "How late the data path's deadline timer fired.",
			Buckets:   []float64{10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3},
		}),
	}
	for _, dir := range []string{DirTx, DirRx} {
		for _, r := range DropReasons {
			s.drops[[2]string{dir, r}] = new(atomic.Uint64)
		}
	}
	pl := []string{"conn", "path"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	s.descs = descs{
		txPackets: d("path_tx_packets_total", "Packets sent on the path.", pl...),
		txBytes:   d("path_tx_bytes_total", "Bytes sent on the path (UDP payload).", pl...),
		rxPackets: d("path_rx_packets_total", "Packets received on the path.", pl...),
		rxBytes:   d("path_rx_bytes_total", "Bytes received on the path (UDP payload).", pl...),
		lost:      d("path_lost_packets_total", "Packets declared lost on the path.", pl...),
		ce:        d("path_ecn_ce_total", "Packets received with ECN CE on the path.", pl...),
		srtt:      d("path_srtt_seconds", "Smoothed round-trip time.", pl...),
		minRTT:    d("path_min_rtt_seconds", "Minimum round-trip time.", pl...),
		cwnd:      d("path_cwnd_bytes", "Congestion window.", pl...),
		pacing:    d("path_pacing_rate_bytes_per_second", "Pacing rate.", pl...),
		up:        d("path_up", "1 if the path is usable.", pl...),
		drops:     d("dropped_packets_total", "Inner packets dropped, by direction and reason.", "direction", "reason"),
		buffered:  d("reorder_buffered_packets", "Packets waiting in reorder buffers."),
		timeouts:  d("reorder_timeouts_total", "Reorder gaps skipped after the hold time."),
		late:      d("reorder_late_drops_total", "Packets that arrived after their gap was skipped and were dropped."),
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
		if a.Conn != b.Conn {
			if a.Conn < b.Conn {
				return -1
			}
			return 1
		}
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
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

// Describe implements prometheus.Collector.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	d := &s.descs
	for _, x := range []*prometheus.Desc{d.txPackets, d.txBytes, d.rxPackets, d.rxBytes, d.lost, d.ce,
		d.srtt, d.minRTT, d.cwnd, d.pacing, d.up, d.drops, d.buffered, d.timeouts, d.late} {
		ch <- x
	}
	s.TimerLateness.Describe(ch)
}

// Collect implements prometheus.Collector.
func (s *Set) Collect(ch chan<- prometheus.Metric) {
	d := &s.descs
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	s.mu.Lock()
	for k, p := range s.paths {
		counter(d.txPackets, p.TxPackets.Load(), k.Conn, k.Path)
		counter(d.txBytes, p.TxBytes.Load(), k.Conn, k.Path)
		counter(d.rxPackets, p.RxPackets.Load(), k.Conn, k.Path)
		counter(d.rxBytes, p.RxBytes.Load(), k.Conn, k.Path)
		counter(d.lost, p.Lost.Load(), k.Conn, k.Path)
		counter(d.ce, p.ECNCE.Load(), k.Conn, k.Path)
		gauge(d.srtt, time.Duration(p.SRTT.Load()).Seconds(), k.Conn, k.Path)
		gauge(d.minRTT, time.Duration(p.MinRTT.Load()).Seconds(), k.Conn, k.Path)
		gauge(d.cwnd, float64(p.Cwnd.Load()), k.Conn, k.Path)
		gauge(d.pacing, float64(p.PacingRate.Load()), k.Conn, k.Path)
		up := 0.0
		if p.Up.Load() {
			up = 1
		}
		gauge(d.up, up, k.Conn, k.Path)
	}
	s.mu.Unlock()
	for k, c := range s.drops {
		counter(d.drops, c.Load(), k[0], k[1])
	}
	gauge(d.buffered, float64(s.ReorderBuffered.Load()))
	counter(d.timeouts, s.ReorderTimeouts.Load())
	counter(d.late, s.ReorderLate.Load())
	s.TimerLateness.Collect(ch)
}

// NewRegistry returns a registry with the set, Go runtime and process
// metrics, and mptun_build_info{version,go}.
func NewRegistry(set *Set, version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		set,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace:   namespace,
			Name:        "build_info",
			Help:        "Build information; the value is always 1.",
			ConstLabels: prometheus.Labels{"version": version, "go": runtime.Version()},
		}, func() float64 { return 1 }),
	)
	return reg
}
