// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// securePipe is an open 2-path secure connection driven by hand.
func securePipe(tb testing.TB, aead string) *statePipe {
	p := newStatePipe(tb, true, stFresh)
	p.ep[0].sec.aead = map[string]uint8{"chacha20poly1305": aeadChaCha, "aes-256-gcm": aeadAESGCM}[aead]
	p.ep[1].sec.aead = p.ep[0].sec.aead
	// The client's first message already carries its preference: redo it.
	if err := p.ep[0].secInitClient(p.conn); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < 100 && !(p.conn.State() == Open && len(p.conn.subflows) == 2 && p.conn.subflows[1].state == sfOpen); i++ {
		p.move(0, true)
		p.move(1, true)
		p.now = p.now.Add(time.Millisecond)
	}
	if p.conn.State() != Open || p.conn.AEAD() != aead {
		tb.Fatalf("secure pipe: %v %q", p.conn.State(), p.conn.AEAD())
	}
	return p
}

func (p *statePipe) deliveredByServer() uint64 {
	var n uint64
	for _, c := range p.ep[1].conns {
		n += c.stats.DeliveredPackets
	}
	return n
}

// BenchmarkEnginePacketSecure is BenchmarkEnginePacket in secure mode:
// the engine cost of one 1200-byte inner packet including sealing and
// opening it (and the acks), per AEAD.
func BenchmarkEnginePacketSecure(b *testing.B) {
	for _, aead := range []string{"chacha20poly1305", "aes-256-gcm"} {
		b.Run(aead, func(b *testing.B) {
			p := securePipe(b, aead)
			pkt := innerPkt("10.99.0.2", 1200, 7)
			for i := 0; i < 5000; i++ {
				p.sendOne(pkt)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			start := p.deliveredByServer()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.sendOne(pkt)
			}
			b.StopTimer()
			if got := p.deliveredByServer() - start; got < uint64(b.N)*9/10 {
				b.Fatalf("delivered %d of %d", got, b.N)
			}
		})
	}
}

func TestSecureSteadyStateAllocs(t *testing.T) {
	p := securePipe(t, "chacha20poly1305")
	pkt := innerPkt("10.99.0.2", 1200, 7)
	for i := 0; i < 5000; i++ {
		p.sendOne(pkt)
	}
	before := p.deliveredByServer()
	allocs := testing.AllocsPerRun(2000, func() {
		p.sendOne(pkt)
	})
	if p.deliveredByServer()-before < 1900 {
		t.Fatalf("delivered %d of 2000 (drops %v)", p.deliveredByServer()-before, p.ep[1].Stats().Dropped)
	}
	if allocs > 0.05 {
		t.Fatalf("%.3f allocations per packet in steady state", allocs)
	}
}

// BenchmarkAEAD seals a 1,400-byte payload with a 40-byte header as
// associated data, per AEAD: the measurement behind preferring AES-GCM
// where the CPU has AES instructions.
func BenchmarkAEAD(b *testing.B) {
	for _, kind := range []uint8{aeadChaCha, aeadAESGCM} {
		b.Run(aeadName(kind), func(b *testing.B) {
			var key [32]byte
			a := newAEAD(kind, &key)
			buf := make([]byte, 1500)
			nonce := make([]byte, 12)
			b.SetBytes(1400)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sealPacket(a, nonce, 0, buf, 40, 1440, uint64(i))
			}
		})
	}
}

// TestSecureECN: with the inner packet encrypted, RFC 6040 still holds:
// the outer field copies the inner one (read before sealing), and an outer
// CE marks an ECT inner packet CE (with a valid IPv4 header checksum) after
// opening, or drops a Not-ECT one.
func TestSecureECN(t *testing.T) {
	p := securePipe(t, "aes-256-gcm")
	p.ep[0].cfg.ECN = true
	for _, tc := range []struct {
		inner, outer, ce uint8
		delivered        bool
		wantInner        uint8
	}{
		{inner: 0, outer: 0, ce: 0, delivered: true, wantInner: 0},
		{inner: 1, outer: 1, ce: 0, delivered: true, wantInner: 1},
		{inner: 2, outer: 2, ce: 3, delivered: true, wantInner: 3},
		{inner: 0, outer: 0, ce: 3, delivered: false},
	} {
		pkt := innerPkt("10.99.0.2", 200, 1)
		pkt[1] = tc.inner
		setIPv4Checksum(pkt)
		p.conn.Send(p.now, pkt)
		var sent []byte
		var ecn uint8
		for {
			tx, ok := p.ep[0].PollTransmit(p.now, p.buf)
			if !ok {
				break
			}
			if typ, _ := wire.PeekType(p.buf[:tx.N]); typ.HasData() {
				sent, ecn = append([]byte(nil), p.buf[:tx.N]...), tx.ECN
			}
		}
		if sent == nil || ecn != tc.outer {
			t.Fatalf("inner ECN %d: outer %d, want %d", tc.inner, ecn, tc.outer)
		}
		before := p.deliveredByServer()
		drops := p.ep[1].stats.InnerECNDropped
		p.ep[1].HandleDatagram(p.now, 0, cliAddr(0), srvAddr.Addr(), sent, tc.ce)
		var got []byte
		for {
			n, _, ok := p.ep[1].PollDeliver(p.now, p.buf)
			if !ok {
				break
			}
			got = append([]byte(nil), p.buf[:n]...)
		}
		if tc.delivered != (p.deliveredByServer() > before) {
			t.Fatalf("inner ECN %d outer CE %v: delivered %v", tc.inner, tc.ce == 3, !tc.delivered)
		}
		if !tc.delivered {
			if p.ep[1].stats.InnerECNDropped != drops+1 {
				t.Fatal("Not-ECT under CE not counted")
			}
			continue
		}
		if got[1]&3 != tc.wantInner || !ipv4ChecksumOK(got) {
			t.Fatalf("inner ECN %d after decap, want %d (checksum ok %v)", got[1]&3, tc.wantInner, ipv4ChecksumOK(got))
		}
		p.move(1, true)
		p.now = p.now.Add(time.Millisecond)
	}
}

func setIPv4Checksum(p []byte) {
	p[10], p[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	c := ^uint16(s)
	p[10], p[11] = byte(c>>8), byte(c)
}

func ipv4ChecksumOK(p []byte) bool {
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s) == 0xffff
}
