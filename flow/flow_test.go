// SPDX-License-Identifier: MIT

package flow

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// ipv4 builds an IPv4 packet with a transport header of proto carrying
// the two 16-bit words a and b (ports, or ICMP type/code + checksum).
func ipv4(src, dst string, proto uint8, a, b uint16, tail ...byte) []byte {
	p := make([]byte, 20+8)
	p[0] = 0x45
	p[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[20:], a)
	binary.BigEndian.PutUint16(p[22:], b)
	copy(p[24:], tail)
	return p
}

func ipv6(src, dst string, next uint8, ext []byte, a, b uint16) []byte {
	p := make([]byte, 40, 40+len(ext)+8)
	p[0] = 0x60
	p[6] = next
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	p = append(p, ext...)
	var l4 [8]byte
	binary.BigEndian.PutUint16(l4[0:], a)
	binary.BigEndian.PutUint16(l4[2:], b)
	return append(p, l4[:]...)
}

func TestHashTellsFlowsApart(t *testing.T) {
	const seed = 42
	base := ipv4("10.0.0.1", "10.0.0.2", 6, 40000, 443)
	same := ipv4("10.0.0.1", "10.0.0.2", 6, 40000, 443, 0xff, 0xee) // other payload
	if Hash(base, seed) != Hash(same, seed) {
		t.Fatal("two packets of one TCP flow hash differently")
	}
	others := map[string][]byte{
		"source port":      ipv4("10.0.0.1", "10.0.0.2", 6, 40001, 443),
		"destination port": ipv4("10.0.0.1", "10.0.0.2", 6, 40000, 444),
		"source address":   ipv4("10.0.0.3", "10.0.0.2", 6, 40000, 443),
		"destination":      ipv4("10.0.0.1", "10.0.0.4", 6, 40000, 443),
		"protocol":         ipv4("10.0.0.1", "10.0.0.2", 17, 40000, 443),
		"reverse":          ipv4("10.0.0.2", "10.0.0.1", 6, 443, 40000),
	}
	for name, p := range others {
		if Hash(p, seed) == Hash(base, seed) {
			t.Errorf("%s differs but the hash does not", name)
		}
	}
	if Hash(base, seed) == Hash(base, seed+1) {
		t.Error("the seed does not change the hash")
	}
}

func TestHashICMPEchoIdentifiers(t *testing.T) {
	echo := func(id uint16, typ byte) []byte {
		p := ipv4("10.0.0.1", "10.0.0.2", 1, uint16(typ)<<8, 0)
		binary.BigEndian.PutUint16(p[24:], id)
		return p
	}
	if Hash(echo(1, 8), 0) == Hash(echo(2, 8), 0) {
		t.Error("two ping identifiers are one flow")
	}
	p1, p2 := echo(7, 8), echo(7, 8)
	binary.BigEndian.PutUint16(p2[26:], 99) // sequence number
	if Hash(p1, 0) != Hash(p2, 0) {
		t.Error("one ping's requests are several flows")
	}
}

func TestParseIPv6ExtensionHeadersAndFragments(t *testing.T) {
	// Hop-by-hop (8 bytes) then UDP.
	hbh := []byte{17, 0, 0, 0, 0, 0, 0, 0}
	p := ipv6("fd00::1", "fd00::2", 0, hbh, 5060, 5061)
	h, ok := Parse(p)
	if !ok || h.Proto != 17 || !h.Ports || h.SrcPort != 5060 || h.DstPort != 5061 {
		t.Fatalf("through hop-by-hop: %+v %v", h, ok)
	}
	// First fragment keeps ports; a later fragment has none.
	first := ipv6("fd00::1", "fd00::2", 44, []byte{6, 0, 0, 1, 0, 0, 0, 1}, 1, 2)
	if h, ok := Parse(first); !ok || !h.Ports || h.Proto != 6 {
		t.Fatalf("first fragment: %+v %v", h, ok)
	}
	later := ipv6("fd00::1", "fd00::2", 44, []byte{6, 0, 0, 8, 0, 0, 0, 1}, 1, 2)
	if h, ok := Parse(later); !ok || h.Ports || h.Proto != 6 {
		t.Fatalf("later fragment: %+v %v", h, ok)
	}
	// IPv4 non-first fragment.
	v4 := ipv4("10.0.0.1", "10.0.0.2", 17, 1, 2)
	binary.BigEndian.PutUint16(v4[6:], 100)
	if h, ok := Parse(v4); !ok || h.Ports {
		t.Fatalf("IPv4 later fragment: %+v %v", h, ok)
	}
}

func TestParseRejectsShortAndNonIP(t *testing.T) {
	for _, p := range [][]byte{nil, {0x45}, {0x60, 0, 0}, {0x20, 1, 2, 3}, make([]byte, 19)} {
		if _, ok := Parse(p); ok {
			t.Errorf("Parse(% x) accepted", p)
		}
		Hash(p, 1) // must not panic
	}
}

func TestHashDoesNotAllocate(t *testing.T) {
	p := ipv6("fd00::1", "fd00::2", 6, nil, 1, 2)
	if n := testing.AllocsPerRun(100, func() { Hash(p, 3) }); n != 0 {
		t.Fatalf("%v allocations per Hash", n)
	}
}

func BenchmarkHashIPv4(b *testing.B) {
	p := ipv4("10.0.0.1", "10.0.0.2", 6, 40000, 443)
	for b.Loop() {
		Hash(p, 1)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(ipv4("10.0.0.1", "10.0.0.2", 6, 1, 2))
	f.Add(ipv6("fd00::1", "fd00::2", 0, []byte{44, 0, 0, 0, 0, 0, 0, 0}, 1, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := Parse(b)
		if ok && h.Ports && !HasPorts(h.Proto) {
			t.Fatalf("ports for protocol %d", h.Proto)
		}
		if Hash(b, 5) != Hash(append([]byte(nil), b...), 5) {
			t.Fatal("hash not a function of the bytes")
		}
	})
}
