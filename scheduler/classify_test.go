// SPDX-License-Identifier: MIT

package scheduler

import (
	"encoding/binary"
	"testing"
)

func ipv4(proto uint8, dscp uint8, sport, dport uint16) []byte {
	b := make([]byte, 28)
	b[0], b[1], b[9] = 0x45, dscp<<2, proto
	binary.BigEndian.PutUint16(b[2:], 28)
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	return b
}

func ipv6(proto uint8, dscp uint8, sport, dport uint16, ext bool) []byte {
	b := make([]byte, 48, 56)
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(dscp)<<22)
	b[6] = proto
	l4 := b[40:]
	if ext {
		b[6] = 0 // hop-by-hop, 8 bytes
		b = b[:56]
		b[40], b[41] = proto, 0
		l4 = b[48:]
	}
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	return b
}

func TestClassifier(t *testing.T) {
	c, err := NewClassifier("otias", []Rule{
		{Name: "voip", Proto: 17, DstPorts: PortRange{5060, 5080}, Scheduler: "redundant"},
		{Name: "ef", DSCP: []uint8{46}, Scheduler: "redundant"},
		{Name: "ssh", Proto: 6, SrcPorts: PortRange{22, 22}, Scheduler: "srtt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want int
	}{
		{"v4 sip", ipv4(17, 0, 4000, 5060), 1},
		{"v4 udp other", ipv4(17, 0, 4000, 5081), 0},
		{"v4 tcp to sip port", ipv4(6, 0, 4000, 5060), 0},
		{"v4 EF", ipv4(6, 46, 1, 2), 2},
		{"v4 ssh", ipv4(6, 0, 22, 40000), 3},
		{"v6 sip", ipv6(17, 0, 1, 5070, false), 1},
		{"v6 sip after hop-by-hop", ipv6(17, 0, 1, 5070, true), 1},
		{"v6 EF", ipv6(58, 46, 0, 0, false), 2},
		{"short", []byte{0x45, 0}, 0},
		{"empty", nil, 0},
		{"v4 truncated ports", ipv4(17, 0, 1, 5060)[:21], 0},
	} {
		if got := c.Classify(tc.pkt); got != tc.want {
			t.Errorf("%s: class %d, want %d", tc.name, got, tc.want)
		}
	}
	// Non-first fragment: no ports, so the port rule cannot match.
	frag := ipv4(17, 0, 4000, 5060)
	binary.BigEndian.PutUint16(frag[6:], 100)
	if got := c.Classify(frag); got != 0 {
		t.Errorf("fragment: class %d", got)
	}
	if got := c.Classes(); len(got) != 4 || got[0] != "otias" || got[1] != "redundant" {
		t.Errorf("classes %v", got)
	}
	pkt := ipv6(17, 0, 1, 5070, true)
	if a := testing.AllocsPerRun(100, func() { c.Classify(pkt) }); a != 0 {
		t.Errorf("%v allocations per Classify", a)
	}
}

func TestClassifierRejectsBadRules(t *testing.T) {
	for _, rules := range [][]Rule{
		{{Scheduler: "nope"}},
		{{Scheduler: "rr", DSCP: []uint8{64}}},
		{{Scheduler: "rr", SrcPorts: PortRange{10, 5}}},
		{{Scheduler: "rr", Proto: 1, DstPorts: PortRange{1, 2}}},
	} {
		if _, err := NewClassifier("rr", rules); err == nil {
			t.Errorf("rules %+v accepted", rules)
		}
	}
	if _, err := NewClassifier("nope", nil); err == nil {
		t.Error("unknown default accepted")
	}
}

func FuzzClassify(f *testing.F) {
	f.Add(ipv4(17, 46, 4000, 5060))
	f.Add(ipv6(17, 0, 1, 5070, true))
	f.Add(ipv6(6, 10, 22, 1, false))
	f.Add([]byte{0x60})
	c, err := NewClassifier("rr", []Rule{
		{Proto: 17, DstPorts: PortRange{5060, 5080}, Scheduler: "redundant"},
		{DSCP: []uint8{46}, Scheduler: "srtt"},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := c.Classify(b); got < 0 || got > 2 {
			t.Fatalf("class %d out of range", got)
		}
	})
}

func BenchmarkClassify(b *testing.B) {
	c, _ := NewClassifier("otias", []Rule{
		{Proto: 17, DstPorts: PortRange{5060, 5080}, Scheduler: "redundant"},
		{DSCP: []uint8{46}, Scheduler: "redundant"},
		{Proto: 6, SrcPorts: PortRange{22, 22}, Scheduler: "srtt"},
	})
	pkt := ipv6(6, 0, 40000, 443, true)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Classify(pkt)
	}
}
