// SPDX-License-Identifier: MIT

package codel

import (
	"math"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// fifo is a plain queue of packets for CoDel to act on: marked packets
// stay, dropped ones are counted.
type fifo struct {
	enq     []mono.Time
	size    int
	bytes   int
	cur     mono.Time
	ecn     bool
	marked  int
	dropped int
}

func (f *fifo) push(t mono.Time) {
	f.enq = append(f.enq, t)
	f.bytes += f.size
}

func (f *fifo) Next(now mono.Time) (time.Duration, int, bool) {
	if len(f.enq) == 0 {
		return 0, 0, false
	}
	f.cur, f.enq = f.enq[0], f.enq[1:]
	f.bytes -= f.size
	return now.Sub(f.cur), f.bytes, true
}

func (f *fifo) Signal() bool {
	if f.ecn {
		f.marked++
		return true
	}
	f.dropped++
	return false
}

const ms = time.Millisecond

// A queue whose sojourn time stays below Target is never signalled, and
// neither is one whose backlog is a single packet.
func TestNoSignalWithoutStandingQueue(t *testing.T) {
	var s State
	f := &fifo{size: 1000}
	for i := 0; i < 10000; i++ {
		now := mono.Time(i) * mono.Time(ms)
		f.push(now)
		f.push(now)
		if !s.Dequeue(now+mono.Time(4*ms), Params{}, f) { // 4 ms sojourn < 5 ms
			t.Fatal("packet lost")
		}
		s.Dequeue(now+mono.Time(4*ms), Params{}, f)
	}
	f = &fifo{size: 1000}
	for i := 0; i < 10000; i++ {
		now := mono.Time(i) * mono.Time(ms)
		f.push(now)
		s.Dequeue(now+mono.Time(50*ms), Params{}, f) // long sojourn, but the backlog is 0
	}
	if f.dropped != 0 || s.Dropping() {
		t.Errorf("%d drops, dropping %v", f.dropped, s.Dropping())
	}
}

// standing runs a queue that always holds sojourn worth of packets, one
// dequeue per millisecond, and returns the times CoDel signalled.
func standing(ecn bool, sojourn time.Duration, n int) ([]mono.Time, *fifo) {
	var s State
	f := &fifo{size: 1000, ecn: ecn}
	var at []mono.Time
	for i := 0; i < n; i++ {
		now := mono.Time(i) * mono.Time(ms)
		for len(f.enq) < 5 { // always a backlog
			f.push(now.Add(-sojourn))
		}
		before := f.marked + f.dropped
		s.Dequeue(now, Params{}, f)
		if f.marked+f.dropped > before {
			at = append(at, now)
		}
	}
	return at, f
}

// Above Target for an Interval, CoDel signals, then at intervals that
// shrink as 100 ms/√count (the control law).
func TestControlLaw(t *testing.T) {
	for _, ecn := range []bool{true, false} {
		at, f := standing(ecn, 20*ms, 1000)
		if len(at) < 5 {
			t.Fatalf("ecn %v: %d signals", ecn, len(at))
		}
		if at[0] != mono.Time(100*ms) {
			t.Errorf("ecn %v: first signal at %v, want one interval after the queue stood (100 ms)", ecn, time.Duration(at[0]))
		}
		for k := 1; k < 5; k++ {
			gap := at[k].Sub(at[k-1])
			want := time.Duration(float64(100*ms) / math.Sqrt(float64(k)))
			if d := gap - want; d < -ms || d > ms { // one dequeue per ms
				t.Errorf("ecn %v: gap %d = %v, want %v", ecn, k, gap, want)
			}
		}
		if ecn && f.dropped != 0 || !ecn && f.marked != 0 {
			t.Errorf("ecn %v: marked %d dropped %d", ecn, f.marked, f.dropped)
		}
	}
}

// Leaving the dropping state and re-entering it soon after resumes near
// the previous signal rate (count − lastCount) instead of starting over.
func TestReentryResumesCount(t *testing.T) {
	var s State
	f := &fifo{size: 1000}
	now := mono.Time(0)
	step := func(sojourn time.Duration) {
		for len(f.enq) < 5 {
			f.push(now.Add(-sojourn))
		}
		s.Dequeue(now, Params{}, f)
		now = now.Add(ms)
	}
	for i := 0; i < 600; i++ {
		step(20 * ms)
	}
	if !s.Dropping() || s.Signals() < 3 || s.Signals() != int(s.count) {
		t.Fatalf("a standing queue for 600 ms: dropping %v, %d signals (count %d)", s.Dropping(), s.Signals(), s.count)
	}
	for i := 0; i < 50; i++ {
		step(0) // below target: dropping ends
	}
	if s.Dropping() || s.Signals() != 0 {
		t.Fatalf("still dropping below target (%d signals)", s.Signals())
	}
	before := s.count
	for i := 0; i < 300 && !s.Dropping(); i++ {
		step(20 * ms)
	}
	if !s.Dropping() {
		t.Fatal("did not re-enter dropping")
	}
	if before < 3 || s.count != before-1 {
		t.Errorf("count %d when dropping ended, %d on re-entry; want %d", before, s.count, before-1)
	}
}

// The queue emptying ends the dropping state.
func TestEmptyQueueStopsDropping(t *testing.T) {
	_, f := standing(false, 20*ms, 300)
	var s State
	s.dropping = true
	f.enq = nil
	if s.Dequeue(mono.Time(time.Second), Params{}, f) || s.Dropping() {
		t.Error("empty queue: packet or still dropping")
	}
}

func BenchmarkDequeue(b *testing.B) {
	var s State
	backing := make([]mono.Time, 0, 16)
	f := &fifo{size: 1000, ecn: true}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now := mono.Time(i) * mono.Time(time.Microsecond)
		f.enq = backing[:0]
		f.bytes = 0
		f.push(now.Add(-10 * ms))
		f.push(now.Add(-10 * ms))
		s.Dequeue(now, Params{}, f)
	}
}
