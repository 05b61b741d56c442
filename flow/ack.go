// SPDX-License-Identifier: MIT

package flow

import "encoding/binary"

// TCP flags.
const (
	tcpACK = 0x10
	tcpPSH = 0x08
)

// pureACK locates the TCP header of a pure cumulative ACK in b: IPv4
// without options or IPv6 without extension headers, not marked CE, TCP
// with only the ACK flag (PSH aside), no payload, and no option but NOP,
// EOL and Timestamps, so that nothing in it (SACK blocks, a window scale,
// ECN echo or AccECN counters, a FIN) is lost when a later ACK replaces
// it. It returns the
// offset of the TCP header and the length of the IP addresses block and
// where it starts.
func pureACK(b []byte) (tcp, addrOff, addrLen int, ok bool) {
	if len(b) < 1 {
		return 0, 0, 0, false
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 || b[0]&0x0f != 5 || b[9] != 6 || b[1]&3 == 3 ||
			binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 || int(binary.BigEndian.Uint16(b[2:4])) != len(b) {
			return 0, 0, 0, false // options, not TCP, a fragment, or padded
		}
		tcp, addrOff, addrLen = 20, 12, 8
	case 6:
		if len(b) < 40 || b[6] != 6 || b[1]>>4&3 == 3 || int(binary.BigEndian.Uint16(b[4:6]))+40 != len(b) {
			return 0, 0, 0, false
		}
		tcp, addrOff, addrLen = 40, 8, 32
	default:
		return 0, 0, 0, false
	}
	if len(b) < tcp+20 {
		return 0, 0, 0, false
	}
	doff := int(b[tcp+12]>>4) * 4
	if doff < 20 || tcp+doff != len(b) { // no payload
		return 0, 0, 0, false
	}
	if b[tcp+12]&0x0f != 0 || b[tcp+13]&^tcpPSH != tcpACK { // reserved/AE bit, CWR, ECE, URG, RST, SYN, FIN
		return 0, 0, 0, false
	}
	for o := tcp + 20; o < tcp+doff; {
		switch b[o] {
		case 0: // EOL
			o = tcp + doff
		case 1: // NOP
			o++
		case 8: // Timestamps
			if o+10 > tcp+doff || b[o+1] != 10 {
				return 0, 0, 0, false
			}
			o += 10
		default:
			return 0, 0, 0, false
		}
	}
	return tcp, addrOff, addrLen, true
}

// ACKSupersedes reports whether the inner packet newer makes the queued
// packet older redundant: both are pure cumulative TCP ACKs (see pureACK)
// of the same connection and direction, and newer acknowledges at least
// as much. Sending newer alone then tells the TCP sender everything older
// would have (its window and timestamp are newer too). A send queue that
// drops older in favour of newer halves an ACK stream that waits for a
// narrow uplink (an ADSL line's 1 Mbit/s beside its 16 Mbit/s downlink),
// as the ACK filters of CAKE and DOCSIS modems do. Both are only read.
func ACKSupersedes(newer, older []byte) bool {
	nt, off, n, ok := pureACK(newer)
	if !ok || len(older) < 1 || older[0]>>4 != newer[0]>>4 {
		return false
	}
	ot, _, _, ok := pureACK(older)
	if !ok || string(newer[off:off+n]) != string(older[off:off+n]) ||
		binary.BigEndian.Uint32(newer[nt:]) != binary.BigEndian.Uint32(older[ot:]) { // ports
		return false
	}
	// The same sequence number (a pure ACK sends no data) and an ACK
	// number not behind older's, in serial-number arithmetic: a newer
	// ACK whose number went back (reordered on the way in) is kept apart.
	if binary.BigEndian.Uint32(newer[nt+4:]) != binary.BigEndian.Uint32(older[ot+4:]) {
		return false
	}
	return int32(binary.BigEndian.Uint32(newer[nt+8:])-binary.BigEndian.Uint32(older[ot+8:])) >= 0
}
