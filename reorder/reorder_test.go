// SPDX-License-Identifier: MIT

package reorder

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

const ms = mono.Time(time.Millisecond)

type harness struct {
	t   *testing.T
	r   Reorderer
	now mono.Time
	out []uint64
	ps  map[int]uint64
}

func newHarness(t *testing.T, name string, cfg Config) *harness {
	t.Helper()
	r, err := New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, r: r, ps: map[int]uint64{}}
}

func (h *harness) drain() {
	for {
		it, ok := h.r.Pop(h.now)
		if !ok {
			return
		}
		h.out = append(h.out, it.Seq)
	}
}

// push delivers seq on path at the current time with the path's next DCCP seq.
func (h *harness) push(path int, seq uint64) bool {
	h.ps[path]++
	ok := h.r.Push(h.now, Item{Seq: seq, Path: path, PathSeq: h.ps[path], Arrival: h.now})
	h.drain()
	return ok
}

// advance moves time to t, firing deadlines on the way.
func (h *harness) advance(t mono.Time) {
	for n := 0; ; n++ {
		if n > 100000 {
			h.t.Fatalf("deadline %v stuck at %v", h.r.Deadline(), h.now)
		}
		d := h.r.Deadline()
		if d > t {
			break
		}
		h.now = max(h.now, d)
		h.r.OnTimer(h.now)
		// As the engine: the NACKs due go out after the timer.
		if nk, ok := h.r.(NACKer); ok {
			for {
				if _, ok := nk.PollNACK(h.now); !ok {
					break
				}
			}
		}
		h.drain()
	}
	h.now = t
}

func (h *harness) want(seqs ...uint64) {
	h.t.Helper()
	if len(h.out) != len(seqs) {
		h.t.Fatalf("delivered %v, want %v", h.out, seqs)
	}
	for i := range seqs {
		if h.out[i] != seqs[i] {
			h.t.Fatalf("delivered %v, want %v", h.out, seqs)
		}
	}
}

func TestRegistry(t *testing.T) {
	for _, n := range []string{"passive", "fixed", "adaptive", "equalize"} {
		r, err := New(n, Config{})
		if err != nil || r.Name() != n {
			t.Errorf("New(%q) = %v, %v", n, r, err)
		}
	}
	if _, err := New("nope", Config{}); err == nil {
		t.Error("unknown name accepted")
	}
}

func TestPassiveDeliversAtOnceAndDropsDuplicates(t *testing.T) {
	h := newHarness(t, "passive", Config{})
	h.push(0, 10)
	h.push(0, 12)
	h.push(1, 11)
	if h.push(1, 12) {
		t.Error("duplicate accepted")
	}
	h.want(10, 12, 11)
	s := h.r.Stats()
	if s.OutOfOrder != 1 || s.Duplicates != 1 || s.Delivered != 3 || s.Held != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestFixedHoldsUntilMaxHoldWithoutArrivals(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: 30 * time.Millisecond})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 1)
	h.push(0, 3) // 2 missing; path 1 has not passed it
	h.want(1)
	if d := h.r.Deadline(); d != 30*ms {
		t.Fatalf("deadline %v, want 30ms", d)
	}
	h.advance(29 * ms)
	h.want(1)
	h.advance(31 * ms) // the timer fires with no packet arriving
	h.want(1, 3)
	s := h.r.Stats()
	if s.GapsSkipped != 1 || s.Held != 1 || s.HoldHist[8] != 1 { // [20ms,50ms)
		t.Errorf("stats %+v", s)
	}
	// 2 arrives late: delivered out of order, counted.
	h.push(1, 2)
	h.want(1, 3, 2)
	if s := h.r.Stats(); s.GapsLateArrive != 1 || s.OutOfOrder != 1 {
		t.Errorf("stats %+v", s)
	}
	if h.push(1, 2) {
		t.Error("second copy of a late packet accepted")
	}
}

