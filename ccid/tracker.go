// SPDX-License-Identifier: MIT

package ccid

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// seqMask keeps DCCP sequence numbers to their 48 bits.
const seqMask = 1<<48 - 1

// sentPacket is the sender's record of one packet (see History).
type sentPacket struct {
	seq   uint64 // wire sequence number
	sent  mono.Time
	bytes int32
	// txInFlight is the bytes in flight when this was sent, itself
	// included (BBR).
	txInFlight int32

	// Delivery-rate sampling state at send time (draft-cheng-iccrg-
	// delivery-rate-estimation), used by BBR.
	delivered     uint64 // bytes delivered when this was sent
	deliveredTime mono.Time
	firstSentTime mono.Time
	sentCum       uint64 // bytes sent before this packet (BBR)
	firstSentCum  uint64 // sentCum of the packet sent at firstSentTime
	lostAtSend    uint64 // bytes declared lost when this was sent
	episode       uint32 // congestion episode at the time it was declared lost
	flags         uint8
	appLimited    bool
	probing       bool // sent in Startup, ProbeBW_REFILL or ProbeBW_UP (BBR)

	ackNo  uint64 // the Ack Number it carried (History.NoteAck)
	repair Repair // loss repair's copy (History.KeepRepair)
}

const (
	pktInFlight uint8 = 1 << iota // counts against the window
	pktAcked
	pktLost    // declared lost (may still be acked later: spurious)
	pktSampled // gave an RTT sample already
)

// lossEvents receives what the tracker learns from one acknowledgement.
type lossEvents interface {
	// acked: p was newly reported received; ecn if the cell was
	// Received-ECN-Marked. late is true when p had been declared lost.
	acked(p *sentPacket, idx uint64, ecn, late bool)
	// lost: p is now declared lost.
	lost(p *sentPacket, idx uint64)
}

// tracker keeps the packets in flight, walks Ack Vectors against them,
// estimates the RTT and detects losses. Loss detection follows RACK
// (RFC 8985) on top of RFC 4341's NUMDUPACK rule: until reordering has been
// seen, a packet is lost once three packets sent after it are acked; once it
// has been seen, only when a packet sent more than reoWnd after it was acked
// (or when reoWnd has passed with nothing heard of it). reoWnd adapts to the
// reordering observed, so a path that reorders by 20 ms does not look lossy.
//
// Its records live in the subflow's History: [head, next) are the
// tracker's; the ring may keep older ones for loss repair and ack-of-ack.
type tracker struct {
	*History
	// window is the records the tracker means to keep before dropping
	// old lost ones: it doubles as the window grows and shrinks back when
	// the subflow idles (compact).
	window int

	inFlight      int // packets counting against the window
	inFlightBytes int

	// RTT (RFC 6298 estimator).
	srtt, rttvar, minRTT, latestRTT time.Duration
	hasRTT                          bool
	sampled                         bool // the last feedback gave an RTT sample

	// RACK state.
	rackXmit     mono.Time     // send time of the most recently sent acked packet
	rackIdx      uint64        // its index
	rackRTT      time.Duration // its RTT
	highAcked    uint64        // highest index acked + 1
	reorderSeen  bool
	reorderExt   time.Duration // observed reordering extent (decaying max)
	reorderStamp mono.Time
	reoMult      int // RFC 8985 reo_wnd_mult, raised on spurious losses

	// Counters.
	sent, ackedPkts, lostPkts, ecnMarks uint64
	lostBytes                           uint64
	lateAcks                            uint64 // packets acked after being declared lost
	spuriousEvents                      uint64
}

// trackerMin is the window a tracker starts with: enough for an idle
// subflow's keepalives.
const trackerMin = historyMin

// newTracker returns a tracker keeping its records in h, or in a history
// of its own when h is nil. A controller that replaces another on the
// same subflow starts afresh: the records in h are no longer in flight.
func newTracker(h *History) *tracker {
	if h == nil {
		h = NewHistory()
	}
	for i := h.head; i < h.next; i++ {
		bitSet(h.pending, i&h.mask, false)
		bitSet(h.live, i&h.mask, false)
	}
	h.head = h.next
	return &tracker{History: h, window: trackerMin, reoMult: 1}
}

