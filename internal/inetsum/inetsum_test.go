// SPDX-License-Identifier: MIT

package inetsum

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
)

// ref is the textbook RFC 1071 loop, 16 bits at a time, as an oracle.
func ref(b []byte) uint16 {
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

func TestRFC1071Example(t *testing.T) {
	// RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
	b, _ := hex.DecodeString("0001f203f4f5f6f7")
	if got := Fold(Sum(0, b)); got != 0xddf2 {
		t.Fatalf("sum %#04x, want 0xddf2", got)
	}
	if got := Checksum(b); got != 0x220d {
		t.Fatalf("checksum %#04x, want 0x220d", got)
	}
}

func TestIPv4HeaderVector(t *testing.T) {
	// A well-known IPv4 header whose checksum field holds b861.
	b, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	if got := Checksum(b); got != 0xb861 {
		t.Fatalf("checksum %#04x, want 0xb861", got)
	}
	binary.BigEndian.PutUint16(b[10:], 0xb861)
	if got := Checksum(b); got != 0 {
		t.Fatalf("header with its checksum sums to %#04x, want 0", got)
	}
}

func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for n := 0; n < 400; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if n%5 == 0 {
			for i := range b {
				b[i] = 0xff // carries out of every lane
			}
		}
		if got, want := Checksum(b), ref(b); got != want {
			t.Fatalf("len %d: %#04x, want %#04x", n, got, want)
		}
		// Pieces of even length chain to the same sum.
		if n >= 2 {
			cut := (r.IntN(n) / 2) * 2
			if got, want := Finish(Sum(Sum(0, b[:cut]), b[cut:])), ref(b); got != want {
				t.Fatalf("len %d cut %d: %#04x, want %#04x", n, cut, got, want)
			}
		}
	}
}

func TestPseudoHeader(t *testing.T) {
	// IPv4, worked by hand: c000+0201+c633+6407+0011+0020 = 1ec6c, and
	// ec6c plus the carry 1 is ec6d.
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	const want = 0xec6d
	if got := Fold(PseudoHeader(src, dst, 17, 32)); got != want {
		t.Fatalf("IPv4 pseudo-header %#04x, want %#04x", got, want)
	}
	// The mapped form of the same addresses is the same IPv4 header.
	if got := Fold(PseudoHeader(netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16()), 17, 32)); got != want {
		t.Fatalf("4in6 pseudo-header %#04x, want %#04x", got, want)
	}
	// IPv6: the 40-byte layout of RFC 8200 §8.1 summed plainly.
	s6, d6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:ffff::2")
	var ph []byte
	ph = append(ph, s6.AsSlice()...)
	ph = append(ph, d6.AsSlice()...)
	ph = binary.BigEndian.AppendUint32(ph, 70000)
	ph = append(ph, 0, 0, 0, 33)
	if got, want := Finish(PseudoHeader(s6, d6, 33, 70000)), ref(ph); got != want {
		t.Fatalf("IPv6 pseudo-header %#04x, want %#04x", got, want)
	}
}

func TestUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 64)
	for round := 0; round < 1000; round++ {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		binary.BigEndian.PutUint16(b[10:], 0)
		binary.BigEndian.PutUint16(b[10:], Checksum(b))
		off := 2 * r.IntN(32)
		if off == 10 {
			continue
		}
		old := binary.BigEndian.Uint16(b[off:])
		nw := uint16(r.Uint32())
		binary.BigEndian.PutUint16(b[off:], nw)
		binary.BigEndian.PutUint16(b[10:], Update(binary.BigEndian.Uint16(b[10:]), old, nw))
		if Checksum(b) != 0 {
			t.Fatalf("round %d: incremental update left a bad checksum", round)
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{64, 1500, 9000} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		b.Run(itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				_ = Checksum(buf)
			}
		})
	}
}

// BenchmarkReference is the 16-bit loop, for the ratio.
func BenchmarkReference(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(1500)
	for b.Loop() {
		_ = ref(buf)
	}
}

func BenchmarkUpdate(b *testing.B) {
	var s uint16
	for b.Loop() {
		s = Update(s, 0x4500, 0x4503)
	}
	_ = s
}

func itoa(n int) string { return strconv.Itoa(n) + "B" }
