// SPDX-License-Identifier: MIT

package mpdccp

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

// Fuzzing from every state. A statePipe holds a client and a server
// Endpoint, plain or secure, driven by hand into one of these states:
const (
	stFresh     = iota // the client has a Request queued; the server has nothing
	stHandshake        // the server answered the Request; the client has not seen it
	stJoined           // two paths open at both ends
	stClosing          // the client closes; its Closes reached the server, the Resets did not come back
	numFuzzStates
)

type statePipe struct {
	ep   [2]*Endpoint
	conn *Conn
	now  mono.Time
	buf  []byte
}

func newStatePipe(tb testing.TB, secure bool, state int) *statePipe {
	rng := rand.New(rand.NewPCG(11, 12))
	p := &statePipe{buf: make([]byte, 2048)}
	cli := Config{Role: Client, Rand: netsim.RandReader(rng)}
	srv := Config{Role: Server, Rand: netsim.RandReader(rng)}
	if secure {
		hc := harnessConfig{}
		secureConfigs(newSecKeys(1), &hc)
		cli.Security, srv.Security = hc.cli.Security, hc.srv.Security
	}
	var err error
	if p.ep[0], err = NewEndpoint(cli); err != nil {
		tb.Fatal(err)
	}
	if p.ep[1], err = NewEndpoint(srv); err != nil {
		tb.Fatal(err)
	}
	if p.conn, err = p.ep[0].Dial(0, directPaths(2)); err != nil {
		tb.Fatal(err)
	}
	switch state {
	case stHandshake:
		p.move(0, true)
		for {
			if _, ok := p.ep[1].PollTransmit(p.now, p.buf); !ok {
				break
			}
		}
	case stJoined, stClosing:
		for i := 0; i < 100 && !(p.conn.State() == Open && len(p.conn.subflows) == 2 && p.conn.subflows[1].state == sfOpen); i++ {
			p.move(0, true)
			p.move(1, true)
			p.now = p.now.Add(time.Millisecond)
		}
		if p.conn.State() != Open {
			tb.Fatal("pipe did not open")
		}
		if state == stClosing {
			p.conn.Close(p.now)
			p.move(0, true)
			for {
				if _, ok := p.ep[1].PollTransmit(p.now, p.buf); !ok {
					break
				}
			}
		}
	}
	return p
}

// sendOne sends pkt from the client, moves everything across once each
// way and advances the clock by 10 µs.
func (p *statePipe) sendOne(pkt []byte) {
	p.conn.Send(p.now, pkt)
	p.move(0, true)
	p.move(1, true)
	p.now = p.now.Add(10 * time.Microsecond)
}

// move sends what side has to the other side (deliver) or drops it.
func (p *statePipe) move(side int, deliver bool) {
	e, peer := p.ep[side], p.ep[1-side]
	pumpOut(e, p.now, p.buf, func(t Transmit, dg []byte) {
		if deliver {
			handOver(peer, p.now, side, t, dg, 0)
		}
	})
	drainDelivered(e, p.now, p.buf, nil)
	for {
		if _, ok := e.PollEvent(); !ok {
			break
		}
	}
}

// stateSeeds returns the datagrams both ends sent in a short session.
func stateSeeds(tb testing.TB, secure bool) [][]byte {
	p := newStatePipe(tb, secure, stFresh)
	var out [][]byte
	for i := 0; i < 30; i++ {
		if i < 20 && p.conn.State() == Open {
			p.conn.Send(p.now, innerPkt("10.99.0.2", 120, byte(i)))
		}
		if i == 25 {
			p.conn.Close(p.now)
		}
		for side := 0; side < 2; side++ {
			e, peer := p.ep[side], p.ep[1-side]
			pumpOut(e, p.now, p.buf, func(t Transmit, dg []byte) {
				out = append(out, append([]byte(nil), dg...))
				handOver(peer, p.now, side, t, dg, 0)
			})
		}
		p.now = p.now.Add(time.Millisecond)
	}
	return out
}

