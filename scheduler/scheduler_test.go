// SPDX-License-Identifier: MIT

package scheduler

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func mk(t *testing.T, name string) Scheduler {
	t.Helper()
	s, err := New(name, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != name {
		t.Fatalf("Name() = %q, want %q", s.Name(), name)
	}
	return s
}

func path(id int, prio uint8, rtt time.Duration, canSend bool) Path {
	return Path{ID: id, Usable: true, Prio: prio, Weight: 1, Cwnd: 10, CanSend: canSend,
		SRTT: rtt, MinRTT: rtt, PacingRate: 1e6}
}

func pick(s Scheduler, paths []Path) []int {
	return s.Pick(0, paths, Packet{Size: 1000}, nil)
}

func one(t *testing.T, s Scheduler, paths []Path, want int) {
	t.Helper()
	got := pick(s, paths)
	if want < 0 {
		if len(got) != 0 {
			t.Fatalf("%s picked %v, want hold", s.Name(), got)
		}
		return
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("%s picked %v, want [%d]", s.Name(), got, want)
	}
}

func TestRegistryHasAll(t *testing.T) {
	for _, n := range []string{"rr", "priority", "srtt", "otias", "ecf", "redundant", "active-standby"} {
		mk(t, n)
	}
	if _, err := New("nope", Config{}); err == nil {
		t.Error("unknown scheduler accepted")
	}
}

func TestWeightedRoundRobin(t *testing.T) {
	s := mk(t, "rr")
	paths := []Path{path(0, 3, 10*time.Millisecond, true), path(1, 3, 40*time.Millisecond, true), path(2, 3, 0, true)}
	paths[0].Weight, paths[1].Weight, paths[2].Weight = 3, 1, 0 // 0 counts as 1
	n := map[int]int{}
	for i := 0; i < 500; i++ {
		n[pick(s, paths)[0]]++
	}
	if n[0] != 300 || n[1] != 100 || n[2] != 100 {
		t.Errorf("shares %v, want 300/100/100", n)
	}
	// Smoothness: path 0 never gets more than 3 in a row... and a full
	// path is skipped.
	paths[0].CanSend = false
	for i := 0; i < 10; i++ {
		if id := pick(s, paths)[0]; id == 0 {
			t.Fatal("picked a path without window room")
		}
	}
	paths[1].CanSend, paths[2].CanSend = false, false
	one(t, s, paths, -1)
	if st := s.Stats(); st.Holds != 1 || st.Picks[0] != 300 {
		t.Errorf("stats %+v", st)
	}
}

func TestMPPrioSemantics(t *testing.T) {
	s := mk(t, "priority")
	ms := time.Millisecond
	// Higher primary preferred, then spill in order.
	paths := []Path{path(0, 3, ms, true), path(1, 5, 50*ms, true), path(2, 2, ms, true), path(3, 1, ms, true), path(4, 0, ms, true)}
	one(t, s, paths, 1)
	paths[1].CanSend = false
	one(t, s, paths, 0)
	paths[0].CanSend = false
	one(t, s, paths, 2) // secondary only when every primary is window-limited
	paths[2].CanSend = false
	one(t, s, paths, -1) // standby not used while primaries/secondaries are usable
	paths[0].Usable, paths[1].Usable, paths[2].Usable = false, false, false
	one(t, s, paths, 3) // now standby
	paths[3].Usable = false
	one(t, s, paths, -1) // prio 0 never
}

func TestSRTT(t *testing.T) {
	s := mk(t, "srtt")
	paths := []Path{path(0, 3, 40*time.Millisecond, true), path(1, 3, 10*time.Millisecond, true)}
	one(t, s, paths, 1)
	paths[1].CanSend = false
	one(t, s, paths, 0)
	paths[1].Prio = 1 // standby is not used while path 0 is usable
	paths[1].CanSend = true
	one(t, s, paths, 0)
}

func TestOTIASQueuesOnFastPathUntilSlowIsSooner(t *testing.T) {
	s, _ := New("otias", Config{PathQueues: true})
	fast := Path{ID: 0, Usable: true, Prio: 3, Cwnd: 10, SRTT: 10 * time.Millisecond, PacingRate: 2e6}
	slow := Path{ID: 1, Usable: true, Prio: 3, Cwnd: 100, CanSend: true, SRTT: 40 * time.Millisecond, PacingRate: 4e6}
	// Fast window full but little queued: still arrives first via fast.
	fast.InFlight = 10
	one(t, s, []Path{fast, slow}, 0)
	// 40 kB queued at 2 MB/s = 20 ms wait: the slow path (20 ms) wins.
	fast.Queued = 40000
	one(t, s, []Path{fast, slow}, 1)
	// Without per-path queues only paths with room are candidates.
	fast.Queued = 0
	one(t, mk(t, "otias"), []Path{fast, slow}, 1)
}

func TestECFWaitsForFastPath(t *testing.T) {
	s := mk(t, "ecf")
	fast := Path{ID: 0, Usable: true, Prio: 3, Cwnd: 10, InFlight: 10, SRTT: 10 * time.Millisecond}
	slow := Path{ID: 1, Usable: true, Prio: 3, Cwnd: 100, CanSend: true, SRTT: 100 * time.Millisecond}
	paths := []Path{fast, slow}
	// One packet waiting: the fast path frees up well within 100 ms.
	if got := s.Pick(0, paths, Packet{Size: 1000, Backlog: 1000}, nil); len(got) != 0 {
		t.Fatalf("ecf sent %v on the slow path for a single packet", got)
	}
	// A large backlog needs the slow path as well.
	if got := s.Pick(0, paths, Packet{Size: 1000, Backlog: 1000 * 1400}, nil); len(got) != 1 || got[0] != 1 {
		t.Fatalf("ecf picked %v with a large backlog, want [1]", got)
	}
	// Unknown backlog: never hold.
	if got := s.Pick(0, paths, Packet{Size: 1000}, nil); len(got) != 1 || got[0] != 1 {
		t.Fatalf("ecf picked %v with unknown backlog, want [1]", got)
	}
	paths[0].CanSend = true
	one(t, s, paths, 0)
}

func TestRedundant(t *testing.T) {
	s, _ := New("redundant", Config{PathQueues: true})
	paths := []Path{path(0, 3, 0, true), path(1, 3, 0, true), path(2, 3, 0, false), path(3, 0, 0, true)}
	paths[2].Queued = 10 * 1400 // a full window queued already
	got := pick(s, paths)
	if len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("redundant picked %v, want [0 1]", got)
	}
	paths[2].Queued = 0 // full window but nothing queued: gets a queued copy
	if got := pick(s, paths); len(got) != 3 {
		t.Fatalf("redundant picked %v, want [0 1 2]", got)
	}
	if got := pick(mk(t, "redundant"), paths); len(got) != 2 {
		t.Fatalf("redundant without path queues picked %v, want [0 1]", got)
	}
	paths[0].CanSend, paths[1].CanSend = false, false
	one(t, s, paths, -1)
}

