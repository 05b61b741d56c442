// SPDX-License-Identifier: MIT

package ecn

import (
	"encoding/binary"
	"testing"
)

func ipv4(tos uint8) []byte {
	p := make([]byte, 28)
	p[0], p[1] = 0x45, tos
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^sum(p[:20]))
	return p
}

func ipv6(tc uint8) []byte {
	p := make([]byte, 48)
	p[0] = 0x60 | tc>>4
	p[1] = tc << 4
	return p
}

func sum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// RFC 6040 §4.2, Figure 4, every cell.
func TestDecapTable(t *testing.T) {
	type cell struct {
		out  uint8
		drop bool
	}
	want := [4][4]cell{ // [inner][outer]
		NotECT: {NotECT: {NotECT, false}, ECT1: {NotECT, false}, ECT0: {NotECT, false}, CE: {0, true}},
		ECT0:   {NotECT: {ECT0, false}, ECT1: {ECT1, false}, ECT0: {ECT0, false}, CE: {CE, false}},
		ECT1:   {NotECT: {ECT1, false}, ECT1: {ECT1, false}, ECT0: {ECT1, false}, CE: {CE, false}},
		CE:     {NotECT: {CE, false}, ECT1: {CE, false}, ECT0: {CE, false}, CE: {CE, false}},
	}
	for inner := uint8(0); inner < 4; inner++ {
		for outer := uint8(0); outer < 4; outer++ {
			out, drop := Decap(outer, inner)
			w := want[inner][outer]
			if drop != w.drop || !drop && out != w.out {
				t.Errorf("inner %d outer %d: got %d drop %v, want %d drop %v", inner, outer, out, drop, w.out, w.drop)
			}
		}
	}
}

// Normal mode copies the inner field, Not-ECT included.
func TestEncapCopies(t *testing.T) {
	for v := uint8(0); v < 4; v++ {
		if Encap(v) != v {
			t.Errorf("Encap(%d) = %d", v, Encap(v))
		}
	}
}

func TestSetKeepsIPv4ChecksumValid(t *testing.T) {
	for from := uint8(0); from < 4; from++ {
		for to := uint8(0); to < 4; to++ {
			p := ipv4(0xb8 | from) // DSCP EF kept
			Set(p, to)
			if got, _ := Get(p); got != to || p[1]>>2 != 0xb8>>2 {
				t.Fatalf("%d→%d: field %d, DSCP %x", from, to, got, p[1]>>2)
			}
			if sum(p[:20]) != 0xffff {
				t.Fatalf("%d→%d: header checksum invalid", from, to)
			}
		}
	}
	p := ipv6(0xb8 | ECT0)
	Set(p, CE)
	if got, _ := Get(p); got != CE || p[0] != 0x6b || p[1]>>4 != 0x8|CE {
		t.Fatalf("IPv6: % x", p[:2])
	}
}

func TestMarkCE(t *testing.T) {
	for _, tc := range []struct {
		pkt  []byte
		ok   bool
		want uint8
	}{
		{ipv4(ECT0), true, CE}, {ipv4(ECT1), true, CE}, {ipv4(CE), true, CE}, {ipv4(NotECT), false, NotECT},
		{ipv6(ECT0), true, CE}, {ipv6(NotECT), false, NotECT},
	} {
		if ok := MarkCE(tc.pkt); ok != tc.ok {
			t.Errorf("MarkCE = %v, want %v", ok, tc.ok)
		}
		if got, _ := Get(tc.pkt); got != tc.want {
			t.Errorf("field %d after MarkCE, want %d", got, tc.want)
		}
	}
	for _, bad := range [][]byte{nil, {0x45}, {0x4f, 0x02}, make([]byte, 10), {0x60, 0x20, 0}} {
		if MarkCE(bad) {
			t.Errorf("MarkCE(% x) accepted", bad)
		}
	}
}

func TestDecapPacket(t *testing.T) {
	p := ipv4(ECT0)
	if changed, drop := DecapPacket(CE, p); !changed || drop {
		t.Fatalf("ECT(0) under CE: changed %v drop %v", changed, drop)
	}
	if got, _ := Get(p); got != CE || sum(p[:20]) != 0xffff {
		t.Fatalf("not marked CE with a valid checksum")
	}
	if _, drop := DecapPacket(CE, ipv4(NotECT)); !drop {
		t.Error("Not-ECT under CE not dropped")
	}
	if changed, drop := DecapPacket(ECT0, ipv4(NotECT)); changed || drop {
		t.Error("Not-ECT under ECT(0) changed or dropped")
	}
	if changed, drop := DecapPacket(CE, []byte{1, 2, 3}); changed || drop {
		t.Error("non-IP payload touched")
	}
}

func FuzzDecapPacket(f *testing.F) {
	f.Add(uint8(3), ipv4(ECT0))
	f.Add(uint8(3), ipv6(NotECT))
	f.Add(uint8(1), []byte{0x45, 0})
	f.Fuzz(func(t *testing.T, outer uint8, pkt []byte) {
		before, ok := Get(pkt)
		valid4 := ok && pkt[0]>>4 == 4 && sum(pkt[:int(pkt[0]&0xf)*4]) == 0xffff
		changed, drop := DecapPacket(outer, pkt)
		after, _ := Get(pkt)
		if !ok && (changed || drop) {
			t.Fatal("non-IP packet touched")
		}
		if drop && (before != NotECT || outer&3 != CE) {
			t.Fatalf("dropped inner %d outer %d", before, outer)
		}
		if ok && !drop {
			if want, _ := Decap(outer, before); after != want {
				t.Fatalf("field %d, want %d", after, want)
			}
		}
		if valid4 && sum(pkt[:int(pkt[0]&0xf)*4]) != 0xffff {
			t.Fatal("valid IPv4 checksum broken")
		}
	})
}
