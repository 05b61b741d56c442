// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/reorder"
)

// mptun's private MP_EXP contents (RFC 9897 leaves MP_EXP's data to the
// implementation; docs/interop.md lists them). A peer that does not know
// them ignores them, and then loses only what they speed up.
//
//   - empty: on a data packet, "path-ordered": the packet's flow has
//     nothing in flight on another path, so the receiver may deliver it
//     once this path's earlier packets are in (reorder.Item.PathOrdered).
//     Three bytes, which on a Data packet fill MP_SEQ's padding.
//   - 'N', After (6 bytes), After−Before (2 bytes): a NACK: the data
//     packets sent on one path between those with MP_SEQ Before and After
//     were lost; please send them again (rtxOnNACK).
//   - 'M', same fields: the MP_SEQs between Before and After are missing,
//     no path's sequence showed where: send again those still
//     unacknowledged, wherever they went (rtxOnMissing).
const (
	expNACK    = 'N'
	expMissing = 'M'
	expNACKLen = 1 + 6 + 2
	// maxNACKsOut bounds the NACKs waiting for a packet to carry them.
	maxNACKsOut = 16
)

// putNACK appends the MP_EXP data of a NACK to dst.
func putNACK(dst []byte, n reorder.NACK) []byte {
	var b [expNACKLen]byte
	b[0] = expNACK
	if n.Path < 0 {
		b[0] = expMissing
	}
	after := n.After & wire.MaxSeq
	for i := 0; i < 6; i++ {
		b[1+i] = byte(after >> (8 * (5 - i)))
	}
	binary.BigEndian.PutUint16(b[7:], uint16(min(seqDiff(n.After, n.Before), 0xffff)))
	return append(dst, b[:]...)
}

// parseNACK decodes the MP_EXP data of a NACK; missing says it is the
// 'M' kind.
func parseNACK(raw []byte) (before, after uint64, missing, ok bool) {
	if len(raw) != expNACKLen || raw[0] != expNACK && raw[0] != expMissing {
		return 0, 0, false, false
	}
	missing = raw[0] == expMissing
	for i := 0; i < 6; i++ {
		after = after<<8 | uint64(raw[1+i])
	}
	d := binary.BigEndian.Uint16(raw[7:])
	if d < 2 {
		return 0, 0, false, false
	}
	return seqAdd(after, -int64(d)), after, missing, true
}

// pollNACKs collects the reorderer's repair requests and makes the fastest
// subflow send them at once.
func (c *Conn) pollNACKs(now mono.Time) {
	nk, ok := c.reo.(reorder.NACKer)
	if !ok {
		return
	}
	for {
		n, ok := nk.PollNACK(now)
		if !ok {
			return
		}
		if c.ep.cfg.NoNACK {
			continue // as if every NACK were lost (ablation)
		}
		if len(c.nackOut) < maxNACKsOut {
			c.nackOut = append(c.nackOut, n)
		}
		if sf := c.fastestOpen(now); sf != nil {
			sf.ackNow = true
		}
	}
}

// fastestOpen is the usable subflow with the shortest one-way delay to
// the peer now (oneWay: not the RTT, which on an asymmetric line also
// holds the queue of the other way).
func (c *Conn) fastestOpen(now mono.Time) *subflow {
	var best *subflow
	var bestDelay time.Duration
	for _, sf := range c.subflows {
		if !sf.usable() {
			continue
		}
		st := sf.cc.State()
		if d := sf.oneWay(now, &st); best == nil || d < bestDelay {
			best, bestDelay = sf, d
		}
	}
	return best
}

// putNACKs adds the pending NACKs that fit to a packet of sf, the
// fastest subflow (NACKs want to arrive soon; any subflow will do when the
// fastest cannot send).
func (c *Conn) putNACKs(now mono.Time, sf *subflow, b *wire.Builder, room func(int) bool) {
	if len(c.nackOut) == 0 || sf != c.fastestOpen(now) {
		return
	}
	var raw [expNACKLen]byte
	sent := 0
	for _, n := range c.nackOut {
		if !room(3 + expNACKLen) {
			break
		}
		if b.MP(&wire.MPOption{Type: wire.MPExp, Raw: putNACK(raw[:0], n)}) != nil {
			break
		}
		sent++
	}
	c.nackOut = append(c.nackOut[:0], c.nackOut[sent:]...)
	c.stats.NACKsSent += uint64(sent)
}

// handleExp processes an MP_EXP option of mptun's (see above).
func (c *Conn) handleExp(now mono.Time, raw []byte, ro *rxOpts) {
	if len(raw) == 0 {
		ro.pathOrdered = true
		return
	}
	if before, after, missing, ok := parseNACK(raw); ok {
		c.stats.NACKsReceived++
		switch {
		case !c.ep.cfg.Retransmit:
		case missing:
			c.rtxOnMissing(now, before, after)
		default:
			c.rtxOnNACK(now, before, after)
		}
	}
}
