// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// TestFullDataPacketCarriesItsOptions: a data packet with the largest
// inner packet the tunnel accepts (the inner MTU) still carries what the
// receiver needs: MP_SEQ, the NDP Count after non-data packets (without
// it the Acks the receiver did not see count as lost data, and it holds
// the flow for repairs: web flows beside a bulk download took 70 ms
// instead of 40 in the lab when a 4-byte smaller reservation left no
// room for it), MP_EXP for a path-ordered flow, and an Ack Vector.
func TestFullDataPacketCarriesItsOptions(t *testing.T) {
	for _, secure := range []bool{false, true} {
		cfg := Config{CCID: "ccid2"}
		hc := harnessConfig{seed: simSeed, links: simCells[0].links(1), cli: cfg, srv: cfg}
		if secure {
			secureConfigs(newSecKeys(3), &hc)
		}
		h := newHarness(t, hc)
		c := h.dial(1)
		if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == 1 && h.openPaths(h.serverConn()) == 1 }) {
			t.Fatalf("not open\n%s", h.dumpEvents())
		}
		sf := c.subflows[0]
		sf.ndpRun, sf.dataSinceAck = 1, 1 // after an Ack, with an ack due
		buf := make([]byte, c.ep.cfg.MaxPacket)
		payload := make([]byte, c.ep.MaxPayload())
		tx, ok := c.sendData(h.sim.Now(), sf, buf, payload, 7, true)
		if !ok || tx.N > c.ep.cfg.MaxPacket {
			t.Fatalf("secure=%v: sent %v, %d bytes of at most %d", secure, ok, tx.N, c.ep.cfg.MaxPacket)
		}
		var p wire.Packet
		if err := wire.Parse(buf[:tx.N], &p); err != nil {
			t.Fatal(err)
		}
		var seq, ndp, exp, ackVec bool
		it := wire.NewOptionIter(p.Options)
		for o, ok := it.Next(); ok; o, ok = it.Next() {
			var mo wire.MPOption
			switch {
			case o.Type == wire.OptNDPCount:
				ndp = true
			case o.Type == wire.OptAckVector0 || o.Type == wire.OptAckVector1:
				ackVec = true
			case o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &mo) == nil:
				seq = seq || mo.Type == wire.MPSeq
				exp = exp || mo.Type == wire.MPExp
			}
		}
		if p.Type != wire.TypeDataAck || !seq || !ndp || !exp || !ackVec {
			t.Errorf("secure=%v: %v of %d bytes (payload %d): MP_SEQ %v, NDP Count %v, MP_EXP %v, Ack Vector %v",
				secure, p.Type, tx.N, len(payload), seq, ndp, exp, ackVec)
		}
	}
}
