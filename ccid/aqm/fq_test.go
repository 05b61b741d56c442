// SPDX-License-Identifier: MIT

package aqm

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

type pickAll struct{ extra time.Duration }

func (p pickAll) Pick(int, []byte, time.Duration) (bool, Allowance) {
	return true, Allowance{Extra: p.extra}
}

type pickNot struct{ not int }

func (p pickNot) Pick(f int, _ []byte, _ time.Duration) (bool, Allowance) {
	return f != p.not, Allowance{}
}

func TestFQSparseFlowOvertakesBulk(t *testing.T) {
	q := NewFQ(FQConfig{Config: Config{Limit: 512}})
	for i := 0; i < 200; i++ {
		if _, ok := q.Enqueue(0, ipv4(1500, NotECT), 1); !ok {
			t.Fatal("bulk refused")
		}
	}
	q.Enqueue(0, ipv4(100, NotECT), 2)
	for i := 0; i < 3; i++ {
		p, f, ok := q.Dequeue(0, pickAll{})
		if !ok {
			t.Fatal("empty")
		}
		if f == q.Bucket(2) {
			if len(p) != 100 {
				t.Fatalf("wrong packet for the sparse flow: %d bytes", len(p))
			}
			return
		}
	}
	t.Fatal("the sparse flow's packet waited behind more than two bulk packets")
}

func TestFQDeficitRoundRobinSharesBytes(t *testing.T) {
	q := NewFQ(FQConfig{Config: Config{Limit: 4096}})
	// Flow 1 sends 1500-byte packets, flow 2 300-byte ones: DRR shares
	// bytes, not packets.
	for i := 0; i < 1000; i++ {
		q.Enqueue(0, ipv4(1500, NotECT), 1)
		q.Enqueue(0, ipv4(300, NotECT), 2)
	}
	var bytes [2]int
	for i := 0; i < 600; i++ {
		p, f, ok := q.Dequeue(0, pickAll{})
		if !ok {
			t.Fatal("empty")
		}
		if f == q.Bucket(1) {
			bytes[0] += len(p)
		} else {
			bytes[1] += len(p)
		}
	}
	if r := float64(bytes[0]) / float64(bytes[1]); r < 0.9 || r > 1.1 {
		t.Fatalf("byte share %d vs %d (ratio %.2f), want equal", bytes[0], bytes[1], r)
	}
}

func TestFQPickerSkipsFlowsItCannotSend(t *testing.T) {
	q := NewFQ(FQConfig{})
	q.Enqueue(0, ipv4(1500, NotECT), 1)
	q.Enqueue(0, ipv4(1500, NotECT), 2)
	_, f, ok := q.Dequeue(0, pickNot{q.Bucket(1)})
	if !ok || f != q.Bucket(2) {
		t.Fatalf("got flow %d ok=%v, want the second flow", f, ok)
	}
	if _, _, ok := q.Dequeue(0, pickNot{q.Bucket(1)}); ok {
		t.Fatal("served the refused flow")
	}
	if q.FlowLen(q.Bucket(1)) != 1 {
		t.Fatal("the refused flow lost its packet")
	}
}

func TestFQOverflowDropsFromFattestFlow(t *testing.T) {
	var dropped int
	q := NewFQ(FQConfig{Config: Config{Limit: 64, Drop: func([]byte) { dropped++ }}})
	for i := 0; i < 64; i++ {
		q.Enqueue(0, ipv4(1500, NotECT), 1)
	}
	if _, ok := q.Enqueue(0, ipv4(100, NotECT), 2); !ok {
		t.Fatal("a sparse flow's packet was refused because a bulk flow filled the queue")
	}
	if dropped != 1 || q.FlowLen(q.Bucket(1)) != 63 {
		t.Fatalf("dropped %d, bulk holds %d; want the bulk flow's oldest dropped", dropped, q.FlowLen(q.Bucket(1)))
	}
	if _, ok := q.Enqueue(0, ipv4(1500, NotECT), 1); ok {
		t.Fatal("the fattest flow's own arrival was accepted into a full queue")
	}
}

// standing drives one flow at twice the service rate for dur and returns
// the packets CoDel signalled (dropped or marked).
func standing(t *testing.T, extra time.Duration, dur time.Duration) uint64 {
	t.Helper()
	q := NewFQ(FQConfig{Config: Config{Target: 5 * time.Millisecond, Limit: 4096}})
	var now mono.Time
	for now = 0; now < mono.Time(dur); now += mono.Time(time.Millisecond) {
		q.Enqueue(now, ipv4(1500, NotECT), 7)
		q.Enqueue(now, ipv4(1500, NotECT), 7)
		q.Dequeue(now, pickAll{extra})
	}
	s := q.Stats()
	return s.Dropped + s.Marked
}

func TestFQCoDelPerFlowTarget(t *testing.T) {
	if n := standing(t, 0, 2*time.Second); n == 0 {
		t.Fatal("a standing queue of a growing flow was never signalled")
	}
	// The same flow allowed 10 s of extra sojourn is left alone.
	if n := standing(t, 10*time.Second, time.Second); n != 0 {
		t.Fatalf("%d signals despite the extra allowance", n)
	}
}

func TestFQSteadyStateDoesNotAllocate(t *testing.T) {
	q := NewFQ(FQConfig{})
	p := ipv4(1500, NotECT)
	var now mono.Time
	n := testing.AllocsPerRun(1000, func() {
		now += 1000
		q.Enqueue(now, p, uint64(now/1000)%5)
		q.Dequeue(now, pickAll{})
	})
	if n != 0 {
		t.Fatalf("%v allocations per packet", n)
	}
}

