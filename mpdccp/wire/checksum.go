// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Checksums (RFC 4340 §9) for DCCP carried in UDP (RFC 6773).
//
// Rule implemented. In DCCP-UDP the DCCP header keeps its Checksum and
// CsCov fields, and the UDP header adds its own checksum. This package
// computes the DCCP checksum exactly as RFC 4340 §9 does for native DCCP:
// the Internet checksum over a pseudo-header (outer source and destination
// address, protocol 33, DCCP packet length) followed by the header, the
// options and the payload bytes that CsCov selects. The UDP checksum is left
// to the kernel's UDP stack (always on, also for IPv4), so the whole
// datagram stays covered whatever CsCov says. Why this rule: it keeps a
// packet byte-identical to what a native DCCP stack would send, so a capture
// rewritten to IP protocol 33 verifies in any DCCP dissector, and a partial
// CsCov keeps its RFC 4340 meaning.
//
// Caveat, to verify against the RFC text (which could not be retrieved
// where this was written): RFC 6773 targets NAT traversal, and a NAT
// rewrites the outer addresses without touching the DCCP checksum. A
// receiver behind or across a NAT therefore cannot verify an
// address-dependent checksum. Passing the zero netip.Addr for both
// addresses to SetChecksum and VerifyChecksum gives an address-free
// checksum (all-zero IPv4 addresses in the pseudo-header) that survives
// NATs; the engine should use that where a NAT may sit on the path.

// ProtoDCCP is the IP protocol number of DCCP, used in the pseudo-header
// of native DCCP (RFC 4340 §9.1) and by pcapdccp for captures.
const ProtoDCCP = 33

// ProtoUDP is the IP protocol number of UDP.
const ProtoUDP = 17

// checksumProto is the pseudo-header protocol number SetChecksum uses.
const checksumProto = ProtoDCCP

// SetChecksum fills the DCCP checksum of pkt (a complete DCCP packet whose
// Data Offset and CsCov are set) for the outer addresses src and dst.
// A coverage beyond the packet is clamped to the whole packet.
func SetChecksum(pkt []byte, src, dst netip.Addr) {
	SetChecksumProto(pkt, src, dst, checksumProto)
}

// VerifyChecksum reports whether the DCCP checksum of pkt is correct for
// src and dst, and its CsCov does not exceed the packet (RFC 4340 §9.2).
func VerifyChecksum(pkt []byte, src, dst netip.Addr) bool {
	return VerifyChecksumProto(pkt, src, dst, checksumProto)
}

// SetChecksumProto is SetChecksum with an explicit pseudo-header protocol
// number (33 for native DCCP, as in captures).
func SetChecksumProto(pkt []byte, src, dst netip.Addr, proto uint8) {
	if len(pkt) < GenericHeaderLen {
		return
	}
	pkt[6], pkt[7] = 0, 0
	cov, ok := Coverage(pkt)
	if !ok {
		cov = len(pkt)
	}
	s := pseudoSum(src, dst, proto, len(pkt))
	s = sum64(pkt[:cov], s)
	binary.BigEndian.PutUint16(pkt[6:], ^fold(s))
}

// VerifyChecksumProto is VerifyChecksum with an explicit pseudo-header
// protocol number.
func VerifyChecksumProto(pkt []byte, src, dst netip.Addr, proto uint8) bool {
	if len(pkt) < GenericHeaderLen {
		return false
	}
	cov, ok := Coverage(pkt)
	if !ok {
		return false
	}
	s := pseudoSum(src, dst, proto, len(pkt))
	s = sum64(pkt[:cov], s)
	return fold(s) == 0xffff
}

// Coverage returns how many bytes of pkt the checksum covers (RFC 4340
// §9.2): all of it for CsCov 0, else the header and options plus
// (CsCov-1)*4 payload bytes. ok is false if that exceeds the packet or
// the Data Offset does.
func Coverage(pkt []byte) (n int, ok bool) {
	if len(pkt) < GenericHeaderLen {
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

// pseudoSum is the unfolded sum of the IPv4 or IPv6 pseudo-header
// (RFC 4340 §9.1, same layout as TCP's and UDP's).
func pseudoSum(src, dst netip.Addr, proto uint8, length int) uint64 {
	var s uint64
	// A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; the packet
	// on the wire is IPv4 all the same.
	src, dst = src.Unmap(), dst.Unmap()
	if !src.IsValid() && !dst.IsValid() {
		return uint64(proto) + uint64(length)
	}
	if src.Is4() && dst.Is4() {
		a, b := src.As4(), dst.As4()
		s = uint64(binary.BigEndian.Uint32(a[:])) + uint64(binary.BigEndian.Uint32(b[:]))
		s += uint64(proto) + uint64(length)
		return s
	}
	a, b := src.As16(), dst.As16()
	s = sum64(a[:], 0)
	s = sum64(b[:], s)
	s += uint64(uint32(length)) + uint64(proto)
	return s
}

// InternetChecksum returns the RFC 1071 checksum of b (the complement of
// the ones'-complement sum of its 16-bit words).
func InternetChecksum(b []byte) uint16 { return ^fold(sum64(b, 0)) }

// sum64 adds b, as big-endian 16-bit words, to the ones'-complement
// accumulator s. It works on 64-bit loads, 32 bytes per iteration, with
// end-around carries; the result must be folded.
func sum64(b []byte, s uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[0:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	if len(b) >= 4 {
		s, c = bits.Add64(s, uint64(binary.BigEndian.Uint32(b)), c)
		b = b[4:]
	}
	if len(b) >= 2 {
		s, c = bits.Add64(s, uint64(binary.BigEndian.Uint16(b)), c)
		b = b[2:]
	}
	if len(b) == 1 {
		s, c = bits.Add64(s, uint64(b[0])<<8, c)
	}
	s, c = bits.Add64(s, 0, c)
	return s + c
}

// fold reduces a 64-bit ones'-complement accumulator to 16 bits.
func fold(s uint64) uint16 {
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}
