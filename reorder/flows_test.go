// SPDX-License-Identifier: MIT

package reorder

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// udp is an inner UDP packet of flow port (destination port).
func udp(port uint16) []byte {
	p := make([]byte, 28)
	p[0], p[9] = 0x45, 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:], 4000)
	binary.BigEndian.PutUint16(p[22:], port)
	return p
}

// pushFlow delivers seq of flow port on path, path-ordered or not.
func (h *harness) pushFlow(path int, seq uint64, port uint16, ordered bool) {
	h.ps[path]++
	h.r.Push(h.now, Item{Seq: seq, Path: path, PathSeq: h.ps[path], Arrival: h.now, Buf: udp(port), PathOrdered: ordered})
	h.drain()
}

// repairHarness is the repair tests' harness: the adaptive reorderer with
// cfg over the two paths of twoPathInfo.
func repairHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := newHarness(t, "adaptive", cfg)
	h.r.SetPaths(twoPathInfo())
	return h
}

func twoPathInfo() []PathInfo {
	return []PathInfo{
		{ID: 0, Active: true, SRTT: 16 * time.Millisecond, MinRTT: 16 * time.Millisecond},
		{ID: 1, Active: true, SRTT: 70 * time.Millisecond, MinRTT: 70 * time.Millisecond},
	}
}

// A flow kept on the fast path is delivered at once, while another flow's
// packet is still on its way over the slow path.
func TestPathOrderedSkipsOtherPathsGaps(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	h.pushFlow(1, 1, 80, false)
	h.pushFlow(0, 3, 53, true) // 2 is in flight on the slow path
	h.want(1, 3)
	h.pushFlow(0, 4, 80, false) // the spread flow waits for 2
	h.want(1, 3)
	h.pushFlow(1, 2, 80, false)
	h.want(1, 3, 2, 4)
	if s := h.r.Stats(); s.PathOrdered != 1 {
		t.Errorf("path-ordered deliveries %d, want 1", s.PathOrdered)
	}
}

// A path-ordered packet waits when its flow has packets held here: its
// flow just moved from spreading to one path.
func TestPathOrderedWaitsBehindItsFlow(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	h.pushFlow(0, 1, 80, false)
	h.pushFlow(0, 3, 80, false) // held: 2 is missing
	h.pushFlow(0, 4, 80, true)  // same flow: must not overtake 3
	h.want(1)
	h.pushFlow(1, 2, 80, false)
	h.want(1, 2, 3, 4)
}

