// SPDX-License-Identifier: MIT

package mpdccp

import (
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
)

// Loss repair (Config.Retransmit). DCCP is unreliable, and the inner TCP
// of a tunnel pays for every packet a path drops with a congestion
// reaction of its own, on the whole aggregate. With loss repair a sender
// keeps each data packet until its subflow's Ack Vector reports it, and
// sends it once more, with its MP_SEQ, on the cheapest ready path when
//   - the receiver reports it lost: a hole in a path's own sequence is
//     seen as soon as the next packet on that path arrives, and asked for
//     with a NACK over the fastest path (nack.go); a repair takes about
//     the fastest path's round trip, whatever the lossy path's delay;
//   - or the subflow's Ack Vector reports it missing while three later
//     sequence numbers arrived (the receiver may not support NACKs).
// The repair is kept like any data packet on the path that carries it, so
// a lost repair is repaired again. The receiver's reorderer holds the gap
// meanwhile and drops whichever copy comes second as a duplicate, exactly
// as for redundant scheduling.

const (
	rtxRingMin   = 32   // entries a subflow's ring starts with; a power of two
	rtxRingSize  = 2048 // most entries a subflow's ring grows to; a power of two
	rtxDupThresh = 3
)

type rtxEntry struct {
	seq    uint64 // the subflow's DCCP sequence number of the packet
	mpSeq  uint64 // kept after release, to find the path a NACK names
	b      []byte // nil once acknowledged, repaired or given up
	n      int
	at     mono.Time
	repair bool // a repair of a packet first sent on another path
}

// rtxRing holds a subflow's data packets in sequence order. It grows
// with the window it covers and is freed when a connection idles, so an
// idle subflow costs nothing here.
type rtxRing struct {
	ents       []rtxEntry // len is a power of two, or 0
	head, tail uint64
}

func (r *rtxRing) at(i uint64) *rtxEntry { return &r.ents[i&uint64(len(r.ents)-1)] }

func (r *rtxRing) full() bool { return r.tail-r.head == uint64(len(r.ents)) }

// grow doubles the ring (or allocates its first one), keeping the
// entries' positions by index.
func (r *rtxRing) grow() {
	n := max(2*len(r.ents), rtxRingMin)
	ents := make([]rtxEntry, n)
	for i := r.head; i != r.tail; i++ {
		ents[i&uint64(n-1)] = *r.at(i)
	}
	r.ents = ents
}

// shrink frees an empty ring.
func (r *rtxRing) shrink() {
	if r.head == r.tail {
		r.ents = nil
	}
}

// rtxItem is a packet waiting to be sent again.
type rtxItem struct {
	mpSeq uint64
	b     []byte
	n     int
}

// rtxMaxAge is how long a packet is kept for repair: the receiver holds a
// gap about that long at most.
func (c *Conn) rtxMaxAge() time.Duration {
	if h := c.ep.cfg.Reorder.MaxHold; h > 0 {
		return h
	}
	var srtt time.Duration
	for _, sf := range c.subflows {
		if sf.state == sfOpen {
			srtt = max(srtt, sf.cc.State().SRTT)
		}
	}
	return min(max(2*srtt+100*time.Millisecond, 200*time.Millisecond), 2*time.Second)
}

// rtxKeep stores a data packet just sent on sf; the ring owns b from now on.
func (c *Conn) rtxKeep(now mono.Time, sf *subflow, mpSeq uint64, b []byte, n int, repair bool) {
	r := &sf.rtx
	if r.full() {
		if len(r.ents) < rtxRingSize {
			r.grow()
		} else {
			c.rtxRelease(r.at(r.head))
			r.head++
		}
	}
	*r.at(r.tail) = rtxEntry{seq: sf.gss, mpSeq: mpSeq, b: b, n: n, at: now, repair: repair}
	r.tail++
}

// rtxRelease frees an entry's buffer; its sequence numbers stay.
func (c *Conn) rtxRelease(e *rtxEntry) {
	if e.b != nil {
		c.ep.pool.put(e.b)
	}
	e.b, e.n = nil, 0
}

// rtxRepair queues e's packet for one more transmission.
func (c *Conn) rtxRepair(e *rtxEntry) bool {
	if e.b == nil || len(c.rtxQ) >= rtxRingSize {
		return false
	}
	c.rtxQ = append(c.rtxQ, rtxItem{mpSeq: e.mpSeq, b: e.b, n: e.n})
	e.b, e.n = nil, 0
	c.stats.Repaired++
	c.holdUntil, c.repairAt = 0, 0
	return true
}

// runState finds seq in an Ack Vector: its state, and whether it is covered.
func runState(runs []ccid.AckRun, seq uint64) (ccid.AckState, bool) {
	for _, r := range runs {
		d := seqDiff(r.High, seq)
		if d >= 0 && d < int64(r.N) {
			return r.State, true
		}
	}
	return 0, false
}

// rtxOnFeedback releases acknowledged packets and queues lost ones for
// one more transmission. ackNo is the peer's greatest received sequence
// number on sf.
func (c *Conn) rtxOnFeedback(now mono.Time, sf *subflow, ackNo uint64, runs []ccid.AckRun) {
	r := &sf.rtx
	maxAge := c.rtxMaxAge()
	for i := r.head; i != r.tail; i++ {
		e := r.at(i)
		if e.b == nil {
			if i == r.head {
				r.head++
			}
			continue
		}
		if seqLess(ackNo, e.seq) {
			break // not yet reported on
		}
		st, covered := runState(runs, e.seq)
		switch {
		case covered && st != ccid.NotReceived:
			c.rtxRelease(e)
		case covered && seqDiff(ackNo, e.seq) >= rtxDupThresh:
			if now.Sub(e.at) >= maxAge || !c.rtxRepair(e) {
				c.rtxRelease(e)
			}
		case !covered && now.Sub(e.at) >= maxAge:
			// Beyond what the vector covers and too old to help the
			// receiver's reorder buffer: forget it.
			c.rtxRelease(e)
		}
		if e.b == nil && i == r.head {
			r.head++
		}
	}
}

