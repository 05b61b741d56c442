// SPDX-License-Identifier: MIT

// Package inetsum is the tree's one Internet checksum (RFC 1071): the
// ones'-complement sum used by IPv4 headers, UDP, ICMP and DCCP, its
// pseudo-headers, and the incremental update of RFC 1624.
//
// Sums are carried unfolded in a uint64 so that pieces (a pseudo-header,
// a header, a payload) can be added one after another and folded once.
// Every piece but the last must have an even length: an odd byte is
// padded as the high half of a word, as RFC 1071 pads the end.
package inetsum

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Sum adds b, as big-endian 16-bit words, to the unfolded sum acc. It
// loads 64 bits at a time, 32 bytes per iteration, with end-around carries.
func Sum(acc uint64, b []byte) uint64 {
	var c uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[0:]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[8:]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[16:]), c)
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	if len(b) >= 4 {
		acc, c = bits.Add64(acc, uint64(binary.BigEndian.Uint32(b)), c)
		b = b[4:]
	}
	if len(b) >= 2 {
		acc, c = bits.Add64(acc, uint64(binary.BigEndian.Uint16(b)), c)
		b = b[2:]
	}
	if len(b) == 1 {
		acc, c = bits.Add64(acc, uint64(b[0])<<8, c)
	}
	acc, c = bits.Add64(acc, 0, c)
	return acc + c
}

// Fold reduces an unfolded sum to 16 bits (not complemented).
func Fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	return uint16(acc)
}

// Checksum is the Internet checksum of b: the complement of its folded
// sum. A block that contains its own correct checksum sums to 0xffff, so
// Checksum returns 0 for it.
func Checksum(b []byte) uint16 { return ^Fold(Sum(0, b)) }

// Finish is the checksum field value for an unfolded sum.
func Finish(acc uint64) uint16 { return ^Fold(acc) }

// PseudoHeader is the unfolded sum of the IPv4 (RFC 768, RFC 9293) or
// IPv6 (RFC 8200 §8.1) pseudo-header for an upper-layer packet of length
// bytes with protocol proto between src and dst. IPv4-mapped IPv6
// addresses count as IPv4: a dual-stack socket reports IPv4 peers that
// way, and the packet on the wire is IPv4. If either address is not IPv4
// the IPv6 layout is used, with an invalid address counting as zeros.
func PseudoHeader(src, dst netip.Addr, proto uint8, length int) uint64 {
	src, dst = src.Unmap(), dst.Unmap()
	if (src.Is4() || !src.IsValid()) && (dst.Is4() || !dst.IsValid()) {
		var a, b [4]byte
		if src.IsValid() {
			a = src.As4()
		}
		if dst.IsValid() {
			b = dst.As4()
		}
		s := uint64(binary.BigEndian.Uint32(a[:])) + uint64(binary.BigEndian.Uint32(b[:]))
		return s + uint64(proto) + uint64(uint16(length))
	}
	var a, b [16]byte
	if src.IsValid() {
		a = src.As16()
	}
	if dst.IsValid() {
		b = dst.As16()
	}
	s := Sum(Sum(0, a[:]), b[:])
	return s + uint64(uint32(length)) + uint64(proto)
}

// Update returns the checksum field value after one 16-bit word it covers
// changed from old to new (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
func Update(sum, old, new uint16) uint16 {
	s := uint32(^sum) + uint32(^old) + uint32(new)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return ^uint16(s)
}