func (t *tracker) setPending(i uint64, on bool) {
	bitSet(t.pending, i&t.mask, on)
	if !on {
		bitSet(t.live, i&t.mask, false)
	}
}

// nextPending returns the first pending index in [i, end), or end.
func (t *tracker) nextPending(i, end uint64) uint64 { return t.nextIn(t.pending, i, end) }

// nextLive returns the first index in [i, end) still in flight, or end.
func (t *tracker) nextLive(i, end uint64) uint64 { return t.nextIn(t.live, i, end) }

// onSent records packet seq. It returns the record so that controllers can
// stamp their own send-time state, and its index.
func (t *tracker) onSent(now mono.Time, seq uint64, bytes int, inFlight bool) (*sentPacket, uint64) {
	seq &= seqMask
	if !t.started {
		t.started = true
		t.seqBase = seq
	} else if d := (seq - t.seqOf(t.next)) & seqMask; d != 0 {
		// The engine skipped sequence numbers (or went back). Small forward
		// gaps are filled with placeholders; anything else restarts the
		// numbering (the packets in flight are forgotten).
		if d < 1<<16 {
			for ; d > 0; d-- {
				t.onSent(now, t.seqOf(t.next), 0, false)
			}
		} else {
			t.forgetAll()
			t.seqBase = (seq - t.next) & seqMask
		}
	}
	if t.next-t.head >= uint64(t.window) {
		// Below the size the ring used to start at, grow rather than
		// forget lost packets whose late acks would show them spurious.
		t.prune(now, t.window >= 1024)
		if t.next-t.head >= uint64(t.window) {
			t.window *= 2
		}
	}
	i := t.push(seq)
	p := t.pkt(i)
	p.sent, p.bytes = now, int32(bytes)
	t.sent++
	if inFlight {
		p.flags = pktInFlight
		t.inFlight++
		t.inFlightBytes += bytes
		t.setPending(i, true)
		bitSet(t.live, i&t.mask, true)
	} else {
		t.setPending(i, false)
	}
	return p, i
}

// compact drops what no longer matters and shrinks the ring to what is
// still kept, so that an idle subflow holds a few records, not its
// largest window's.
func (t *tracker) compact(now mono.Time) {
	t.prune(now, false)
	if n := max(int(t.next-t.head), trackerMin); n <= t.window/4 {
		w := trackerMin
		for w < n {
			w <<= 1
		}
		t.window = w
	}
	t.History.compact()
}

// forgetAll drops every record (after a sequence jump).
func (t *tracker) forgetAll() {
	for i := t.head; i < t.next; i++ {
		t.setPending(i, false)
	}
	t.head = t.next
	t.inFlight, t.inFlightBytes = 0, 0
}

// prune drops records from the head that no longer matter: acked ones, ones
// not in flight, and lost ones that are too old to come back.
func (t *tracker) prune(now mono.Time, force bool) {
	keep := t.srtt + 4*t.rttvar + t.reoWnd(true) + 100*time.Millisecond
	if !t.hasRTT {
		keep = time.Second
	}
	for t.head < t.next {
		p := t.pkt(t.head)
		if p.flags&pktInFlight != 0 && p.flags&pktAcked == 0 {
			if p.flags&pktLost == 0 {
				break // still outstanding
			}
			if !force && now.Sub(p.sent) < keep {
				break // a late arrival would show the loss was spurious
			}
			t.setPending(t.head, false)
		}
		t.head++
	}
}

// reoWnd is RACK's reordering window. Before any reordering is seen it is
// zero when NUMDUPACK packets above have been acked (RFC 4341 behaviour),
// else a quarter of the min RTT.
func (t *tracker) reoWnd(reorderSeen bool) time.Duration {
	if !reorderSeen {
		return 0
	}
	w := time.Duration(t.reoMult) * t.minRTT / 4
	if t.hasRTT && w > t.srtt {
		w = t.srtt
	}
	// The reordering actually observed may exceed RFC 8985's SRTT cap: DCCP
	// never retransmits, so waiting longer only delays the congestion
	// response, which is better than a spurious one. Bounded at 4 × SRTT.
	ext := t.reorderExt + t.reorderExt/4
	if t.hasRTT {
		ext = min(ext, 4*t.srtt)
	}
	return max(w, ext)
}

