// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
)

func TestNACKEncoding(t *testing.T) {
	for _, n := range []reorder.NACK{{Before: 1, After: 3}, {Before: 0xffffffffffff, After: 5}, {Before: 100, After: 70000}, {Path: -1, Before: 8, After: 10}} {
		raw := putNACK(nil, n)
		before, after, missing, ok := parseNACK(raw)
		if missing != (n.Path < 0) {
			t.Errorf("%+v: kind lost", n)
		}
		want := n.Before
		if seqDiff(n.After, n.Before) > 0xffff {
			want = seqAdd(n.After, -0xffff) // the distance saturates: a shorter range
		}
		if !ok || after != n.After || before != want {
			t.Errorf("%+v: got %d..%d %v", n, before, after, ok)
		}
	}
	for _, raw := range [][]byte{nil, {'N'}, {'X', 0, 0, 0, 0, 0, 1, 0, 2}, {'N', 0, 0, 0, 0, 0, 9, 0, 1}} {
		if _, _, _, ok := parseNACK(raw); ok {
			t.Errorf("parseNACK(% x) accepted", raw)
		}
	}
}

func FuzzParseNACK(f *testing.F) {
	f.Add(putNACK(nil, reorder.NACK{Before: 7, After: 10}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		before, after, _, ok := parseNACK(raw)
		if ok && seqDiff(after, before) < 2 {
			t.Fatalf("range %d..%d holds nothing", before, after)
		}
	})
}

// cbr offers flow port's numbered UDP packets at rate (bit/s) from side
// for dur; got records each one's one-way delay at the other side.
type cbr struct {
	h     *harness
	side  int
	port  uint16
	size  int
	sent  map[uint32]mono.Time
	delay []time.Duration
	order []uint32
}

func (s *cbr) run(rate float64, dur time.Duration) {
	s.runBursts(1, time.Duration(float64(s.size*8)/rate*1e9), dur)
}

func (s *cbr) deliver(b []byte) bool {
	if len(b) < 32 || binary.BigEndian.Uint16(b[22:]) != s.port {
		return false
	}
	id := binary.BigEndian.Uint32(b[28:])
	s.order = append(s.order, id)
	s.delay = append(s.delay, s.h.sim.Now().Sub(s.sent[id]))
	return true
}

// twoFlows opens a two-path connection over cell (BBR paths, loss repair,
// the default send queue) with two UDP flows from the client: a 1200-byte
// one on port 9000 and another of size-byte packets on port.
func twoFlows(t *testing.T, seed int64, cell simCell, size int, port uint16) (*harness, *Conn, *cbr, *cbr) {
	t.Helper()
	cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
	h := newHarness(t, harnessConfig{seed: seed, links: cell.links(2), cli: cfg, srv: cfg})
	first := &cbr{h: h, side: sideClient, port: 9000, size: 1200, sent: map[uint32]mono.Time{}}
	second := &cbr{h: h, side: sideClient, port: port, size: size, sent: map[uint32]mono.Time{}}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if side == sideServer && !first.deliver(b) {
			second.deliver(b)
		}
	}
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatal("not open")
	}
	return h, c, first, second
}

// A flow that needs both paths (UDP at 80 % of their sum) beside a ping:
// the ping keeps the fast path's round trip, and the spread flow arrives
// complete and in order although the slow path loses 3 % (repairs cross
// the fast path, asked for by NACK).
func TestSpreadFlowBesidePing(t *testing.T) {
	cell := simCell{rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond},
		loss: [2]float64{0, 0.03}}
	h, c, bulk, ping := twoFlows(t, 21, cell, 64, 53)
	bulk.run(24e6, 10*time.Second)
	h.run(2 * time.Second)
	ping.run(64*8*20, 8*time.Second)
	h.run(10 * time.Second)

	s := c.Stats()
	rs := h.serverConn().Stats().Reorder
	if len(bulk.order) < len(bulk.sent)*995/1000 {
		t.Errorf("spread flow: %d of %d delivered (%d repaired, reorder %+v)", len(bulk.order), len(bulk.sent), s.Repaired, rs)
	}
	for i := 1; i < len(bulk.order); i++ {
		if bulk.order[i] < bulk.order[i-1] {
			t.Fatalf("spread flow out of order at %d: %d after %d", i, bulk.order[i], bulk.order[i-1])
		}
	}
	if s.NACKsReceived == 0 || rs.Repaired == 0 {
		t.Errorf("no repair by NACK: %+v, reorder %+v", s.connCounters, rs)
	}
	var onSlow int
	for _, sf := range c.subflows {
		if sf.id == 1 {
			onSlow = int(sf.stats.DataOut)
		}
	}
	if onSlow < len(bulk.sent)/10 {
		t.Errorf("only %d of %d packets crossed the slow path: the flow was not spread", onSlow, len(bulk.sent))
	}
	// The ping never waits for the slow path: one way about 8 ms.
	if len(ping.delay) == 0 {
		t.Fatal("no ping delivered")
	}
	if d := quantileDur(append([]time.Duration(nil), ping.delay...), 0.9); d > 12*time.Millisecond {
		t.Errorf("ping one-way delay p90 %v, want about the fast path's 8 ms", d)
	}
}

