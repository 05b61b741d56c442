// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"net/netip"
)

// In secure mode the inner packet is encrypted on the wire, so the data
// path cannot apply RFC 6040 itself: the engine derives the outer ECN
// field from the plaintext when sealing (Transmit.ECN) and applies an
// outer CE mark to the plaintext after opening.

const (
	notECT = 0
	ect0   = 2
	ce     = 3
)

// innerECN returns the ECN field of an IPv4 or IPv6 packet.
func innerECN(pkt []byte) (uint8, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return pkt[1] & 3, true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return (pkt[1] >> 4) & 3, true
	}
	return 0, false
}

// outerECN is the encapsulation rule: copy the inner ECN field; Not-ECT
// travels as ECT(0) so that the subflow's controller hears of congestion.
func outerECN(inner []byte) uint8 {
	e, ok := innerECN(inner)
	if !ok || e == notECT {
		return ect0
	}
	return e
}

// decapInnerCE applies an outer CE mark to the inner packet: an ECT inner
// packet is marked CE (the IPv4 header checksum patched); it returns false
// for a Not-ECT one, which must be dropped.
func decapInnerCE(pkt []byte) bool {
	e, ok := innerECN(pkt)
	if !ok {
		return true
	}
	if e == notECT {
		return false
	}
	if e == ce {
		return true
	}
	if pkt[0]>>4 == 4 {
		old := binary.BigEndian.Uint16(pkt[0:2])
		pkt[1] |= 3
		sum := binary.BigEndian.Uint16(pkt[10:12])
		// RFC 1624: HC' = ~(~HC + ~m + m').
		s := uint32(^sum) + uint32(^old) + uint32(binary.BigEndian.Uint16(pkt[0:2]))
		for s>>16 != 0 {
			s = s&0xffff + s>>16
		}
		binary.BigEndian.PutUint16(pkt[10:12], ^uint16(s))
		return true
	}
	pkt[1] |= 3 << 4
	return true
}

// innerSource returns the source address of an IPv4 or IPv6 packet.
func innerSource(pkt []byte) (netip.Addr, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(pkt[12:16])), true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(pkt[8:24])), true
	}
	return netip.Addr{}, false
}
