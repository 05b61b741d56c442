// SPDX-License-Identifier: MIT

package bench

import (
	"net/netip"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(d, 0.5); p != 50*time.Millisecond {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(d, 0.99); p != 99*time.Millisecond {
		t.Errorf("p99 %v", p)
	}
	if p := percentile(d[:1], 0.99); p != time.Millisecond {
		t.Errorf("p99 of one %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none %v", p)
	}
}

func TestSoakVerdict(t *testing.T) {
	samples := func(grow float64) *SoakResult {
		s := &SoakResult{Seconds: 600}
		for ts := 0.0; ts <= 600; ts += 10 {
			v := 100e6 + grow*ts
			s.Samples = append(s.Samples, MemSample{T: ts, RSSBytes: uint64(v), HeapBytes: uint64(v / 2)})
		}
		return s
	}
	flat := samples(0)
	soakVerdict(flat)
	if !flat.Flat || flat.Growth.RSSPct != 0 {
		t.Errorf("constant memory judged %+v", flat.Growth)
	}
	leak := samples(20e3) // 20 kB/s: 9 MB over the 7.5 minutes compared
	soakVerdict(leak)
	if leak.Flat || leak.Growth.RSSPct < 5 {
		t.Errorf("a leak judged flat: %+v", leak.Growth)
	}
	short := &SoakResult{Seconds: 30}
	for ts := 0.0; ts <= 30; ts += 10 {
		short.Samples = append(short.Samples, MemSample{T: ts, RSSBytes: 50e6, HeapBytes: 20e6})
	}
	soakVerdict(short)
	if !short.Flat {
		t.Errorf("a short flat soak judged %+v (%s)", short.Growth, short.Rule)
	}
}

func TestParseGOMAXPROCS(t *testing.T) {
	g, err := ParseGOMAXPROCS("1, 2,4")
	if err != nil || len(g) != 3 || g[0] != 1 || g[1] != 2 || g[2] != 4 {
		t.Fatalf("got %v, %v", g, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-1"} {
		if _, err := ParseGOMAXPROCS(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBulkPacket(t *testing.T) {
	p := bulkPacket(netip.MustParseAddr("10.128.0.7"), netip.MustParseAddr("10.126.0.1"), 1400)
	if len(p) != 1400 || p[0] != 0x45 || int(p[2])<<8|int(p[3]) != 1400 || p[9] != 17 {
		t.Fatalf("header % x", p[:20])
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("IPv4 header checksum does not verify: %#x", sum)
	}
	// UDP checksum over the pseudo-header and the datagram.
	sum = 17 + 1380
	for i := 12; i < 20; i += 2 {
		sum += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for i := 20; i < 1400; i += 2 {
		sum += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("UDP checksum does not verify: %#x", sum)
	}
	if got := nthAddr(scaleInnerNet, 300); got != netip.MustParseAddr("10.128.1.44") {
		t.Errorf("nthAddr %v", got)
	}
}
