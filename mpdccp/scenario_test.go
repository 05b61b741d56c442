// SPDX-License-Identifier: MIT

package mpdccp

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

func openHarness(t *testing.T, seed int64, n int, cfg harnessConfig) (*harness, *Conn) {
	t.Helper()
	cfg.seed = seed
	if cfg.links == nil {
		for range n {
			cfg.links = append(cfg.links, link(20e6, 10*time.Millisecond, 0))
		}
	}
	h := newHarness(t, cfg)
	c := h.dial(n)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n }) {
		t.Fatalf("not open\n%s", h.dumpEvents())
	}
	return h, c
}

func TestMPSeqWraparound(t *testing.T) {
	total := uint64(10000)
	h, c := openHarness(t, 11, 2, harnessConfig{cli: Config{InitialMPSeq: wire.MaxSeq - 4000}})
	snk := newSink()
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer {
			snk.deliver(b)
		}
	}
	src := &source{h: h, c: c, side: sideClient, total: total, size: 500, period: time.Millisecond, perTick: 4}
	src.start()
	if !h.runUntil(60*time.Second, func() bool { return snk.count >= total }) {
		t.Fatalf("delivered %d of %d", snk.count, total)
	}
	if c.mpSeq >= total || c.mpSeq == 0 {
		t.Fatalf("MP_SEQ did not wrap: next %d", c.mpSeq)
	}
	if snk.dups != 0 || uint64(len(snk.seen)) != total {
		t.Fatalf("dups %d unique %d", snk.dups, len(snk.seen))
	}
}

func TestPathOutage(t *testing.T) {
	cfg := harnessConfig{cli: Config{KeepAlive: 200 * time.Millisecond, PathTimeout: time.Second},
		srv: Config{KeepAlive: 200 * time.Millisecond, PathTimeout: time.Second}}
	h, c := openHarness(t, 5, 2, cfg)
	snk := newSink()
	var deliveredAt []mono.Time
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer {
			snk.deliver(b)
			deliveredAt = append(deliveredAt, h.sim.Now())
		}
	}
	start := h.sim.Now().Add(2 * time.Second)
	end := start.Add(5 * time.Second)
	for _, l := range []*netsim.Link{h.paths[0].up, h.paths[0].down} {
		lc := l.Config()
		lc.Outages = []netsim.Outage{{Start: start, End: end}}
		l.SetConfig(lc)
	}
	total := uint64(12 * 1000 * 4)
	src := &source{h: h, c: c, side: sideClient, total: total, size: 500, period: time.Millisecond, perTick: 4}
	src.start()
	h.runUntil(30*time.Second, func() bool { return snk.count >= total })

	var down, up mono.Time
	for _, ev := range h.events[sideClient] {
		if ev.Path != 0 {
			continue
		}
		if ev.Kind == EventPathDown && down == 0 {
			down = h.sim.Now() // placeholder, replaced below
		}
	}
	// Find event times from path state transitions recorded in order.
	if h.countEvents(sideClient, EventPathDown) < 1 || h.countEvents(sideServer, EventPathDown) < 1 {
		t.Fatalf("no PathDown:\n%s", h.dumpEvents())
	}
	if h.countEvents(sideClient, EventPathUp) < 3 { // path 0, path 1 established, path 0 back
		t.Fatalf("no PathUp after the outage:\n%s", h.dumpEvents())
	}
	_ = up
	// Traffic continued on path 1 during the outage: deliveries in every
	// 500 ms slot after detection (start + PathTimeout + slack).
	for slot := start.Add(1500 * time.Millisecond); slot < end; slot = slot.Add(500 * time.Millisecond) {
		n := 0
		for _, at := range deliveredAt {
			if at >= slot && at < slot.Add(500*time.Millisecond) {
				n++
			}
		}
		if n < 500 {
			t.Fatalf("only %d deliveries in [%v, +500ms) during the outage", n, time.Duration(slot-start))
		}
	}
	// Path 0 is back in use after the outage.
	st := c.Stats()
	if st.Paths[0].Failed || st.Paths[0].State != "open" {
		t.Fatalf("path 0 after outage: %+v", st.Paths[0])
	}
	// The lost packets are those in flight on path 0 when it died.
	if lost := total - snk.count; lost > 2000 {
		t.Fatalf("lost %d packets", lost)
	}
	if snk.count < total*9/10 {
		t.Fatalf("delivered %d of %d", snk.count, total)
	}
	t.Logf("delivered %d of %d; events:\n%s", snk.count, total, h.dumpEvents())
}

