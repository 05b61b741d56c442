// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
)

// With loss repair, packets that random loss drops on the paths are sent
// once more and reach the receiver exactly once; without it they are lost.
// (A repair lost again, and losses at the very end of the transfer that no
// later packet reveals, stay lost.)
func TestLossRepair(t *testing.T) {
	run := func(repair bool) (delivered, total uint64, repaired uint64, dups uint64) {
		total = 10000
		links := []netsim.LinkConfig{link(40e6, 10*time.Millisecond, 0.02), link(20e6, 40*time.Millisecond, 0.01)}
		links[0].Queue, links[1].Queue = 256*1024, 256*1024
		ro := reorder.Config{MaxHold: 200 * time.Millisecond, NoEarlyLoss: repair}
		h := newHarness(t, harnessConfig{seed: 5, links: links,
			cli: Config{Retransmit: repair, Reorderer: "fixed", Reorder: ro},
			srv: Config{Retransmit: repair, Reorderer: "fixed", Reorder: ro}})
		c, snk := h.dialWithSink(2)
		src := &source{h: h, c: c, side: sideClient, total: total, size: 1200, period: time.Millisecond, perTick: 2}
		src.start()
		h.runUntil(300*time.Second, func() bool { return src.next >= total && c.queued() == 0 })
		h.run(3 * time.Second)
		return snk.count, src.next, c.Stats().Repaired, snk.dups
	}
	plainDelivered, total, _, _ := run(false)
	delivered, total2, repaired, dups := run(true)
	t.Logf("without repair %d of %d delivered; with repair %d of %d (%d repaired)", plainDelivered, total, delivered, total2, repaired)
	if dups != 0 {
		t.Fatalf("%d duplicates delivered to the application", dups)
	}
	if plainDelivered >= total*995/1000 {
		t.Fatalf("paths lost too little to test repair: %d of %d delivered", plainDelivered, total)
	}
	if repaired == 0 || delivered < total2*997/1000 {
		t.Errorf("with repair %d of %d delivered (%d repaired), want at least 99.7%%", delivered, total2, repaired)
	}
}
