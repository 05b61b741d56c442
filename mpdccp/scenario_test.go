// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/reorder"
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
	snk := h.serverSink()
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
	snk := h.serverSink()
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
				wire.SetChecksum(b, from.Addr(), to)
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

func TestSetPrioConfirmed(t *testing.T) {
	// 30% loss on path 1 makes MP_PRIO and MP_CONFIRM need retransmissions.
	links := []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0), link(20e6, 10*time.Millisecond, 0.3)}
	h, c := openHarness(t, 51, 2, harnessConfig{links: links})
	if err := c.SetPrio(h.sim.Now(), 1, 1); err != nil {
		t.Fatal(err)
	}
	h.service(sideClient)
	sc := h.serverConn()
	if !h.runUntil(30*time.Second, func() bool { return len(c.ctrl) == 0 }) {
		t.Fatalf("MP_PRIO never confirmed: %+v", c.ctrl)
	}
	if p := sc.pathByID(1); p == nil || p.prio != 1 {
		t.Fatalf("server path 1 prio not updated")
	}
	// With path 0 primary and path 1 standby, data goes to path 0 only.
	before := sc.pathByID(1).stats.DataIn
	snk := h.serverSink()
	src := &source{h: h, c: c, side: sideClient, total: 2000, size: 500, period: time.Millisecond, perTick: 2}
	src.start()
	h.runUntil(10*time.Second, func() bool { return snk.count >= 2000 })
	if got := sc.pathByID(1).stats.DataIn - before; got != 0 {
		t.Fatalf("standby path carried %d data packets", got)
	}
	if snk.count != 2000 {
		t.Fatalf("delivered %d", snk.count)
	}
}

func TestNATRebinding(t *testing.T) {
	h, c := openHarness(t, 61, 1, harnessConfig{})
	snk := h.serverSink()
	src := &source{h: h, c: c, side: sideClient, total: 3000, size: 500, period: time.Millisecond, perTick: 2}
	src.start()
	h.run(500 * time.Millisecond)
	// The NAT in front of the client picks a new public port.
	h.paths[0].cli = netip.AddrPortFrom(h.paths[0].cli.Addr(), 51000)
	if !h.runUntil(20*time.Second, func() bool { return snk.count >= 3000 }) {
		t.Fatalf("delivered %d of 3000 after rebinding", snk.count)
	}
	if h.countEvents(sideServer, EventPathRebind) != 1 {
		t.Fatalf("events:\n%s", h.dumpEvents())
	}
	if got := h.serverConn().subflows[0].remote; got != h.paths[0].cli {
		t.Fatalf("server sends to %v", got)
	}
}

func TestSyncAfterSequenceJump(t *testing.T) {
	h, c := openHarness(t, 71, 1, harnessConfig{})
	snk := h.serverSink()
	// As if thousands of packets had been lost: the client's next sequence
	// numbers are far beyond the server's window (RFC 4340 §7.5.4).
	sf := c.subflows[0]
	sf.gss = seqAdd(sf.gss, 5000)
	src := &source{h: h, c: c, side: sideClient, total: 2000, size: 500, period: time.Millisecond, perTick: 2}
	src.start()
	if !h.runUntil(20*time.Second, func() bool { return snk.count >= 1900 }) {
		t.Fatalf("delivered %d after the jump", snk.count)
	}
	ss := h.serverConn().subflows[0]
	if ss.stats.OutOfWindow == 0 || ss.stats.SyncsOut == 0 {
		t.Fatalf("no Sync: %+v", ss.stats)
	}
}

func TestIdleTimeout(t *testing.T) {
	h, c := openHarness(t, 81, 1, harnessConfig{srv: Config{IdleTimeout: 5 * time.Second}})
	// The client vanishes: everything it sends is lost from now on.
	lc := h.paths[0].up.Config()
	lc.Loss = 1
	h.paths[0].up.SetConfig(lc)
	h.run(10 * time.Second)
	if len(h.ep[1].Conns()) != 0 {
		t.Fatalf("server still holds %d conns", len(h.ep[1].Conns()))
	}
	if h.countEvents(sideServer, EventConnClosed) != 1 || c.State() != Open {
		t.Fatalf("client %v\n%s", c.State(), h.dumpEvents())
	}
}

