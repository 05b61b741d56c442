// SPDX-License-Identifier: MIT

package scheduler

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

const ms = time.Millisecond

// twoPaths: a fast path (8 ms one way) and a slow one (35 ms), both able
// to send unless said otherwise.
func twoPaths(fastReady, slowReady bool) []Path {
	p := []Path{path(0, 3, 16*ms, fastReady), path(1, 3, 70*ms, slowReady)}
	p[0].OWD, p[1].OWD = 8*ms, 35*ms
	return p
}

func flowPick(t *testing.T, s Scheduler, now mono.Time, paths []Path, f FlowPacket) FlowDecision {
	t.Helper()
	fp, ok := s.(FlowPicker)
	if !ok {
		t.Fatalf("%s is not a FlowPicker", s.Name())
	}
	return fp.PickFlow(now, paths, f)
}

func TestFlowPinsToTheFastestPath(t *testing.T) {
	s := mk(t, "flow")
	d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 3, Size: 100})
	if !d.OK || d.Path != 0 {
		t.Fatalf("new flow: %+v, want the fast path", d)
	}
	// Extra queueing allowed: the base delay difference plus a margin.
	if d.Extra < 27*ms || d.Extra > 40*ms {
		t.Errorf("extra %v, want about 27 ms + margin", d.Extra)
	}
	// A lossy fast path costs repairs: with 50 % loss the other is cheaper.
	p := twoPaths(true, true)
	p[0].Loss = 0.5
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 4}); !d.OK || d.Path != 1 {
		t.Fatalf("lossy fast path: %+v, want the slow one", d)
	}
}

// The flow's RTT, which its send queue's AQM waits for, is that of the
// slowest path it may spread onto; a satellite path (over 150 ms slower
// one way) does not count, and its delay difference is not all allowed as
// queue; a flow pinned to that path has its RTT.
func TestFlowRTT(t *testing.T) {
	s := mk(t, "flow")
	d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 3, Size: 100})
	if d.RTT != 70*ms {
		t.Fatalf("8 + 35 ms: RTT %v, want the slow path's 70 ms", d.RTT)
	}
	p := twoPaths(true, true)
	p[1].OWD, p[1].MinRTT, p[1].SRTT = 300*ms, 600*ms, 600*ms
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 4}); d.Path != 0 || d.RTT != 16*ms || d.Extra != maxRTTSpread {
		t.Fatalf("8 + 300 ms: %+v, want the fast path with its own 16 ms RTT and a queue allowance of %v", d, maxRTTSpread)
	}
	p[0].Usable = false
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 5}); d.Path != 1 || d.RTT != 600*ms {
		t.Fatalf("satellite path alone: %+v, want its 600 ms RTT", d)
	}
}

// A flow the AQM keeps signalling (a constant-rate stream) gets the
// satellite path's whole delay difference as queue allowance, so that it
// overflows there instead of being dropped; it keeps it while it lasts,
// and a new flowlet starts with the cap again.
func TestFlowUnresponsiveFlowMayQueueOntoASatellitePath(t *testing.T) {
	s := mk(t, "flow")
	p := twoPaths(true, true)
	p[1].OWD, p[1].MinRTT, p[1].SRTT = 300*ms, 600*ms, 600*ms
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 4, Signals: unresponsiveSignals - 1}); d.Extra != maxRTTSpread {
		t.Fatalf("a few signals: allowance %v, want the cap %v", d.Extra, maxRTTSpread)
	}
	d := flowPick(t, s, mono.Time(ms), p, FlowPacket{Flow: 4, Signals: unresponsiveSignals})
	if d.Path != 0 || d.Extra <= 292*ms {
		t.Fatalf("unresponsive: %+v, want the fast path with an allowance over the 292 ms difference", d)
	}
	if d := flowPick(t, s, mono.Time(2*ms), p, FlowPacket{Flow: 4}); d.Extra <= 292*ms {
		t.Fatalf("the same flow after its spell: allowance %v, want it kept", d.Extra)
	}
	if d := flowPick(t, s, mono.Time(2*time.Second), p, FlowPacket{Flow: 4}); d.Extra != maxRTTSpread {
		t.Fatalf("a new flowlet: allowance %v, want the cap %v again", d.Extra, maxRTTSpread)
	}
	if d := flowPick(t, s, mono.Time(2*time.Second), p, FlowPacket{Flow: 5}); d.Extra != maxRTTSpread {
		t.Fatalf("another flow: allowance %v, want the cap %v", d.Extra, maxRTTSpread)
	}
}

