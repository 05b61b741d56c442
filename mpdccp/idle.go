// SPDX-License-Identifier: MIT

package mpdccp

import (
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// A concentrator holds thousands of connections, most of them idle most of
// the time. Everything a connection's traffic grows (send queue, repair
// rings, sent-packet histories, reorder window, per-flow state) is given
// back once it has carried no data for idleShrinkAfter, and grows again on
// demand when traffic returns.
const idleShrinkAfter = 5 * time.Second

// noteData records that c carried data at now.
func (c *Conn) noteData(now mono.Time) {
	c.lastData = now
	c.shrunk = false
}

// shrinkDue is when c will have idled long enough to shrink, or Never.
func (c *Conn) shrinkDue() mono.Time {
	if c.shrunk || c.state != Open {
		return mono.Never
	}
	return mono.Max(c.lastData, c.created).Add(idleShrinkAfter)
}

// shrink releases what an idle connection does not need. Anything still
// holding packets (a queue, a ring, the reorder window) is left alone.
func (c *Conn) shrink(now mono.Time) {
	c.shrunk = true
	if c.fq != nil && c.fq.Len() == 0 {
		c.aqmPast = addAQMStats(c.aqmPast, c.fq.Stats())
		c.fq, c.flowOrd = nil, nil
	}
	if c.classHead == c.classTail {
		c.classQ, c.classHead, c.classTail = nil, 0, 0
	}
	if len(c.rtxQ) == 0 {
		c.rtxQ = nil
	}
	if len(c.nackOut) == 0 {
		c.nackOut = nil
	}
	for _, sf := range c.subflows {
		c.rtxExpire(now, sf)
		sf.hist.ShrinkRepair()
		if cc, ok := sf.cc.(ccid.Compacter); ok {
			cc.Compact(now)
		}
	}
	if r, ok := c.reo.(reorder.Shrinker); ok {
		r.Shrink()
	}
	if s, ok := c.sched.(scheduler.Shrinker); ok {
		s.Shrink()
	}
	for _, s := range c.classScheds {
		if s, ok := s.(scheduler.Shrinker); ok {
			s.Shrink()
		}
	}
}

// addAQMStats adds the counters of a released send queue to the earlier
// ones, so that a connection's statistics survive its idle spells.
func addAQMStats(a, b aqm.Stats) aqm.Stats {
	a.Enqueued += b.Enqueued
	a.Dequeued += b.Dequeued
	a.Marked += b.Marked
	a.Dropped += b.Dropped
	a.TailDropped += b.TailDropped
	a.Superseded += b.Superseded
	a.MaxSojourn = max(a.MaxSojourn, b.MaxSojourn)
	return a
}