func TestAdvertiseAndWithdrawAddr(t *testing.T) {
	h, c := openHarness(t, 52, 1, harnessConfig{links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0.2)}})
	addr := netip.MustParseAddrPort("192.0.2.7:7000")
	if err := c.AdvertiseAddr(h.sim.Now(), 5, addr); err != nil {
		t.Fatal(err)
	}
	h.service(sideClient)
	if !h.runUntil(20*time.Second, func() bool { return len(c.ctrl) == 0 }) {
		t.Fatalf("ADDADDR not confirmed: %+v", c.ctrl)
	}
	var got []Event
	for _, ev := range h.events[sideServer] {
		if ev.Kind == EventPeerAddr {
			got = append(got, ev)
		}
	}
	if len(got) == 0 || got[0].Remote != addr || got[0].Path != 5 {
		t.Fatalf("server events %+v", got)
	}
	if err := c.WithdrawAddr(h.sim.Now(), 5); err != nil {
		t.Fatal(err)
	}
	h.service(sideClient)
	if !h.runUntil(20*time.Second, func() bool { return len(c.ctrl) == 0 }) {
		t.Fatalf("REMOVEADDR not confirmed: %+v", c.ctrl)
	}
	if h.countEvents(sideServer, EventPeerRemoveAddr) == 0 {
		t.Fatalf("no remove event:\n%s", h.dumpEvents())
	}
	if h.ep[1].Stats().Dropped[DropBadHMAC] != 0 {
		t.Fatal("HMAC of ADDADDR/REMOVEADDR rejected")
	}
}

// TestPluggableComponents runs a lossy 2-path transfer with each
// congestion controller, scheduler and reorderer registered, checking
// that nothing is delivered twice and losses are accounted for.
func TestPluggableComponents(t *testing.T) {
	cases := []struct{ ccid, sched, reo string }{
		{"ccid2", "rr", "passive"},
		{"bbr", "srtt", "adaptive"},
		{"", "", ""}, // the defaults
		{"ccid2", "redundant", "passive"},
		{"ccid2", "otias", "fixed"},
		{"bbr", "ecf", "equalize"},
		{"ccid2", "priority", "adaptive"},
	}
	for _, tc := range cases {
		t.Run(tc.ccid+"/"+tc.sched+"/"+tc.reo, func(t *testing.T) {
			cfg := Config{CCID: tc.ccid, Scheduler: tc.sched, Reorderer: tc.reo}
			links := []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0.01), link(10e6, 25*time.Millisecond, 0.01)}
			links[0].Queue, links[1].Queue = 32*1024, 32*1024
			h, c := openHarness(t, 61, 2, harnessConfig{cli: cfg, srv: cfg, links: links})
			snk := h.serverSink()
			total := uint64(5000)
			src := &source{h: h, c: c, side: sideClient, total: total, size: 1000, period: time.Millisecond, perTick: 3}
			src.start()
			h.runUntil(60*time.Second, func() bool { return src.next >= total && c.queued() == 0 })
			h.run(3 * time.Second)
			if snk.dups != 0 {
				t.Fatalf("%d duplicates delivered", snk.dups)
			}
			if snk.count < total*8/10 {
				t.Fatalf("delivered only %d of %d", snk.count, total)
			}
			if tc.sched != "redundant" {
				lossAccount(t, h, c, snk, src.next)
			} else if h.serverConn().Stats().Duplicates == 0 {
				t.Fatal("redundant scheduler sent no copies")
			}
		})
	}
}

