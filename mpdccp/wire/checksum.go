// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/mptun/mptun/internal/inetsum"
)

// Checksums of DCCP carried in UDP (DCCP-UDP, RFC 6773).
//
// Two checksums protect a DCCP-UDP packet, and docs/interop.md gives the
// reasoning in full:
//
//   - The UDP checksum (RFC 768) over the UDP pseudo-header (protocol 17)
//     and the whole datagram. RFC 6773 requires it (never zero), and it is
//     the check that survives NAT: a NAT rewrites the outer addresses and
//     ports and updates the UDP checksum to match. The kernel computes it
//     when sending and verifies it before a datagram reaches a socket, so
//     this package never sees it; UDPChecksum computes it for captures.
//   - The DCCP checksum (RFC 4340 §9) in the generic header, computed
//     exactly as native DCCP does it: over the IP pseudo-header with
//     protocol 33 and the DCCP length, then the header, the options and
//     the payload bytes CsCov selects. SetChecksum fills it for the outer
//     addresses as the sender sends them, so a packet whose path has no
//     NAT is byte for byte a native DCCP packet and any DCCP dissector
//     verifies it once the UDP header is stripped.
//
// A NAT rewrites the addresses but not the DCCP checksum. The error this
// leaves is the ones'-complement difference between the two
// pseudo-headers, which depends on the addresses alone (the length is the
// same on both sides, ports are not in it), so it is the same for every
// packet of a flow. ChecksumResidual exposes it: the engine accepts the
// residual 0xffff (right for the addresses it sees) or the one the flow's
// handshake showed, and so keeps a DCCP-level integrity check across NATs.
//
// ProtoDCCP is the IP protocol number of DCCP (RFC 4340 §9.1), used in the
// DCCP checksum's pseudo-header and by captures in native form.
const ProtoDCCP = 33

// ProtoUDP is the IP protocol number of UDP.
const ProtoUDP = 17

// ResidualGood is the residual of a DCCP checksum that is right for the
// addresses it was checked with.
const ResidualGood = 0xffff

// SetChecksum fills the DCCP checksum of pkt (a complete DCCP packet whose
// Data Offset and CsCov are set) for the outer source and destination
// addresses src and dst (RFC 4340 §9.1). A coverage beyond the packet is
// clamped to the whole packet. An address the sender does not know (an
// invalid or unspecified one) counts as zeros.
func SetChecksum(pkt []byte, src, dst netip.Addr) {
	if len(pkt) < minGenericHeader(pkt) {
		return
	}
	pkt[6], pkt[7] = 0, 0
	cov, ok := Coverage(pkt)
	if !ok {
		cov = len(pkt)
	}
	s := inetsum.PseudoHeader(src, dst, ProtoDCCP, len(pkt))
	binary.BigEndian.PutUint16(pkt[6:], inetsum.Finish(inetsum.Sum(s, pkt[:cov])))
}

// VerifyChecksum reports whether the DCCP checksum of pkt is right for the
// outer addresses src and dst, and its CsCov does not exceed the packet
// (RFC 4340 §9.2).
func VerifyChecksum(pkt []byte, src, dst netip.Addr) bool {
	r, ok := ChecksumResidual(pkt, src, dst)
	return ok && r == ResidualGood
}

// ChecksumResidual returns the folded sum of the pseudo-header for src and
// dst and the bytes the DCCP checksum covers, checksum field included:
// ResidualGood when the checksum is right for these addresses, else a value
// that, for a packet intact but sent with other addresses (through a NAT),
// depends only on the two address pairs. ok is false if pkt is shorter than
// a generic header or its coverage exceeds it; such a packet must be
// dropped (RFC 4340 §9.2).
func ChecksumResidual(pkt []byte, src, dst netip.Addr) (residual uint16, ok bool) {
	cov, ok := Coverage(pkt)
	if !ok {
		return 0, false
	}
	s := inetsum.PseudoHeader(src, dst, ProtoDCCP, len(pkt))
	return inetsum.Fold(inetsum.Sum(s, pkt[:cov])), true
}

// Coverage returns how many bytes of pkt the DCCP checksum covers (RFC 4340
// §9.2): all of it for CsCov 0, else the header and options plus
// (CsCov-1)*4 payload bytes. ok is false if that exceeds the packet, the
// Data Offset does, or pkt is shorter than a generic header.
func Coverage(pkt []byte) (n int, ok bool) {
	if len(pkt) < minGenericHeader(pkt) {
		return 0, false
	}
	off := int(pkt[4]) * 4
	if off > len(pkt) {
		return 0, false
	}
	cscov := int(pkt[5] & 0xf)
	if cscov == 0 {
		return len(pkt), true
	}
	n = off + (cscov-1)*4
	if n > len(pkt) {
		return 0, false
	}
	return n, true
}

// minGenericHeader is the shortest generic header pkt can have: 12 bytes
// with short sequence numbers (X=0), else 16.
func minGenericHeader(pkt []byte) int {
	if len(pkt) > 8 && pkt[8]&1 == 0 {
		return shortGenericHeaderLen
	}
	return GenericHeaderLen
}

// UDPChecksum returns the UDP checksum field (RFC 768) of a datagram from
// src to dst whose UDP header (length set, checksum field zero) and
// payload are udp. A computed zero is sent as 0xffff: zero means "no
// checksum", which RFC 6773 does not allow for DCCP-UDP.
func UDPChecksum(src, dst netip.Addr, udp []byte) uint16 {
	c := inetsum.Finish(inetsum.Sum(inetsum.PseudoHeader(src, dst, ProtoUDP, len(udp)), udp))
	if c == 0 {
		c = 0xffff
	}
	return c
}

// InternetChecksum returns the RFC 1071 checksum of b.
func InternetChecksum(b []byte) uint16 { return inetsum.Checksum(b) }
