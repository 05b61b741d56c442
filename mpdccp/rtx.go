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
// keeps each data packet until its subflow's Ack Vector reports it; a
// packet reported missing while three later sequence numbers arrived is
// sent once more, with its MP_SEQ, on the fastest ready path. The
// receiver's reorderer holds the gap meanwhile and drops whichever copy
// comes second as a duplicate, exactly as for redundant scheduling, so
// the wire format and a peer without loss repair are unaffected.

const (
	rtxRingSize  = 2048 // per subflow; a power of two
	rtxDupThresh = 3
)

type rtxEntry struct {
	seq   uint64 // the subflow's DCCP sequence number of the packet
	mpSeq uint64
	b     []byte
	n     int
	at    mono.Time
}

// rtxRing holds a subflow's unacknowledged data packets in sequence order.
type rtxRing struct {
	ents       []rtxEntry
	head, tail uint64
}

// rtxItem is a packet waiting to be sent again.
type rtxItem struct {
	mpSeq uint64
	b     []byte
	n     int
}

func (c *Conn) rtxMaxAge() time.Duration {
	if h := c.ep.cfg.Reorder.MaxHold; h > 0 {
		return h
	}
	return 100 * time.Millisecond
}

// rtxKeep stores a data packet just sent on sf; the ring owns b from now on.
func (c *Conn) rtxKeep(now mono.Time, sf *subflow, mpSeq uint64, b []byte, n int) {
	r := &sf.rtx
	if r.ents == nil {
		r.ents = make([]rtxEntry, rtxRingSize)
	}
	if r.tail-r.head == rtxRingSize {
		c.rtxRelease(&r.ents[r.head%rtxRingSize])
		r.head++
	}
	r.ents[r.tail%rtxRingSize] = rtxEntry{seq: sf.gss, mpSeq: mpSeq, b: b, n: n, at: now}
	r.tail++
}

func (c *Conn) rtxRelease(e *rtxEntry) {
	if e.b != nil {
		c.ep.pool.put(e.b)
	}
	*e = rtxEntry{}
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
		e := &r.ents[i%rtxRingSize]
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
			if now.Sub(e.at) < maxAge && len(c.rtxQ) < rtxRingSize {
				c.rtxQ = append(c.rtxQ, rtxItem{mpSeq: e.mpSeq, b: e.b, n: e.n})
				*e = rtxEntry{}
				c.stats.Repaired++
			} else {
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

// pollRepair sends a queued repair on the ready path with the lowest RTT.
func (c *Conn) pollRepair(now mono.Time, buf []byte) (Transmit, bool) {
	for len(c.rtxQ) > 0 {
		it := c.rtxQ[0]
		var best *subflow
		for _, sf := range c.subflows {
			if !sf.usable() || !sf.ready(now) {
				continue
			}
			if best == nil || sf.cc.State().SRTT < best.cc.State().SRTT {
				best = sf
			}
		}
		if best == nil {
			return Transmit{}, false
		}
		// Shift down rather than reslice, so the queue's array is reused
		// and repairs never allocate in steady state.
		n := copy(c.rtxQ, c.rtxQ[1:])
		c.rtxQ[n] = rtxItem{}
		c.rtxQ = c.rtxQ[:n]
		t, ok := c.sendData(now, best, buf, it.b[:it.n], it.mpSeq)
		c.ep.pool.put(it.b)
		if ok {
			return t, true
		}
	}
	return Transmit{}, false
}

// rtxReleaseAll frees every buffer loss repair holds (connection closing).
func (c *Conn) rtxReleaseAll() {
	for _, it := range c.rtxQ {
		c.ep.pool.put(it.b)
	}
	c.rtxQ = c.rtxQ[:0]
	for _, sf := range c.subflows {
		for sf.rtx.head != sf.rtx.tail {
			c.rtxRelease(&sf.rtx.ents[sf.rtx.head%rtxRingSize])
			sf.rtx.head++
		}
	}
}
