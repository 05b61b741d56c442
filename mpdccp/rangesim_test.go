// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/netsim"
)

// rangeCells are path pairs users have, beyond the lab's matrix: the
// better single path is not always the one with the lower delay, radio
// links reorder and lose in bursts, satellites add hundreds of ms.
var rangeCells = []simCell{
	{name: "DSL 16/10 + LTE 50/30 j10", rate: [2]float64{16e6, 50e6},
		delay: [2]time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, jitter: [2]time.Duration{0, 10 * time.Millisecond}},
	{name: "LTE 40/25 j15 reo + WiFi 30/4 GE", rate: [2]float64{40e6, 30e6},
		delay: [2]time.Duration{25 * time.Millisecond, 4 * time.Millisecond}, jitter: [2]time.Duration{15 * time.Millisecond, 2 * time.Millisecond},
		reorder: [2]bool{true, false}, ge: [2]*netsim.GilbertElliott{nil, {PGoodBad: 0.005, PBadGood: 0.3, LossBad: 0.5}}},
	{name: "LEO 60/20 j10 + DSL 20/12", rate: [2]float64{60e6, 20e6},
		delay: [2]time.Duration{20 * time.Millisecond, 12 * time.Millisecond}, jitter: [2]time.Duration{10 * time.Millisecond, 0}},
	{name: "GEO 20/300 + LTE 10/30", rate: [2]float64{20e6, 10e6},
		delay: [2]time.Duration{300 * time.Millisecond, 30 * time.Millisecond}},
	{name: "DSL 4/10 + GEO 25/300", rate: [2]float64{4e6, 25e6},
		delay: [2]time.Duration{10 * time.Millisecond, 300 * time.Millisecond}},
	{name: "DSL 4/10 + LTE 50/40 j10", rate: [2]float64{4e6, 50e6},
		delay: [2]time.Duration{10 * time.Millisecond, 40 * time.Millisecond}, jitter: [2]time.Duration{0, 10 * time.Millisecond}},
	{name: "DSL 50/8 + LTE 10/40 10% loss", rate: [2]float64{50e6, 10e6},
		delay: [2]time.Duration{8 * time.Millisecond, 40 * time.Millisecond}, loss: [2]float64{0, 0.10}},
	{name: "5G 100/15 j5 + DSL 40/10", rate: [2]float64{100e6, 40e6},
		delay: [2]time.Duration{15 * time.Millisecond, 10 * time.Millisecond}, jitter: [2]time.Duration{5 * time.Millisecond, 0}},
	// The lab matrix's inverted 8+35 cell: the low-delay path is the small one.
	{name: "DSL 10/8 + LTE 20/35", rate: [2]float64{10e6, 20e6},
		delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}},
}

// TestSimSeedsReport prints one inner flow's goodput over both paths for
// four simulator seeds and their mean, on the cells where the outcome
// depends most on chance (jitter, bursty loss, a flow that may or may not
// move its pin) and on the DSL+LTE-like ones: one seed is not evidence
// for a change of the defaults. It asserts nothing.
func TestSimSeedsReport(t *testing.T) {
	reportOnly(t)
	defer func(s int64) { simSeed = s }(simSeed)
	cells := []simCell{simCells[0], simCells[1], rangeCells[0], rangeCells[1], rangeCells[5], rangeCells[8]}
	for _, bbr := range []bool{false, true} {
		for _, cell := range cells {
			var sum float64
			var each []string
			for seed := int64(1); seed <= 4; seed++ {
				simSeed = seed
				r := runInner(t, cell, 2, Config{}, 16*time.Second, bbr)
				sum += r.goodput / 1e6
				each = append(each, fmt.Sprintf("%.1f", r.goodput/1e6))
			}
			fmt.Printf("%-34s %-5s mean %6.2f Mbit/s, seeds 1-4: %s\n", cell.name,
				map[bool]string{false: "cubic", true: "bbr"}[bbr], sum/4, strings.Join(each, " "))
		}
	}
}

// TestSimRangeReport prints inner CUBIC and BBR goodput over both paths
// against the better path alone, for rangeCells (go test -run
// SimRangeReport -v). It asserts nothing; it is how the defaults are
// checked beyond the matrix they were designed on.
func TestSimRangeReport(t *testing.T) {
	reportOnly(t)
	const dur = 16 * time.Second
	fmt.Printf("%-34s %-5s %8s %8s %8s %6s %7s %8s\n", "cell", "inner", "path 1", "path 2", "both", "ratio", "retrans", "rtt p50")
	for _, bbr := range []bool{false, true} {
		cc := map[bool]string{false: "cubic", true: "bbr"}[bbr]
		for _, cell := range rangeCells {
			a := runInner(t, cell, 1, Config{}, dur, bbr)
			b := runInner(t, cell.swapped(), 1, Config{}, dur, bbr)
			two := runInner(t, cell, 2, Config{}, dur, bbr)
			fmt.Printf("%-34s %-5s %8.2f %8.2f %8.2f %6.2f %7d %8v\n", cell.name, cc, a.goodput/1e6, b.goodput/1e6,
				two.goodput/1e6, two.goodput/max(a.goodput, b.goodput), two.retrans, two.rttP50.Round(time.Millisecond))
		}
	}
}

