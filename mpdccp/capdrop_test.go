// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"
)

// runCapacityDrop runs one inner CUBIC flow over DSL 16 Mbit/s 5 ms + LTE
// 40 Mbit/s 20 ms (one way) for 20 s; the LTE path's rate falls to 4
// Mbit/s from 8 to 14 s, its buffer still sized for 40. It returns the
// goodput while the rate is low (9-14 s) and after it is back (15-20 s).
func runCapacityDrop(t *testing.T, seed int64) (low, back float64) {
	cell := simCell{name: "dsl16-lte40-drop", rate: [2]float64{16e6, 40e6}, delay: [2]time.Duration{5 * time.Millisecond, 20 * time.Millisecond}}
	cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
	var flows []*innerTCP
	h, _ := openInner(t, cell, 2, cfg, seed, &flows)
	f := newInnerTCP(h, sideClient, 5201, 1400)
	flows = append(flows, f)
	start := h.sim.Now()
	f.start(start.Add(20 * time.Second))
	h.sim.At(start.Add(8*time.Second), func() { h.setPathRate(1, 4e6) })
	h.sim.At(start.Add(14*time.Second), func() { h.setPathRate(1, 40e6) })
	h.run(20 * time.Second)
	return f.goodput(start.Add(9*time.Second), start.Add(14*time.Second)),
		f.goodput(start.Add(15*time.Second), start.Add(20*time.Second))
}

// TestSimPinnedPathLosesCapacity: a bulk flow pinned to the bigger LTE
// path keeps using the DSL path beside it when LTE's capacity falls
// tenfold under it. Waiting for the pinned path to have no room left DSL
// mostly idle while LTE's buffer held the flow's packets: 5.5 Mbit/s
// while LTE was low and 47.5 after (7.6 and 50.8 with the bypass; 14.1
// and 50.9 once LTE's outer BBR also cuts to the rate its queued rounds
// delivered, ccid.BBRParams.QueueCutToDelivery; 13.6 and 51.4 with the
// send queue's 50 ms AQM target; the two paths carry 20 and 56). The
// links have no random loss or jitter, so one seed is the whole story.
func TestSimPinnedPathLosesCapacity(t *testing.T) {
	low, back := runCapacityDrop(t, simSeed)
	t.Logf("%.1f Mbit/s while LTE is at 4 Mbit/s, %.1f after", low/1e6, back/1e6)
	if low < 11e6 {
		t.Errorf("%.1f Mbit/s while the pinned path is at a tenth of its rate, want >= 11", low/1e6)
	}
	if back < 49e6 {
		t.Errorf("%.1f Mbit/s once its rate is back, want >= 49", back/1e6)
	}
}