func TestActiveStandby(t *testing.T) {
	s := mk(t, "active-standby")
	paths := []Path{path(0, 1, 0, true), path(1, 3, 0, true), path(2, 3, 0, true)}
	one(t, s, paths, 1)
	paths[1].CanSend = false
	one(t, s, paths, -1) // no spill
	paths[1].Usable = false
	one(t, s, paths, 2) // failover
	paths[1].Usable, paths[1].CanSend = true, true
	one(t, s, paths, 2) // equal prio: stay
	paths[2].Usable, paths[1].Usable = false, false
	one(t, s, paths, 0) // standby
	paths[1].Usable = true
	one(t, s, paths, 1) // revert to higher priority
	if st := s.Stats(); st.Switches != 3 {
		t.Errorf("%d switches, want 3", st.Switches)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	paths := []Path{path(0, 3, 10*time.Millisecond, true), path(1, 3, 40*time.Millisecond, true)}
	dst := make([]int, 0, 4)
	for _, n := range Names() {
		s := mk(t, n)
		s.Pick(0, paths, Packet{Size: 1000}, dst[:0])
		if a := testing.AllocsPerRun(100, func() { s.Pick(mono.Time(1), paths, Packet{Size: 1000}, dst[:0]) }); a != 0 {
			t.Errorf("%s: %v allocations per Pick", n, a)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	paths := []Path{path(0, 3, 10*time.Millisecond, true), path(1, 3, 40*time.Millisecond, true), path(2, 2, 20*time.Millisecond, false)}
	dst := make([]int, 0, 4)
	for _, n := range Names() {
		b.Run(n, func(b *testing.B) {
			s, _ := New(n, Config{})
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				paths[1].CanSend = i&1 == 0
				dst = s.Pick(mono.Time(i), paths, Packet{Size: 1200, Backlog: 1200}, dst[:0])
			}
		})
	}
}