// Two paths of the same delay, measured a fraction of a millisecond
// apart: a new flow takes the bigger one, whichever measured lower; before
// their capacities were measured, the first one.
func TestFlowPrefersTheBiggerOfEquallyFastPaths(t *testing.T) {
	s := mk(t, "flow")
	p := twoPaths(true, true)
	p[0].OWD, p[1].OWD = 5*ms+300*time.Microsecond, 5*ms
	p[0].PacingRate, p[1].PacingRate = 20e6/8, 10e6/8
	p[0].RateMeasured, p[1].RateMeasured = true, true
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 7}); !d.OK || d.Path != 0 {
		t.Fatalf("equal delays: %+v, want the 20 Mbit/s path", d)
	}
	// The bandwidth estimate decides, not the pacing rate: a small idle
	// path in Startup paces at 2.77 × its estimate.
	p[0].Rate, p[1].Rate, p[1].PacingRate = 20e6/8, 10e6/8, 27e6/8
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 9}); !d.OK || d.Path != 0 {
		t.Fatalf("equal delays, small path pacing high: %+v, want the 20 Mbit/s path", d)
	}
	// The bigger one wins wherever it is configured.
	p[0].Rate, p[1].Rate = 10e6/8, 20e6/8
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 10}); !d.OK || d.Path != 1 {
		t.Fatalf("equal delays, second path bigger: %+v, want the 20 Mbit/s path", d)
	}
	// Estimates of paths that never filled (a fresh tunnel: pings, acks)
	// do not decide: the first path does.
	p[0].RateMeasured = false
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 11}); !d.OK || d.Path != 0 {
		t.Fatalf("equal delays, capacities unmeasured: %+v, want the first path", d)
	}
	// A real difference in delay still wins over rate.
	p[0].OWD = 7 * ms
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 8}); !d.OK || d.Path != 1 {
		t.Fatalf("2 ms apart: %+v, want the lower-delay path", d)
	}
}

// A flow whose path is busy waits for it rather than crossing the slow
// path, until its wait reaches what the slow path adds (datagram ECF)
// less half the fast path's round trip (spreadRTT): 27 ms + 2 ms margin
// - 8 ms = 21 ms.
func TestFlowSpreadsOnlyWhenWaitingCostsMore(t *testing.T) {
	s := mk(t, "flow")
	flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1})
	d := flowPick(t, s, 0, twoPaths(false, true), FlowPacket{Flow: 1, Sojourn: 5 * ms})
	if d.OK {
		t.Fatalf("short wait: sent on path %d, want hold", d.Path)
	}
	if d.RetryIn != 16*ms {
		t.Errorf("retry in %v, want 27 ms + 2 ms margin - 8 ms - 5 ms", d.RetryIn)
	}
	if d := flowPick(t, s, 0, twoPaths(false, true), FlowPacket{Flow: 1, Sojourn: 20 * ms}); d.OK {
		t.Fatalf("a wait just short of 21 ms: sent on path %d, want hold", d.Path)
	}
	d = flowPick(t, s, 0, twoPaths(false, true), FlowPacket{Flow: 1, Sojourn: 21 * ms})
	if !d.OK || d.Path != 1 {
		t.Fatalf("a wait of 21 ms: %+v, want the slow path", d)
	}
	// Hysteresis: while spreading, a somewhat shorter wait still spreads.
	if d := flowPick(t, s, 0, twoPaths(false, true), FlowPacket{Flow: 1, Sojourn: 17 * ms}); !d.OK || d.Path != 1 {
		t.Fatalf("spreading: %+v, want the slow path", d)
	}
	// The pinned path back: it takes the flow again.
	if d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1, Sojourn: 40 * ms}); !d.OK || d.Path != 0 {
		t.Fatalf("pinned path ready: %+v", d)
	}
	// A slower path with the same delay (equal paths) takes it at once.
	p := twoPaths(false, true)
	p[1].OWD, p[1].MinRTT, p[1].SRTT = 8*ms, 16*ms, 16*ms
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 2, Sojourn: 2 * ms}); !d.OK || d.Path != 1 {
		t.Fatalf("equal paths: %+v, want the ready one", d)
	}
}

