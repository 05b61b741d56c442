// SPDX-License-Identifier: MIT

// Package codel is CoDel's dequeue-side logic (RFC 8289) over any FIFO:
// the tunnel's send queue (ccid/aqm) and the lab emulator's bottleneck
// (lab/emu) both run it. It decides which packets leaving the queue carry
// a congestion signal; the queue decides what the signal is (a CE mark or
// a drop). Pure logic on a caller-supplied clock; no allocation.
package codel

import (
	"math"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// Defaults of RFC 8289 §4.
const (
	DefaultTarget   = 5 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
	DefaultMTU      = 1500
)

// Params tune CoDel; zero fields take the defaults.
type Params struct {
	// Target is the acceptable standing sojourn time.
	Target time.Duration
	// Interval is how long the sojourn time may stay above Target before
	// CoDel acts: about a worst-case RTT of the flows in the queue.
	Interval time.Duration
	// MTU: with at most this many bytes queued CoDel never acts (a queue
	// of one packet is not a standing queue).
	MTU int
}

func (p Params) withDefaults() Params {
	if p.Target <= 0 {
		p.Target = DefaultTarget
	}
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	if p.MTU <= 0 {
		p.MTU = DefaultMTU
	}
	return p
}

// Queue is the FIFO CoDel dequeues from, as seen by Dequeue.
type Queue interface {
	// Next makes the queue's head the current packet (removing it from
	// the backlog, or only looking at it: the queue decides) and returns
	// how long it waited and the bytes still queued besides it; ok is
	// false when the queue is empty.
	Next(now mono.Time) (sojourn time.Duration, backlog int, ok bool)
	// Signal gives the current packet CoDel's congestion signal: it marks
	// it CE and reports true (the packet is still sent) or drops it and
	// reports false (Next then brings the following packet).
	Signal() bool
}

// State is one queue's CoDel state (RFC 8289 §5). The zero value is an
// idle queue.
type State struct {
	firstAbove mono.Time // when the sojourn time may have been above target for an interval
	dropNext   mono.Time // next signal while dropping
	count      uint32    // signals since dropping began
	lastCount  uint32
	dropping   bool
}

// Dropping reports whether CoDel is in its dropping state.
func (s *State) Dropping() bool { return s.dropping }

// Signals is how many packets CoDel has signalled (dropped or marked)
// since it entered its dropping state, 0 when it is not dropping. A flow
// that backs off leaves the dropping state after a few; one that does
// not (a constant-rate stream above its share) keeps it growing.
func (s *State) Signals() int {
	if !s.dropping {
		return 0
	}
	return int(s.count)
}

// next brings the next packet and says whether the sojourn condition has
// held for an interval (RFC 8289 dodequeue).
func (s *State) next(now mono.Time, p *Params, q Queue) (ok, okToDrop bool) {
	sojourn, backlog, ok := q.Next(now)
	if !ok {
		s.firstAbove = 0
		return false, false
	}
	if sojourn < p.Target || backlog <= p.MTU {
		s.firstAbove = 0
		return true, false
	}
	if s.firstAbove == 0 {
		s.firstAbove = now.Add(p.Interval)
		return true, false
	}
	return true, now >= s.firstAbove
}

// controlLaw spaces signals by interval/√count, so the signal rate grows
// until the queue drains.
func (s *State) controlLaw(t mono.Time, p *Params) mono.Time {
	return t.Add(time.Duration(float64(p.Interval) / math.Sqrt(float64(max(s.count, 1)))))
}

// Dequeue runs CoDel's dequeue at now on q: it brings packets with
// q.Next, signals those CoDel picks with q.Signal, and reports whether a
// current packet is left for the caller to send.
func (s *State) Dequeue(now mono.Time, params Params, q Queue) bool {
	p := params.withDefaults()
	ok, okToDrop := s.next(now, &p, q)
	if !ok {
		s.dropping = false
		return false
	}
	if s.dropping {
		if !okToDrop {
			s.dropping = false
		}
		for s.dropping && now >= s.dropNext {
			s.count++
			if q.Signal() { // marked: sent, and the next signal is due later
				s.dropNext = s.controlLaw(s.dropNext, &p)
				break
			}
			if ok, okToDrop = s.next(now, &p, q); !ok {
				s.dropping = false
				return false
			}
			if !okToDrop {
				s.dropping = false
			} else {
				s.dropNext = s.controlLaw(s.dropNext, &p)
			}
		}
		return true
	}
	if !okToDrop {
		return true
	}
	if !q.Signal() {
		ok, _ = s.next(now, &p, q)
	}
	s.dropping = true
	// Resume near the previous signal rate if dropping ended recently.
	delta := s.count - s.lastCount
	if delta > 1 && now.Sub(s.dropNext) < 16*p.Interval {
		s.count = delta
	} else {
		s.count = 1
	}
	s.dropNext = s.controlLaw(now, &p)
	s.lastCount = s.count
	return ok
}