func TestDropLate(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: 10 * time.Millisecond, DropLate: true})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 1)
	h.push(0, 3)
	h.advance(20 * ms)
	if h.push(1, 2) {
		t.Error("late packet accepted with DropLate")
	}
	h.want(1, 3)
	if s := h.r.Stats(); s.LateDropped != 1 || s.OutOfOrder != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestGapFilledInTime(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: 50 * time.Millisecond})
	h.push(0, 5)
	h.push(0, 7)
	h.push(0, 8)
	h.now = 10 * ms
	h.push(1, 6)
	h.want(5, 6, 7, 8)
	if s := h.r.Stats(); s.GapsSkipped != 0 || s.Held != 2 || s.InOrder != 2 {
		t.Errorf("stats %+v", s)
	}
	if d := h.r.Deadline(); d != mono.Never {
		t.Errorf("deadline %v with nothing held", d)
	}
}

func TestEarlyLossWhenEveryPathPassed(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Second})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 1)
	h.push(1, 2)
	h.push(0, 4) // 3 missing, path 1 may still bring it
	h.want(1, 2)
	h.now = ms
	h.push(1, 5) // path 1 passed 3 too: it is lost
	h.want(1, 2, 4, 5)
	if s := h.r.Stats(); s.GapsSkipped != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestEarlyLossFromPathSeq(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Second})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(1, 1)
	h.push(0, 2)
	h.ps[0]++    // path 0 lost its next packet (DCCP seq hole)...
	h.push(0, 4) // ...and MP_SEQ 3 is the only one missing in between
	h.want(1, 2, 4)
	// With two missing and a hole of one, nothing can be concluded.
	h.push(1, 5)
	h.ps[1]++
	h.push(1, 8)
	h.want(1, 2, 4, 5)
}

func TestAdaptiveHoldFromRTTs(t *testing.T) {
	h := newHarness(t, "adaptive", Config{MaxHold: 200 * time.Millisecond, Margin: 2 * time.Millisecond})
	h.r.SetPaths([]PathInfo{
		{ID: 0, Active: true, SRTT: 20 * time.Millisecond},
		{ID: 1, Active: true, SRTT: 100 * time.Millisecond},
	})
	h.push(0, 1)
	h.push(0, 3)
	if d := h.r.Deadline(); d != 42*ms { // (100-20)/2 + 2
		t.Fatalf("deadline %v, want 42ms", d)
	}
	h.r.SetPaths([]PathInfo{
		{ID: 0, Active: true, SRTT: 20 * time.Millisecond},
		{ID: 1, Active: true, SRTT: 2 * time.Second},
	})
	h.push(0, 5)
	h.advance(500 * ms)
	h.want(1, 3, 5)
	if s := h.r.Stats(); s.HoldHist[11] != 1 || s.HoldHist[12] != 0 {
		// 5 must have been held MaxHold (200ms), in [200ms,500ms).
		t.Errorf("hold histogram %v", s.HoldHist)
	}
}

func TestAdaptiveLearnsFromArrivals(t *testing.T) {
	// No RTT information: the hold comes from how late gaps were filled.
	h := newHarness(t, "adaptive", Config{MaxHold: 200 * time.Millisecond, Margin: time.Millisecond})
	h.push(0, 1)
	h.push(0, 3)
	h.now = 30 * ms
	h.push(1, 2) // filled 30ms after the gap opened
	h.want(1, 2, 3)
	h.now = 40 * ms
	h.push(0, 5)
	if d := h.r.Deadline(); d != 71*ms {
		t.Fatalf("deadline %v, want 71ms (30ms lateness + 1ms margin)", d)
	}
}

func TestEqualizeDelaysFastPath(t *testing.T) {
	h := newHarness(t, "equalize", Config{MaxHold: 200 * time.Millisecond, Margin: time.Millisecond})
	h.r.SetPaths([]PathInfo{
		{ID: 0, Active: true, SRTT: 20 * time.Millisecond},
		{ID: 1, Active: true, SRTT: 60 * time.Millisecond},
	})
	h.push(0, 1) // fast path: held 20ms although in order
	h.want()
	h.push(1, 2)
	h.want()
	h.advance(19 * ms)
	h.want()
	h.advance(21 * ms)
	h.want(1, 2)
}

