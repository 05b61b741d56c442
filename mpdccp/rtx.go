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
//   - or the subflow's controller declares it lost from the Ack Vectors
//     (the receiver may not support NACKs): three later sequence numbers
//     arrived, or, once the path was seen to reorder, a packet sent more
//     than the reordering's extent after it (RACK, ccid's tracker).
// The repair is kept like any data packet on the path that carries it, so
// a lost repair is repaired again. The receiver's reorderer holds the gap
// meanwhile and drops whichever copy comes second as a duplicate, exactly
// as for redundant scheduling.

// A subflow's repair entries live in its sent-packet history
// (ccid.History), with the packets' records: at most ccid.RepairMax.
const rtxRingSize = ccid.RepairMax

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
// (The packet just went out with sequence number sf.gss at now: its
// record in sf.hist has both.)
func (c *Conn) rtxKeep(now mono.Time, sf *subflow, mpSeq uint64, b []byte, n int, repair bool) {
	if old := sf.hist.KeepRepair(sf.gss, ccid.Repair{MPSeq: mpSeq, B: b, N: int32(n), Again: repair}); old != nil {
		c.ep.pool.put(old)
	}
}

// rtxRelease frees an entry's buffer; its sequence numbers stay.
func (c *Conn) rtxRelease(e *ccid.Repair) {
	if e.B != nil {
		c.ep.pool.put(e.B)
	}
	e.B, e.N = nil, 0
}

// rtxDrop frees and forgets every entry sf holds.
func (c *Conn) rtxDrop(sf *subflow) {
	h := sf.hist
	for h.RepairHead() != h.End() {
		c.rtxRelease(h.Repair(h.RepairHead()))
		h.PopRepair()
	}
}

// rtxRepair queues e's packet for one more transmission.
func (c *Conn) rtxRepair(e *ccid.Repair) bool {
	if e.B == nil || len(c.rtxQ) >= rtxRingSize {
		return false
	}
	c.rtxQ = append(c.rtxQ, rtxItem{mpSeq: e.MPSeq, b: e.B, n: int(e.N)})
	e.B, e.N = nil, 0
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
	h := sf.hist
	maxAge := c.rtxMaxAge()
	for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
		e := h.Repair(i)
		if e.B == nil {
			if i == h.RepairHead() {
				h.PopRepair()
			}
			continue
		}
		seq := h.Seq(i)
		if seqLess(ackNo, seq) {
			break // not yet reported on
		}
		st, covered := runState(runs, seq)
		switch {
		case covered && st != ccid.NotReceived:
			c.rtxRelease(e)
		case h.Lost(i):
			// Not three later sequence numbers alone (RFC 4341's rule): a
			// path whose jitter reorders tens of packets would have most
			// of them repaired while they are on their way.
			if now.Sub(h.SentAt(i)) >= maxAge || !c.rtxRepair(e) {
				c.rtxRelease(e)
			}
		case !covered && now.Sub(h.SentAt(i)) >= maxAge:
			// Beyond what the vector covers and too old to help the
			// receiver's reorder buffer: forget it.
			c.rtxRelease(e)
		}
		if e.B == nil && i == h.RepairHead() {
			h.PopRepair()
		}
	}
}

// rtxExpire drops packets too old to repair, so an idle or dead subflow
// does not pin buffers.
func (c *Conn) rtxExpire(now mono.Time, sf *subflow) {
	h := sf.hist
	maxAge := c.rtxMaxAge()
	for i := h.RepairHead(); i != h.End(); i = h.RepairHead() {
		e := h.Repair(i)
		if e.B != nil && now.Sub(h.SentAt(i)) < maxAge {
			return
		}
		c.rtxRelease(e)
		h.PopRepair()
	}
}

// rtxCarried reports whether sf sent a data packet with MP_SEQ mpSeq that
// it still remembers.
func (sf *subflow) rtxCarried(mpSeq uint64) bool {
	h := sf.hist
	for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
		if h.Repair(i).MPSeq == mpSeq {
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
		h := sf.hist
		for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
			e := h.Repair(i)
			if e.B == nil || seqDiff(e.MPSeq, before) <= 0 || seqDiff(e.MPSeq, after) >= 0 {
				continue
			}
			if sf == carrier && !e.Again || (e.Again || carrier == nil) && now.Sub(h.SentAt(i)) >= overdue {
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
		due := sf.oneWay(now, &st) + 5*time.Millisecond
		h := sf.hist
		for i := h.RepairHead(); i != h.End(); i = h.NextRepair(i + 1) {
			e := h.Repair(i)
			if e.B != nil && seqDiff(e.MPSeq, before) > 0 && seqDiff(e.MPSeq, after) < 0 && now.Sub(h.SentAt(i)) >= due {
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
		cost := max(sf.cc.SendTime(now).Sub(now), 0) + sf.oneWay(now, &st) +
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
		c.rtxDrop(sf)
	}
}