func TestGarbageAndReplay(t *testing.T) {
	h, c := openHarness(t, 21, 2, harnessConfig{})
	var captured [][]byte
	h.tap = func(side, path int, b []byte) bool {
		if side == sideClient && len(captured) < 500 {
			captured = append(captured, append([]byte(nil), b...))
		}
		return true
	}
	snk := newSink()
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer {
			snk.deliver(b)
		}
	}
	total := uint64(4000)
	src := &source{h: h, c: c, side: sideClient, total: total, size: 300, period: time.Millisecond, perTick: 2}
	src.start()
	h.run(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	srv := h.ep[1]
	from := h.paths[0].cli
	to := srvAddr.Addr()
	attacker := netip.MustParseAddrPort("10.66.0.1:5555")
	inject := func(b []byte) {
		// Half from the client's own address (on-path replay), half from
		// an attacker's address.
		src := from
		if rng.IntN(2) == 0 {
			src = attacker
		}
		srv.HandleDatagram(h.sim.Now(), 0, src, to, b, 0)
		h.service(sideServer)
	}
	for i := 0; i < 2000; i++ {
		h.run(time.Millisecond)
		switch i % 5 {
		case 0: // random bytes
			b := make([]byte, rng.IntN(200))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			inject(b)
		case 1: // replay
			inject(captured[rng.IntN(len(captured))])
		case 2: // replay with a bit flipped (bad checksum)
			b := append([]byte(nil), captured[rng.IntN(len(captured))]...)
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
			inject(b)
		case 3: // truncated replay
			b := captured[rng.IntN(len(captured))]
			inject(b[:rng.IntN(len(b))])
		case 4: // replay with a fixed-up checksum and a mangled option byte
			b := append([]byte(nil), captured[rng.IntN(len(captured))]...)
			if len(b) > 24 {
				b[16+rng.IntN(len(b)-16)] = byte(rng.Uint32())
				wire.SetChecksum(b, checksumAddr, checksumAddr)
			}
			inject(b)
		}
	}
	if !h.runUntil(30*time.Second, func() bool { return snk.count >= total }) {
		t.Fatalf("delivered %d of %d; server stats %+v", snk.count, total, srv.Stats())
	}
	if snk.dups != 0 {
		t.Fatalf("%d duplicates delivered", snk.dups)
	}
	if c.State() != Open || h.serverConn().State() != Open || h.openPaths(h.serverConn()) != 2 {
		t.Fatalf("connection broken: %v %v %+v\n%s", c.State(), h.serverConn().State(), h.serverConn().Stats().Paths, h.dumpEvents())
	}
	st := srv.Stats()
	if st.Dropped[DropMalformed] == 0 || st.Dropped[DropChecksum] == 0 {
		t.Fatalf("drops not counted: %v", st.Dropped)
	}
	t.Logf("server drops %v", st.Dropped)
}

// resetsSeen records Reset codes sent by side.
func resetsSeen(h *harness, side int) *[]wire.ResetCode {
	var codes []wire.ResetCode
	prev := h.tap
	h.tap = func(s, path int, b []byte) bool {
		var p wire.Packet
		if s == side && wire.Parse(b, &p) == nil && p.Type == wire.TypeReset {
			codes = append(codes, p.ResetCode)
		}
		if prev != nil {
			return prev(s, path, b)
		}
		return true
	}
	return &codes
}

func TestJoinBadHMAC(t *testing.T) {
	for _, bad := range []int{sideClient, sideServer} {
		h, c := openHarness(t, 31, 1, harnessConfig{links: []netsim.LinkConfig{link(10e6, 10*time.Millisecond, 0), link(10e6, 10*time.Millisecond, 0)}})
		h.ep[bad].testBadJoinHMAC = true
		resets := resetsSeen(h, 1-bad)
		if err := c.AddPath(h.sim.Now(), h.pathConfigs()[1]); err != nil {
			t.Fatal(err)
		}
		h.service(sideClient)
		h.run(5 * time.Second)
		if len(*resets) != 1 || (*resets)[0] != wire.ResetOptionError {
			t.Fatalf("bad side %d: resets %v\n%s", bad, *resets, h.dumpEvents())
		}
		if h.countEvents(sideClient, EventJoinFailed) != 1 {
			t.Fatalf("no JoinFailed on the client:\n%s", h.dumpEvents())
		}
		if c.State() != Open || h.openPaths(c) != 1 || h.openPaths(h.serverConn()) != 1 {
			t.Fatalf("connection affected: %v, %d/%d paths", c.State(), h.openPaths(c), h.openPaths(h.serverConn()))
		}
	}
}

