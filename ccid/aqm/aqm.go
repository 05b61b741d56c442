// SPDX-License-Identifier: MIT

// Package aqm bounds a tunnel's send queue by sojourn time. When the tunnel
// cannot send as fast as the TUN device delivers, inner packets wait in the
// connection's queue; CoDel (RFC 8289) decides when the wait is a standing
// queue and then marks CE on ECN-capable inner packets, so inner TCP/QUIC
// learn of congestion within one of their RTTs, and drops only Not-ECT ones.
//
// It is pure logic over raw inner IP packets ([]byte) and a caller-supplied
// clock; it neither allocates per packet nor keeps a goroutine.
package aqm

import (
	"time"

	"github.com/mptun/mptun/internal/codel"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ring"
)

// Config parameterises a Queue. The zero value gets RFC 8289's defaults.
type Config struct {
	// Target is the acceptable standing sojourn time (default 5 ms).
	Target time.Duration
	// Interval is how long the sojourn time may stay above Target before
	// CoDel acts; about a worst-case inner RTT (default 100 ms).
	Interval time.Duration
	// Limit caps the queue in packets (default 1024) and LimitBytes in bytes
	// (default 0 = no byte limit). Arrivals beyond either are tail-dropped.
	Limit      int
	LimitBytes int
	// MTU: with at most this many bytes queued CoDel never acts (default 1500).
	MTU int
	// NoECN drops instead of marking, even for ECT packets.
	NoECN bool
	// Disabled turns the queue into a plain drop-tail FIFO (for comparison).
	Disabled bool
	// Drop, if set, receives every packet the queue drops, so the caller can
	// return its buffer to a pool.
	Drop func(pkt []byte)
}

// Stats counts what the queue did.
type Stats struct {
	Enqueued, Dequeued uint64
	Marked             uint64 // CE marks set by CoDel
	Dropped            uint64 // CoDel drops (Not-ECT, or NoECN)
	TailDropped        uint64 // arrivals refused by Limit/LimitBytes
	// Superseded: queued packets replaced by a later one that made them
	// redundant (FQConfig.Supersedes), counted in Enqueued too.
	Superseded uint64
	MaxSojourn time.Duration
}

type entry struct {
	pkt []byte
	enq mono.Time
}

// Queue is a FIFO of inner packets with CoDel. It is not safe for
// concurrent use; the connection's owner goroutine drives it.
type Queue struct {
	cfg   Config
	fifo  *ring.Ring[entry]
	bytes int

	codel  codel.State
	params codel.Params
	cur    entry // the packet CoDel is deciding on

	stats Stats
}

// withDefaults fills zero fields.
func (cfg Config) withDefaults() Config {
	if cfg.Target <= 0 {
		cfg.Target = codel.DefaultTarget
	}
	if cfg.Interval <= 0 {
		cfg.Interval = codel.DefaultInterval
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 1024
	}
	if cfg.MTU <= 0 {
		cfg.MTU = codel.DefaultMTU
	}
	return cfg
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	cfg = cfg.withDefaults()
	return &Queue{cfg: cfg, fifo: ring.New[entry](cfg.Limit),
		params: codel.Params{Target: cfg.Target, Interval: cfg.Interval, MTU: cfg.MTU}}
}

// Len is the number of queued packets, Bytes their size.
func (q *Queue) Len() int   { return q.fifo.Len() }
func (q *Queue) Bytes() int { return q.bytes }

// Stats returns the counters.
func (q *Queue) Stats() Stats { return q.stats }

// HeadSojourn is how long the oldest packet has waited, or 0.
func (q *Queue) HeadSojourn(now mono.Time) time.Duration {
	if q.fifo.Len() == 0 {
		return 0
	}
	return now.Sub(q.fifo.Front().enq)
}

// Enqueue appends pkt at now. It reports false, after handing pkt to
// Config.Drop, when the queue is full.
func (q *Queue) Enqueue(now mono.Time, pkt []byte) bool {
	if q.fifo.Len() >= q.cfg.Limit || q.cfg.LimitBytes > 0 && q.bytes+len(pkt) > q.cfg.LimitBytes {
		q.stats.TailDropped++
		q.cfg.drop(pkt)
		return false
	}
	q.fifo.Push(entry{pkt: pkt, enq: now})
	q.bytes += len(pkt)
	q.stats.Enqueued++
	return true
}

// drop hands pkt to Drop, if set.
func (c *Config) drop(pkt []byte) {
	if c.Drop != nil {
		c.Drop(pkt)
	}
}

// sojourn is how long a packet enqueued at enq has waited at now; it
// keeps MaxSojourn.
func (s *Stats) sojourn(now, enq mono.Time) time.Duration {
	soj := now.Sub(enq)
	if soj > s.MaxSojourn {
		s.MaxSojourn = soj
	}
	return soj
}

// signal is CoDel's congestion signal on pkt: a CE mark if ECN is allowed
// and pkt is ECN-capable (it is still sent), else a drop. It reports
// whether pkt was kept.
func (s *Stats) signal(cfg *Config, pkt []byte) bool {
	if !cfg.NoECN && MarkCE(pkt) {
		s.Marked++
		return true
	}
	s.Dropped++
	cfg.drop(pkt)
	return false
}

func (q *Queue) pop() (entry, bool) {
	e, ok := q.fifo.Pop()
	q.bytes -= len(e.pkt)
	return e, ok
}

// codelView is the queue as internal/codel sees it.
type codelView Queue

// Next pops the head as CoDel's current packet.
func (v *codelView) Next(now mono.Time) (time.Duration, int, bool) {
	q := (*Queue)(v)
	e, ok := q.pop()
	q.cur = e
	if !ok {
		return 0, 0, false
	}
	return q.stats.sojourn(now, e.enq), q.bytes, true
}

// Signal marks the current packet CE if it is ECN-capable (it is still
// sent), else drops it.
func (v *codelView) Signal() bool {
	q := (*Queue)(v)
	if q.stats.signal(&q.cfg, q.cur.pkt) {
		return true
	}
	q.cur = entry{}
	return false
}

// Dequeue returns the next packet to send at now, or false if the queue is
// empty. Packets CoDel drops go to Config.Drop; packets it marks are
// returned with CE set.
func (q *Queue) Dequeue(now mono.Time) ([]byte, bool) {
	var ok bool
	if q.cfg.Disabled {
		_, _, ok = (*codelView)(q).Next(now)
	} else {
		ok = q.codel.Dequeue(now, q.params, (*codelView)(q))
	}
	e := q.cur
	q.cur = entry{}
	if !ok {
		return nil, false
	}
	q.stats.Dequeued++
	return e.pkt, true
}
