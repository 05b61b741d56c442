// SPDX-License-Identifier: MIT

package aqm

import "github.com/mptun/mptun/internal/inetsum"

// ECN codepoints (RFC 3168).
const (
	NotECT uint8 = 0
	ECT1   uint8 = 1
	ECT0   uint8 = 2
	CE     uint8 = 3
)

// ECN returns the ECN field of an IPv4 or IPv6 packet, and false if pkt is
// not a well-formed IP header.
func ECN(pkt []byte) (uint8, bool) {
	if len(pkt) < 1 {
		return 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 || int(pkt[0]&0x0f)*4 < 20 || len(pkt) < int(pkt[0]&0x0f)*4 {
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

// MarkCE sets CE on an ECN-capable (ECT(0), ECT(1) or CE) IPv4 or IPv6
// packet in place, fixing the IPv4 header checksum incrementally
// (RFC 1624). It reports false, leaving pkt alone, for Not-ECT packets and
// anything that is not a well-formed IP header: those must be dropped
// instead (RFC 3168 §5).
func MarkCE(pkt []byte) bool {
	e, ok := ECN(pkt)
	if !ok || e == NotECT {
		return false
	}
	if e == CE {
		return true
	}
	switch pkt[0] >> 4 {
	case 4:
		old := uint16(pkt[0])<<8 | uint16(pkt[1])
		pkt[1] |= CE
		updated := uint16(pkt[0])<<8 | uint16(pkt[1])
		hc := inetsum.Update(uint16(pkt[10])<<8|uint16(pkt[11]), old, updated)
		pkt[10], pkt[11] = byte(hc>>8), byte(hc)
	case 6:
		pkt[1] |= CE << 4
	}
	return true
}
