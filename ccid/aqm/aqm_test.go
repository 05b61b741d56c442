// SPDX-License-Identifier: MIT

package aqm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// ipv4 builds a 20-byte IPv4 header (plus payload) with a valid checksum.
func ipv4(size int, ecn uint8) []byte {
	p := make([]byte, size)
	p[0] = 0x45
	p[1] = 0xb8&^3 | ecn // DSCP EF, to check it survives
	binary.BigEndian.PutUint16(p[2:], uint16(size))
	p[8] = 64
	p[9] = 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ipv4Checksum(p[:20]))
	return p
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func ipv6(size int, ecn uint8) []byte {
	p := make([]byte, size)
	tc := uint8(0xb8) | ecn
	p[0] = 0x60 | tc>>4
	p[1] = tc<<4 | 0x0a // flow label bits must survive
	p[2], p[3] = 0xbc, 0xde
	return p
}

func TestMarkCEIPv4(t *testing.T) {
	for _, e := range []uint8{ECT0, ECT1, CE} {
		p := ipv4(100, e)
		if !MarkCE(p) {
			t.Fatalf("ECN %d: MarkCE refused", e)
		}
		if got, _ := ECN(p); got != CE {
			t.Fatalf("ECN %d: after MarkCE ECN = %d", e, got)
		}
		if p[1]&^3 != 0xb8 {
			t.Fatalf("DSCP changed: %#x", p[1])
		}
		if want := ipv4Checksum(p[:20]); binary.BigEndian.Uint16(p[10:]) != want {
			t.Fatalf("ECN %d: checksum %#x, want %#x", e, binary.BigEndian.Uint16(p[10:]), want)
		}
	}
	p := ipv4(100, NotECT)
	orig := append([]byte(nil), p...)
	if MarkCE(p) {
		t.Fatal("MarkCE marked a Not-ECT packet")
	}
	if string(p) != string(orig) {
		t.Fatal("MarkCE changed a Not-ECT packet")
	}
}

func TestMarkCEIPv6(t *testing.T) {
	p := ipv6(60, ECT0)
	if !MarkCE(p) {
		t.Fatal("MarkCE refused ECT(0)")
	}
	if got, _ := ECN(p); got != CE {
		t.Fatalf("ECN = %d", got)
	}
	if tc := p[0]<<4 | p[1]>>4; tc != 0xb8|CE {
		t.Fatalf("traffic class %#x", tc)
	}
	if p[1]&0x0f != 0x0a || p[2] != 0xbc {
		t.Fatal("flow label changed")
	}
	if MarkCE(ipv6(60, NotECT)) {
		t.Fatal("marked Not-ECT")
	}
}

func TestMarkCERejectsGarbage(t *testing.T) {
	for _, p := range [][]byte{nil, {0x45}, {0x46, 2, 0, 0}, make([]byte, 19), {0x60, 0x20}} {
		if MarkCE(p) {
			t.Fatalf("MarkCE(%x) = true", p)
		}
	}
}

func FuzzMarkCE(f *testing.F) {
	f.Add(ipv4(40, ECT0))
	f.Add(ipv4(20, NotECT))
	f.Add(ipv4(60, CE))
	f.Add(ipv6(40, ECT1))
	f.Add([]byte{0x4f, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		before, okBefore := ECN(p)
		valid := okBefore && p[0]>>4 == 4 && ipv4Checksum(p[:20]) == binary.BigEndian.Uint16(p[10:])
		orig := string(p)
		marked := MarkCE(p)
		if !marked {
			if string(p) != orig {
				t.Fatal("unmarked packet changed")
			}
			return
		}
		if !okBefore || before == NotECT {
			t.Fatal("marked a packet that is not ECN-capable IP")
		}
		if e, _ := ECN(p); e != CE {
			t.Fatalf("ECN after mark = %d", e)
		}
		if valid && ipv4Checksum(p[:20]) != binary.BigEndian.Uint16(p[10:]) {
			t.Fatal("checksum broken by MarkCE")
		}
	})
}

// standingQueue keeps a standing 20 ms queue of packets with ECN field e
// for 300 ms: 20 packets queued, served one per ms, refilled one per ms.
func standingQueue(q *Queue, e uint8) {
	var now mono.Time
	for i := 0; i < 20; i++ {
		q.Enqueue(now, ipv4(1000, e))
	}
	for i := 0; i < 300; i++ {
		now = now.Add(time.Millisecond)
		q.Enqueue(now, ipv4(1000, e))
		q.Dequeue(now)
	}
}

// TestCoDelMarksStandingQueue overloads the queue steadily: CoDel must
// start marking after an interval above target, and keep the sojourn of
// what it sends near target once the sender backs off, while a Not-ECT
// packet under the same conditions is dropped rather than marked.
func TestCoDelMarksStandingQueue(t *testing.T) {
	q := New(Config{Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond})
	standingQueue(q, ECT0)
	s := q.Stats()
	if s.Marked == 0 || s.Dropped != 0 {
		t.Fatalf("standing queue: marked %d dropped %d, want marks and no drops", s.Marked, s.Dropped)
	}
	// Not-ECT under a standing queue is dropped.
	var dropped int
	q2 := New(Config{Drop: func([]byte) { dropped++ }})
	standingQueue(q2, NotECT)
	if s := q2.Stats(); s.Dropped == 0 || s.Marked != 0 || dropped != int(s.Dropped) {
		t.Fatalf("Not-ECT: dropped %d (callback %d) marked %d", s.Dropped, dropped, s.Marked)
	}
}

func TestCoDelLeavesShortQueueAlone(t *testing.T) {
	q := New(Config{})
	var now mono.Time
	for i := 0; i < 2000; i++ {
		now = now.Add(time.Millisecond)
		q.Enqueue(now, ipv4(1000, ECT0))
		q.Enqueue(now, ipv4(1000, ECT0))
		now = now.Add(time.Millisecond) // 2 ms sojourn < 5 ms target
		q.Dequeue(now)
		q.Dequeue(now)
	}
	if s := q.Stats(); s.Marked != 0 || s.Dropped != 0 {
		t.Fatalf("short queue signalled: %+v", s)
	}
}

func TestTailLimit(t *testing.T) {
	q := New(Config{Limit: 4})
	for i := 0; i < 6; i++ {
		q.Enqueue(0, ipv4(100, ECT0))
	}
	if q.Len() != 4 || q.Stats().TailDropped != 2 {
		t.Fatalf("len %d taildrops %d", q.Len(), q.Stats().TailDropped)
	}
}

func BenchmarkEnqueueDequeue(b *testing.B) {
	q := New(Config{})
	p := ipv4(1400, ECT0)
	var now mono.Time
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now += 1000
		q.Enqueue(now, p)
		q.Dequeue(now)
	}
}