// rto is the retransmission timeout after backoff timeouts in a row:
// RFC 6298's SRTT + 4·RTTVAR with the variance term floored
// (minRTTVarTerm), doubled per timeout up to maxRTO.
func (t *tracker) rto(backoff uint) time.Duration {
	r := initRTO
	if t.hasRTT {
		r = t.srtt + max(4*t.rttvar, minRTTVarTerm)
	}
	return min(r<<min(backoff, 10), maxRTO)
}

// reseedRTT starts the smoothed RTT afresh from rtt, as from a first
// sample (RFC 6298 §2.2; §5.7 re-initialises after an outage). The min RTT
// is kept.
func (t *tracker) reseedRTT(rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	t.hasRTT = true
	t.srtt, t.rttvar, t.latestRTT = rtt, rtt/2, rtt
	if t.minRTT <= 0 || rtt < t.minRTT {
		t.minRTT = rtt
	}
}

func (t *tracker) updateRTT(now mono.Time, sample time.Duration) {
	if sample <= 0 {
		sample = time.Microsecond
	}
	t.latestRTT = sample
	if !t.hasRTT {
		t.hasRTT = true
		t.srtt = sample
		t.rttvar = sample / 2
		t.minRTT = sample
		return
	}
	if sample < t.minRTT {
		t.minRTT = sample
	}
	d := t.srtt - sample
	if d < 0 {
		d = -d
	}
	t.rttvar = (3*t.rttvar + d) / 4
	t.srtt = (7*t.srtt + sample) / 8
}

// idxOfSeq maps a wire sequence number to an index in [head, next), or
// reports false.
func (t *tracker) idxOfSeq(seq uint64) (uint64, bool) {
	i, ok := t.indexOf(seq)
	return i, ok && i >= t.head
}

// onFeedback walks fb's Ack Vector. It calls ev for each newly acked packet
// and for each packet now declared lost. It returns whether anything new
// was acked.
func (t *tracker) onFeedback(now mono.Time, fb *Feedback, ev lossEvents) bool {
	if !t.started {
		return false
	}
	// RTT from the packet that triggered this ack, minus the peer's delay.
	t.sampled = false
	if i, ok := t.idxOfSeq(fb.AckNo & seqMask); ok {
		p := t.pkt(i)
		// A pure Ack of ours may wait for the peer's next packet to be
		// acknowledged: trust it only with the peer's Elapsed Time.
		if p.flags&(pktAcked|pktSampled) == 0 && (p.flags&pktInFlight != 0 || fb.Elapsed > 0) {
			p.flags |= pktSampled
			if s := now.Sub(p.sent) - fb.Elapsed; s > 0 || fb.Elapsed == 0 {
				t.updateRTT(now, s)
				t.sampled = true
			}
		}
	}
	any := false
	// Oldest run first, so packets acked by one feedback are visited in
	// send order and do not look reordered among themselves.
	for k := len(fb.Runs) - 1; k >= 0; k-- {
		r := fb.Runs[k]
		if r.State != Received && r.State != ReceivedECNMarked || r.N == 0 {
			continue
		}
		hi := r.High & seqMask
		lo := (hi - uint64(r.N) + 1) & seqMask
		// Intersect [lo, hi] with [head, next).
		dhi := (hi - t.seqOf(t.head)) & seqMask
		dlo := (lo - t.seqOf(t.head)) & seqMask
		span := t.next - t.head
		var a, b uint64 // indices [a, b)
		switch {
		case dlo <= dhi: // run does not wrap relative to head
			if dlo >= span {
				continue
			}
			a = t.head + dlo
			b = t.head + min(dhi+1, span)
		default: // run starts before head
			if dhi >= span && dhi > seqMask/2 {
				continue
			}
			a = t.head
			b = t.head + min(dhi+1, span)
		}
		ecn := r.State == ReceivedECNMarked
		for i := t.nextPending(a, b); i < b; i = t.nextPending(i+1, b) {
			p := t.pkt(i)
			late := p.flags&pktLost != 0
			p.flags |= pktAcked
			t.setPending(i, false)
			any = true
			t.ackedPkts++
			if ecn {
				t.ecnMarks++
			}
			if !late {
				t.inFlight--
				t.inFlightBytes -= int(p.bytes)
			} else {
				t.lateAcks++
			}
			// Reordering: this packet was overtaken by a later one.
			if i < t.highAcked && p.sent < t.rackXmit {
				t.reorderSeen = true
				ext := t.rackXmit.Sub(p.sent)
				if ext > t.reorderExt || now.Sub(t.reorderStamp) > 10*time.Second {
					t.reorderExt = ext
					t.reorderStamp = now
				}
			}
			if p.sent >= t.rackXmit {
				t.rackXmit, t.rackIdx = p.sent, i
				t.rackRTT = now.Sub(p.sent)
			}
			if i+1 > t.highAcked {
				t.highAcked = i + 1
			}
			ev.acked(p, i, ecn, late)
		}
	}
	t.detectLosses(now, ev)
	t.prune(now, false)
	return any
}