func TestFlowNeverSpreadsOntoAVeryLossyPath(t *testing.T) {
	s := mk(t, "flow")
	p := twoPaths(false, true)
	p[1].Loss = 0.3
	flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1})
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 1, Sojourn: time.Second}); d.OK {
		t.Fatalf("spread onto a path losing 30 %%: %+v", d)
	}
}

// The pin moves only after the flow was idle longer than the paths'
// delay difference (a new flowlet), never under a busy flow.
func TestFlowletSwitching(t *testing.T) {
	s := mk(t, "flow")
	flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 2})
	// The slow path becomes the cheaper one (the fast one loses a lot).
	p := twoPaths(true, true)
	p[0].Loss = 0.9
	if d := flowPick(t, s, mono.Time(5*ms), p, FlowPacket{Flow: 2}); d.Path != 0 {
		t.Fatalf("a busy flow moved to path %d", d.Path)
	}
	if d := flowPick(t, s, mono.Time(500*ms), p, FlowPacket{Flow: 2}); d.Path != 1 {
		t.Fatalf("after an idle gap the flow stayed on path %d", d.Path)
	}
}

func TestFlowHonoursPriorities(t *testing.T) {
	s := mk(t, "flow")
	p := twoPaths(true, true)
	p[0].Prio = 1 // standby: only when nothing better is usable
	if d := flowPick(t, s, 0, p, FlowPacket{Flow: 9}); !d.OK || d.Path != 1 {
		t.Fatalf("standby fast path: %+v, want the primary slow path", d)
	}
	p[1].Usable = false
	if d := flowPick(t, s, mono.Time(time.Second), p, FlowPacket{Flow: 9}); !d.OK || d.Path != 0 {
		t.Fatalf("primary down: %+v, want the standby path", d)
	}
}

// Packets outside flow scheduling (traffic classes on "flow") take the
// cheapest path with room.
func TestFlowPacketPick(t *testing.T) {
	s := mk(t, "flow")
	one(t, s, twoPaths(true, true), 0)
	one(t, s, twoPaths(false, true), 1)
	one(t, s, twoPaths(false, false), -1)
}

func TestFlowPickDoesNotAllocate(t *testing.T) {
	s := mk(t, "flow").(FlowPicker)
	p := twoPaths(false, true)
	s.PickFlow(0, p, FlowPacket{Flow: 7})
	n := testing.AllocsPerRun(100, func() { s.PickFlow(0, p, FlowPacket{Flow: 7, Sojourn: 30 * ms}) })
	if n != 0 {
		t.Fatalf("%v allocations per PickFlow", n)
	}
}

// smallFast: the fast path is a 4 Mbit/s DSL line, the slow one a 50
// Mbit/s LTE link.
func smallFast(fastReady, slowReady bool) []Path {
	p := twoPaths(fastReady, slowReady)
	p[0].Rate, p[1].Rate = 4e6/8, 50e6/8
	return p
}

// A flow that sends most of its packets on a much bigger slower path (its
// pinned path is the small one) is pinned there; a short pause keeps it
// there, a long one starts it afresh on the fastest path. A short flow
// never moves.
func TestFlowMovesToThePathCarryingMostOfIt(t *testing.T) {
	s := mk(t, "flow")
	now := mono.Time(0)
	twoPaths := smallFast
	step := func(fastReady bool) FlowDecision {
		now += mono.Time(ms)
		return flowPick(t, s, now, twoPaths(fastReady, true), FlowPacket{Flow: 1, Sojourn: 40 * ms})
	}
	step(true)
	// One packet in four fits on the fast path; the rest overflow.
	for i := 0; i < 20; i++ {
		step(i%4 == 0)
	}
	if d := step(true); d.Path != 0 {
		t.Fatalf("after 20 packets the flow moved to path %d", d.Path)
	}
	for i := 0; i < 200; i++ {
		step(i%4 == 0)
	}
	// Pinned to the slow path now: it takes packets when it can, whatever
	// the flow's wait, and the fast path is its overflow.
	if d := flowPick(t, s, now, twoPaths(true, true), FlowPacket{Flow: 1}); !d.OK || d.Path != 1 {
		t.Fatalf("a flow mostly on the slow path: %+v, want pinned to it", d)
	}
	if d := flowPick(t, s, now, twoPaths(true, false), FlowPacket{Flow: 1}); !d.OK || d.Path != 0 {
		t.Fatalf("slow path busy: %+v, want the fast path as overflow", d)
	}
	now += mono.Time(300 * ms) // longer than a flowlet gap, shorter than bulkIdle
	if d := flowPick(t, s, now, twoPaths(true, true), FlowPacket{Flow: 1}); d.Path != 1 {
		t.Fatalf("after a short pause: path %d, want the bulk flow's path", d.Path)
	}
	now += mono.Time(2 * time.Second)
	if d := flowPick(t, s, now, twoPaths(true, true), FlowPacket{Flow: 1}); d.Path != 0 {
		t.Fatalf("after a long pause: path %d, want the fastest path", d.Path)
	}
}

