// SPDX-License-Identifier: MIT

// Package ecn reads and writes the ECN field of IP packets and holds the
// tunnel's ECN rules (RFC 6040): what the outer header carries on
// encapsulation, and what the inner packet becomes on decapsulation.
package ecn

import "github.com/mptun/mptun/internal/inetsum"

// Codepoints (RFC 3168).
const (
	NotECT uint8 = 0
	ECT1   uint8 = 1
	ECT0   uint8 = 2
	CE     uint8 = 3
)

// Get returns the ECN field of an IPv4 or IPv6 packet, and false if pkt
// does not start with a well-formed IP header.
func Get(pkt []byte) (uint8, bool) {
	if len(pkt) < 1 {
		return 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		ihl := int(pkt[0]&0x0f) * 4
		if ihl < 20 || len(pkt) < ihl {
			return 0, false
		}
		return pkt[1] & 3, true
	case 6:
		if len(pkt) < 40 {
			return 0, false
		}
		return (pkt[1] >> 4) & 3, true
	}
	return 0, false
}

// Set writes v into the ECN field of the IPv4 or IPv6 packet pkt (which
// Get accepted), patching the IPv4 header checksum incrementally
// (RFC 1624).
func Set(pkt []byte, v uint8) {
	switch pkt[0] >> 4 {
	case 4:
		old := uint16(pkt[0])<<8 | uint16(pkt[1])
		pkt[1] = pkt[1]&^3 | v&3
		updated := uint16(pkt[0])<<8 | uint16(pkt[1])
		hc := inetsum.Update(uint16(pkt[10])<<8|uint16(pkt[11]), old, updated)
		pkt[10], pkt[11] = byte(hc>>8), byte(hc)
	case 6:
		pkt[1] = pkt[1]&^(3<<4) | (v&3)<<4
	}
}

// MarkCE sets CE on an ECN-capable (ECT(0), ECT(1) or CE) packet in
// place. It reports false, leaving pkt alone, for Not-ECT packets and
// anything that is not a well-formed IP header: a congested queue must
// drop those instead (RFC 3168 §5).
func MarkCE(pkt []byte) bool {
	e, ok := Get(pkt)
	if !ok || e == NotECT {
		return false
	}
	if e != CE {
		Set(pkt, CE)
	}
	return true
}

// Encap is the outer ECN field for an inner packet's field (RFC 6040
// §4.1, normal mode): a copy, so a Not-ECT packet stays Not-ECT and a
// congested path drops it rather than mark what the inner transport
// would not understand.
func Encap(inner uint8) uint8 { return inner & 3 }

// Decap is what an inner packet's ECN field becomes when it leaves the
// tunnel under the outer field (RFC 6040 §4.2, Figure 4); drop is true
// for a CE-marked outer header over a Not-ECT inner packet, which must
// not be forwarded.
func Decap(outer, inner uint8) (out uint8, drop bool) {
	outer, inner = outer&3, inner&3
	switch {
	case inner == NotECT:
		return NotECT, outer == CE
	case inner == CE || outer == CE:
		return CE, false
	case outer == ECT1:
		return ECT1, false // ECT(0) inner, ECT(1) outer: the more severe
	}
	return inner, false
}

// DecapPacket applies Decap to the inner IP packet pkt in place. It
// reports whether the field changed and whether pkt must be dropped; a
// packet that is not IP passes unchanged.
func DecapPacket(outer uint8, pkt []byte) (changed, drop bool) {
	in, ok := Get(pkt)
	if !ok {
		return false, false
	}
	out, drop := Decap(outer, in)
	if drop || out == in {
		return false, drop
	}
	Set(pkt, out)
	return true, false
}