// detectLosses declares lost the outstanding packets RACK considers lost.
func (t *tracker) detectLosses(now mono.Time, ev lossEvents) {
	if t.highAcked == 0 {
		return
	}
	reo := t.reoWnd(t.reorderSeen)
	if !t.reorderSeen {
		reo = t.minRTT / 4
	}
	// Count acked packets above each candidate for NUMDUPACK: walk the
	// outstanding packets oldest first; they are sorted by send time.
	for i := t.nextLive(t.head, t.highAcked); i < t.highAcked; i = t.nextLive(i+1, t.highAcked) {
		p := t.pkt(i)
		if p.sent > t.rackXmit {
			break
		}
		lost := now.Sub(p.sent) >= t.rackRTT+reo
		if !lost && !t.reorderSeen {
			lost = t.ackedAbove(i, 3)
		}
		if !lost {
			// Packets are in send order: a later one is not lost either,
			// unless the dupack rule applies to it.
			if t.reorderSeen {
				break
			}
			continue
		}
		t.markLost(i, p)
		ev.lost(p, i)
	}
}

// ackedAbove reports whether at least n in-flight packets with an index
// above i have been acked.
func (t *tracker) ackedAbove(i uint64, n int) bool {
	for j := t.highAcked - 1; j > i && n > 0; j-- {
		p := t.pkt(j)
		if p.flags&(pktAcked|pktInFlight) == pktAcked|pktInFlight {
			n--
		}
		if t.highAcked-j > 4096 {
			break
		}
	}
	return n <= 0
}

func (t *tracker) markLost(i uint64, p *sentPacket) {
	p.flags |= pktLost
	bitSet(t.live, i&t.mask, false)
	t.inFlight--
	t.inFlightBytes -= int(p.bytes)
	t.lostPkts++
	t.lostBytes += uint64(p.bytes)
}

// lossDeadline is when the oldest outstanding packet would be declared lost
// by RACK's timer, or Never.
func (t *tracker) lossDeadline() mono.Time {
	if t.highAcked == 0 || t.inFlight == 0 {
		return mono.Never
	}
	i := t.nextLive(t.head, t.highAcked)
	if i >= t.highAcked {
		return mono.Never
	}
	p := t.pkt(i)
	if p.sent > t.rackXmit {
		return mono.Never
	}
	reo := t.reoWnd(t.reorderSeen)
	if !t.reorderSeen {
		reo = t.minRTT / 4
	}
	return p.sent.Add(t.rackRTT + reo)
}

// onLossTimer runs RACK's timer.
func (t *tracker) onLossTimer(now mono.Time, ev lossEvents) {
	t.detectLosses(now, ev)
	t.prune(now, false)
}

// declareAllLost marks every outstanding packet lost (retransmission
// timeout). It returns how many were.
func (t *tracker) declareAllLost(ev lossEvents) int {
	n := 0
	for i := t.nextLive(t.head, t.next); i < t.next; i = t.nextLive(i+1, t.next) {
		p := t.pkt(i)
		t.markLost(i, p)
		ev.lost(p, i)
		n++
	}
	return n
}

// oldestOutstanding returns the send time of the oldest packet in flight.
func (t *tracker) oldestOutstanding() (mono.Time, bool) {
	if i := t.nextLive(t.head, t.next); i < t.next {
		return t.pkt(i).sent, true
	}
	return 0, false
}

// onSpurious is told by a controller that a loss episode was spurious, so
// that the reordering window widens (RFC 8985 §6.2, reo_wnd_mult).
func (t *tracker) onSpurious() {
	t.spuriousEvents++
	t.reorderSeen = true
	if t.reoMult < 4 {
		t.reoMult++
	}
}
