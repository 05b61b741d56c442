// SPDX-License-Identifier: MIT

package ccid

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

// refRepair and refAck are plain models of loss repair's ring and the
// ack-of-ack records as they were kept before the History held them.
type refRepair struct {
	seq, mpSeq uint64
	b          []byte
}

type refAck struct{ seq, ackNo uint64 }

// TestHistoryUsersShareOneRing drives a controller, loss repair and
// ack-of-ack over one History with random traffic, feedback, releases and
// idle compactions, and checks each user's view against a plain model:
// the repair entries (their order, sequence numbers, MP_SEQs and buffers,
// the oldest given up beyond RepairMax) and the Ack Numbers AckOfAck
// returns. The controller's own records are checked by its tests.
func TestHistoryUsersShareOneRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	h := NewHistory()
	cc := NewCCID2(Config{History: h})
	var reps []refRepair
	var acks []refAck
	repCap, evictions := 0, 0
	now := mono.Time(1)
	seq := uint64(1<<48 - 300) // wraps the wire numbering
	mpSeq := uint64(0)
	checkRepairs := func(when string) {
		t.Helper()
		k := 0
		for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
			if k >= len(reps) {
				t.Fatalf("%s: more repair entries than the model's %d", when, len(reps))
			}
			r, e := reps[k], h.Repair(i)
			if h.Seq(i) != r.seq || e.MPSeq != r.mpSeq || (e.B == nil) != (r.b == nil) || e.B != nil && &e.B[0] != &r.b[0] {
				t.Fatalf("%s: entry %d is seq %d mp %d (buffer %v), want seq %d mp %d (buffer %v)",
					when, k, h.Seq(i), e.MPSeq, e.B != nil, r.seq, r.mpSeq, r.b != nil)
			}
			k++
		}
		if k != len(reps) || h.Repairs() != len(reps) {
			t.Fatalf("%s: %d repair entries (count %d), model %d", when, k, h.Repairs(), len(reps))
		}
	}
	for round := 0; round < 400; round++ {
		for n := rng.IntN(300); n > 0; n-- {
			now += mono.Time(100 * time.Microsecond)
			data := rng.IntN(4) > 0
			cc.OnPacketSent(now, seq, 1000, data)
			if data && rng.IntN(8) > 0 {
				b := make([]byte, 1)
				var gone []byte
				if repCap == len(reps) {
					if repCap < RepairMax {
						repCap = max(2*repCap, repairMin)
					} else {
						gone, reps = reps[0].b, reps[1:]
						evictions++
					}
				}
				reps = append(reps, refRepair{seq: seq & seqMask, mpSeq: mpSeq, b: b})
				if old := h.KeepRepair(seq, Repair{MPSeq: mpSeq, B: b, N: 1}); (old == nil) != (gone == nil) || old != nil && &old[0] != &gone[0] {
					t.Fatalf("round %d: KeepRepair gave back the wrong buffer", round)
				}
				mpSeq++
			}
			if rng.IntN(3) == 0 {
				ackNo := rng.Uint64() & seqMask
				if len(acks) == ackRecords {
					acks = acks[1:]
				}
				acks = append(acks, refAck{seq & seqMask, ackNo})
				h.NoteAck(seq, ackNo)
			}
			seq = (seq + 1) & seqMask
		}
		checkRepairs("after sends")
		// Feedback: a random vector below the newest packet.
		hi := (seq - 1 - uint64(rng.IntN(20))) & seqMask
		var runs []AckRun
		s := hi
		for len(runs) < 6 {
			n := uint32(1 + rng.IntN(30))
			st := Received
			if rng.IntN(3) == 0 {
				st = NotReceived
			}
			runs = append(runs, AckRun{High: s, N: n, State: st})
			s = (s - uint64(n)) & seqMask
		}
		now += mono.Time(time.Millisecond)
		cc.OnFeedback(now, &Feedback{AckNo: hi, Runs: runs})
		got, gotOK := h.AckOfAck(hi, runs)
		want, wantOK := uint64(0), false
		for k := len(acks) - 1; k >= 0; k-- {
			r := acks[k]
			if wire.SeqDiff(hi, r.seq) < 0 {
				continue
			}
			if r.seq == hi || receivedIn(runs, r.seq) {
				want, wantOK = r.ackNo, true
				acks = acks[k+1:]
				break
			}
		}
		if got != want || gotOK != wantOK {
			t.Fatalf("round %d: AckOfAck = %d, %v; model %d, %v", round, got, gotOK, want, wantOK)
		}
		// Loss repair releases some entries and forgets released ones
		// from its head, as the engine does.
		// Rounds 100 to 129 release nothing: the ring reaches RepairMax.
		for k := range reps {
			if (round < 100 || round >= 130) && rng.IntN(2) == 0 {
				reps[k].b = nil
			}
		}
		for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
			if e := h.Repair(i); e.B != nil && !bufIn(reps, e.B) {
				e.B = nil
			}
		}
		for len(reps) > 0 && reps[0].b == nil {
			reps = reps[1:]
			h.PopRepair()
		}
		checkRepairs("after releases")
		if round%9 == 0 {
			now += mono.Time(10 * time.Second)
			if len(reps) == 0 {
				h.ShrinkRepair()
				repCap = 0
			}
			cc.Compact(now)
			checkRepairs("after compact")
			if len(reps) == 0 && len(acks) == 0 && cc.State().InFlight == 0 && h.Size() != historyIdle {
				t.Fatalf("idle history keeps %d records", h.Size())
			}
		}
	}
	if evictions == 0 {
		t.Fatal("the test never filled loss repair's ring")
	}
}