func TestJoinUnknownConnection(t *testing.T) {
	h, c := openHarness(t, 32, 1, harnessConfig{links: []netsim.LinkConfig{link(10e6, 10*time.Millisecond, 0), link(10e6, 10*time.Millisecond, 0)}})
	resets := resetsSeen(h, sideServer)
	c.peerCI ^= 0x5a5a5a5a // the join names a connection the server does not know
	if err := c.AddPath(h.sim.Now(), h.pathConfigs()[1]); err != nil {
		t.Fatal(err)
	}
	h.service(sideClient)
	h.run(5 * time.Second)
	if len(*resets) != 1 || (*resets)[0] != wire.ResetNoConnection {
		t.Fatalf("resets %v", *resets)
	}
	if h.countEvents(sideClient, EventJoinFailed) != 1 || c.State() != Open {
		t.Fatalf("state %v\n%s", c.State(), h.dumpEvents())
	}
}

func TestJoinTooBusy(t *testing.T) {
	links := []netsim.LinkConfig{link(10e6, 10*time.Millisecond, 0), link(10e6, 10*time.Millisecond, 0), link(10e6, 10*time.Millisecond, 0)}
	h := newHarness(t, harnessConfig{seed: 33, links: links, srv: Config{MaxSubflows: 2}})
	resets := resetsSeen(h, sideServer)
	c := h.dial(3)
	h.run(5 * time.Second)
	if h.openPaths(c) != 2 || len(*resets) != 1 || (*resets)[0] != wire.ResetTooBusy {
		t.Fatalf("open %d resets %v\n%s", h.openPaths(c), *resets, h.dumpEvents())
	}
}

func TestGracefulClose(t *testing.T) {
	h, c := openHarness(t, 41, 2, harnessConfig{links: []netsim.LinkConfig{link(10e6, 20*time.Millisecond, 0.1), link(10e6, 30*time.Millisecond, 0.1)}})
	resets := resetsSeen(h, sideServer)
	c.Close(h.sim.Now())
	h.service(sideClient)
	if !h.runUntil(30*time.Second, func() bool { return len(h.ep[0].Conns()) == 0 && len(h.ep[1].Conns()) == 0 }) {
		t.Fatalf("not closed: client %d server %d conns\n%s", len(h.ep[0].Conns()), len(h.ep[1].Conns()), h.dumpEvents())
	}
	if c.State() != Closed {
		t.Fatalf("state %v", c.State())
	}
	for _, code := range *resets {
		if code != wire.ResetClosed {
			t.Fatalf("server reset codes %v", *resets)
		}
	}
	if len(*resets) < 2 {
		t.Fatalf("server sent %d resets, want one per subflow", len(*resets))
	}
	if h.countEvents(sideClient, EventConnClosed) != 1 || h.countEvents(sideServer, EventConnClosed) != 1 {
		t.Fatalf("events:\n%s", h.dumpEvents())
	}
}

func TestAbortClose(t *testing.T) {
	h, c := openHarness(t, 42, 2, harnessConfig{})
	resets := resetsSeen(h, sideClient)
	sc := h.serverConn()
	c.Abort(h.sim.Now())
	h.service(sideClient)
	h.run(time.Second)
	if len(*resets) != 2 || (*resets)[0] != wire.ResetMPAbrupt {
		t.Fatalf("client resets %v", *resets)
	}
	if sc.State() != Closed || len(h.ep[1].Conns()) != 0 || len(h.ep[0].Conns()) != 0 {
		t.Fatalf("server conn %v, conns %d/%d", sc.State(), len(h.ep[0].Conns()), len(h.ep[1].Conns()))
	}
	for _, ev := range h.events[sideServer] {
		if ev.Kind == EventConnClosed && ev.Reset != wire.ResetMPAbrupt {
			t.Fatalf("server close event %+v", ev)
		}
	}
}
