// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/scheduler"
)

// TestEqualizeFromFirstPacket checks the promise the equalize reorderer
// makes to the flows inside: no packet reaches the other side sooner than
// the slower path's one-way delay, from the very first packets after the
// handshake on (a TCP handshake inside sets the inner minimum RTT, which
// BBR keeps for 10 s), in both directions, and while one path is idle.
func TestEqualizeFromFirstPacket(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 20 * time.Millisecond
	cfg := Config{Reorderer: "equalize", Scheduler: "rr"}
	h := newHarness(t, harnessConfig{seed: 7,
		links: []netsim.LinkConfig{link(16e6, fast, 0), link(30e6, slow, 0)}, cli: cfg, srv: cfg})
	sent := map[uint64]mono.Time{}
	var owd [2][]time.Duration
	h.onDeliver = func(side int, c *Conn, b []byte) {
		id := binary.BigEndian.Uint64(b)
		owd[side] = append(owd[side], h.sim.Now().Sub(sent[id]))
	}
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatalf("not open\n%s", h.dumpEvents())
	}
	h.run(time.Second) // idle: nothing has crossed either path yet
	pkt := make([]byte, 100)
	id := uint64(0)
	// Ping-pong: one packet each way at a time, so that nothing ever
	// waits behind a gap and only the equalisation can hold it.
	for round := 0; round < 20; round++ {
		for side, conn := range []*Conn{c, h.serverConn()} {
			binary.BigEndian.PutUint64(pkt, id)
			sent[id] = h.sim.Now()
			if !conn.Send(h.sim.Now(), pkt) {
				t.Fatal("send refused")
			}
			h.service(side)
			id++
			h.run(60 * time.Millisecond)
		}
	}
	for side := range 2 {
		if len(owd[1-side]) != 20 {
			t.Fatalf("side %d delivered %d of 20", 1-side, len(owd[1-side]))
		}
		for i, d := range owd[1-side] {
			if d < slow {
				t.Errorf("packet %d from side %d arrived after %v, sooner than the slow path's %v", i, side, d, slow)
			}
			if d > slow+10*time.Millisecond {
				t.Errorf("packet %d from side %d held too long: %v", i, side, d)
			}
		}
	}
}

// Packets of a traffic class are not equalised: the receiver (which has
// the same class rules) delivers them at once, so a redundant VoIP flow
// gets the fast path's delay while other traffic waits out the difference.
func TestClassPacketsSkipEqualisation(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 30 * time.Millisecond
	cls := []scheduler.Rule{{Name: "voip", Proto: 17, DstPorts: scheduler.PortRange{Lo: 5060, Hi: 5060}, Scheduler: "redundant"}}
	cfg := Config{Reorderer: "equalize", Scheduler: "rr", Classes: cls}
	h := newHarness(t, harnessConfig{seed: 5,
		links: []netsim.LinkConfig{link(16e6, fast, 0), link(30e6, slow, 0)}, cli: cfg, srv: cfg})
	sent := map[uint32]mono.Time{}
	delay := map[uint16][]time.Duration{}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if side == sideServer {
			port := binary.BigEndian.Uint16(b[22:])
			delay[port] = append(delay[port], h.sim.Now().Sub(sent[binary.BigEndian.Uint32(b[28:])]))
		}
	}
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatal("paths did not open")
	}
	for i := uint32(0); i < 40; i++ {
		port := uint16(80)
		if i%2 == 0 {
			port = 5060
		}
		sent[i] = h.sim.Now()
		c.Send(h.sim.Now(), innerUDP(i, 17, port))
		h.service(sideClient)
		h.run(50 * time.Millisecond)
	}
	if len(delay[5060]) != 20 || len(delay[80]) != 20 {
		t.Fatalf("delivered %d VoIP, %d other", len(delay[5060]), len(delay[80]))
	}
	for _, d := range delay[5060] {
		if d > fast+2*time.Millisecond {
			t.Errorf("VoIP packet delivered after %v, want about the fast path's %v", d, fast)
		}
	}
	for _, d := range delay[80] {
		if d < slow {
			t.Errorf("other packet delivered after %v, before the slow path's %v", d, slow)
		}
	}
}
