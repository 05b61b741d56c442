// SPDX-License-Identifier: MIT

package datapath

import (
	"encoding/binary"
	"net/netip"

	"github.com/mptun/mptun/internal/inetsum"
)

// tooBig builds, into dst, the ICMP error that tells the sender of pkt to
// use packets of at most mtu bytes: "fragmentation needed" for IPv4 packets
// with DF set, "Packet Too Big" for IPv6. src is the address the error
// comes from (the tunnel's own inner address of that family). It returns
// nil when no error is due (IPv4 without DF may be fragmented by the
// network, so it is simply dropped by the caller).
func tooBig(dst, pkt []byte, mtu int, src netip.Addr) []byte {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		if pkt[6]&0x40 == 0 { // DF not set
			return nil
		}
		return tooBig4(dst, pkt, mtu, src)
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return tooBig6(dst, pkt, mtu, src)
	}
	return nil
}

func tooBig4(dst, pkt []byte, mtu int, src netip.Addr) []byte {
	ihl := int(pkt[0]&0xf) * 4
	quote := min(len(pkt), ihl+8) // RFC 792: header plus 64 bits of data
	total := 20 + 8 + quote
	if cap(dst) < total {
		return nil
	}
	b := dst[:total]
	clear(b[:28])
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	b[8] = 64 // TTL
	b[9] = 1  // ICMP
	if !src.Is4() {
		src = netip.AddrFrom4([4]byte(pkt[16:20]))
	}
	s4 := src.As4()
	copy(b[12:16], s4[:])
	copy(b[16:20], pkt[12:16]) // back to the original sender
	binary.BigEndian.PutUint16(b[10:], inetsum.Checksum(b[:20]))
	icmp := b[20:]
	icmp[0], icmp[1] = 3, 4 // destination unreachable, fragmentation needed
	binary.BigEndian.PutUint16(icmp[6:], uint16(mtu))
	copy(icmp[8:], pkt[:quote])
	binary.BigEndian.PutUint16(icmp[2:], inetsum.Checksum(icmp))
	return b
}

func tooBig6(dst, pkt []byte, mtu int, src netip.Addr) []byte {
	// RFC 4443 §3.2: as much of the invoking packet as fits in 1280 bytes.
	quote := min(len(pkt), 1280-40-8)
	total := 40 + 8 + quote
	if cap(dst) < total {
		return nil
	}
	b := dst[:total]
	clear(b[:48])
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(8+quote))
	b[6] = 58 // ICMPv6
	b[7] = 64
	if !src.Is6() || src.Is4In6() {
		src = netip.AddrFrom16([16]byte(pkt[24:40]))
	}
	s16 := src.As16()
	copy(b[8:24], s16[:])
	copy(b[24:40], pkt[8:24])
	icmp := b[40:]
	icmp[0] = 2 // Packet Too Big
	binary.BigEndian.PutUint32(icmp[4:], uint32(mtu))
	copy(icmp[8:], pkt[:quote])
	ph := inetsum.PseudoHeader(src, netip.AddrFrom16([16]byte(b[24:40])), 58, len(icmp))
	binary.BigEndian.PutUint16(icmp[2:], inetsum.Finish(inetsum.Sum(ph, icmp)))
	return b
}