// A loss on a path (a hole in its own sequence) is asked for at once, and
// the path's path-ordered packets wait for the repair instead of passing
// the gap.
func TestHoleNACKAndRepair(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	nk := h.r.(NACKer)
	h.pushFlow(0, 1, 53, true)
	h.ps[0]++                  // the path lost its next packet, MP_SEQ 2
	h.pushFlow(0, 3, 53, true) // path-ordered, but behind a loss of its own path
	h.want(1)
	n, ok := nk.PollNACK(h.now)
	if !ok || n.Path != 0 || n.Before != 1 || n.After != 3 {
		t.Fatalf("NACK %+v %v, want path 0 between 1 and 3", n, ok)
	}
	if _, ok := nk.PollNACK(h.now); ok {
		t.Fatal("second NACK at once")
	}
	// No repair yet: asked again a repair round trip later.
	h.now += 30 * ms
	h.r.OnTimer(h.now)
	if n2, ok := nk.PollNACK(h.now); !ok || n2 != n {
		t.Fatalf("repeat NACK %+v %v", n2, ok)
	}
	h.pushFlow(0, 2, 53, false) // the repair
	h.want(1, 2, 3)
	if s := h.r.Stats(); s.Holes != 1 || s.Repaired != 1 || s.NACKs != 2 || s.GapsSkipped != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A hole whose repair never comes is given up after the last NACK and a
// round trip, not held for the whole hold limit.
func TestHoleGivenUp(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	nk := h.r.(NACKer)
	h.pushFlow(0, 1, 53, true)
	h.ps[0]++
	h.pushFlow(0, 3, 53, true)
	nacks := 0
	for h.now < mono.Time(time.Second) && len(h.out) < 2 {
		// What the engine does at every timer: the reorderer's, then
		// the NACKs due.
		h.now += ms
		if h.r.Deadline() <= h.now {
			h.r.OnTimer(h.now)
		}
		for {
			if _, ok := nk.PollNACK(h.now); !ok {
				break
			}
			nacks++
		}
		h.drain()
	}
	h.want(1, 3)
	if nacks != maxNACKs {
		t.Errorf("%d NACKs, want %d", nacks, maxNACKs)
	}
	if h.now > mono.Time(200*time.Millisecond) {
		t.Errorf("given up at %v", time.Duration(h.now))
	}
	if s := h.r.Stats(); s.RepairGivenUp != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A path that carried nothing for a while holds a gap only for as long
// as its delay difference to the fastest path, not indefinitely.
func TestSilentPathBlocksOnlyForItsDelay(t *testing.T) {
	h := repairHarness(t, Config{Repair: true, MaxHold: 10 * time.Second})
	h.pushFlow(0, 1, 80, false)
	h.pushFlow(0, 3, 80, false) // 2 missing: maybe on the slow path
	h.want(1)
	h.advance(h.now + 20*ms) // less than the slow path's 27 ms extra
	h.want(1)
	h.advance(h.now + 200*ms)
	h.want(1, 3)
}

// A repair arrives with an old MP_SEQ but in the path's sequence: it must
// not make the path look as if it reordered by itself (which would delay
// its NACKs).
func TestRepairIsNotInPathReordering(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	nk := h.r.(NACKer)
	h.pushFlow(0, 1, 53, true)
	h.ps[0]++
	h.pushFlow(0, 3, 53, true)
	nk.PollNACK(h.now)
	h.pushFlow(0, 2, 53, false) // repair on the same path
	h.pushFlow(0, 4, 53, true)
	h.ps[0]++
	h.pushFlow(0, 6, 53, true)
	if _, ok := nk.PollNACK(h.now); !ok {
		t.Fatal("the second hole is not asked for at once")
	}
}

// A gap that every path is past without any path's sequence showing it
// lost (here: the slow path's last packet before it went quiet) is asked
// for by MP_SEQ (NACK path -1) and waits for the repair.
func TestMissingGapAskedForByMPSeq(t *testing.T) {
	h := repairHarness(t, Config{Repair: true})
	nk := h.r.(NACKer)
	h.pushFlow(0, 1, 80, false)
	h.pushFlow(0, 3, 80, false) // 2 went over the slow path and was lost there
	// Past the slow path's delay difference (27 ms + jitter allowance),
	// the buffer's own deadline comes up.
	d := h.r.Deadline()
	if d > 50*ms {
		t.Fatalf("deadline %v, want within the slow path's delay", time.Duration(d))
	}
	h.now = d
	h.r.OnTimer(h.now)
	h.drain()
	n, ok := nk.PollNACK(h.now)
	if !ok || n.Path != -1 || n.Before != 1 || n.After != 3 {
		t.Fatalf("NACK %+v %v, want MP_SEQ 2 by number", n, ok)
	}
	h.want(1) // 3 waits for the repair of 2
	h.pushFlow(0, 2, 80, false)
	h.want(1, 2, 3)
}

// A packet lost last on a slow path whose queue comes and goes (a large
// RTT variation) is asked for once it is later than that path's packets
// have been seen to be, not after four RTT variations (27 + 4 × 27 ms
// and the margins here): its gap holds the fast path's packets until
// then.
func TestTailLossNACKedByMeasuredLateness(t *testing.T) {
	nackAfter := func(h *harness, tail uint64) time.Duration {
		t.Helper()
		nk := h.r.(NACKer)
		h.pushFlow(0, tail, 80, false)
		h.pushFlow(0, tail+2, 80, false) // tail+1 went over the slow path and was lost
		open := h.now
		for h.now < open.Add(time.Second) {
			h.now += ms
			h.r.OnTimer(h.now)
			h.drain()
			if n, ok := nk.PollNACK(h.now); ok {
				if n.Path != -1 || n.After != tail+2 {
					t.Fatalf("NACK %+v, want MP_SEQ %d by number", n, tail+1)
				}
				h.pushFlow(0, tail+1, 80, false) // the repair
				return time.Duration(h.now - open)
			}
		}
		t.Fatalf("MP_SEQ %d never asked for", tail+1)
		return 0
	}
	paths := twoPathInfo()
	paths[1].RTTVar = 27 * time.Millisecond // a 2 Mbit/s path's queue

	h := repairHarness(t, Config{Repair: true, MaxHold: 10 * time.Second})
	h.r.SetPaths(paths)
	seq := uint64(1)
	for range 5 { // the slow path's packets fill gaps 60 ms after they opened
		h.pushFlow(0, seq, 80, false)
		h.pushFlow(0, seq+2, 80, false)
		h.now += 60 * ms
		h.pushFlow(1, seq+1, 80, false)
		seq += 3
	}
	d := nackAfter(h, seq)
	// 60 ms measured + twice the margin (half the RTT variation).
	if d < 60*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("asked %v after the gap opened; want after the measured 60 ms lateness and its margin, by 100 ms", d)
	}
}