// FuzzEngineStates feeds a datagram three times to one end of a pipe in a
// chosen state. sel: bits 0-1 the state (fresh, mid-handshake, joined,
// closing), bit 2 the receiving end (server if set), bit 3 secure mode,
// bit 4 fix the checksum, bits 5-6 the source (path 0, path 1, unknown).
// Nothing may panic, and memory stays bounded: no connections beyond what
// one datagram can open, no buffers leaked.
func FuzzEngineStates(f *testing.F) {
	for _, secure := range []bool{false, true} {
		sbit := uint8(0)
		if secure {
			sbit = 8
		}
		for i, b := range stateSeeds(f, secure) {
			f.Add(b, sbit|uint8(i%4)|0x10|uint8(i%2)<<2)
			if i%5 == 0 {
				// From an unknown address (a rebinding candidate), and
				// oversized: longer than any packet the engine sends.
				f.Add(b, sbit|stJoined|0x10|0x60)
				f.Add(append(append([]byte(nil), b...), make([]byte, 1600)...), sbit|stJoined|0x14|0x60)
			}
		}
	}
	f.Add([]byte{}, uint8(0))
	f.Add(make([]byte, 16), uint8(0x1c))
	f.Fuzz(func(t *testing.T, b []byte, sel uint8) {
		state := int(sel & 3)
		side := int(sel>>2) & 1
		p := newStatePipe(t, sel&8 != 0, state)
		src := int(sel>>5) & 3
		for i := 0; i < 3; i++ {
			d := append([]byte(nil), b...)
			from := cliAddr(min(src, 2) + 5*(src/3))
			if sel&0x10 != 0 && len(d) >= wire.GenericHeaderLen {
				if side == 1 {
					wire.SetChecksum(d, from.Addr(), srvAddr.Addr())
				} else {
					wire.SetChecksum(d, srvAddr.Addr(), cliAddr(min(src, 1)).Addr())
				}
			}
			if side == 1 {
				p.ep[1].HandleDatagram(p.now, min(src, 1), from, srvAddr.Addr(), d, uint8(i))
			} else {
				p.ep[0].HandleDatagram(p.now, min(src, 1), srvAddr, cliAddr(min(src, 1)).Addr(), d, uint8(i))
			}
			p.move(0, true)
			p.move(1, true)
			p.now = p.now.Add(time.Millisecond)
		}
		if n := len(p.ep[1].conns); n > 2 {
			t.Fatalf("%d server connections", n)
		}
		if n := len(p.ep[0].conns); n > 1 {
			t.Fatalf("%d client connections", n)
		}
		for _, e := range p.ep {
			if len(e.pool.free) > 64 || len(e.stateless) > maxStateless {
				t.Fatalf("%d pooled buffers, %d stateless replies", len(e.pool.free), len(e.stateless))
			}
			for _, c := range e.conns {
				if len(c.subflows) > e.cfg.MaxSubflows+2 {
					t.Fatalf("%d subflows", len(c.subflows))
				}
			}
		}
	})
}

// FuzzNoiseMessage feeds arbitrary bytes as the Noise message of a
// secure Request (MP_EXP) with a valid DCCP frame around it.
func FuzzNoiseMessage(f *testing.F) {
	f.Add([]byte{expInitiation}, uint8(0))
	f.Add(append([]byte{expInitiation}, make([]byte, 140)...), uint8(1))
	f.Add(append([]byte{expCookieReply}, make([]byte, 56)...), uint8(2))
	f.Fuzz(func(t *testing.T, exp []byte, kind uint8) {
		if len(exp) > 250 {
			return
		}
		p := newStatePipe(t, true, stFresh)
		buf := make([]byte, 1024)
		var b wire.Builder
		typ := wire.TypeRequest
		if kind&1 != 0 {
			typ = wire.TypeResponse
		}
		h := wire.Header{SrcPort: 40000, DstPort: 6511, Type: typ, Seq: 1, Ack: p.conn.subflows[0].iss, ServiceCode: p.ep[1].cfg.ServiceCode}
		if kind&1 != 0 {
			h.SrcPort, h.DstPort = p.conn.subflows[0].remotePort, p.conn.subflows[0].localPort
		}
		b.Begin(buf, &h)
		b.Feature(wire.OptChangeR, wire.FeatMultipath, 0)
		b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0)
		keys := append([]byte{mpKeyTypeNoise}, make([]byte, 64)...)
		b.MP(&wire.MPOption{Type: wire.MPKey, Token: 7, Keys: keys})
		b.MP(&wire.MPOption{Type: wire.MPExp, Raw: exp})
		n, err := b.Finish(make([]byte, int(kind>>1)%40))
		if err != nil {
			return
		}
		if typ == wire.TypeRequest {
			wire.SetChecksum(buf[:n], cliAddr(3).Addr(), srvAddr.Addr())
		} else {
			wire.SetChecksum(buf[:n], srvAddr.Addr(), cliAddr(0).Addr())
		}
		if typ == wire.TypeRequest {
			p.ep[1].HandleDatagram(p.now, 0, cliAddr(3), srvAddr.Addr(), buf[:n], 0)
			if len(p.ep[1].conns) != 0 {
				t.Fatal("a made-up Noise message opened a connection")
			}
		} else {
			p.move(0, false)
			p.ep[0].HandleDatagram(p.now, 0, srvAddr, cliAddr(0).Addr(), buf[:n], 0)
			if p.conn.sec.ready {
				t.Fatal("a made-up Response completed the handshake")
			}
		}
		p.move(0, true)
		p.move(1, true)
	})
}