func TestFQFlushReturnsEverything(t *testing.T) {
	q := NewFQ(FQConfig{})
	for i := 0; i < 10; i++ {
		q.Enqueue(0, ipv4(100, NotECT), uint64(i))
	}
	got := 0
	q.Flush(func([]byte) { got++ })
	if got != 10 || q.Len() != 0 || q.Bytes() != 0 {
		t.Fatalf("flushed %d, left %d packets %d bytes", got, q.Len(), q.Bytes())
	}
	if _, _, ok := q.Dequeue(0, pickAll{}); ok {
		t.Fatal("dequeued after flush")
	}
	q.Enqueue(0, ipv4(100, NotECT), 3)
	if _, _, ok := q.Dequeue(0, pickAll{}); !ok {
		t.Fatal("unusable after flush")
	}
}

func BenchmarkFQEnqueueDequeue(b *testing.B) {
	q := NewFQ(FQConfig{})
	p := ipv4(1500, NotECT)
	var now mono.Time
	for b.Loop() {
		now += 1000
		q.Enqueue(now, p, uint64(now)%7)
		q.Dequeue(now, pickAll{})
	}
}

// steadyQueue holds one flow's sojourn at about backlog ms (one packet in
// and one out per ms after a backlog) for dur, and returns the packets
// CoDel signalled.
func steadyQueue(t *testing.T, backlog int, allow Allowance, dur time.Duration) uint64 {
	t.Helper()
	q := NewFQ(FQConfig{Config: Config{Target: 20 * time.Millisecond, Limit: 4096}})
	for i := 0; i < backlog; i++ {
		q.Enqueue(0, ipv4(1500, NotECT), 7)
	}
	for now := mono.Time(0); now < mono.Time(dur); now += mono.Time(time.Millisecond) {
		q.Enqueue(now, ipv4(1500, NotECT), 7)
		q.Dequeue(now, pickAllow{allow})
	}
	s := q.Stats()
	return s.Dropped + s.Marked
}

type pickAllow struct{ a Allowance }

func (p pickAllow) Pick(int, []byte, time.Duration) (bool, Allowance) { return true, p.a }

func TestFQCoDelFollowsFlowRTT(t *testing.T) {
	// A standing 60 ms queue: too much for a flow with a short RTT, ...
	if n := steadyQueue(t, 60, Allowance{}, 2*time.Second); n == 0 {
		t.Fatal("a standing 60 ms queue of a flow with unknown RTT was never signalled")
	}
	if n := steadyQueue(t, 60, Allowance{RTT: 80 * time.Millisecond}, 2*time.Second); n == 0 {
		t.Fatal("a standing 60 ms queue of an 80 ms RTT flow was never signalled")
	}
	// ... but what a flow over a satellite path (600 ms) needs to keep the
	// path busy after a cut of its window.
	if n := steadyQueue(t, 60, Allowance{RTT: 600 * time.Millisecond}, 2*time.Second); n != 0 {
		t.Fatalf("%d signals to a 600 ms RTT flow with a 60 ms queue", n)
	}
	// Its queue is still bounded: half its RTT.
	if n := steadyQueue(t, 400, Allowance{RTT: 600 * time.Millisecond}, 3*time.Second); n == 0 {
		t.Fatal("a standing 400 ms queue of a 600 ms RTT flow was never signalled")
	}
	p := NewFQ(FQConfig{Config: Config{Target: 20 * time.Millisecond}}).params(Allowance{Extra: 30 * time.Millisecond, RTT: 600 * time.Millisecond})
	if p.Interval != 600*time.Millisecond || p.Target != 300*time.Millisecond {
		t.Fatalf("600 ms RTT, 30 ms extra: interval %v target %v, want 600ms and 300ms", p.Interval, p.Target)
	}
}

// A packet that supersedes the last one queued in its bucket takes its
// place (its turn and its wait) and the older one is dropped; nothing
// else in the queue changes.
func TestFQSupersededPacketIsReplaced(t *testing.T) {
	var dropped [][]byte
	// Packets are [kind, n]: kind 'a' supersedes an 'a' before it.
	sup := func(newer, older []byte) bool { return newer[0] == 'a' && older[0] == 'a' }
	q := NewFQ(FQConfig{Config: Config{Limit: 64, Disabled: true, Drop: func(p []byte) { dropped = append(dropped, p) }}, Supersedes: sup})
	q.Enqueue(0, []byte{'d', 1}, 1)
	q.Enqueue(mono.Time(time.Millisecond), []byte{'a', 2}, 1)
	q.Enqueue(mono.Time(2*time.Millisecond), []byte{'a', 3}, 1) // replaces a2
	q.Enqueue(mono.Time(3*time.Millisecond), []byte{'a', 4}, 2) // another bucket
	q.Enqueue(mono.Time(4*time.Millisecond), []byte{'d', 5}, 1)
	q.Enqueue(mono.Time(5*time.Millisecond), []byte{'a', 6}, 1) // the tail is d5: kept
	if q.Len() != 5 || q.Bytes() != 10 || q.Stats().Superseded != 1 || len(dropped) != 1 || dropped[0][1] != 2 {
		t.Fatalf("len %d bytes %d superseded %d dropped %v", q.Len(), q.Bytes(), q.Stats().Superseded, dropped)
	}
	if w := q.FlowSojourn(mono.Time(10*time.Millisecond), q.Bucket(1)); w != 10*time.Millisecond {
		t.Fatalf("bucket 1's oldest packet waited %v, want 10ms", w)
	}
	var order []byte
	for {
		p, f, ok := q.Dequeue(mono.Time(10*time.Millisecond), pickAll{})
		if !ok {
			break
		}
		if f == q.Bucket(1) {
			order = append(order, p[1])
		}
	}
	if string(order) != string([]byte{1, 3, 5, 6}) {
		t.Fatalf("bucket 1 sent %v, want [1 3 5 6]", order)
	}
}
