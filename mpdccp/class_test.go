// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/scheduler"
)

// innerUDP builds a minimal IPv4/UDP packet to dstPort carrying id.
func innerUDP(id uint32, proto uint8, dstPort uint16) []byte {
	p := make([]byte, 20+8+8)
	p[0], p[9] = 0x45, proto
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{10, 0, 0, 1})
	copy(p[16:], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:], 40000)
	binary.BigEndian.PutUint16(p[22:], dstPort)
	binary.BigEndian.PutUint32(p[28:], id)
	return p
}

// A traffic-class rule sends VoIP (UDP to 5060, 50 packets/s) redundantly
// on both paths while other traffic is scheduled once: with one path
// dropping 5% of its packets no VoIP packet is lost, and the receiver keeps
// one copy of each.
func TestTrafficClassRedundant(t *testing.T) {
	cls := []scheduler.Rule{{Name: "voip", Proto: 17, DstPorts: scheduler.PortRange{Lo: 5060, Hi: 5060}, Scheduler: "redundant"}}
	h := newHarness(t, harnessConfig{seed: 7,
		links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0), link(20e6, 20*time.Millisecond, 0.05)},
		cli:   Config{Scheduler: "rr", Reorderer: "adaptive", Classes: cls},
		srv:   Config{Reorderer: "adaptive"},
	})
	got := map[uint32]int{}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if side == sideServer && len(b) >= 32 {
			got[binary.BigEndian.Uint32(b[28:])]++
		}
	}
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 }) {
		t.Fatal("paths did not open")
	}
	const n = 500
	for i := 0; i < n; i++ {
		now := h.sim.Now()
		c.Send(now, innerUDP(uint32(i), 17, 5060)) // VoIP: redundant
		c.Send(now, innerUDP(uint32(n+i), 6, 80))  // other: rr
		h.service(sideClient)
		h.run(20 * time.Millisecond)
	}
	h.run(time.Second)
	var voipLost, otherLost int
	for i := uint32(0); i < 2*n; i++ {
		switch {
		case got[i] > 1:
			t.Fatalf("packet %d delivered %d times", i, got[i])
		case got[i] == 0 && i < n:
			voipLost++
		case got[i] == 0:
			otherLost++
		}
	}
	st := h.serverConn().Stats()
	cs := c.Stats()
	t.Logf("voip lost %d/%d, other lost %d/%d; copies skipped %d; receiver dropped %d duplicates",
		voipLost, n, otherLost, n, cs.CopiesSkipped, st.Duplicates)
	if voipLost > 0 {
		t.Errorf("%d VoIP packets lost despite redundancy", voipLost)
	}
	if otherLost == 0 {
		t.Error("no loss on the other class: the lossy path was not exercised")
	}
	// Most VoIP packets arrived twice (a copy is skipped when a path has no
	// window room at that moment: there are no per-path queues yet).
	if dups := st.Duplicates; dups < n*3/4 || dups > n {
		t.Errorf("duplicates dropped at the receiver = %d, want most of %d", dups, n)
	}
}

// Under bulk load that fills both paths' windows and the AQM'd send queue,
// traffic-class packets still go out on every path of their redundant
// rule (up to classAllowance over the window) and are never dropped by
// the bulk queue's AQM: their own queue is served first.
func TestTrafficClassUnderBulkLoad(t *testing.T) {
	cls := []scheduler.Rule{{Name: "voip", Proto: 17, DstPorts: scheduler.PortRange{Lo: 5060, Hi: 5060}, Scheduler: "redundant"}}
	aqmCfg := &aqm.Config{Target: time.Millisecond, Interval: 20 * time.Millisecond}
	h := newHarness(t, harnessConfig{seed: 3,
		links: []netsim.LinkConfig{link(5e6, 10*time.Millisecond, 0), link(5e6, 20*time.Millisecond, 0.05)},
		// ccid2: written when it was the engine's default. (With bbr the
		// 5 %-loss path paces so slowly that about half the copies are
		// not seen as duplicates; left to the BBR loss-response work.)
		cli: Config{CCID: "ccid2", Scheduler: "rr", Reorderer: "fixed", Classes: cls, AQM: aqmCfg, Retransmit: true},
		srv: Config{CCID: "ccid2", Reorderer: "fixed", Classes: cls, Retransmit: true},
	})
	voip := map[uint32]int{}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if side == sideServer && len(b) >= 32 && b[0] == 0x45 && b[9] == 17 {
			voip[binary.BigEndian.Uint32(b[28:])]++
		}
	}
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatal("paths did not open")
	}
	bulk := &source{h: h, c: c, side: sideClient, total: 1 << 30, size: 1200, period: time.Millisecond}
	bulk.start()
	h.run(2 * time.Second) // windows full, send queue standing
	const n = 200
	for i := 0; i < n; i++ {
		c.Send(h.sim.Now(), innerUDP(uint32(i), 17, 5060))
		h.service(sideClient)
		h.run(20 * time.Millisecond)
	}
	bulk.total = 0
	h.run(time.Second)
	cs, ss := c.Stats(), h.serverConn().Stats()
	lost := 0
	for i := uint32(0); i < n; i++ {
		if voip[i] == 0 {
			lost++
		}
	}
	t.Logf("voip lost %d/%d; copies skipped %d; receiver duplicates %d; bulk AQM drops %d", lost, n, cs.CopiesSkipped, ss.Duplicates, cs.AQM.Dropped)
	if cs.AQM.Dropped == 0 {
		t.Error("the AQM dropped nothing: the bulk load did not congest the send queue")
	}
	if lost > 0 {
		t.Errorf("%d VoIP packets lost", lost)
	}
	if cs.CopiesSkipped > 0 {
		t.Errorf("%d redundant copies skipped under load", cs.CopiesSkipped)
	}
	if ss.Duplicates < n*9/10 {
		t.Errorf("receiver saw %d duplicates, want ~%d (one per VoIP packet)", ss.Duplicates, n)
	}
}
