// SPDX-License-Identifier: MIT

package netsim

import (
	"time"

	"github.com/mptun/mptun/internal/lossmodel"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ring"
)

// GilbertElliott is the two-state bursty loss model (internal/lossmodel).
type GilbertElliott = lossmodel.GilbertElliott

// Outage is a time interval in which the link silently drops everything.
type Outage struct{ Start, End mono.Time }

// LinkConfig describes one direction of a path.
type LinkConfig struct {
	Rate    float64       // bits per second; 0 = infinite
	Queue   int           // drop-tail queue limit in bytes; 0 = unlimited
	Delay   time.Duration // one-way propagation delay, not counted against the queue
	Jitter  time.Duration // extra uniform delay in [0, Jitter]
	Reorder bool          // let jitter reorder packets (otherwise FIFO is kept)
	Loss    float64       // Bernoulli loss probability
	GE      *GilbertElliott
	Outages []Outage
	// Stalls are intervals in which the link sends nothing but keeps
	// queueing (a radio link without capacity for a while): what is
	// queued leaves at the stall's end, late, unless the queue overflows.
	Stalls []Outage
	// Bucket > 0 shapes the link as a token bucket (Linux tbf, an ISP's
	// shaper) instead of a serializing line: a packet leaves as soon as
	// the bucket holds its size in tokens, which refill at Rate up to
	// Bucket bytes. After an idle spell a burst of up to Bucket bytes
	// passes at once, as through a real shaper, and a sender that times
	// those acks sees a far higher rate than the link's.
	Bucket int
}

// Packet is what a link carries. Size is the wire size used for rate and
// queue accounting; Data and Meta are passed through untouched.
type Packet struct {
	Size   int
	Data   []byte
	Meta   any
	ECN    uint8
	SentAt mono.Time
}

// LinkStats counts what a link did.
type LinkStats struct {
	Sent, SentBytes           uint64
	Delivered, DeliveredBytes uint64
	DroppedQueue              uint64
	DroppedLoss               uint64
	DroppedOutage             uint64
	MaxQueueBytes             int
}

// Link is one direction of a simulated path: a drop-tail queue drained at
// Rate, then a propagation delay with optional jitter and loss.
type Link struct {
	sim     *Sim
	cfg     LinkConfig
	deliver func(Packet)

	// departures holds the serialization end time and size of every packet
	// still queued or being serialized, oldest first.
	departures  ring.Ring[departure]
	queued      int
	busyUntil   mono.Time
	lastArrival mono.Time
	ge          lossmodel.Chain
	stats       LinkStats
	// Token bucket state (LinkConfig.Bucket): tokens held at tokensAt.
	tokens   float64
	tokensAt mono.Time
	bucketOn bool
}

type departure struct {
	at   mono.Time
	size int
}

// NewLink creates a link that hands delivered packets to deliver.
func (s *Sim) NewLink(cfg LinkConfig, deliver func(Packet)) *Link {
	return &Link{sim: s, cfg: cfg, deliver: deliver}
}

// Config returns the link's current configuration.
func (l *Link) Config() LinkConfig { return l.cfg }

// SetConfig changes the link from now on. Packets already serialized keep
// their timing.
func (l *Link) SetConfig(cfg LinkConfig) { l.cfg = cfg }

// Stats returns the link's counters.
func (l *Link) Stats() LinkStats { return l.stats }

func (l *Link) drain() {
	now := l.sim.now
	for l.departures.Len() > 0 && l.departures.Front().at <= now {
		d, _ := l.departures.Pop()
		l.queued -= d.size
	}
}

// QueueBytes is the number of bytes queued or being serialized now.
func (l *Link) QueueBytes() int {
	l.drain()
	return l.queued
}

// QueueDelay is how long a packet sent now would wait before its
// serialization starts.
func (l *Link) QueueDelay() time.Duration {
	if l.busyUntil <= l.sim.now {
		return 0
	}
	return l.busyUntil.Sub(l.sim.now)
}

func (l *Link) inOutage(t mono.Time) bool {
	for _, o := range l.cfg.Outages {
		if t >= o.Start && t < o.End {
			return true
		}
	}
	return false
}

// afterStalls is the first time at or after t outside every stall.
func (l *Link) afterStalls(t mono.Time) mono.Time {
	for moved := true; moved; {
		moved = false
		for _, st := range l.cfg.Stalls {
			if t >= st.Start && t < st.End {
				t, moved = st.End, true
			}
		}
	}
	return t
}

func (l *Link) lost() bool {
	rng := l.sim.rng
	if g := l.cfg.GE; g != nil && l.ge.Lost(g, rng) {
		return true
	}
	return l.cfg.Loss > 0 && rng.Float64() < l.cfg.Loss
}

// takeTokens returns when a packet of size bytes, first in line at start,
// leaves a token-bucket link, and takes its tokens.
func (l *Link) takeTokens(start mono.Time, size int) mono.Time {
	bytesPerSec := l.cfg.Rate / 8
	if !l.bucketOn {
		l.bucketOn, l.tokens, l.tokensAt = true, float64(l.cfg.Bucket), start
	}
	have := min(float64(l.cfg.Bucket), l.tokens+start.Sub(l.tokensAt).Seconds()*bytesPerSec)
	if need := float64(size) - have; need > 0 {
		start = start.Add(time.Duration(need / bytesPerSec * 1e9))
		have = float64(size)
	}
	l.tokens, l.tokensAt = have-float64(size), start
	return start
}

// Send offers p to the link at the current time. It returns false if the
// queue had no room; a packet lost on the way still returns true, as on a
// real link the sender cannot tell.
func (l *Link) Send(p Packet) bool {
	now := l.sim.now
	p.SentAt = now
	l.stats.Sent++
	l.stats.SentBytes += uint64(p.Size)
	l.drain()
	if l.cfg.Queue > 0 && l.queued+p.Size > l.cfg.Queue {
		l.stats.DroppedQueue++
		return false
	}
	if l.inOutage(now) {
		l.stats.DroppedOutage++
		return true
	}
	start := l.afterStalls(mono.Max(now, l.busyUntil))
	done := start
	switch {
	case l.cfg.Rate > 0 && l.cfg.Bucket > 0:
		done = l.takeTokens(start, p.Size)
	case l.cfg.Rate > 0:
		done = start.Add(time.Duration(float64(p.Size) * 8 / l.cfg.Rate * 1e9))
	}
	l.busyUntil = done
	l.departures.Push(departure{at: done, size: p.Size})
	l.queued += p.Size
	if l.queued > l.stats.MaxQueueBytes {
		l.stats.MaxQueueBytes = l.queued
	}
	if l.lost() {
		l.stats.DroppedLoss++
		return true
	}
	arrive := done.Add(l.cfg.Delay)
	if l.cfg.Jitter > 0 {
		arrive = arrive.Add(time.Duration(l.sim.rng.Int64N(int64(l.cfg.Jitter) + 1)))
	}
	if !l.cfg.Reorder && arrive < l.lastArrival {
		arrive = l.lastArrival
	}
	if arrive > l.lastArrival {
		l.lastArrival = arrive
	}
	l.sim.At(arrive, func() {
		if l.inOutage(l.sim.now) {
			l.stats.DroppedOutage++
			return
		}
		l.stats.Delivered++
		l.stats.DeliveredBytes += uint64(p.Size)
		l.deliver(p)
	})
	return true
}