// rtxExpire drops packets too old to repair, so an idle or dead subflow
// does not pin buffers.
func (c *Conn) rtxExpire(now mono.Time, sf *subflow) {
	r := &sf.rtx
	maxAge := c.rtxMaxAge()
	for r.head != r.tail {
		e := r.at(r.head)
		if e.b != nil && now.Sub(e.at) < maxAge {
			return
		}
		c.rtxRelease(e)
		r.head++
	}
}

// rtxCarried reports whether sf sent a data packet with MP_SEQ mpSeq that
// it still remembers.
func (sf *subflow) rtxCarried(mpSeq uint64) bool {
	r := &sf.rtx
	for i := r.tail; i != r.head; i-- {
		if r.at(i-1).mpSeq == mpSeq {
			return true
		}
	}
	return false
}

// rtxOnNACK repairs what the receiver reports lost between the data
// packets with MP_SEQ before and after of one path: the unacknowledged
// packets in between that the same subflow carried, and repairs of them
// (on other paths) that should have arrived by now.
func (c *Conn) rtxOnNACK(now mono.Time, before, after uint64) {
	if seqDiff(after, before) <= 1 {
		return
	}
	var carrier *subflow
	for _, sf := range c.subflows {
		if sf.rtxCarried(after) {
			carrier = sf
			break
		}
	}
	for _, sf := range c.subflows {
		overdue := sf.cc.State().SRTT
		overdue += overdue/2 + 5*time.Millisecond
		r := &sf.rtx
		for i := r.head; i != r.tail; i++ {
			e := r.at(i)
			if e.b == nil || seqDiff(e.mpSeq, before) <= 0 || seqDiff(e.mpSeq, after) >= 0 {
				continue
			}
			if sf == carrier && !e.repair || (e.repair || carrier == nil) && now.Sub(e.at) >= overdue {
				c.rtxRepair(e)
			}
		}
	}
}

// rtxOnMissing repairs the unacknowledged packets with an MP_SEQ between
// before and after, on whichever subflow they went, that should have
// arrived by now (the receiver saw every path pass them).
func (c *Conn) rtxOnMissing(now mono.Time, before, after uint64) {
	if seqDiff(after, before) <= 1 {
		return
	}
	for _, sf := range c.subflows {
		st := sf.cc.State()
		due := max(sf.baseOWD(&st), st.SRTT/2) + 5*time.Millisecond
		r := &sf.rtx
		for i := r.head; i != r.tail; i++ {
			e := r.at(i)
			if e.b != nil && seqDiff(e.mpSeq, before) > 0 && seqDiff(e.mpSeq, after) < 0 && now.Sub(e.at) >= due {
				c.rtxRepair(e)
			}
		}
	}
}

// pollRepair sends a queued repair on the cheapest ready path and keeps it
// there, so that a lost repair is repaired too.
func (c *Conn) pollRepair(now mono.Time, buf []byte) (Transmit, bool) {
	for len(c.rtxQ) > 0 {
		it := c.rtxQ[0]
		best, ok := c.repairPath(now)
		if !ok {
			c.repairAt = c.pacingRelease(now)
			if best != nil {
				c.repairAt = best.cc.SendTime(now)
			}
			return Transmit{}, false
		}
		// Shift down rather than reslice, so the queue's array is reused
		// and repairs never allocate in steady state.
		n := copy(c.rtxQ, c.rtxQ[1:])
		c.rtxQ[n] = rtxItem{}
		c.rtxQ = c.rtxQ[:n]
		t, ok := c.sendData(now, best, buf, it.b[:it.n], it.mpSeq, false)
		if ok {
			c.rtxKeep(now, best, it.mpSeq, it.b, it.n, true)
			return t, true
		}
		c.ep.pool.put(it.b)
	}
	return Transmit{}, false
}

// pacingRelease is the earliest time a usable path with window room may
// send, or Never (an ack will open a window).
func (c *Conn) pacingRelease(now mono.Time) mono.Time {
	t := mono.Never
	for _, sf := range c.subflows {
		if sf.usable() && sf.cc.CanSend(now) {
			t = mono.Min(t, sf.cc.SendTime(now))
		}
	}
	return t
}

// repairPath is the path on which a repair arrives soonest: the wait for
// its pacer, its one-way delay now, and the expected cost of losing the
// repair there too. Only a path with window room counts; ok is false when
// the best one must first wait for its pacer (until repairAt).
func (c *Conn) repairPath(now mono.Time) (best *subflow, ok bool) {
	var bestCost time.Duration
	for _, sf := range c.subflows {
		if !sf.usable() || !sf.cc.CanSend(now) {
			continue
		}
		st := sf.cc.State()
		cost := max(sf.cc.SendTime(now).Sub(now), 0) + max(sf.baseOWD(&st), st.SRTT/2) +
			time.Duration(sf.lossRate*float64(st.SRTT))
		if best == nil || cost < bestCost {
			best, bestCost = sf, cost
		}
	}
	return best, best != nil && best.ready(now)
}

// rtxReleaseAll frees every buffer loss repair holds (connection closing).
func (c *Conn) rtxReleaseAll() {
	for _, it := range c.rtxQ {
		c.ep.pool.put(it.b)
	}
	c.rtxQ = c.rtxQ[:0]
	for _, sf := range c.subflows {
		for sf.rtx.head != sf.rtx.tail {
			c.rtxRelease(sf.rtx.at(sf.rtx.head))
			sf.rtx.head++
		}
	}
}