// TestSimDoNoHarmRange: on the range cells without a satellite path, one
// inner CUBIC flow over both paths gets at least 0.95 of what the better
// path alone gives (16 s runs), on average over simulator seeds 1-4: one
// seed is a single trajectory of a chaotic system, and a change that
// moves a cell by less than the seeds differ must not decide the test
// (DSL 50/8 + LTE 10/40 10 % loss: 0.95-0.98 of the DSL line by seed).
// Inner BBR is reported, not asserted: a BBR flow moved for capacity onto
// a path with a much longer RTT runs below that path's rate until its
// min_rtt filter expires (10 s). Single seeds put "DSL 4/10 + LTE 50/40"
// at 0.87-0.92: the flow starts on the 4 Mbit/s path, its queue outgrows
// CoDel's allowance while the LTE path is still in Startup, and the one
// early drop leaves inner CUBIC growing from a small window for seconds
// (a known limitation, in BENCHMARKS.md).
func TestSimDoNoHarmRange(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	defer func(s int64) { simSeed = s }(simSeed)
	const dur = 16 * time.Second
	for _, cell := range rangeCells {
		if max(cell.delay[0], cell.delay[1]) >= 250*time.Millisecond {
			continue
		}
		var best, two float64
		var each []string
		for seed := int64(1); seed <= 4; seed++ {
			simSeed = seed
			a := runInnerBulk(t, cell, 1, Config{}, dur)
			b := runInnerBulk(t, cell.swapped(), 1, Config{}, dur)
			r := runInnerBulk(t, cell, 2, Config{}, dur)
			best += max(a.goodput, b.goodput) / 4
			two += r.goodput / 4
			each = append(each, fmt.Sprintf("%.2f", r.goodput/max(a.goodput, b.goodput)))
		}
		t.Logf("%s: %.2f (seeds 1-4: %s)", cell.name, two/best, strings.Join(each, " "))
		if two < 0.95*best {
			t.Errorf("%s: %.2f Mbit/s over both paths, %.2f over the better one alone (means of seeds 1-4)", cell.name, two/1e6, best/1e6)
		}
	}
}

// TestSimLongPathAQM: the send queue's AQM must not starve a flow whose
// RTT is longer than CoDel's 100 ms interval. One inner CUBIC flow over a
// single satellite-like path (20 Mbit/s, 300 ms one way) and one over a
// 120 ms path get at least 0.7 of what the same tunnel gives them with
// its AQM switched off: 0.76 and 0.79 now (13.9 and 12.2 Mbit/s), 0.22
// and 0.48 with CoDel's fixed 100 ms interval. The AQM still costs such a
// flow some throughput: that is its trade for a bounded queue.
func TestSimLongPathAQM(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	const dur = 20 * time.Second
	for _, cell := range []simCell{
		{name: "20/300", rate: [2]float64{20e6}, delay: [2]time.Duration{300 * time.Millisecond}},
		{name: "20/120", rate: [2]float64{20e6}, delay: [2]time.Duration{120 * time.Millisecond}},
	} {
		with := runInnerBulk(t, cell, 1, Config{}, dur)
		without := runInnerBulk(t, cell, 1, Config{AQM: &aqm.Config{Disabled: true}}, dur)
		t.Logf("%s: %.2f Mbit/s, %.2f without the AQM", cell.name, with.goodput/1e6, without.goodput/1e6)
		if with.goodput < 0.7*without.goodput {
			t.Errorf("%s: %.2f Mbit/s through the AQM, %.2f without it", cell.name, with.goodput/1e6, without.goodput/1e6)
		}
	}
}

// TestSimStandbyTerrestrialReport prints one inner flow's goodput over a
// satellite path bigger than the terrestrial one when the terrestrial
// path is standby (MP_PRIO 1, what active-backup mode with the satellite
// preferred sets): the README's workaround for a flow that would stay on
// the small terrestrial path. The same for a small low-delay path beside
// a bigger terrestrial one (the README's workaround for inner BBR there).
// It asserts nothing.
func TestSimStandbyTerrestrialReport(t *testing.T) {
	reportOnly(t)
	for _, bbr := range []bool{false, true} {
		for _, cell := range []simCell{rangeCells[3], rangeCells[4], rangeCells[8]} {
			cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
			var flows []*innerTCP
			h, c := openInner(t, cell, 2, cfg, simSeed, &flows)
			terrestrial := 0
			if cell.delay[1] < cell.delay[0] {
				terrestrial = 1
			}
			if err := c.SetPrio(h.sim.Now(), terrestrial, 1); err != nil {
				t.Fatal(err)
			}
			f := newInnerTCP(h, sideClient, 5201, 1400)
			if bbr {
				f.bbr = newInnerBBR(1400)
			}
			flows = append(flows, f)
			const dur = 16 * time.Second
			start := h.sim.Now()
			f.start(start.Add(dur))
			h.run(dur)
			fmt.Printf("%-34s %-5s low-delay path standby: %6.2f Mbit/s\n", cell.name,
				map[bool]string{false: "cubic", true: "bbr"}[bbr], f.goodput(start.Add(dur/4), start.Add(dur))/1e6)
		}
	}
}