func TestMandatoryUnknownOption(t *testing.T) {
	h, c := openHarness(t, 53, 2, harnessConfig{})
	resets := resetsSeen(h, sideServer)
	sf := c.subflows[1]
	hdr := wire.Header{SrcPort: sf.localPort, DstPort: sf.remotePort, Type: wire.TypeAck, Seq: sf.nextSeq(), Ack: sf.gsr}
	var b wire.Builder
	buf := make([]byte, 256)
	if err := b.Begin(buf, &hdr); err != nil {
		t.Fatal(err)
	}
	if err := b.Option(wire.OptMandatory, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Option(200, []byte{1, 2}); err != nil { // CCID-specific, unknown to us
		t.Fatal(err)
	}
	n, err := b.Finish(nil)
	if err != nil {
		t.Fatal(err)
	}
	wire.SetChecksum(buf[:n], h.paths[1].cli.Addr(), srvAddr.Addr())
	h.ep[1].HandleDatagram(h.sim.Now(), 1, h.paths[1].cli, srvAddr.Addr(), buf[:n], 0)
	h.service(sideServer)
	h.run(time.Second)
	if len(*resets) != 1 || (*resets)[0] != wire.ResetMandatoryError {
		t.Fatalf("resets %v", *resets)
	}
	// Only that subflow is gone.
	if c.State() != Open || h.openPaths(c) != 1 || h.openPaths(h.serverConn()) != 1 {
		t.Fatalf("state %v paths %d/%d", c.State(), h.openPaths(c), h.openPaths(h.serverConn()))
	}
}

func TestRequestBackoffAndGiveUp(t *testing.T) {
	lc := link(10e6, 10*time.Millisecond, 1) // the server is unreachable
	h := newHarness(t, harnessConfig{seed: 54, links: []netsim.LinkConfig{lc}})
	var at []mono.Time
	h.tap = func(side, path int, b []byte) bool {
		if typ, ok := wire.PeekType(b); ok && typ == wire.TypeRequest {
			at = append(at, h.sim.Now())
		}
		return true
	}
	c := h.dial(1)
	h.run(5 * time.Minute)
	if len(at) != maxRequestTries {
		t.Fatalf("%d Requests, want %d", len(at), maxRequestTries)
	}
	for i := 2; i < len(at); i++ {
		if prev, cur := at[i-1].Sub(at[i-2]), at[i].Sub(at[i-1]); cur < prev {
			t.Fatalf("interval %d shrank: %v after %v", i, cur, prev)
		}
	}
	if at[1].Sub(at[0]) != requestRTO || at[2].Sub(at[1]) != 2*requestRTO {
		t.Fatalf("no exponential backoff: %v", at)
	}
	if c.State() != Closed || len(h.ep[0].Conns()) != 0 || h.countEvents(sideClient, EventConnClosed) != 1 {
		t.Fatalf("state %v conns %d\n%s", c.State(), len(h.ep[0].Conns()), h.dumpEvents())
	}
}

// TestChaos runs traffic both ways over 3 paths with bursty loss,
// reordering jitter, outages and rate changes, and checks the invariants:
// nothing delivered twice, every loss accounted for, the connection alive.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("long simulation; run without -short")
	}
	for seed := int64(1); seed <= 3; seed++ {
		ge := &netsim.GilbertElliott{PGoodBad: 0.01, PBadGood: 0.3, LossGood: 0.001, LossBad: 0.5}
		links := []netsim.LinkConfig{
			{Rate: 30e6, Delay: 15 * time.Millisecond, Jitter: 5 * time.Millisecond, Reorder: true, Queue: 64 * 1024, GE: ge},
			{Rate: 10e6, Delay: 40 * time.Millisecond, Jitter: 20 * time.Millisecond, Queue: 32 * 1024, Loss: 0.02},
			{Rate: 5e6, Delay: 80 * time.Millisecond, Queue: 16 * 1024, Loss: 0.05},
		}
		cfg := Config{KeepAlive: 300 * time.Millisecond, PathTimeout: time.Second}
		h, c := openHarnessRetry(t, seed, links, cfg)
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		base := h.sim.Now()
		for i := 0; i < 6; i++ {
			p := rng.IntN(len(links))
			start := base.Add(time.Duration(2+rng.IntN(30)) * time.Second)
			end := start.Add(time.Duration(200+rng.IntN(4000)) * time.Millisecond)
			for _, l := range []*netsim.Link{h.paths[p].up, h.paths[p].down} {
				lc := l.Config()
				lc.Outages = append(lc.Outages, netsim.Outage{Start: start, End: end})
				l.SetConfig(lc)
			}
		}
		h.sim.At(base.Add(10*time.Second), func() {
			lc := h.paths[0].up.Config()
			lc.Rate = 3e6
			h.paths[0].up.SetConfig(lc)
		})
		up, down := newSink(), newSink()
		h.onDeliver = func(side int, _ *Conn, b []byte) {
			if side == sideServer {
				up.deliver(b)
			} else {
				down.deliver(b)
			}
		}
		total := uint64(20000)
		s1 := &source{h: h, c: c, side: sideClient, total: total, size: 900, period: time.Millisecond, perTick: 1}
		s2 := &source{h: h, c: h.serverConn(), side: sideServer, total: total, size: 1100, period: time.Millisecond, perTick: 1}
		s1.start()
		s2.start()
		h.runUntil(5*time.Minute, func() bool {
			return s1.next >= total && s2.next >= total && c.queued() == 0 && h.serverConn().queued() == 0
		})
		h.run(5 * time.Second)
		if up.dups != 0 || down.dups != 0 {
			t.Fatalf("seed %d: duplicates %d/%d", seed, up.dups, down.dups)
		}
		if c.State() != Open || h.serverConn().State() != Open {
			t.Fatalf("seed %d: conn %v/%v\n%s", seed, c.State(), h.serverConn().State(), h.dumpEvents())
		}
		lossAccount(t, h, c, up, s1.next)
		if up.count < total*7/10 || down.count < total*7/10 {
			t.Fatalf("seed %d: delivered %d up, %d down of %d", seed, up.count, down.count, total)
		}
		t.Logf("seed %d: up %d down %d of %d; client drops %v server drops %v", seed, up.count, down.count, total,
			h.ep[0].Stats().Dropped, h.ep[1].Stats().Dropped)
	}
}