// Equalisation uses the paths' base delays (minimum RTTs), not their
// smoothed RTTs: queueing on the fast path must not shrink the hold below
// the base difference (the inner flow would see a shorter RTT), and an
// idle slow path still counts.
func TestEqualizeUsesBaseDelays(t *testing.T) {
	h := newHarness(t, "equalize", Config{MaxHold: 200 * time.Millisecond, Margin: time.Millisecond})
	h.r.SetPaths([]PathInfo{
		{ID: 0, Active: true, SRTT: 60 * time.Millisecond, MinRTT: 10 * time.Millisecond},
		{ID: 1, Active: true, SRTT: 45 * time.Millisecond, MinRTT: 40 * time.Millisecond},
	})
	h.push(0, 1)       // nothing ever arrived on path 1
	h.advance(14 * ms) // held (40-10)/2 = 15 ms, not (45-60)/2 < 0
	h.want()
	h.advance(16 * ms)
	h.want(1)
}

func TestBufferLimitSkipsOldestGap(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Hour, BufferLimit: 8})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 0)
	for s := uint64(2); s < 12; s++ {
		h.push(0, s)
	}
	if len(h.out) < 2 || h.out[1] != 2 {
		t.Fatalf("delivered %v", h.out)
	}
	if s := h.r.Stats(); s.Overflow != 1 || s.Buffered > 8 {
		t.Errorf("stats %+v", s)
	}
}

func TestFarAheadJump(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Hour, BufferLimit: 8})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 0)
	h.push(0, 2)
	h.push(0, 1<<40)
	h.want(0, 2)
	h.push(1, 1<<40+1) // every path is beyond the gaps now
	h.want(0, 2, 1<<40, 1<<40+1)
	if s := h.r.Stats(); s.Buffered != 0 || s.GapsSkipped < 1<<39 {
		t.Errorf("stats %+v", s)
	}
}

func TestWraparound(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: 50 * time.Millisecond})
	top := uint64(seqMask)
	h.push(0, top-1)
	h.push(0, 0) // top is missing
	h.push(1, top)
	h.push(1, 1)
	h.want(top-1, top, 0, 1)
	if s := h.r.Stats(); s.GapsSkipped != 0 || s.OutOfOrder != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestIdleFlush(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Hour, IdleFlush: 100 * time.Millisecond})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 1)
	h.push(0, 3)
	h.push(0, 5)
	h.advance(99 * ms)
	h.want(1)
	h.advance(100 * ms)
	h.want(1, 3, 5)
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	r, _ := New("adaptive", Config{})
	r.SetPaths([]PathInfo{{ID: 0, Active: true, SRTT: 10 * time.Millisecond}, {ID: 1, Active: true, SRTT: 30 * time.Millisecond}})
	buf := make([]byte, 64)
	var seq, ps0, ps1 uint64
	now := mono.Time(0)
	step := func() {
		// Two packets per path, the slow one arriving with lower seqs.
		now += mono.Time(100 * time.Microsecond)
		ps0++
		r.Push(now, Item{Seq: seq + 1, Path: 0, PathSeq: ps0, Arrival: now, Buf: buf})
		ps1++
		r.Push(now, Item{Seq: seq, Path: 1, PathSeq: ps1, Arrival: now, Buf: buf})
		seq += 2
		for {
			if _, ok := r.Pop(now); !ok {
				break
			}
		}
		if r.Deadline() <= now {
			r.OnTimer(now)
		}
	}
	for i := 0; i < 5000; i++ {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Errorf("%v allocations per packet pair", a)
	}
}

