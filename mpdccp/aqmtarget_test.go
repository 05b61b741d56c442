// SPDX-License-Identifier: MIT

package mpdccp

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/defaults"
)

// runSwingingPaths runs one inner CUBIC flow for 30 s over two paths of
// 30 and 20 Mbit/s (20 and 40 ms one way) whose rates swing, each on its
// own, to 0.3-1.7 times that every 0.2-1 s (a radio cell's scheduling
// and fading, in the crude), with the send queue's AQM at target; it
// returns the goodput after the first 2 s.
func runSwingingPaths(t *testing.T, target time.Duration, seed uint64) float64 {
	cell := simCell{name: "swinging radio paths", rate: [2]float64{30e6, 20e6}, delay: [2]time.Duration{20 * time.Millisecond, 40 * time.Millisecond}}
	cfg := Config{CCID: "bbr", Retransmit: true, AQM: &aqm.Config{Target: target}}
	var flows []*innerTCP
	h, _ := openInner(t, cell, 2, cfg, simSeed, &flows)
	f := newInnerTCP(h, sideClient, 5201, 1400)
	flows = append(flows, f)
	start := h.sim.Now()
	const dur = 30 * time.Second
	f.start(start.Add(dur))
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range 2 {
		for at := 500 * time.Millisecond; at < dur; at += time.Duration(200+rng.IntN(800)) * time.Millisecond {
			r := cell.rate[i] * (0.3 + 1.4*rng.Float64())
			h.sim.At(start.Add(at), func() { h.setPathRate(i, r) })
		}
	}
	h.run(dur)
	return f.goodput(start.Add(2*time.Second), start.Add(dur))
}

// TestSimAQMTarget: the send queue's default target (50 ms; 20 ms before
// 7 December) lets a bulk flow keep a capacity dip in its own queue
// instead of taking a cut, and FQ still serves pings and short transfers
// beside it first. Over two paths whose rates swing, ten seeds, the bulk
// flow gets at least what it got with 20 ms (31.98 against 31.12 Mbit/s
// on average when written); beside a bulk download, a ping's and a 10 KB
// transfer's median take at most a tenth longer than with 20 ms.
func TestSimAQMTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	const old = 20 * time.Millisecond
	var withOld, withDefault float64
	for seed := uint64(1); seed <= 10; seed++ {
		withOld += runSwingingPaths(t, old, seed) / 10
		withDefault += runSwingingPaths(t, defaults.AQMTarget, seed) / 10
	}
	t.Logf("swinging paths, mean of ten seeds: %.2f Mbit/s with %v, %.2f with %v", withDefault/1e6, defaults.AQMTarget, withOld/1e6, old)
	if withDefault < withOld {
		t.Errorf("swinging paths: %.2f Mbit/s with the default target %v, %.2f with %v", withDefault/1e6, defaults.AQMTarget, withOld/1e6, old)
	}
	for _, cell := range []simCell{simCells[0], simCells[5]} {
		a := runLatencyWith(t, cell, 2, true, 8*time.Second, Config{AQM: &aqm.Config{Target: old}})
		b := runLatencyWith(t, cell, 2, true, 8*time.Second, Config{})
		t.Logf("%s beside bulk: ping p50 %v, 10 KB p50 %v with %v; %v, %v with %v", cell.name,
			p50(b.ping), p50(b.short10), defaults.AQMTarget, p50(a.ping), p50(a.short10), old)
		if p50(b.ping) > p50(a.ping)*11/10 || p50(b.short10) > p50(a.short10)*11/10 {
			t.Errorf("%s beside bulk: ping %v and 10 KB %v with the default target, %v and %v with %v",
				cell.name, p50(b.ping), p50(b.short10), p50(a.ping), p50(a.short10), old)
		}
	}
}
