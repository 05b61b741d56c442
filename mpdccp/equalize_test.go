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

// recordDelays records, per destination port, how long each inner packet
// the server delivers took since sent[its id] (replacing onDeliver).
func recordDelays(h *harness, sent map[uint32]mono.Time) map[uint16][]time.Duration {
	delay := map[uint16][]time.Duration{}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if side == sideServer {
			port := binary.BigEndian.Uint16(b[22:])
			delay[port] = append(delay[port], h.sim.Now().Sub(sent[binary.BigEndian.Uint32(b[28:])]))
		}
	}
	return delay
}

// TestEqualizeSpreadFlowsOnly checks the promise the equalize reorderer
// makes per flow: a flow spread over both paths sees one consistent delay,
// the slower path's, so that its congestion control (inner BBR) does not
// take the fast path's delay for the path set's; a flow that stays on one
// path at a time (here: one packet per 100 ms, each a new flowlet that may
// take either path) is delivered with its own path's delay, never held
// for the slow path.
func TestEqualizeSpreadFlowsOnly(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 20 * time.Millisecond
	cfg := Config{Reorderer: "equalize", Scheduler: "rr"}
	h := newHarness(t, harnessConfig{seed: 7,
		links: []netsim.LinkConfig{link(16e6, fast, 0), link(30e6, slow, 0)}, cli: cfg, srv: cfg})
	sent := map[uint32]mono.Time{}
	delay := recordDelays(h, sent)
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatalf("not open\n%s", h.dumpEvents())
	}
	h.run(time.Second)
	id := uint32(0)
	send := func(port uint16) {
		sent[id] = h.sim.Now()
		if !c.Send(h.sim.Now(), innerUDP(id, 17, port)) {
			t.Fatal("send refused")
		}
		id++
		h.service(sideClient)
	}
	for round := 0; round < 10; round++ {
		send(53) // the sparse flow: one packet per round
		for i := 0; i < 20; i++ {
			send(80) // the spread flow: back to back over both paths
			h.run(500 * time.Microsecond)
		}
		h.run(100 * time.Millisecond)
	}
	if len(delay[53]) != 10 || len(delay[80]) != 200 {
		t.Fatalf("delivered %d sparse, %d spread", len(delay[53]), len(delay[80]))
	}
	onFast := 0
	for _, d := range delay[53] {
		if d < fast+2*time.Millisecond {
			onFast++
		} else if d > slow+2*time.Millisecond {
			t.Errorf("sparse packet held: %v", d)
		}
	}
	if onFast == 0 {
		t.Error("no sparse packet crossed the fast path at its own delay")
	}
	for i, d := range delay[80] {
		if i < 40 || i%20 == 0 {
			continue // warm-up (the slow path's first window), and a burst's first packet goes alone
		}
		if d < slow || d > slow+10*time.Millisecond {
			t.Errorf("spread packet %d delivered after %v, want the slow path's %v", i, d, slow)
		}
	}
}

// Packets of a traffic class are not equalised: the receiver (which has
// the same class rules) delivers them at once, so a redundant VoIP flow
// gets the fast path's delay while a flow spread over both paths waits
// out the difference.
func TestClassPacketsSkipEqualisation(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 30 * time.Millisecond
	cls := []scheduler.Rule{{Name: "voip", Proto: 17, DstPorts: scheduler.PortRange{Lo: 5060, Hi: 5060}, Scheduler: "redundant"}}
	cfg := Config{Reorderer: "equalize", Scheduler: "rr", Classes: cls}
	h := newHarness(t, harnessConfig{seed: 5,
		links: []netsim.LinkConfig{link(16e6, fast, 0), link(30e6, slow, 0)}, cli: cfg, srv: cfg})
	sent := map[uint32]mono.Time{}
	delay := recordDelays(h, sent)
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatal("paths did not open")
	}
	for i := uint32(0); i < 400; i++ {
		port := uint16(80)
		if i%20 == 0 {
			port = 5060
		}
		sent[i] = h.sim.Now()
		c.Send(h.sim.Now(), innerUDP(i, 17, port))
		h.service(sideClient)
		h.run(time.Millisecond)
	}
	h.run(time.Second)
	if len(delay[5060]) != 20 || len(delay[80]) != 380 {
		t.Fatalf("delivered %d VoIP, %d other", len(delay[5060]), len(delay[80]))
	}
	for _, d := range delay[5060] {
		if d > fast+2*time.Millisecond {
			t.Errorf("VoIP packet delivered after %v, want about the fast path's %v", d, fast)
		}
	}
	for _, d := range delay[80][1:] {
		if d < slow {
			t.Errorf("spread packet delivered after %v, before the slow path's %v", d, slow)
		}
	}
}
