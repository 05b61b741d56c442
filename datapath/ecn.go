// SPDX-License-Identifier: MIT

package datapath

import (
	"encoding/binary"

	"github.com/mptun/mptun/internal/inetsum"
)

// ECN codepoints (RFC 3168).
const (
	notECT = 0
	ect1   = 1
	ect0   = 2
	ce     = 3
)

// innerECN returns the ECN field of an inner IPv4 or IPv6 packet, and false
// if pkt is not one.
func innerECN(pkt []byte) (uint8, bool) {
	if len(pkt) < 2 {
		return 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		return pkt[1] & 3, len(pkt) >= 20
	case 6:
		return (pkt[1] >> 4) & 3, len(pkt) >= 40
	}
	return 0, false
}

// outerECN is the ECN field for the outer header of a datagram carrying
// inner (RFC 6040 normal mode: copy the inner field). A Not-ECT inner packet
// still travels as ECT(0), so the subflow's own congestion control hears of
// congestion from ECN-marking bottlenecks.
func outerECN(inner uint8) uint8 {
	if inner == notECT {
		return ect0
	}
	return inner
}

// decapDecision is what the decapsulator does with an inner packet that
// arrived under an outer ECN field (RFC 6040 §4.2).
type decapDecision uint8

const (
	decapForward decapDecision = iota
	decapMarkCE
	decapDrop
)

func decapECN(outer, inner uint8) decapDecision {
	if outer != ce || inner == ce {
		return decapForward
	}
	if inner == notECT {
		return decapDrop
	}
	return decapMarkCE
}

// setCE marks an inner IPv4/IPv6 packet CE in place and returns the 16-bit
// words that changed, as (offset, old, new) triples, so that a checksum
// over the packet can be patched incrementally (RFC 1624). Offsets are
// relative to pkt and even.
func setCE(pkt []byte) (changes [2]wordChange, n int) {
	switch pkt[0] >> 4 {
	case 4:
		old0 := binary.BigEndian.Uint16(pkt[0:2])
		oldSum := binary.BigEndian.Uint16(pkt[10:12])
		pkt[1] |= ce
		new0 := binary.BigEndian.Uint16(pkt[0:2])
		newSum := inetsum.Update(oldSum, old0, new0)
		binary.BigEndian.PutUint16(pkt[10:12], newSum)
		return [2]wordChange{{0, old0, new0}, {10, oldSum, newSum}}, 2
	case 6:
		old0 := binary.BigEndian.Uint16(pkt[0:2])
		pkt[1] |= ce << 4
		return [2]wordChange{{0, old0, binary.BigEndian.Uint16(pkt[0:2])}}, 1
	}
	return changes, 0
}

type wordChange struct {
	off      int
	old, new uint16
}
