// SPDX-License-Identifier: MIT

package ccid

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// TestTrackerSmallRings checks the pending/live bit sets against a plain
// model while the ring grows from its smallest size (which wraps inside
// one bit-set word), shrinks with compact, and grows again.
func TestTrackerSmallRings(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tr := newTracker(nil)
	pending := map[uint64]bool{}
	now := mono.Time(1)
	var seq uint64 = 1<<48 - 40 // wraps the wire numbering too
	check := func(when string) {
		t.Helper()
		for from := tr.head; from <= tr.next; from++ {
			want := tr.next
			for i := from; i < tr.next; i++ {
				if pending[i] {
					want = i
					break
				}
			}
			if got := tr.nextPending(from, tr.next); got != want {
				t.Fatalf("%s (ring %d, head %d, next %d): nextPending(%d) = %d, want %d",
					when, len(tr.ring), tr.head, tr.next, from, got, want)
			}
		}
	}
	for round := 0; round < 200; round++ {
		// A burst of sends, sometimes more than the ring holds.
		for n := rng.IntN(40); n > 0; n-- {
			now += mono.Time(time.Millisecond)
			_, i := tr.onSent(now, seq, 1000, true)
			pending[i] = true
			seq++
		}
		check("after sends")
		// Acknowledge a random subset, as an Ack Vector with holes would.
		for i := tr.head; i < tr.next; i++ {
			if pending[i] && rng.IntN(3) > 0 {
				tr.pkt(i).flags |= pktAcked
				tr.setPending(i, false)
				delete(pending, i)
			}
		}
		check("after acks")
		if round%7 == 0 {
			// Everything acked, then idle: the ring shrinks back.
			for i := tr.head; i < tr.next; i++ {
				tr.pkt(i).flags |= pktAcked
				tr.setPending(i, false)
				delete(pending, i)
			}
			tr.inFlight, tr.inFlightBytes = 0, 0
			tr.compact(now + mono.Time(time.Second))
			if len(tr.ring) != historyIdle || tr.window != trackerMin {
				t.Fatalf("idle tracker keeps %d records (window %d), want %d (%d)", len(tr.ring), tr.window, historyIdle, trackerMin)
			}
			check("after compact")
		}
	}
}

// TestCompactKeepsOutstanding: compacting while packets are in flight
// keeps them, and their acknowledgement still works afterwards.
func TestCompactKeepsOutstanding(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr"} {
		c, _ := New(name, Config{})
		now := mono.Time(1)
		for seq := uint64(0); seq < 1000; seq++ {
			now += mono.Time(100 * time.Microsecond)
			c.OnPacketSent(now, seq, 1400, true)
			if seq >= 10 {
				c.OnFeedback(now, &Feedback{AckNo: seq - 10, Runs: []AckRun{{High: seq - 10, N: 1, State: Received}}})
			}
		}
		before := c.State().InFlight
		c.(Compacter).Compact(now)
		if got := c.State().InFlight; got != before || got != 10 {
			t.Fatalf("%s: %d in flight after compact, %d before, want 10", name, got, before)
		}
		c.OnFeedback(now+mono.Time(time.Millisecond), &Feedback{AckNo: 999, Runs: []AckRun{{High: 999, N: 10, State: Received}}})
		if got := c.State().InFlight; got != 0 {
			t.Fatalf("%s: %d in flight after the last ack", name, got)
		}
	}
}

// TestReseedRTTStartsAfresh: after an outage's inflated samples, a reseed
// puts SRTT at the measured round trip at once (as a first sample), where
// RFC 6298 smoothing would need about 20 samples; the min RTT stays.
func TestReseedRTTStartsAfresh(t *testing.T) {
	var tr tracker
	for range 20 {
		tr.updateRTT(0, 80*time.Millisecond)
	}
	for range 8 {
		tr.updateRTT(0, 1500*time.Millisecond) // packets that waited out a stall
	}
	if tr.srtt < 500*time.Millisecond {
		t.Fatalf("SRTT %v: the stall's samples should have inflated it", tr.srtt)
	}
	tr.reseedRTT(90 * time.Millisecond)
	if tr.srtt != 90*time.Millisecond || tr.rttvar != 45*time.Millisecond || tr.minRTT != 80*time.Millisecond {
		t.Fatalf("after reseed: SRTT %v RTTVAR %v min %v, want 90 ms, 45 ms, 80 ms", tr.srtt, tr.rttvar, tr.minRTT)
	}
	tr.reseedRTT(0) // no measurement: nothing changes
	if tr.srtt != 90*time.Millisecond {
		t.Fatalf("a zero reseed changed SRTT to %v", tr.srtt)
	}
}