func bufIn(reps []refRepair, b []byte) bool {
	for _, r := range reps {
		if r.b != nil && &r.b[0] == &b[0] {
			return true
		}
	}
	return false
}

// TestHistoryPrevIn checks prevIn against a plain scan on rings from the
// smallest (which wraps inside one bit-set word) to several words.
func TestHistoryPrevIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, size := range []int{16, 64, 256} {
		h := NewHistory()
		h.resize(size)
		base := uint64(rng.IntN(1000))
		h.next, h.head = base+uint64(size), base+uint64(size)
		set := map[uint64]bool{}
		for i := base; i < h.next; i++ {
			if rng.IntN(5) == 0 {
				set[i] = true
				bitSet(h.acks, i&h.mask, true)
			}
		}
		for lo := base; lo < h.next; lo += uint64(1 + rng.IntN(3)) {
			for end := lo; end <= h.next; end++ {
				want, wantOK := uint64(0), false
				for i := end; i > lo; i-- {
					if set[i-1] {
						want, wantOK = i-1, true
						break
					}
				}
				if got, ok := h.prevIn(h.acks, lo, end); got != want || ok != wantOK {
					t.Fatalf("ring %d: prevIn(%d, %d) = %d, %v; want %d, %v", size, lo, end, got, ok, want, wantOK)
				}
			}
		}
	}
}

// TestHistorySurvivesControllerSwitch: a controller that replaces another
// on the same subflow (CCID negotiation) starts with nothing in flight,
// while loss repair and ack-of-ack keep what they hold.
func TestHistorySurvivesControllerSwitch(t *testing.T) {
	h := NewHistory()
	a := NewCCID2(Config{History: h})
	for seq := uint64(10); seq < 20; seq++ {
		a.OnPacketSent(mono.Time(seq), seq, 1000, true)
	}
	h.NoteAck(19, 77)
	if old := h.KeepRepair(19, Repair{MPSeq: 5, B: make([]byte, 1), N: 1}); old != nil {
		t.Fatal("a buffer came back from an empty repair ring")
	}
	b := NewBBR(Config{History: h})
	if n := b.State().InFlight; n != 0 {
		t.Fatalf("new controller starts with %d in flight", n)
	}
	b.OnPacketSent(100, 20, 1000, true)
	if i := h.RepairHead(); i == h.End() || h.Seq(i) != 19 || h.Repair(i).MPSeq != 5 {
		t.Fatal("the repair entry was lost in the switch")
	}
	if a, ok := h.AckOfAck(19, []AckRun{{High: 19, N: 1, State: Received}}); !ok || a != 77 {
		t.Fatalf("AckOfAck after the switch = %d, %v; want 77", a, ok)
	}
	b.OnFeedback(200, &Feedback{AckNo: 20, Runs: []AckRun{{High: 20, N: 11, State: Received}}})
	if st := b.State(); st.InFlight != 0 || st.PacketsAcked != 1 {
		t.Fatalf("after the switch: %d in flight, %d acked; want 0, 1", st.InFlight, st.PacketsAcked)
	}
}
