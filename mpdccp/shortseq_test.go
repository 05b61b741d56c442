// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

// TestShortSeqnosNegotiated: two mptun ends agree on Allow Short Seqnos
// (RFC 4340 §7.6.1) and then send their Data, Ack and DataAck packets with
// 24-bit sequence numbers (X=0), plain and sealed; with a peer that does
// not know the feature both ends keep 48-bit ones. Every inner packet
// arrives either way, over lossy paths, so that holes, repairs and the acks
// of old packets must be read against the right 48-bit numbers.
func TestShortSeqnosNegotiated(t *testing.T) {
	for _, tc := range []struct {
		name         string
		secure, long bool
	}{{"plain", false, false}, {"sealed", true, false}, {"peer without the feature", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			links := []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0.02), link(10e6, 20*time.Millisecond, 0.02)}
			hc := harnessConfig{seed: 5, links: links}
			if tc.secure {
				secureConfigs(newSecKeys(5), &hc)
			}
			hc.cli.Retransmit, hc.srv.Retransmit = true, true
			h := newHarness(t, hc)
			h.ep[1].testLongSeqnos = tc.long
			var short, long [2]int // data-bearing packets sent per side, by header form
			h.tap = func(side, path int, b []byte) bool {
				if typ := wire.Type(b[8] >> 1 & 0xf); typ == wire.TypeData || typ == wire.TypeDataAck {
					if b[8]&1 == 0 {
						short[side]++
					} else {
						long[side]++
					}
				}
				return true
			}
			var got [2]int
			h.onDeliver = func(side int, _ *Conn, b []byte) { got[side]++ }
			c := h.dial(2)
			if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
				t.Fatalf("not open\n%s", h.dumpEvents())
			}
			sc := h.serverConn()
			const n = 3000
			for i := range n {
				c.Send(h.sim.Now(), innerPkt("10.99.0.2", 1200, byte(i)))
				if i%4 == 0 {
					sc.Send(h.sim.Now(), innerPkt("10.99.0.1", 200, byte(i)))
				}
				h.service(sideClient)
				h.service(sideServer)
				h.run(500 * time.Microsecond)
			}
			h.run(3 * time.Second)
			if got[sideServer] != n || got[sideClient] != n/4 {
				t.Fatalf("delivered %d of %d to the server, %d of %d to the client; drops %v / %v",
					got[sideServer], n, got[sideClient], n/4, h.ep[1].Stats().Dropped, h.ep[0].Stats().Dropped)
			}
			for side := range 2 {
				if tc.long && short[side] != 0 {
					t.Errorf("side %d sent %d data packets with short sequence numbers to a peer without the feature", side, short[side])
				}
				// Only packets sent before the agreement may be long.
				if !tc.long && (short[side] == 0 || long[side] > short[side]/20) {
					t.Errorf("side %d sent %d data packets with short sequence numbers, %d with long ones", side, short[side], long[side])
				}
			}
			for side, cc := range []*Conn{c, sc} {
				for _, ps := range cc.Stats().Paths {
					if ps.ShortSeqnos == tc.long || !ps.HeaderChecksum {
						t.Errorf("side %d path %d reports short seqnos %v, header checksum %v", side, ps.ID, ps.ShortSeqnos, ps.HeaderChecksum)
					}
				}
			}
			t.Logf("short %v long %v; repaired %d", short, long, c.Stats().Repaired)
		})
	}
}
