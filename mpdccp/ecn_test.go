// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/ecn"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

// ecnPipe joins a client and a server over one path; router sees the
// outer ECN field of every client-to-server datagram and returns the
// field it arrives with (an ECN-marking bottleneck, or one that ignores
// the field).
type ecnPipe struct {
	ep      [2]*Endpoint
	conn    *Conn
	now     mono.Time
	buf     []byte
	dbuf    []byte
	router  func(t Transmit, dg []byte) uint8
	dataECN map[uint8]int // outer fields of the client's data packets
	got     [][]byte      // inner packets delivered at the server
}

func newECNPipe(t *testing.T) *ecnPipe {
	rng := rand.New(rand.NewPCG(3, 4))
	p := &ecnPipe{buf: make([]byte, 2048), dbuf: make([]byte, 2048), dataECN: map[uint8]int{}}
	for i, role := range []Role{Client, Server} {
		ep, err := NewEndpoint(Config{Role: role, Rand: netsim.RandReader(rng), ECN: true, Reorderer: "fixed"})
		if err != nil {
			t.Fatal(err)
		}
		p.ep[i] = ep
	}
	c, err := p.ep[0].Dial(0, directPaths(1))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = c
	for i := 0; i < 200 && c.State() != Open; i++ {
		p.step()
	}
	if c.State() != Open {
		t.Fatal("connection did not open")
	}
	return p
}

// step moves every pending datagram across, both ways, then advances the
// clock by a millisecond.
func (p *ecnPipe) step() {
	for moved := true; moved; {
		moved = false
		for side := 0; side < 2; side++ {
			e, peer := p.ep[side], p.ep[1-side]
			if pumpOut(e, p.now, p.buf, func(t Transmit, dg []byte) {
				outer := t.ECN
				if side == 0 {
					if isData(dg) {
						p.dataECN[t.ECN]++
					}
					if p.router != nil {
						outer = p.router(t, dg)
					}
				}
				handOver(peer, p.now, side, t, dg, outer)
			}) {
				moved = true
			}
			drainDelivered(e, p.now, p.dbuf, func(pkt []byte) {
				if side == 1 {
					p.got = append(p.got, append([]byte(nil), pkt...))
				}
			})
		}
	}
	p.now = p.now.Add(time.Millisecond)
}

// isData reports whether dg is a DCCP Data or DataAck packet.
func isData(dg []byte) bool { typ := dg[8] >> 1 & 0xf; return typ == 2 || typ == 4 }

// innerECN is a 200-byte IPv4/UDP packet numbered id with the ECN field v.
func innerECN(id uint32, v uint8) []byte {
	pkt := innerUDP(id, 17, 9000)
	pkt = append(pkt, make([]byte, 200-len(pkt))...)
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	pkt[1] = v
	setIPv4Checksum(pkt)
	return pkt
}

func (p *ecnPipe) ecnMarks() uint64 { return p.conn.Stats().Paths[0].CC.ECNMarks }

// An ECN-capable inner packet travels under its own field; a bottleneck
// marks the outer header CE; the receiver's subflow records the mark, so
// the sender's controller counts it, and the inner packet leaves the
// tunnel marked CE (RFC 6040).
func TestOuterCEReachesSenderAndMarksInner(t *testing.T) {
	p := newECNPipe(t)
	p.router = func(t Transmit, dg []byte) uint8 {
		if t.ECN == ecn.ECT0 || t.ECN == ecn.ECT1 {
			return ecn.CE
		}
		return t.ECN
	}
	const n = 50
	for i := uint32(0); i < n; i++ {
		p.conn.Send(p.now, innerECN(i, ecn.ECT0))
		p.step()
	}
	for i := 0; i < 50; i++ {
		p.step()
	}
	if p.dataECN[ecn.ECT0] == 0 || len(p.dataECN) != 1 {
		t.Errorf("outer fields of data packets with ECT(0) inside: %v", p.dataECN)
	}
	if len(p.got) != n {
		t.Fatalf("%d of %d delivered", len(p.got), n)
	}
	for _, b := range p.got {
		if v, _ := ecn.Get(b); v != ecn.CE {
			t.Fatalf("inner packet delivered with ECN %d, want CE", v)
		}
	}
	if m := p.ecnMarks(); m == 0 {
		t.Error("the sender's controller counted no ECN marks")
	}
	if st := p.ep[1].Stats(); st.InnerCEMarked != n || st.InnerECNDropped != 0 {
		t.Errorf("server marked %d, dropped %d", st.InnerCEMarked, st.InnerECNDropped)
	}
}

// A Not-ECT inner packet travels Not-ECT. If its outer header arrives CE
// all the same, the subflow still records the mark for the sender's
// controller, and the inner packet is dropped, not delivered; its MP_SEQ
// counts as received, so the packets after it are not held behind a gap.
func TestOuterCEOnNotECTDropsInnerAfterRecording(t *testing.T) {
	p := newECNPipe(t)
	marked := 0
	p.router = func(t Transmit, dg []byte) uint8 {
		if isData(dg) && marked < 5 { // the first five data packets
			marked++
			return ecn.CE
		}
		return t.ECN
	}
	const n = 40
	for i := uint32(0); i < n; i++ {
		p.conn.Send(p.now, innerECN(i, ecn.NotECT))
		p.step()
	}
	if p.dataECN[ecn.NotECT] == 0 || len(p.dataECN) != 1 {
		t.Errorf("outer fields of data packets with Not-ECT inside: %v", p.dataECN)
	}
	if marked != 5 {
		t.Fatalf("%d datagrams marked", marked)
	}
	// The rest arrive at once behind the dropped ones ("fixed" would hold
	// a real gap for its 100 ms).
	if len(p.got) != n-5 {
		t.Fatalf("%d delivered within the sending time, want %d", len(p.got), n-5)
	}
	for _, b := range p.got {
		if v, _ := ecn.Get(b); v != ecn.NotECT {
			t.Fatalf("Not-ECT packet delivered with ECN %d", v)
		}
	}
	if st := p.ep[1].Stats(); st.InnerECNDropped != 5 {
		t.Errorf("server dropped %d inner packets, want 5", st.InnerECNDropped)
	}
	for i := 0; i < 50; i++ {
		p.step()
	}
	if m := p.ecnMarks(); m == 0 {
		t.Error("the sender's controller counted no ECN marks")
	}
}
