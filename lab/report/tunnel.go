// SPDX-License-Identifier: MIT

package report

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"

	"github.com/mptun/mptun/internal/mono"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// TunnelMetrics is what the mptun peer samples from its daemons' status
// during a run: the sending side's congestion window per path over time
// and the receiving side's reorder hold-time histogram.
type TunnelMetrics struct {
	// TimesS are the sample times, seconds since the traffic started
	// (Align; negative before it).
	TimesS []float64 `json:"times_s"`
	// Cwnd is the congestion window in packets per path name, one value
	// per sample time.
	Cwnd map[string][]float64 `json:"cwnd_packets"`
	// SRTTms is the smoothed RTT per path, one value per sample time.
	SRTTms map[string][]float64 `json:"srtt_ms"`
	// Phase is the congestion controller's phase per path (BBR's
	// startup, drain, probe-bw-*, probe-rtt; CCID2's slow-start,
	// congestion-avoidance, recovery, ...), one value per sample time: a
	// path that stays in Startup shows here.
	Phase map[string][]string `json:"phase,omitempty"`
	// HoldBucketsMs are the upper bounds of the hold histogram buckets;
	// HoldCounts has one more entry (the overflow bucket).
	HoldBucketsMs []float64 `json:"hold_buckets_ms"`
	HoldCounts    []uint64  `json:"hold_counts"`
	// Repaired counts packets the sender sent once more (loss repair).
	Repaired uint64 `json:"repaired"`
	// The sender's send queue: inner packets its AQM dropped and ones
	// refused because it was full (congestion, not path failure).
	AQMDrops   uint64 `json:"aqm_drops"`
	QueueDrops uint64 `json:"queue_drops"`
	// Path healing at the sender: suspicions and packets re-injected on
	// other paths, summed over its paths.
	Suspicions uint64 `json:"suspicions"`
	Reinjected uint64 `json:"reinjected"`
	// Process samples each daemon's goroutines and heap ("client",
	// "server"), every ProcessEvery of the run: a leak shows as growth.
	Process map[string][]ProcessSample `json:"process,omitempty"`
	// Final is what each daemon's connection ran at the end ("sender",
	// "receiver"): runtime changes show here.
	Final map[string]ConnSettings `json:"final,omitempty"`
	// Status is each daemon's whole status at the end (the control API's
	// "status" answer): per-path pacing lateness, the send queue's and
	// the reorderer's counters, for diagnosis.
	Status map[string]any `json:"status,omitempty"`
	// First is the monotonic time of TimesS's zero and ProcessStart that
	// of the process samples' zero, until Align.
	First        mono.Time `json:"-"`
	ProcessStart mono.Time `json:"-"`
}

// ConnSettings are a connection's settings and repair counters.
type ConnSettings struct {
	Scheduler   string     `json:"scheduler"`
	Reorderer   string     `json:"reorderer"`
	HoldMs      float64    `json:"reorder_max_hold_ms"`
	Repair      bool       `json:"repair"`
	Mode        string     `json:"mode"`
	Repaired    uint64     `json:"repaired"`
	GapsSkipped uint64     `json:"gaps_skipped"`
	GapsLate    uint64     `json:"gaps_late"`
	Prio        []PathPrio `json:"prio"`
	Conns       int        `json:"connections"`
}

// PathPrio is a path's MP_PRIO.
type PathPrio struct {
	Path string `json:"path,omitempty"`
	ID   int    `json:"id"`
	Prio uint8  `json:"prio"`
}

// ProcessSample is one daemon's footprint at a time of the run.
type ProcessSample struct {
	// TimeS: seconds since the traffic started (Align).
	TimeS      float64 `json:"time_s"`
	Goroutines int     `json:"goroutines"`
	HeapBytes  uint64  `json:"heap_bytes"`
	// HeapLiveBytes: what the last garbage collection kept.
	HeapLiveBytes uint64 `json:"heap_live_bytes"`
}

// Align makes every sample time relative to start, the traffic's start,
// as TimesS and ProcessSample.TimeS say: the sampler counts from its own
// first sample, seconds before the traffic (idle RTT and short transfers
// come first), and a reader of results.json took those early samples for
// the bulk flow's. Samples taken before start are negative. A zero start
// leaves the times as sampled.
func (m *TunnelMetrics) Align(start mono.Time) {
	if start == 0 {
		return
	}
	if m.First != 0 {
		off := m.First.Sub(start).Seconds()
		for i := range m.TimesS {
			m.TimesS[i] += off
		}
		m.First = 0
	}
	if m.ProcessStart != 0 {
		off := m.ProcessStart.Sub(start).Seconds()
		for _, samples := range m.Process {
			for i := range samples {
				samples[i].TimeS += off
			}
		}
		m.ProcessStart = 0
	}
}

func plotCwnd(run *Run, m *TunnelMetrics, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: congestion window per path (sender)", run.Peer)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "cwnd (packets)"
	names := make([]string, 0, len(m.Cwnd))
	for n := range m.Cwnd {
		names = append(names, n)
	}
	sort.Strings(names)
	ymax := 1.0
	times := m.TimesS
	for i, n := range names {
		xy := make(plotter.XYs, len(times))
		for j := range times {
			xy[j].X, xy[j].Y = times[j], m.Cwnd[n][j]
			ymax = max(ymax, xy[j].Y)
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		p.Add(l)
		p.Legend.Add(n, l)
	}
	if err := markEvents(p, run.Events, ymax); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 4*vg.Inch, file)
}

func plotHold(run *Run, m *TunnelMetrics, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: reorder hold time (receiver)", run.Peer)
	p.X.Label.Text = "hold time ≤ (ms)"
	p.Y.Label.Text = "packets"
	vals := make(plotter.Values, len(m.HoldCounts))
	labels := make([]string, len(m.HoldCounts))
	for i, c := range m.HoldCounts {
		vals[i] = float64(c)
		if i < len(m.HoldBucketsMs) {
			labels[i] = fmt.Sprintf("%g", m.HoldBucketsMs[i])
		} else {
			labels[i] = "more"
		}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 40, G: 100, B: 180, A: 255}
	p.Add(bars)
	p.NominalX(labels...)
	return p.Save(8*vg.Inch, 4*vg.Inch, file)
}