// A constant-rate stream above the fast path's rate beside a satellite
// path (UDP at 80 % of 20 + 10 Mbit/s, 8 + 300 ms one way) does not back
// off when the send queue's AQM drops its packets: it overflows onto the
// satellite path instead of losing the excess (scheduler
// unresponsiveSignals), and a ping beside it keeps the fast path.
func TestConstantRateStreamOverflowsOntoASatellitePath(t *testing.T) {
	cell := simCell{rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 300 * time.Millisecond}}
	h, c, stream, ping := twoFlows(t, 23, cell, 64, 53)
	stream.run(24e6, 20*time.Second)
	h.run(2 * time.Second)
	ping.run(64*8*20, 16*time.Second)
	h.run(20 * time.Second)

	// What is lost goes in the first seconds, while the stream is found
	// unresponsive and the satellite path's controller ramps up over its
	// 600 ms rounds: 99.0 % delivered; 96.8 % when its first window was
	// ten packets (ccid.BBRParams.InitialRateFloor), 85 % with the
	// satellite cap applied to this flow too.
	if got, want := len(stream.order), len(stream.sent)*985/1000; got < want {
		t.Errorf("stream: %d of %d delivered, want at least %d (send queue %+v)", got, len(stream.sent), want, c.fq.Stats())
	}
	for i := 1; i < len(stream.order); i++ {
		if stream.order[i] < stream.order[i-1] {
			t.Fatalf("stream out of order at %d: %d after %d", i, stream.order[i], stream.order[i-1])
		}
	}
	if len(ping.delay) == 0 {
		t.Fatal("no ping delivered")
	}
	if d := quantileDur(append([]time.Duration(nil), ping.delay...), 0.9); d > 12*time.Millisecond {
		t.Errorf("ping one-way delay p90 %v, want about the fast path's 8 ms", d)
	}
}

// The same stream with 2 % random loss on the satellite path. Its
// round trip never varies, so RTTVAR decays to zero, and both timeouts
// built on SRTT + 4·RTTVAR fired on a path that worked: the engine
// suspected the path when its controller probed and queued a little (no
// new data on it for about a second), and the controller timed out
// before the peer's delayed ack of the first packet after a quiet spell
// (every packet in flight declared lost, the window at one packet).
// With both: 82-87 % delivered (seeds 23, 24); with only the
// controller's timeout fixed this test still sees one suspicion and
// 94.9 %. The controller's timeout has its own test
// (ccid.TestRTOOutlastsASteadyRoundTripAndTheAckDelay). With both fixed,
// 95.1-96.9 % (seeds 23-25) while the path's first window was ten
// packets, 99.0 % with ccid.BBRParams.InitialRateFloor.
func TestConstantRateStreamOverALossySatellitePath(t *testing.T) {
	cell := simCell{rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 300 * time.Millisecond},
		loss: [2]float64{0, 0.02}}
	h, c, stream, _ := twoFlows(t, 23, cell, 64, 53)
	stream.run(24e6, 20*time.Second)
	h.run(22 * time.Second)

	sat := c.Stats().Paths[1]
	t.Logf("delivered %d of %d; satellite path: %d timeouts, %d suspicions, %d lost",
		len(stream.order), len(stream.sent), sat.CC.Timeouts, sat.Suspicions, sat.CC.PacketsLost)
	if got, want := len(stream.order), len(stream.sent)*98/100; got < want {
		t.Errorf("stream: %d of %d delivered, want at least %d (send queue %+v)", got, len(stream.sent), want, c.fq.Stats())
	}
	if sat.CC.Timeouts != 0 || sat.Suspicions != 0 {
		t.Errorf("satellite path: %d timeouts, %d suspicions on a path that never failed", sat.CC.Timeouts, sat.Suspicions)
	}
}