// TestRandomConservation pushes random arrivals (reordered, duplicated,
// lost) through every reorderer and checks the invariants: every accepted
// packet comes out exactly once, deadlines move forward after OnTimer, and
// with DropLate the output is strictly increasing.
func TestRandomConservation(t *testing.T) {
	for _, name := range Names() {
		for _, dropLate := range []bool{false, true} {
			r, _ := New(name, Config{MaxHold: 20 * time.Millisecond, BufferLimit: 64, DropLate: dropLate})
			r.SetPaths([]PathInfo{{ID: 0, Active: true, SRTT: 10 * time.Millisecond}, {ID: 1, Active: true, SRTT: 30 * time.Millisecond}})
			rng := uint64(12345)
			rnd := func(n uint64) uint64 {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return rng % n
			}
			accepted := map[uint64]int{}
			delivered := map[uint64]int{}
			var last uint64
			var haveLast bool
			now := mono.Time(0)
			pop := func() {
				for {
					it, ok := r.Pop(now)
					if !ok {
						break
					}
					delivered[it.Seq]++
					if dropLate && haveLast && seqDiff(it.Seq, last) <= 0 {
						t.Fatalf("%s: %d delivered after %d with DropLate", name, it.Seq, last)
					}
					last, haveLast = it.Seq, true
				}
			}
			base := uint64(seqMask - 500) // cross the wrap
			var ps [2]uint64
			for i := 0; i < 5000; i++ {
				now += mono.Time(rnd(3000)) * mono.Time(time.Microsecond)
				for r.Deadline() <= now {
					d := r.Deadline()
					r.OnTimer(now)
					pop()
					if r.Deadline() <= d && r.Deadline() <= now {
						t.Fatalf("%s: deadline %v not moving after OnTimer at %v", name, r.Deadline(), now)
					}
				}
				seq := (base + uint64(i) + rnd(40)) & seqMask
				if rnd(10) == 0 {
					continue // lost
				}
				path := int(rnd(2))
				ps[path]++
				if r.Push(now, Item{Seq: seq, Path: path, PathSeq: ps[path], Arrival: now}) {
					accepted[seq]++
				}
				pop()
			}
			now += mono.Time(time.Second)
			r.OnTimer(now)
			pop()
			for seq, n := range accepted {
				if n != 1 {
					t.Fatalf("%s: seq %d accepted %d times", name, seq, n)
				}
				if delivered[seq] != 1 {
					t.Fatalf("%s: seq %d accepted but delivered %d times", name, seq, delivered[seq])
				}
			}
			if len(delivered) != len(accepted) {
				t.Fatalf("%s: delivered %d, accepted %d", name, len(delivered), len(accepted))
			}
			if s := r.Stats(); s.Buffered != 0 || s.Delivered != uint64(len(accepted)) {
				t.Fatalf("%s: stats %+v", name, s)
			}
		}
	}
}

func TestInactiveAndSilentPathsDoNotBlockLossDetection(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Hour, IdleFlush: time.Hour})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: false}})
	h.push(0, 1)
	h.push(0, 3) // path 1 is inactive: only path 0 counts, and it passed 2
	h.want(1, 3)

	h = newHarness(t, "fixed", Config{MaxHold: time.Hour, IdleFlush: time.Hour})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(1, 1)
	h.push(0, 2)
	h.push(0, 4) // path 1 was heard from just now: 3 may still come
	h.want(1, 2)
	h.now = 2 * mono.Time(time.Second)
	h.push(0, 5) // path 1 silent for 2 s: it carries nothing
	h.want(1, 2, 4, 5)
}

func TestEqualizeFromArrivalTiming(t *testing.T) {
	// No RTTs: the fast path's hold comes from how late path 1 fills gaps.
	// At ms i path 0 carries 2i+1; path 1 carries 2i, arriving 20 ms later.
	h := newHarness(t, "equalize", Config{MaxHold: time.Second, Margin: time.Millisecond})
	for i := 0; i < 220; i++ {
		h.now = mono.Time(i) * ms
		if i < 200 {
			h.push(0, uint64(2*i+1))
		}
		if i >= 20 {
			h.push(1, uint64(2*(i-20)))
		}
		h.advance(h.now)
	}
	h.advance(h.now + 100*ms)
	if len(h.out) != 400 {
		t.Fatalf("delivered %d of 400", len(h.out))
	}
	// Nothing is missing in front of 400, yet equalize holds it about 20 ms.
	h.out = h.out[:0]
	start := h.now
	h.push(0, 400)
	h.advance(start + 15*ms)
	if len(h.out) != 0 {
		t.Fatalf("in-order fast-path packet released within 15 ms: %v", h.out)
	}
	h.advance(start + 25*ms)
	h.want(400)
}

