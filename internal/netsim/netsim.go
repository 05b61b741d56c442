// SPDX-License-Identifier: MIT

// Package netsim is a deterministic discrete-event simulator of network
// paths in virtual time. Protocol engines, congestion controllers,
// schedulers and reorderers are exercised over it: the same seed gives the
// same run, and a minute of traffic takes milliseconds.
package netsim

import (
	"container/heap"
	"io"
	"math/rand/v2"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// Sim is the event loop and virtual clock. It is not safe for concurrent use.
type Sim struct {
	now    mono.Time
	seq    uint64
	events eventHeap
	rng    *rand.Rand
}

type event struct {
	at  mono.Time
	seq uint64 // FIFO among equal times
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}

// New returns a simulator whose randomness is derived from seed.
func New(seed int64) *Sim {
	return &Sim{rng: rand.New(rand.NewPCG(uint64(seed), 0x6d70_7475_6e00))}
}

// Now is the current virtual time.
func (s *Sim) Now() mono.Time { return s.now }

// Rand is the simulator's seeded random source.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// At schedules fn at time t (or now, if t is in the past). Events at equal
// times run in the order they were scheduled.
func (s *Sim) At(t mono.Time, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.events, event{at: t, seq: s.seq, fn: fn})
}

// After schedules fn d from now.
func (s *Sim) After(d time.Duration, fn func()) { s.At(s.now.Add(d), fn) }

// Step runs the next event. It reports false when there is none.
func (s *Sim) Step() bool {
	if len(s.events) == 0 {
		return false
	}
	e := heap.Pop(&s.events).(event)
	s.now = e.at
	e.fn()
	return true
}

// NextEvent is the time of the next pending event, or mono.Never.
func (s *Sim) NextEvent() mono.Time {
	if len(s.events) == 0 {
		return mono.Never
	}
	return s.events[0].at
}

// RunUntil runs every event with a time up to t, then sets the clock to t.
func (s *Sim) RunUntil(t mono.Time) {
	for len(s.events) > 0 && s.events[0].at <= t {
		s.Step()
	}
	if t > s.now {
		s.now = t
	}
}

// RandReader is a deterministic io.Reader over r, for the keys, nonces
// and initial sequence numbers of simulated endpoints: the same seed gives
// the same bytes, so a simulated run repeats exactly.
func RandReader(r *rand.Rand) io.Reader { return randReader{r} }

type randReader struct{ r *rand.Rand }

func (s randReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(s.r.Uint32())
	}
	return len(b), nil
}