// spreadMostly runs flow 1 for 400 ms with its pinned (fast) path free
// one time in four, so most of it overflows onto the slower path; with
// other, flow 2 takes each of the fast path's free turns too. The rates
// are the paths' in Mbit/s.
func spreadMostly(t *testing.T, s Scheduler, fastRate, slowRate float64, other bool) (mono.Time, func(bool) []Path) {
	paths := func(fastReady bool) []Path {
		p := twoPaths(fastReady, true)
		p[0].Rate, p[1].Rate = fastRate*1e6/8, slowRate*1e6/8
		return p
	}
	now := mono.Time(0)
	for i := 0; i < 400; i++ {
		now += mono.Time(ms)
		flowPick(t, s, now, paths(i%4 == 0), FlowPacket{Flow: 1, Sojourn: 40 * ms})
		if other && i%4 == 0 {
			flowPick(t, s, now, paths(true), FlowPacket{Flow: 2})
		}
	}
	return now, paths
}

// A path less than 1.5 times the pinned path's rate does not take the pin,
// however much of the flow it carries: the move would stall inner BBR for
// up to 10 s for little capacity (Wi-Fi 30 Mbit/s beside LTE 40).
func TestFlowPinStaysBesideAComparablePath(t *testing.T) {
	s := mk(t, "flow")
	now, paths := spreadMostly(t, s, 30, 40, false)
	if d := flowPick(t, s, now, paths(true), FlowPacket{Flow: 1}); !d.OK || d.Path != 0 {
		t.Fatalf("a flow mostly on a comparable slower path: %+v, want still pinned to the fast path", d)
	}
}

// The same beside a second flow that uses the pinned path (web objects
// beside a bulk download): the pinned path is shared, and the spread flow
// moves to the slower (here smaller) path, leaving the low-delay one to
// the other flow.
func TestFlowPinLeavesASharedPath(t *testing.T) {
	s := mk(t, "flow")
	now, paths := spreadMostly(t, s, 20, 10, true)
	if d := flowPick(t, s, now, paths(true), FlowPacket{Flow: 1, Sojourn: 40 * ms}); !d.OK || d.Path != 1 {
		t.Fatalf("a spread flow on a shared path: %+v, want moved to the slower path", d)
	}
	if d := flowPick(t, s, now, paths(true), FlowPacket{Flow: 2}); !d.OK || d.Path != 0 {
		t.Fatalf("the other flow: %+v, want the fast path", d)
	}
}

// A flow spread over paths yields in the first pass, so that flows kept
// on one path take the free slots first; it goes in the second pass. A
// flow on one path never yields.
func TestFlowSpreadFlowYieldsInFirstPass(t *testing.T) {
	s := mk(t, "flow")
	flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1})
	if d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1, FirstPass: true}); !d.OK || d.Yielded {
		t.Fatalf("a flow on one path, first pass: %+v, want sent", d)
	}
	if d := flowPick(t, s, 0, twoPaths(false, true), FlowPacket{Flow: 1, Sojourn: 30 * ms}); !d.OK || d.Path != 1 {
		t.Fatalf("long wait: %+v, want spread to the slow path", d)
	}
	d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1, Sojourn: 30 * ms, FirstPass: true})
	if d.OK || !d.Yielded {
		t.Fatalf("spread flow, first pass: %+v, want it to yield", d)
	}
	if d := flowPick(t, s, 0, twoPaths(true, true), FlowPacket{Flow: 1, Sojourn: 30 * ms}); !d.OK || d.Path != 0 {
		t.Fatalf("spread flow, second pass: %+v, want the pinned path", d)
	}
}

// fill sends flow 1 on its pinned path for d, one packet of size bytes
// every gap, the pinned path always free; it returns the last decision.
func fill(t *testing.T, s Scheduler, now *mono.Time, paths []Path, d, gap time.Duration, size int) FlowDecision {
	t.Helper()
	var last FlowDecision
	for end := now.Add(d); *now < end; *now = now.Add(gap) {
		last = flowPick(t, s, *now, paths, FlowPacket{Flow: 1, Size: size})
	}
	return last
}

