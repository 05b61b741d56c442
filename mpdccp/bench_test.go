// SPDX-License-Identifier: MIT

package mpdccp

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

// pipe joins two endpoints over 2 loss-free, zero-delay in-memory paths,
// without netsim, so that benchmarks measure the engine alone.
type pipe struct {
	ep    [2]*Endpoint
	conn  *Conn
	now   mono.Time
	buf   []byte
	dbuf  []byte
	recvd int
}

func newPipe(tb testing.TB) *pipe { return newPipeRepair(tb, false) }

// newPipeRepair is newPipe with loss repair (Config.Retransmit) on or off.
func newPipeRepair(tb testing.TB, repair bool) *pipe {
	rng := rand.New(rand.NewPCG(5, 6))
	p := &pipe{buf: make([]byte, 2048), dbuf: make([]byte, 2048)}
	var err error
	if p.ep[0], err = NewEndpoint(Config{Role: Client, Rand: netsim.RandReader(rng), Retransmit: repair}); err != nil {
		tb.Fatal(err)
	}
	if p.ep[1], err = NewEndpoint(Config{Role: Server, Rand: netsim.RandReader(rng), Retransmit: repair}); err != nil {
		tb.Fatal(err)
	}
	if p.conn, err = p.ep[0].Dial(0, directPaths(2)); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < 100 && (p.conn.State() != Open || len(p.conn.subflows) < 2 || p.conn.subflows[1].state != sfOpen); i++ {
		p.step()
		p.now = p.now.Add(time.Millisecond)
	}
	if p.conn.State() != Open {
		tb.Fatal("pipe did not open")
	}
	return p
}

// step moves every pending datagram across, both ways, until quiet.
func (p *pipe) step() {
	for moved := true; moved; {
		moved = false
		for side := 0; side < 2; side++ {
			e, peer := p.ep[side], p.ep[1-side]
			if pumpOut(e, p.now, p.buf, func(t Transmit, dg []byte) { handOver(peer, p.now, side, t, dg, 0) }) {
				moved = true
			}
			p.recvd += drainDelivered(e, p.now, p.dbuf, nil)
		}
	}
}

// sendOne sends pkt from the client, moves everything across and advances
// the clock by 10 µs.
func (p *pipe) sendOne(pkt []byte) {
	p.conn.Send(p.now, pkt)
	p.step()
	p.now = p.now.Add(10 * time.Microsecond)
}

// BenchmarkEnginePacket is the engine cost of one 1200-byte inner packet
// through a 2-path connection: Send, schedule, build, checksum, parse,
// ack processing, reorder, deliver, and the acks going back.
func BenchmarkEnginePacket(b *testing.B) { benchEnginePacket(b, false) }

// BenchmarkEnginePacketRepair is BenchmarkEnginePacket with loss repair on:
// every data packet is kept in its subflow's sent-packet history until
// acknowledged.
func BenchmarkEnginePacketRepair(b *testing.B) { benchEnginePacket(b, true) }

func benchEnginePacket(b *testing.B, repair bool) {
	p := newPipeRepair(b, repair)
	pkt := make([]byte, 1200)
	// Warm up pools and rings.
	for i := 0; i < 5000; i++ {
		p.sendOne(pkt)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	b.ResetTimer()
	start := p.recvd
	for i := 0; i < b.N; i++ {
		p.sendOne(pkt)
	}
	b.StopTimer()
	if got := p.recvd - start; got < b.N*9/10 {
		b.Fatalf("delivered %d of %d", got, b.N)
	}
}

func TestEngineSteadyStateAllocs(t *testing.T) {
	for _, repair := range []bool{false, true} {
		p := newPipeRepair(t, repair)
		pkt := make([]byte, 1200)
		for i := 0; i < 5000; i++ {
			p.sendOne(pkt)
		}
		before := p.recvd
		allocs := testing.AllocsPerRun(2000, func() {
			p.sendOne(pkt)
		})
		if p.recvd-before < 1900 {
			t.Fatalf("repair %v: delivered %d of 2000", repair, p.recvd-before)
		}
		if repair && p.conn.Stats().Repaired != 0 {
			t.Fatalf("%d repairs on loss-free paths", p.conn.Stats().Repaired)
		}
		// A rare allocation (a ring growing, a control option) is
		// tolerated; one per packet is not.
		if allocs > 0.05 {
			t.Fatalf("repair %v: %.3f allocations per packet in steady state", repair, allocs)
		}
	}
}

// BenchmarkSimTransfer pushes b.N 1200-byte inner packets through a
// 2-path netsim connection (100 + 50 Mbit/s, 10/30 ms): engine plus
// simulator cost per packet, in wall time.
func BenchmarkSimTransfer(b *testing.B) {
	links := []netsim.LinkConfig{link(100e6, 10*time.Millisecond, 0), link(50e6, 30*time.Millisecond, 0)}
	h := newHarness(b, harnessConfig{seed: 1, links: links})
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 }) {
		b.Fatal("not open")
	}
	snk := uint64(0)
	h.onDeliver = func(side int, _ *Conn, _ []byte) { snk++ }
	b.ReportAllocs()
	b.SetBytes(1200)
	b.ResetTimer()
	src := &source{h: h, c: c, side: sideClient, total: uint64(b.N), size: 1200, period: time.Millisecond, perTick: 12}
	src.start()
	h.runUntil(time.Hour, func() bool { return src.next >= uint64(b.N) && c.queued() == 0 })
	h.run(2 * time.Second)
	b.StopTimer()
	// Drop-tail queues lose a few packets; the rest must arrive.
	b.ReportMetric(float64(snk)/float64(b.N), "delivered/op")
	if snk < uint64(b.N)*9/10 {
		b.Fatalf("delivered %d of %d", snk, b.N)
	}
}