// A flow spread over both paths (UDP at 70 % of their sum) beside a
// flow that the fast path alone carries but that sends in bursts (ten
// 1200-byte packets every 20 ms, 4.8 Mbit/s, like web objects): the
// spread flow yields the fast path to it (scheduler.FlowPacket.FirstPass),
// so a burst leaves at the path's rate, not at half of it in turns with
// the spread flow's backlog.
func TestSpreadFlowYieldsToAFlowOnOnePath(t *testing.T) {
	cell := simCell{rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}}
	h, _, bulk, bursts := twoFlows(t, 22, cell, 1200, 9001)
	bulk.run(21e6, 10*time.Second)
	h.run(2 * time.Second)
	bursts.runBursts(10, 20*time.Millisecond, 8*time.Second)
	h.run(10 * time.Second)

	if len(bursts.delay) < len(bursts.sent)*99/100 || len(bulk.delay) < len(bulk.sent)*99/100 {
		t.Fatalf("delivered: bursts %d of %d, spread flow %d of %d", len(bursts.delay), len(bursts.sent), len(bulk.delay), len(bulk.sent))
	}
	d50 := quantileDur(append([]time.Duration(nil), bursts.delay...), 0.5)
	d90 := quantileDur(append([]time.Duration(nil), bursts.delay...), 0.9)
	b90 := quantileDur(append([]time.Duration(nil), bulk.delay...), 0.9)
	t.Logf("bursts' one-way delay p50 %v p90 %v; spread flow p90 %v", d50, d90, b90)
	// A burst's last packet leaves 10 × 0.48 ms after its first at the
	// fast path's rate: 8 ms + 4.8 ms + pacing slack.
	if d90 > 14*time.Millisecond {
		t.Errorf("bursts' one-way delay p90 %v, want about the fast path's 8 ms + 5 ms", d90)
	}
}

// runBursts offers n packets at once every gap for dur.
func (s *cbr) runBursts(n int, gap, dur time.Duration) {
	end := s.h.sim.Now().Add(dur)
	var id uint32
	var burst func()
	burst = func() {
		c := s.h.conn
		if s.side == sideServer {
			c = s.h.serverConn()
		}
		for range n {
			p := innerUDP(id, 17, s.port)
			p = append(p, make([]byte, s.size-len(p))...)
			s.sent[id] = s.h.sim.Now()
			c.Send(s.h.sim.Now(), p)
			id++
		}
		s.h.service(s.side)
		if s.h.sim.Now() < end {
			s.h.sim.After(gap, burst)
		}
	}
	burst()
}

// The engine's send queue drops a queued inner TCP ACK when a later ACK
// of its connection arrives (Config.ACKFilter), and only then.
func TestSendQueueFiltersSupersededACKs(t *testing.T) {
	ack := func(n uint32) []byte {
		b := make([]byte, 40)
		b[0], b[3], b[8], b[9] = 0x45, 40, 64, 6
		copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		b[20], b[21], b[23] = 0x9c, 0x40, 0x51 // ports 40000 -> 5201
		b[28], b[29], b[30], b[31] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		b[32], b[33] = 5<<4, 0x10
		return b
	}
	for _, filter := range []bool{true, false} {
		cfg := Config{ACKFilter: filter}
		h := newHarness(t, harnessConfig{seed: 1, links: []netsim.LinkConfig{link(10e6, 10*time.Millisecond, 0)}, cli: cfg, srv: cfg})
		c := h.dial(1) // not open yet: everything waits in the send queue
		for n := uint32(1000); n < 5000; n += 1000 {
			if !c.Send(h.sim.Now(), ack(n)) {
				t.Fatal("ACK refused")
			}
		}
		want := uint64(0)
		if filter {
			want = 3
		}
		if st := c.Stats(); st.AQM.Superseded != want || c.queued() != 4-int(want) {
			t.Errorf("filter %v: %d superseded, %d queued; want %d superseded", filter, st.AQM.Superseded, c.queued(), want)
		}
	}
}