// measured marks both paths' rate estimates as measured capacities.
func measured(p []Path) []Path {
	p[0].RateMeasured, p[1].RateMeasured = true, true
	return p
}

// A flow that fills its small low-delay path moves its pin to a path
// measured much bigger, after fillWindows windows (not at once, and not
// when it sends less than fillShare of the path's rate), though its wait
// never built up to the delay difference (inner BBR).
func TestFlowFillingItsPathMovesToABiggerOne(t *testing.T) {
	s := mk(t, "flow")
	now := mono.Time(0)
	paths := measured(smallFast(true, true)) // 4 Mbit/s = 500 KB/s beside 50
	// 1,000 B every 4 ms: 250 KB/s, half the small path's rate.
	if d := fill(t, s, &now, paths, 2*time.Second, 4*ms, 1000); d.Path != 0 {
		t.Fatalf("a flow at half the small path's rate moved to path %d", d.Path)
	}
	// Every 2 ms: the whole rate. Two windows are not enough ...
	if d := fill(t, s, &now, paths, 2*fillWindow+fillWindow/2, 2*ms, 1000); d.Path != 0 {
		t.Fatalf("after two full windows the flow moved to path %d", d.Path)
	}
	// ... the third moves it, and it stays.
	if d := fill(t, s, &now, paths, time.Second, 2*ms, 1000); !d.OK || d.Path != 1 {
		t.Fatalf("a flow filling the small path: %+v, want moved to the big one", d)
	}
	// The old pin is its overflow.
	if d := flowPick(t, s, now, measured(smallFast(true, false)), FlowPacket{Flow: 1, Size: 1000}); !d.OK || d.Path != 0 {
		t.Fatalf("big path busy: %+v, want the small one as overflow", d)
	}
}

// A path whose capacity is unknown (it carried only overflow, or nothing)
// is tried once; measured less than moveRatio times the path the flow
// came from, the flow goes back, and the path is not tried again. A comparable measured path, a lossy one and one
// more than moveDelay slower never take the pin.
func TestFlowFillingItsPathTriesAnUnmeasuredOne(t *testing.T) {
	s := mk(t, "flow")
	now := mono.Time(0)
	paths := smallFast(true, true)
	paths[0].RateMeasured = true // the small path is full; the big one's capacity unknown
	if d := fill(t, s, &now, paths, time.Second, 2*ms, 1000); d.Path != 1 {
		t.Fatalf("a path of unknown capacity: flow on path %d, want it tried", d.Path)
	}
	// Measured at 5 Mbit/s, not 1.5 times the first path's 4: the flow
	// goes back at once.
	paths = measured(smallFast(true, true))
	paths[1].Rate = 5e6 / 8
	if d := flowPick(t, s, now, paths, FlowPacket{Flow: 1, Size: 1000}); d.Path != 0 {
		t.Fatalf("the tried path measured comparable: flow on path %d, want back on the first", d.Path)
	}
	paths[1].RateMeasured = false
	if d := fill(t, s, &now, paths, time.Second, 2*ms, 1000); d.Path != 0 {
		t.Fatalf("tried once already: flow on path %d, want it kept", d.Path)
	}

	// While the tried path is still unmeasured, a flow overflowing to the
	// path it came from stays pinned to the tried one, however little the
	// tried path's estimate shows (a Startup from ten packets: the lab's
	// ADSL 16/1 + LTE inner BBR download went back to the ADSL line and
	// got 13 Mbit/s, half of LTE alone).
	{
		s := mk(t, "flow")
		now := mono.Time(0)
		p := smallFast(true, true)
		p[0].RateMeasured = true
		fill(t, s, &now, p, time.Second, 2*ms, 1000)
		for i := 0; i < 400; i++ {
			now += mono.Time(ms)
			p := smallFast(true, i%4 == 0)
			p[0].RateMeasured, p[1].Rate = true, 0.5e6/8
			flowPick(t, s, now, p, FlowPacket{Flow: 1, Size: 1000, Sojourn: 10 * ms})
		}
		p = smallFast(true, true)
		p[0].RateMeasured, p[1].Rate = true, 0.5e6/8
		if d := flowPick(t, s, now, p, FlowPacket{Flow: 1, Size: 1000}); d.Path != 1 {
			t.Fatalf("a pending trial, most packets overflowing back: flow on path %d, want the tried path", d.Path)
		}
	}

	// A tried path measured big keeps the flow.
	{
		s := mk(t, "flow")
		now := mono.Time(0)
		p := smallFast(true, true)
		p[0].RateMeasured = true
		fill(t, s, &now, p, time.Second, 2*ms, 1000)
		p = measured(smallFast(true, true))
		if d := fill(t, s, &now, p, time.Second, 2*ms, 1000); d.Path != 1 {
			t.Fatalf("the tried path measured big: flow on path %d, want it kept there", d.Path)
		}
	}

	for _, c := range []struct {
		name string
		mod  func(p []Path)
	}{
		{"comparable", func(p []Path) { p[1].Rate = 1.4 * p[0].Rate }},
		{"lossy", func(p []Path) { p[1].Loss = 0.3 }},
		{"too slow", func(p []Path) { p[1].OWD = p[0].OWD + moveDelay + 5*ms }},
	} {
		s := mk(t, "flow")
		now := mono.Time(0)
		p := measured(smallFast(true, true))
		c.mod(p)
		if d := fill(t, s, &now, p, 2*time.Second, 2*ms, 1000); d.Path != 0 {
			t.Errorf("%s path: the flow moved to path %d", c.name, d.Path)
		}
	}
}

