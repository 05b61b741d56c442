// SPDX-License-Identifier: MIT

package datapath

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mptun/mptun/internal/inetsum"
)

func ipv4Packet(tos uint8, df bool, payload int) []byte {
	p := make([]byte, 20+payload)
	p[0] = 0x45
	p[1] = tos
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	if df {
		p[6] = 0x40
	}
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{10, 0, 0, 1})
	copy(p[16:], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^inetSum(p[:20], 0))
	return p
}

func TestDecapECN(t *testing.T) {
	cases := []struct {
		outer, inner uint8
		want         decapDecision
	}{
		{notECT, notECT, decapForward},
		{ect0, notECT, decapForward},
		{ce, notECT, decapDrop},
		{ce, ect0, decapMarkCE},
		{ce, ect1, decapMarkCE},
		{ce, ce, decapForward},
		{ect1, ect0, decapForward},
	}
	for _, c := range cases {
		if got := decapECN(c.outer, c.inner); got != c.want {
			t.Errorf("decapECN(%d,%d) = %d, want %d", c.outer, c.inner, got, c.want)
		}
	}
	if outerECN(notECT) != ect0 || outerECN(ect1) != ect1 || outerECN(ce) != ce {
		t.Error("outerECN does not copy ECT/CE or set ECT(0) for Not-ECT")
	}
}

func TestSetCEKeepsIPv4ChecksumValid(t *testing.T) {
	p := ipv4Packet(0xb8|ect0, false, 10) // DSCP EF + ECT(0)
	ch, n := setCE(p)
	if n != 2 {
		t.Fatalf("changes = %d", n)
	}
	if p[1] != 0xb8|ce {
		t.Fatalf("TOS = %#x, want DSCP kept and CE set", p[1])
	}
	if inetSum(p[:20], 0) != 0xffff {
		t.Error("IPv4 header checksum invalid after setCE")
	}
	// Patching an outer sum over the same bytes with the reported changes
	// equals recomputing it.
	q := ipv4Packet(0xb8|ect0, false, 10)
	before := ^inetSum(q, 0)
	for _, c := range ch[:n] {
		before = inetsum.Update(before, c.old, c.new)
	}
	if want := ^inetSum(p, 0); before != want {
		t.Errorf("patched sum %#x, recomputed %#x", before, want)
	}
}

func TestSetCEIPv6(t *testing.T) {
	p := make([]byte, 48)
	p[0], p[1] = 0x60|0x0b, 0x80|ect1<<4 // traffic class 0xb9 spans the two bytes
	setCE(p)
	if ecn, _ := innerECN(p); ecn != ce {
		t.Fatalf("ECN = %d after setCE", ecn)
	}
	if p[0] != 0x6b || p[1]&0xc0 != 0x80 {
		t.Errorf("DSCP bits changed: % x", p[:2])
	}
}

func TestTooBig(t *testing.T) {
	buf := make([]byte, 1500)
	if tooBig(buf, ipv4Packet(0, false, 1400), 1300, netip.Addr{}) != nil {
		t.Error("ICMP sent for IPv4 without DF")
	}
	pkt := ipv4Packet(0, true, 1400)
	icmp := tooBig(buf, pkt, 1300, netip.MustParseAddr("10.0.0.2"))
	if icmp == nil {
		t.Fatal("no ICMP for IPv4 with DF")
	}
	if icmp[9] != 1 || icmp[20] != 3 || icmp[21] != 4 {
		t.Fatalf("not ICMP frag-needed: % x", icmp[:24])
	}
	if binary.BigEndian.Uint16(icmp[26:]) != 1300 {
		t.Error("next-hop MTU not set")
	}
	if inetSum(icmp[:20], 0) != 0xffff || inetSum(icmp[20:], 0) != 0xffff {
		t.Error("bad IPv4 or ICMP checksum")
	}
	if netip.AddrFrom4([4]byte(icmp[16:20])) != netip.MustParseAddr("10.0.0.1") {
		t.Error("ICMP not addressed to the original sender")
	}

	v6 := make([]byte, 1400)
	v6[0], v6[6] = 0x60, 17
	binary.BigEndian.PutUint16(v6[4:], 1360)
	src, dst := netip.MustParseAddr("fd00::1").As16(), netip.MustParseAddr("fd00::2").As16()
	copy(v6[8:], src[:])
	copy(v6[24:], dst[:])
	icmp = tooBig(buf, v6, 1280, netip.MustParseAddr("fd00::2"))
	if len(icmp) != 1280 || icmp[40] != 2 || binary.BigEndian.Uint32(icmp[44:]) != 1280 {
		t.Fatalf("bad ICMPv6 PTB: len %d % x", len(icmp), icmp[40:48])
	}
	var ph [40]byte
	copy(ph[:32], icmp[8:40])
	binary.BigEndian.PutUint32(ph[32:], uint32(len(icmp)-40))
	ph[39] = 58
	if inetSum(icmp[40:], uint32(inetSum(ph[:], 0))) != 0xffff {
		t.Error("bad ICMPv6 checksum")
	}
}

// inetSum is the folded ones'-complement sum of b from initial.
func inetSum(b []byte, initial uint32) uint16 { return inetsum.Fold(inetsum.Sum(uint64(initial), b)) }
