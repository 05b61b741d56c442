// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// capturePipe returns datagrams of a short session, for seeds.
func capturePipe(tb testing.TB) [][]byte {
	p := newPipe(tb)
	var out [][]byte
	pkt := make([]byte, 100)
	for i := 0; i < 20; i++ {
		p.conn.Send(p.now, pkt)
		for {
			t, ok := p.ep[0].PollTransmit(p.now, p.buf)
			if !ok {
				break
			}
			out = append(out, append([]byte(nil), p.buf[:t.N]...))
			p.ep[1].HandleDatagram(p.now, t.Local, cliAddr(t.Local), srvAddr.Addr(), p.buf[:t.N], 0)
		}
		p.step()
		p.now = p.now.Add(time.Millisecond)
	}
	return out
}

// FuzzEndpointDatagram feeds arbitrary datagrams to the server of an open
// 2-path connection. flags bit 0: fix the checksum so that the packet gets
// past it; bit 1: send from path 1's address; bit 2: deliver to the client.
func FuzzEndpointDatagram(f *testing.F) {
	for _, b := range capturePipe(f) {
		f.Add(b, uint8(1))
		f.Add(b, uint8(3))
		f.Add(b, uint8(5))
	}
	f.Add([]byte{}, uint8(0))
	f.Add(make([]byte, 16), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, flags uint8) {
		p := newPipe(t)
		path := int(flags>>1) & 1
		for i := 0; i < 3; i++ {
			d := append([]byte(nil), b...)
			if flags&4 == 0 {
				if flags&1 != 0 && len(d) >= wire.GenericHeaderLen {
					wire.SetChecksum(d, cliAddr(path).Addr(), srvAddr.Addr())
				}
				p.ep[1].HandleDatagram(p.now, path, cliAddr(path), srvAddr.Addr(), d, 0)
			} else {
				if flags&1 != 0 && len(d) >= wire.GenericHeaderLen {
					wire.SetChecksum(d, srvAddr.Addr(), cliAddr(path).Addr())
				}
				p.ep[0].HandleDatagram(p.now, path, srvAddr, cliAddr(path).Addr(), d, 0)
			}
			p.step()
			p.now = p.now.Add(time.Millisecond)
		}
		// Bounded memory: no new connections or buffers from one datagram.
		if n := len(p.ep[1].conns); n > 2 {
			t.Fatalf("%d server connections", n)
		}
		if n := len(p.ep[1].pool.free) + len(p.ep[0].pool.free); n > 64 {
			t.Fatalf("%d pooled buffers", n)
		}
		// The connection still carries data, unless the datagram was a
		// valid-looking close or reset for it (possible with a fixed checksum).
		if p.conn.State() == Open {
			before := p.recvd
			for i := 0; i < 10; i++ {
				p.conn.Send(p.now, make([]byte, 100))
				p.step()
				p.now = p.now.Add(time.Millisecond)
			}
			if flags&1 == 0 && p.recvd == before {
				t.Fatalf("connection stalled after a datagram with a bad checksum")
			}
		}
	})
}