// A flow that fills its pinned path and already sends an eighth of its
// packets as overflow onto a path of unknown capacity keeps its pin: the
// overflow measures that path, where a trial would move the whole flow's
// round trip onto it. With less overflow (a paced flow), or when the
// overflow already queues on that path, the path is tried.
func TestFlowOverflowingOntoAnUnmeasuredPathIsNotMovedThere(t *testing.T) {
	for _, c := range []struct {
		every     int // one packet in every finds the pinned path busy
		queue     bool
		wantTried bool
	}{{4, false, false}, {20, false, true}, {4, true, true}} {
		s := mk(t, "flow")
		now := mono.Time(0)
		tried := false
		for i := 0; i < 8000; i++ { // 2.4 s, 1,000 B every 0.3 ms
			now += mono.Time(300 * time.Microsecond)
			p := twoPaths(i%c.every != 0, true)
			p[0].Rate, p[0].RateMeasured = 20e6/8, true
			p[1].Rate = 5e6 / 8
			if c.queue {
				p[1].SRTT = p[1].MinRTT + 30*ms
			}
			sojourn := time.Duration(0)
			if i%c.every == 0 {
				sojourn = 5 * ms
			}
			if d := flowPick(t, s, now, p, FlowPacket{Flow: 1, Size: 1000, Sojourn: sojourn}); d.OK && d.Path == 1 && sojourn == 0 {
				tried = true // the pin is on path 1: a packet went there with path 0 ready
			}
		}
		if tried != c.wantTried {
			t.Errorf("one packet in %d overflowing (queue %v): tried = %v, want %v", c.every, c.queue, tried, c.wantTried)
		}
	}
}