// openHarnessRetry is openHarness with explicit links and config on both sides.
func openHarnessRetry(t *testing.T, seed int64, links []netsim.LinkConfig, cfg Config) (*harness, *Conn) {
	t.Helper()
	return openHarness(t, seed, len(links), harnessConfig{links: links, cli: cfg, srv: cfg})
}

// concentrator is one server Endpoint and many client Endpoints with 2
// paths each, joined by an in-memory network without delay.
type concentrator struct {
	srv       *Endpoint
	cls       []*Endpoint
	conns     []*Conn
	got       map[*Conn]map[byte]int
	buf, dbuf []byte
	now       mono.Time
}

func concAddr(cl, path int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(cl >> 8), byte(cl), byte(path + 1)}), 40000)
}

func newConcentrator(tb testing.TB, clients int) *concentrator {
	return newConcentratorWith(tb, clients, Config{})
}

// newConcentratorWith uses base (role, randomness and limits aside) for
// both ends.
func newConcentratorWith(tb testing.TB, clients int, base Config) *concentrator {
	rng := rand.New(rand.NewPCG(8, 9))
	k := &concentrator{got: map[*Conn]map[byte]int{}, buf: make([]byte, 2048), dbuf: make([]byte, 2048)}
	var err error
	srvCfg := base
	srvCfg.Role, srvCfg.Rand, srvCfg.MaxConns = Server, netsim.RandReader(rng), clients
	if k.srv, err = NewEndpoint(srvCfg); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < clients; i++ {
		cliCfg := base
		cliCfg.Role, cliCfg.Rand = Client, netsim.RandReader(rng)
		e, err := NewEndpoint(cliCfg)
		if err != nil {
			tb.Fatal(err)
		}
		c, err := e.Dial(0, []PathConfig{{ID: 0, Local: 0, Remote: srvAddr}, {ID: 1, Local: 1, Remote: srvAddr}})
		if err != nil {
			tb.Fatal(err)
		}
		k.cls, k.conns = append(k.cls, e), append(k.conns, c)
	}
	for step := 0; step < 50; step++ {
		k.pump()
		k.now = k.now.Add(time.Millisecond)
	}
	// More than the concentrator's rate-limiter table (4,096 sources in a
	// second) dialling at once: the rest get in with their Requests'
	// retransmissions once the table is swept.
	for step := 0; step < 600 && !k.allOpen(); step++ {
		k.pump()
		k.now = k.now.Add(50 * time.Millisecond)
	}
	for i, c := range k.conns {
		if c.State() != Open || h2paths(c) != 2 {
			tb.Fatalf("client %d: %v, %d paths", i, c.State(), h2paths(c))
		}
	}
	return k
}

