// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// refChecksum is the plain RFC 1071 loop, to check the unrolled one.
func refChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func TestInternetChecksum(t *testing.T) {
	// RFC 1071 §3 example: the sum of 0001 f203 f4f5 f6f7 is ddf2.
	if got := InternetChecksum(h("0001f203f4f5f6f7")); got != ^uint16(0xddf2) {
		t.Fatalf("RFC 1071 example: %#x", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if n%7 == 0 {
			for i := range b {
				b[i] = 0xff // many carries
			}
		}
		if got, want := InternetChecksum(b), refChecksum(b); got != want {
			t.Fatalf("len %d: got %#x want %#x", n, got, want)
		}
	}
}

// refDCCPChecksum builds the pseudo-header of RFC 4340 §9.1 byte by byte.
func refDCCPChecksum(pkt []byte, src, dst netip.Addr, cov int) uint16 {
	var ph []byte
	if src.Is4() {
		ph = append(ph, src.AsSlice()...)
		ph = append(ph, dst.AsSlice()...)
		ph = append(ph, 0, ProtoDCCP)
		ph = binary.BigEndian.AppendUint16(ph, uint16(len(pkt)))
	} else {
		ph = append(ph, src.AsSlice()...)
		ph = append(ph, dst.AsSlice()...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(pkt)))
		ph = append(ph, 0, 0, 0, ProtoDCCP)
	}
	c := append([]byte(nil), pkt[:cov]...)
	c[6], c[7] = 0, 0
	return refChecksum(append(ph, c...))
}

func TestDCCPChecksum(t *testing.T) {
	pairs := [][2]netip.Addr{
		{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")},
		{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:ffff::2")},
	}
	for _, tc := range packetCases {
		for _, ap := range pairs {
			pkt := append([]byte(nil), tc.want...)
			SetChecksum(pkt, ap[0], ap[1])
			cov, ok := Coverage(pkt)
			if !ok {
				t.Fatalf("%s: coverage", tc.name)
			}
			if got, want := binary.BigEndian.Uint16(pkt[6:]), refDCCPChecksum(pkt, ap[0], ap[1], cov); got != want {
				t.Fatalf("%s %v: checksum %#x want %#x", tc.name, ap[0], got, want)
			}
			if !VerifyChecksum(pkt, ap[0], ap[1]) {
				t.Fatalf("%s: does not verify", tc.name)
			}
			if VerifyChecksum(pkt, ap[1], ap[0].Next()) {
				t.Fatalf("%s: verifies with other addresses", tc.name)
			}
			pkt[12] ^= 0x40 // a sequence number bit
			if VerifyChecksum(pkt, ap[0], ap[1]) {
				t.Fatalf("%s: verifies after corruption", tc.name)
			}
		}
	}
}

func TestChecksumCoverage(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	buf := make([]byte, 200)
	var b Builder
	hd := Header{Type: TypeData, Seq: 3, CsCov: 2} // header + 4 payload bytes
	_ = b.Begin(buf, &hd)
	n, _ := b.Finish(make([]byte, 40))
	pkt := buf[:n]
	if cov, ok := Coverage(pkt); !ok || cov != 20 {
		t.Fatalf("coverage %d %v", cov, ok)
	}
	SetChecksum(pkt, src, dst)
	pkt[30] ^= 1 // outside coverage
	if !VerifyChecksum(pkt, src, dst) {
		t.Fatal("byte outside CsCov coverage broke the checksum")
	}
	pkt[18] ^= 1 // inside
	if VerifyChecksum(pkt, src, dst) {
		t.Fatal("byte inside coverage not detected")
	}
	// Coverage beyond the packet: the packet must be dropped (§9.2).
	pkt[5] = 15
	SetChecksum(pkt, src, dst)
	pkt = pkt[:30]
	if _, ok := Coverage(pkt); ok || VerifyChecksum(pkt, src, dst) {
		t.Fatal("coverage beyond packet accepted")
	}
	// The address-free form used across NATs.
	pkt = buf[:n]
	pkt[5] = 0
	SetChecksum(pkt, netip.Addr{}, netip.Addr{})
	if !VerifyChecksum(pkt, netip.Addr{}, netip.Addr{}) || VerifyChecksum(pkt, src, dst) {
		t.Fatal("address-free checksum")
	}
	// IPv4-mapped IPv6 addresses (from dual-stack sockets) are IPv4.
	pkt[5] = 0
	SetChecksum(pkt, src, dst)
	if !VerifyChecksum(pkt, netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())) {
		t.Fatal("4in6 addresses not treated as IPv4")
	}
	if VerifyChecksum(pkt[:10], src, dst) {
		t.Fatal("short packet verified")
	}
}