// A flow that fills its pinned path, with no path big enough to take its
// pin, overflows onto a somewhat slower path as soon as the pin has no
// room, without first queueing for the delay difference (inner BBR keeps
// no such queue: 20 + 10 Mbit/s at 8 + 35 ms got 0.94 of the fast path
// alone). A short flow, and a path more than moveDelay slower, still wait.
func TestFlowFillingItsPathOverflowsWithoutQueueing(t *testing.T) {
	twoRates := ratedPaths(20e6, 10e6)
	s := mk(t, "flow")
	now := mono.Time(0)
	wait := FlowPacket{Flow: 1, Size: 1000, Sojourn: 4 * ms}
	flowPick(t, s, now, twoRates(true, true), FlowPacket{Flow: 1, Size: 1000})
	if d := flowPick(t, s, now, twoRates(false, true), wait); d.OK {
		t.Fatalf("a new flow waiting 4 ms: sent on path %d, want hold", d.Path)
	}
	// 1000 B every 0.4 ms: 20 Mbit/s, the fast path's rate.
	if d := fill(t, s, &now, twoRates(true, true), time.Second, 400*time.Microsecond, 1000); d.Path != 0 {
		t.Fatalf("filling a path with no bigger one beside it: flow on path %d, want it kept", d.Path)
	}
	if d := flowPick(t, s, now, twoRates(false, true), wait); !d.OK || d.Path != 1 {
		t.Fatalf("a flow filling its path, waiting 4 ms: %+v, want the slow path", d)
	}
	// Nor does a queue on the slower path (its smoothed RTT twice its
	// base RTT and a large variation, as after a burst, with no packets
	// since to update them): the bound is the paths' base delay
	// difference, the wait a fixed margin.
	queued := twoRates(false, true)
	queued[1].SRTT, queued[1].RTTVar = 2*queued[1].MinRTT, 30*ms
	if d := flowPick(t, s, now, queued, wait); !d.OK || d.Path != 1 {
		t.Fatalf("a flow filling its path, a queue on the slower one: %+v, want the slow path", d)
	}
	if d := flowPick(t, s, now, twoRates(false, true), FlowPacket{Flow: 2, Size: 1000, Sojourn: 4 * ms}); d.OK {
		t.Fatalf("another, new flow waiting 4 ms: sent on path %d, want hold", d.Path)
	}

	far := func(fastReady, slowReady bool) []Path {
		p := twoRates(fastReady, slowReady)
		p[1].OWD = p[0].OWD + moveDelay + 5*ms
		p[1].MinRTT, p[1].SRTT = 2*p[1].OWD, 2*p[1].OWD
		return p
	}
	s = mk(t, "flow")
	now = 0
	fill(t, s, &now, far(true, true), time.Second, 400*time.Microsecond, 1000)
	if d := flowPick(t, s, now, far(false, true), wait); d.OK {
		t.Fatalf("a path %v slower: sent on path %d, want hold", moveDelay+5*ms, d.Path)
	}
}

// A flow that filled its path keeps overflowing at once through a window
// or two below the fill share (inner BBR's ProbeRTT: four packets in
// flight for 200 ms), so it does not have to fill the path for
// fillWindows windows again, queueing for the delay difference before
// each overflow. When it stays below the fill share for spillMemory
// windows, it waits again.
func TestFlowFillingItsPathKeepsOverflowingThroughADip(t *testing.T) {
	twoRates := ratedPaths(20e6, 10e6)
	wait := FlowPacket{Flow: 1, Size: 1000, Sojourn: 4 * ms}
	for _, c := range []struct {
		dip       time.Duration
		wantSpill bool
	}{{250 * time.Millisecond, true}, {time.Second, false}} {
		s := mk(t, "flow")
		now := mono.Time(0)
		// 1000 B every 0.4 ms: 20 Mbit/s, the fast path's rate.
		fill(t, s, &now, twoRates(true, true), time.Second, 400*time.Microsecond, 1000)
		// The dip: 1000 B every 5 ms (1.6 Mbit/s).
		fill(t, s, &now, twoRates(true, true), c.dip, 5*time.Millisecond, 1000)
		d := flowPick(t, s, now, twoRates(false, true), wait)
		if spilled := d.OK && d.Path == 1; spilled != c.wantSpill {
			t.Errorf("after a dip of %v: %+v, want overflow onto the slow path %v", c.dip, d, c.wantSpill)
		}
	}
}

// The ACKs of a download fill their pinned uplink when its estimate is no
// more than what they gave it. Overflowing them onto the slower path, as the
// rule above does for data, would only delay them (and it moved the whole ACK
// flow to a second uplink in an end-to-end run): they wait as any flow does.
func TestAckFlowFillingItsPathDoesNotOverflowAtOnce(t *testing.T) {
	smallRates := ratedPaths(1e6, 0.5e6)
	s := mk(t, "flow")
	now := mono.Time(0)
	// 60 B every 0.4 ms: 1.2 Mbit/s, more than the pinned path's estimate.
	if d := fill(t, s, &now, smallRates(true, true), time.Second, 400*time.Microsecond, 60); d.Path != 0 {
		t.Fatalf("ACKs filling their path: flow on path %d, want it kept", d.Path)
	}
	if d := flowPick(t, s, now, smallRates(false, true), FlowPacket{Flow: 1, Size: 60, Sojourn: 4 * ms}); d.OK {
		t.Fatalf("ACKs filling their path, waiting 4 ms: sent on path %d, want hold", d.Path)
	}
	// The same flow of full-size packets overflows.
	s = mk(t, "flow")
	now = 0
	fill(t, s, &now, smallRates(true, true), time.Second, 8*time.Millisecond, 1000)
	if d := flowPick(t, s, now, smallRates(false, true), FlowPacket{Flow: 1, Size: 1000, Sojourn: 4 * ms}); !d.OK || d.Path != 1 {
		t.Fatalf("data filling its path, waiting 4 ms: %+v, want the slow path", d)
	}
}

