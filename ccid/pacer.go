// SPDX-License-Identifier: MIT

package ccid

import (
	"math"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// Pacer is a token bucket that spaces packets at a rate. It returns exact
// release times (nanoseconds, virtual or real): it does not round to a timer
// granularity, because the data path's timer is precise below 1 ms. The zero
// value does not pace.
//
// Pacer also measures its own error: when SendTime says "wait until t" and
// the packet then leaves at t' >= t, t'-t is the lateness of the timer that
// woke the sender. Lateness is what the data path's timer adds; the
// simulator's is zero.
type Pacer struct {
	rate   float64 // bytes per second; 0 = no pacing
	burst  float64 // bucket size, bytes
	tokens float64
	last   mono.Time

	pending mono.Time // release time handed out and not yet used, or 0
	stats   PacingStats
}

// PacingStats accounts for how late packets left compared with the release
// time the pacer gave.
type PacingStats struct {
	Samples  uint64
	LateSum  time.Duration
	LateMax  time.Duration
	OnTime   uint64 // samples with lateness under 100 µs
	lateSqNs float64
}

// MeanLate is the mean lateness.
func (s PacingStats) MeanLate() time.Duration {
	if s.Samples == 0 {
		return 0
	}
	return s.LateSum / time.Duration(s.Samples)
}

// RMSLate is the root-mean-square lateness.
func (s PacingStats) RMSLate() time.Duration {
	if s.Samples == 0 {
		return 0
	}
	return time.Duration(math.Sqrt(s.lateSqNs / float64(s.Samples)))
}

// SetRate sets the pacing rate in bytes per second and the largest burst
// in bytes the bucket may hold. A rate <= 0 disables pacing.
func (p *Pacer) SetRate(now mono.Time, rate float64, burst int) {
	p.refill(now)
	p.rate = rate
	p.burst = float64(burst)
	if p.tokens > p.burst {
		p.tokens = p.burst
	}
}

// Rate is the pacing rate in bytes per second.
func (p *Pacer) Rate() float64 { return p.rate }

func (p *Pacer) refill(now mono.Time) {
	if p.last == 0 || now < p.last {
		if p.last == 0 {
			p.tokens = p.burst
		}
		p.last = now
		return
	}
	p.tokens += p.rate * now.Sub(p.last).Seconds()
	if p.tokens > p.burst {
		p.tokens = p.burst
	}
	p.last = now
}

// SendTime is the earliest time a packet of size bytes may leave; a time
// <= now means at once.
func (p *Pacer) SendTime(now mono.Time, size int) mono.Time {
	if p.rate <= 0 {
		return now
	}
	p.refill(now)
	need := float64(size) - p.tokens
	if need <= 0 {
		return now
	}
	// Round up so that at the returned time the bucket really holds size.
	t := now.Add(time.Duration(math.Ceil(need / p.rate * 1e9)))
	p.pending = t
	return t
}

// OnSent takes size bytes from the bucket. A sender may go into debt by one
// packet (it sends when the budget is short rather than never).
func (p *Pacer) OnSent(now mono.Time, size int) {
	if p.pending != 0 && now >= p.pending {
		late := now.Sub(p.pending)
		p.stats.Samples++
		p.stats.LateSum += late
		p.stats.lateSqNs += float64(late) * float64(late)
		if late > p.stats.LateMax {
			p.stats.LateMax = late
		}
		if late < 100*time.Microsecond {
			p.stats.OnTime++
		}
	}
	p.pending = 0
	if p.rate <= 0 {
		return
	}
	p.refill(now)
	p.tokens -= float64(size)
	if p.tokens < -float64(size) {
		p.tokens = -float64(size)
	}
}

// Stats returns the pacing error accounting.
func (p *Pacer) Stats() PacingStats { return p.stats }