func (k *concentrator) allOpen() bool {
	for _, c := range k.conns {
		if c.State() != Open || h2paths(c) != 2 {
			return false
		}
	}
	return true
}

func (k *concentrator) pump() {
	for moved := true; moved; {
		moved = false
		for i, e := range k.cls {
			if pumpOut(e, k.now, k.buf, func(tx Transmit, dg []byte) {
				k.srv.HandleDatagram(k.now, 0, concAddr(i, tx.Local), srvAddr.Addr(), dg, 0)
			}) {
				moved = true
			}
		}
		if pumpOut(k.srv, k.now, k.buf, func(tx Transmit, dg []byte) {
			a := tx.Remote.Addr().As4()
			cl, path := int(a[1])<<8|int(a[2]), int(a[3])-1
			k.cls[cl].HandleDatagram(k.now, path, srvAddr, tx.Remote.Addr(), dg, 0)
		}) {
			moved = true
		}
		for {
			n, c, ok := k.srv.PollDeliver(k.now, k.dbuf)
			if !ok {
				break
			}
			if k.got[c] == nil {
				k.got[c] = map[byte]int{}
			}
			k.got[c][k.dbuf[:n][0]]++
		}
	}
}

// TestConcentratorManyClients connects 20 clients with 2 paths each to one
// server Endpoint and checks that every inner packet reaches the server
// connection of its own client.
func TestConcentratorManyClients(t *testing.T) {
	const clients = 20
	k := newConcentrator(t, clients)
	for i, c := range k.conns {
		for j := 0; j < 50; j++ {
			c.Send(k.now, []byte{byte(i), byte(j)})
		}
	}
	for step := 0; step < 200; step++ {
		k.pump()
		k.now = k.now.Add(time.Millisecond)
	}
	if len(k.srv.Conns()) != clients || len(k.got) != clients {
		t.Fatalf("server has %d conns, %d delivering", len(k.srv.Conns()), len(k.got))
	}
	for c, m := range k.got {
		if len(m) != 1 {
			t.Fatalf("server conn %x got packets of several clients: %v", c.ID(), m)
		}
		for _, n := range m {
			if n != 50 {
				t.Fatalf("server conn %x got %d packets, want 50", c.ID(), n)
			}
		}
	}
}

// BenchmarkServerIdleConns is the cost of the driver loop's Deadline and
// PollTransmit on a server holding 500 open, idle connections.
func BenchmarkServerIdleConns(b *testing.B) {
	k := newConcentrator(b, 500)
	now := k.now
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if k.srv.Deadline() <= now {
			k.srv.HandleTimer(now)
		}
		if _, ok := k.srv.PollTransmit(now, k.buf); ok {
			b.Fatal("idle server transmitted")
		}
		now = now.Add(time.Microsecond)
	}
}

func h2paths(c *Conn) int {
	n := 0
	for _, sf := range c.subflows {
		if sf.state == sfOpen {
			n++
		}
	}
	return n
}

// BenchmarkConnMemory reports the heap one connection costs, client and
// server ends together, two paths each, after 50 packets each way (so the
// send queues and reorder buffers exist), with the reorder package's own
// default buffer (2048) and the product's (0: defaults.ReorderBuffer).
func BenchmarkConnMemory(b *testing.B) {
	for _, reoBuf := range []int{reorder.DefaultBufferLimit, 0} {
		b.Run(fmt.Sprintf("reorder_buffer=%d", reoBuf), func(b *testing.B) {
			const clients = 100
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				k := newConcentratorWith(b, clients, Config{Reorderer: "equalize", Reorder: reorder.Config{BufferLimit: reoBuf}})
				for j := 0; j < 50; j++ {
					for _, c := range k.conns {
						c.Send(k.now, []byte{1, 2, 3})
					}
					for _, c := range k.srv.Conns() {
						c.Send(k.now, []byte{1, 2, 3})
					}
					k.pump()
					k.now = k.now.Add(time.Millisecond)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clients, "B/conn")
				runtime.KeepAlive(k)
			}
		})
	}
}
