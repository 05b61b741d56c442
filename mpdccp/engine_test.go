// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
)

func TestHandshakeSinglePath(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: 1, links: []netsim.LinkConfig{link(10e6, 20*time.Millisecond, 0)}})
	c := h.dial(1)
	if !h.runUntil(2*time.Second, func() bool { return c.State() == Open && h.openPaths(h.serverConn()) == 1 }) {
		t.Fatalf("not open: client %v server %v\n%s", c.State(), h.serverConn(), h.dumpEvents())
	}
	sc := h.serverConn()
	if sc.State() != Open {
		t.Fatalf("server conn %v", sc.State())
	}
	if sc.peerCI != c.localCI || c.peerCI != sc.localCI {
		t.Fatalf("CI mismatch: client %x/%x server %x/%x", c.localCI, c.peerCI, sc.localCI, sc.peerCI)
	}
	if sc.keys.peer != c.keys.local || c.keys.peer != sc.keys.local || sc.keys.ks == nil || c.keys.ks == nil {
		t.Fatal("keys not exchanged")
	}
	if h.countEvents(sideClient, EventConnOpen) != 1 || h.countEvents(sideServer, EventConnOpen) != 1 {
		t.Fatalf("events:\n%s", h.dumpEvents())
	}
}

func TestJoinsOverLoss(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for seed := int64(1); seed <= 5; seed++ {
				var links []netsim.LinkConfig
				for range n {
					links = append(links, link(20e6, 50*time.Millisecond, 0.10))
				}
				h := newHarness(t, harnessConfig{seed: seed, links: links})
				c := h.dial(n)
				ok := h.runUntil(60*time.Second, func() bool {
					return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n
				})
				if !ok {
					t.Fatalf("seed %d: open paths client %d server %d\n%s", seed, h.openPaths(c), h.openPaths(h.serverConn()), h.dumpEvents())
				}
				sc := h.serverConn()
				for _, sf := range sc.subflows {
					if sf.join != (sf.id != 0) {
						t.Fatalf("server path %d join=%v", sf.id, sf.join)
					}
				}
				if got := h.countEvents(sideServer, EventPathUp); got != n {
					t.Fatalf("seed %d: server PathUp events %d, want %d\n%s", seed, got, n, h.dumpEvents())
				}
			}
		})
	}
}

func TestTransferExactlyOnce(t *testing.T) {
	total := uint64(100000)
	if testing.Short() {
		total = 20000
	}
	links := []netsim.LinkConfig{link(100e6, 10*time.Millisecond, 0), link(50e6, 30*time.Millisecond, 0)}
	for i := range links {
		links[i].Queue = 0 // nothing may be lost
	}
	h := newHarness(t, harnessConfig{seed: 7, links: links})
	c, snk := h.dialWithSink(2)
	// 10 packets per ms = 80 Mbit/s, below the 150 Mbit/s of the two paths.
	src := &source{h: h, c: c, side: sideClient, total: total, size: 1000, period: time.Millisecond, perTick: 10}
	src.start()
	if !h.runUntil(120*time.Second, func() bool { return snk.count >= total }) {
		sc := h.serverConn()
		t.Fatalf("delivered %d of %d (sent %d)\nclient %+v\nserver %+v\nclient ep %+v\nserver ep %+v", snk.count, total, src.next, c.Stats(), sc.Stats(), h.ep[0].Stats(), h.ep[1].Stats())
	}
	h.run(time.Second)
	if snk.dups != 0 || uint64(len(snk.seen)) != total {
		t.Fatalf("dups %d unique %d want %d", snk.dups, len(snk.seen), total)
	}
	st := c.Stats()
	for _, p := range st.Paths {
		if p.DataOut == 0 {
			t.Errorf("path %d carried no data", p.ID)
		}
		t.Logf("path %d: data out %d cwnd %d srtt %v lost %d", p.ID, p.DataOut, p.CC.Cwnd, p.CC.SRTT, p.CC.PacketsLost)
	}
	t.Logf("virtual time %v", time.Duration(h.sim.Now()))
}

// lossAccount checks that every inner packet the client accepted is
// either delivered, lost on the way (datagrams sent minus accepted), or
// refused by the receiver's reorderer.
func lossAccount(t *testing.T, h *harness, c *Conn, snk *sink, sent uint64) {
	t.Helper()
	sc := h.serverConn()
	cs, ss := c.Stats(), sc.Stats()
	var out, in uint64
	for _, p := range cs.Paths {
		out += p.DataOut
	}
	for _, p := range ss.Paths {
		in += p.DataIn
	}
	if cs.Queued != 0 || cs.CopiesSkipped != 0 {
		t.Fatalf("queued %d copies skipped %d", cs.Queued, cs.CopiesSkipped)
	}
	if out != cs.SentPackets {
		t.Fatalf("data datagrams %d != packets sent %d", out, cs.SentPackets)
	}
	lost := out - in
	refused := ss.Duplicates + ss.NoMPSeq
	if snk.count+lost+refused != sent {
		t.Fatalf("delivered %d + lost %d + refused %d != sent %d", snk.count, lost, refused, sent)
	}
	t.Logf("sent %d delivered %d lost %d refused %d", sent, snk.count, lost, refused)
}

func TestTransferWithLossAccounted(t *testing.T) {
	total := uint64(30000)
	if testing.Short() {
		total = 10000
	}
	links := []netsim.LinkConfig{link(40e6, 10*time.Millisecond, 0.02), link(20e6, 40*time.Millisecond, 0.01)}
	links[0].Queue, links[1].Queue = 64*1024, 64*1024
	h := newHarness(t, harnessConfig{seed: 3, links: links})
	c, snk := h.dialWithSink(2)
	src := &source{h: h, c: c, side: sideClient, total: total, size: 1200, period: time.Millisecond}
	src.start()
	h.runUntil(300*time.Second, func() bool { return src.next >= total && c.queued() == 0 })
	h.run(3 * time.Second)
	if snk.dups != 0 {
		t.Fatalf("%d duplicates delivered", snk.dups)
	}
	if snk.count >= total {
		t.Fatalf("no loss at all: delivered %d of %d", snk.count, total)
	}
	lossAccount(t, h, c, snk, src.next)
}