// The ACKs of a download over an ADSL line fill its 1 Mbit/s uplink in
// wire bytes (their own 60 and the tunnel's header), not in their own.
// When the uplink queues (OutQueue) they are tried on the other path. When
// the queue in the RTT is the download's own on the downlink, they stay:
// moved, every inner RTT gets longer by the uplinks' delay difference
// (an end-to-end run fell to 0.36 x MPTCP when they moved).
func TestAckFlowLeavesAnUplinkThatQueuesNotADownlink(t *testing.T) {
	for _, uplinkFull := range []bool{true, false} {
		s := mk(t, "flow")
		now := mono.Time(0)
		tried := false
		for range 4000 { // 2 s, an ACK every 0.5 ms
			now += mono.Time(500 * time.Microsecond)
			p := twoPaths(true, true)
			p[0].Rate, p[0].RateMeasured = 1e6/8, true
			p[0].SRTT = p[0].MinRTT + 40*ms // a queue one way or the other
			if uplinkFull {
				p[0].OutQueue = 40 * ms
			}
			p[1].Rate = 2e6 / 8 // what the ACKs gave it so far, its controller still in Startup
			d := flowPick(t, s, now, p, FlowPacket{Flow: 1, Size: 60, Overhead: 44})
			if d.OK && d.Path == 1 {
				tried = true
			}
		}
		if tried != uplinkFull {
			t.Errorf("uplink full %v: ACKs tried on the other path %v, want %v", uplinkFull, tried, uplinkFull)
		}
	}
}

// ratedPaths returns twoPaths, measured, with the given rates in bit/s.
func ratedPaths(fast, slow float64) func(fastReady, slowReady bool) []Path {
	return func(fastReady, slowReady bool) []Path {
		p := measured(twoPaths(fastReady, slowReady))
		p[0].Rate, p[1].Rate = fast/8, slow/8
		return p
	}
}

// A flow pinned to the bigger, slower path for capacity sends on the
// faster path while that pin's capacity has fallen under it (an LTE
// cell's rate drops tenfold and its buffer fills: a standing queue of
// packets in flight that its RTT variation does not explain), and goes
// back to the pin when the queue is gone. Jitter of the same size (RTTVar
// with it) and an idle pin's smoothed RTT from its last burst do not
// divert it.
func TestFlowBypassesAPinWhoseCapacityFell(t *testing.T) {
	paths := ratedPaths(16e6, 40e6)
	for _, c := range []struct {
		name          string
		queue, rttvar time.Duration
		inFlight      int
		want          int
	}{
		{"capacity fell: 150 ms of queue", 150 * ms, 10 * ms, 40, 0},
		{"jitter: 20 ms above the minimum, RTTVar 15 ms", 20 * ms, 15 * ms, 40, 1},
		{"an idle pin's stale smoothed RTT", 150 * ms, 10 * ms, 0, 1},
	} {
		s := mk(t, "flow")
		now := mono.Time(0)
		// 1,000 B every 0.3 ms (27 Mbit/s) fills the 16 Mbit/s path: the
		// pin moves to the 40 Mbit/s one.
		if d := fill(t, s, &now, paths(true, true), 2*time.Second, 300*time.Microsecond, 1000); d.Path != 1 {
			t.Fatalf("%s: a flow filling the small path is on path %d, want the big one", c.name, d.Path)
		}
		late := paths(true, true)
		late[1].SRTT, late[1].RTTVar, late[1].InFlight = late[1].MinRTT+c.queue, c.rttvar, c.inFlight
		for range 10 {
			now = now.Add(300 * time.Microsecond)
			if d := flowPick(t, s, now, late, FlowPacket{Flow: 1, Size: 1000}); !d.OK || d.Path != c.want {
				t.Fatalf("%s: %+v, want path %d", c.name, d, c.want)
			}
		}
		if d := flowPick(t, s, now.Add(300*time.Microsecond), paths(true, true), FlowPacket{Flow: 1, Size: 1000}); d.Path != 1 {
			t.Errorf("%s: with the queue gone the flow is on path %d, want its pin 1", c.name, d.Path)
		}
	}
}