// Urgent packets (traffic classes) skip both the gap wait and the
// equalisation, and their MP_SEQ is not a gap for the others.
func TestUrgentDeliveredAtOnce(t *testing.T) {
	for _, name := range []string{"fixed", "adaptive", "equalize"} {
		h := newHarness(t, name, Config{MaxHold: 100 * time.Millisecond, Margin: time.Millisecond})
		h.r.SetPaths([]PathInfo{
			{ID: 0, Active: true, MinRTT: 10 * time.Millisecond},
			{ID: 1, Active: true, MinRTT: 40 * time.Millisecond},
		})
		h.push(1, 1)
		h.advance(50 * ms)
		h.out = nil
		// 2 is missing; 3 is urgent and arrives on the fast path.
		h.ps[0]++
		if !h.r.Push(h.now, Item{Seq: 3, Path: 0, PathSeq: h.ps[0], Arrival: h.now, Urgent: true}) {
			t.Fatalf("%s: urgent refused", name)
		}
		h.drain()
		h.want(3)
		// Its second copy is a duplicate.
		h.ps[1]++
		if h.r.Push(h.now, Item{Seq: 3, Path: 1, PathSeq: h.ps[1], Arrival: h.now, Urgent: true}) {
			t.Fatalf("%s: second copy of an urgent packet accepted", name)
		}
		// 2 arrives on the slow path: delivered, and 4 need not wait for 3.
		h.push(1, 2)
		h.push(1, 4)
		h.advance(60 * ms)
		h.want(3, 2, 4)
		if s := h.r.Stats(); s.Urgent != 1 || s.Duplicates != 1 || s.GapsSkipped != 0 || s.OutOfOrder != 0 {
			t.Errorf("%s: stats %+v", name, s)
		}
	}
}

// The window starts small and grows on demand: a packet far ahead (but
// within the configured buffer) waits for the gaps instead of flushing.
func TestWindowGrows(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: time.Hour, BufferLimit: 2048})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 0)
	h.push(1, 1500)
	h.want(0)
	for s := uint64(1); s < 1500; s++ {
		h.push(0, s)
	}
	if len(h.out) != 1501 || h.out[1500] != 1500 {
		t.Fatalf("delivered %d packets, last %d", len(h.out), h.out[len(h.out)-1])
	}
	for i, s := range h.out {
		if s != uint64(i) {
			t.Fatalf("delivered %d at %d", s, i)
		}
	}
	if s := h.r.Stats(); s.GapsSkipped != 0 || s.Overflow != 0 || s.Duplicates != 0 {
		t.Errorf("stats %+v", s)
	}
	// A late copy far behind is still known as a duplicate.
	if h.push(1, 3) {
		t.Error("late duplicate accepted")
	}
}

// The daemon hands the engine a whole receive batch (up to 128 datagrams)
// before it delivers. After a stall of the receiving host, the timer
// skips a gap first, and the batch read next may hold well over 64 of the
// packets that fill it (at a failover, the re-injected copies of what the
// silent path held): none may be dropped for want of a pop.
func TestLateBatchIsKept(t *testing.T) {
	h := newHarness(t, "fixed", Config{MaxHold: 10 * time.Millisecond})
	h.r.SetPaths([]PathInfo{{ID: 0, Active: true}, {ID: 1, Active: true}})
	h.push(0, 0)
	for s := uint64(121); s <= 180; s++ {
		h.push(1, s) // 1..120 missing: held
	}
	h.advance(20 * ms) // the hold expires: 121..180 delivered
	if len(h.out) != 61 {
		t.Fatalf("delivered %d packets after the hold, want 61", len(h.out))
	}
	for s := uint64(1); s <= 120; s++ {
		h.ps[0]++
		if !h.r.Push(h.now, Item{Seq: s, Path: 0, PathSeq: h.ps[0], Arrival: h.now}) {
			t.Fatalf("late packet %d dropped (stats %+v)", s, h.r.Stats())
		}
	}
	h.drain()
	if len(h.out) != 181 {
		t.Errorf("delivered %d packets, want 181", len(h.out))
	}
	if s := h.r.Stats(); s.LateDropped != 0 || s.GapsLateArrive != 120 {
		t.Errorf("stats %+v", s)
	}
}
