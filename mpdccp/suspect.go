// SPDX-License-Identifier: MIT

package mpdccp

import (
	"errors"
	"fmt"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

// Path suspicion and re-injection. A path that stops acknowledging goes
// silent long before PathTimeout declares it failed; the data packets it
// holds are then lost to the inner flows (a silent blackhole of one path
// lost 156 probe packets in the demo). So a subflow is *suspected* as soon
// as its oldest data packet not yet reported on by the peer is older than
// SRTT + max(4·RTTVAR, SRTT/4), or 5/4 of the longest such wait seen in
// the last seconds (a path whose queue comes and goes varies more than
// RTTVAR follows), plus the peer's ack delay; or when a probe of an idle
// path is not answered that fast. A suspected subflow
//   - carries no new data (usable is false),
//   - has the data packets its loss-repair ring still holds sent again at
//     once on the other paths (the receiver drops whichever copy comes
//     second by MP_SEQ, as for redundant scheduling),
//   - is probed every probeInterval with a Sync, and
//   - is trusted again once recoverAnswers probes sent after the suspicion
//     were acknowledged (hysteresis: one late ack of an old packet is not
//     enough).
// PathTimeout still declares it failed if nothing at all is heard.
// Suspicion needs another usable path, heard from after this one should
// have answered: with a single path there is nowhere to re-inject (the
// controller's own timeout does the rest), and a host too busy to read
// its sockets hears no path and must not blame one.

const (
	// recoverAnswers is how many answered probes clear a suspicion.
	recoverAnswers = 2
	// suspectSlack covers the peer's ack delay and the scheduling delays
	// of a busy host (a suspicion that comes from our own late wake-up
	// costs duplicates and a short pause of the path).
	suspectSlack = 2*ackDelay + 10*time.Millisecond
	// minSuspect and maxSuspect bound the suspicion timeout.
	minSuspect = 50 * time.Millisecond
	maxSuspect = 2 * time.Second
	// Probes of a suspected or failed path go every probeInterval, within
	// these bounds: often enough that a path that comes back is in use
	// again well within a second, seldom enough to cost nothing. Every
	// probe consumes a sequence number, and after an outage the peer
	// accepts our packets only if we sent fewer than its Sequence Window
	// (at least 100) meanwhile: so probes slow down the longer the path
	// stays failed (about 70 probes in a 20 s outage). A path manager
	// joins again when the peer's packets arrive out of window anyway.
	minProbeInterval  = 100 * time.Millisecond
	maxProbeInterval  = 250 * time.Millisecond
	slowProbeAfter    = 10 * time.Second
	slowProbeInterval = 500 * time.Millisecond
	idleProbeAfter    = time.Minute
	// reinjectMaxAge: packets older than this are not sent again; the
	// receiver has given up on them long ago.
	reinjectMaxAge = time.Second
)

// suspectState is a subflow's suspicion and probing state.
type suspectState struct {
	on      bool
	since   mono.Time
	answers int
	waitSeq uint64 // an ack of this sequence number answers the probe
	waiting bool
	// The last probe (Sync) and whether its answer is outstanding.
	probeAt  mono.Time
	probeNo  uint64
	probeOut bool
	// cursor is the history index from which the oldest repair entry not
	// yet reported on is searched; it only moves forward (amortised O(1)).
	cursor     uint64
	count      uint64 // suspicions so far
	reinjected uint64 // packets sent again on other paths
	// probeRTT is the round trip of the last answered probe, measured
	// when probeAnswered; it gives an idle (standby) path an RTT.
	probeRTT      time.Duration
	probeAnswered mono.Time
	// lossBefore is the loss estimate when the suspicion began: what the
	// outage lost says nothing about the path once it answers again.
	lossBefore float64
	// The longest time a data packet waited to be reported on, in the
	// current and the previous waitWindow (a windowed maximum).
	waitCur, waitPrev time.Duration
	waitSince         mono.Time
	garAt             mono.Time // when the greatest ack received last grew
	// askedAt is the suspicion time for which the other paths were asked
	// to answer a probe (none had been heard since: idle, or a busy host);
	// probeNow asks this path to probe at once.
	askedAt  mono.Time
	probeNow bool
}

// waitWindow is the span of the windowed maximum of ack waits.
const waitWindow = 2 * time.Second

// suspectTimeout is how long a data packet or probe may go unanswered.
func (sf *subflow) suspectTimeout() time.Duration {
	st := sf.cc.State()
	rtt, v := st.SRTT, st.RTTVar
	if rtt <= 0 {
		rtt, v = sf.hsRTT, sf.hsRTT/2
	}
	if rtt <= 0 {
		return maxSuspect
	}
	// A path's round trip grows by up to a quarter while its controller
	// probes for bandwidth (BBR's ProbeBW_UP queues a quarter of a BDP);
	// on a steady long path RTTVAR is near zero and that probe alone
	// outlasted SRTT + 4·RTTVAR + slack: a satellite path fed overflow
	// was suspected ("no ack for 622 ms") and idle for a second.
	seen := max(sf.sus.waitCur, sf.sus.waitPrev)
	return min(max(rtt+max(4*v, rtt/4)+suspectSlack, seen*5/4+suspectSlack, minSuspect), maxSuspect)
}

// sampleWait records how long a data packet waited until the peer
// reported on it.
func (s *suspectState) sampleWait(now mono.Time, w time.Duration) {
	if el := now.Sub(s.waitSince); el >= waitWindow {
		s.waitPrev = s.waitCur
		if el >= 2*waitWindow {
			s.waitPrev = 0 // a whole window without samples
		}
		s.waitCur, s.waitSince = 0, now
	}
	s.waitCur = max(s.waitCur, w)
}

// probeInterval is how often a suspected or failed path is probed.
func (sf *subflow) probeInterval() time.Duration {
	st := sf.cc.State()
	r := st.SRTT
	if r <= 0 {
		r = sf.hsRTT
	}
	return min(max(2*r, minProbeInterval), maxProbeInterval)
}

// oldestUnreported is the send time of the oldest data packet held for
// loss repair that the peer has not yet reported on (sequence number
// above the greatest acknowledged). Packets passed over on the way have
// been reported on by now: their wait is sampled.
func (sf *subflow) oldestUnreported() (mono.Time, bool) {
	h := sf.hist
	if h.RepairHead() == h.End() {
		return 0, false
	}
	s := &sf.sus
	for s.cursor = h.NextRepair(s.cursor); s.cursor != h.End(); s.cursor = h.NextRepair(s.cursor + 1) {
		if h.Repair(s.cursor).B == nil {
			continue
		}
		at := h.SentAt(s.cursor)
		if seqLess(sf.gar, h.Seq(s.cursor)) {
			return at, true
		}
		if !s.on && s.garAt > at {
			s.sampleWait(s.garAt, s.garAt.Sub(at))
		}
	}
	return 0, false
}

// otherHeard is when a usable path other than sf was last heard from
// (Never: there is none). A path is suspected only once another one was
// heard after it should have been: a host too busy to read its sockets
// hears nothing from any path, and must not blame one of them for it.
func (c *Conn) otherHeard(sf *subflow) mono.Time {
	t := mono.Never
	for _, x := range c.subflows {
		if x != sf && x.usable() {
			if t == mono.Never || x.lastHeard > t {
				t = x.lastHeard
			}
		}
	}
	return t
}

// suspectDeadline is when sf becomes suspect if nothing changes, or when a
// suspected sf has a probe answer to count.
func (c *Conn) suspectDeadline(sf *subflow) mono.Time {
	s := &sf.sus
	if s.probeOut && !seqLess(sf.gar, s.probeNo) {
		return 0 // answered: take the RTT sample
	}
	if s.on {
		if s.waiting && !seqLess(sf.gar, s.waitSeq) {
			return 0
		}
		return mono.Never
	}
	heard := c.otherHeard(sf)
	if sf.failed || heard == mono.Never {
		return mono.Never
	}
	d := sf.suspectDue()
	if heard < d && s.askedAt == d {
		// The other paths were asked; their answer recomputes this.
		return mono.Never
	}
	return d
}

// suspectDue is when sf's suspicion would be due (Never: nothing is).
func (sf *subflow) suspectDue() mono.Time {
	d := mono.Never
	if at, ok := sf.oldestUnreported(); ok {
		d = at.Add(sf.suspectTimeout())
	}
	if sf.sus.probeOut {
		d = mono.Min(d, sf.sus.probeAt.Add(sf.suspectTimeout()))
	}
	return d
}

// askOthers makes the usable paths other than sf that were not heard
// since due probe at once: their answers tell a silent sf from an idle
// or starved host.
func (c *Conn) askOthers(sf *subflow, due mono.Time) {
	sf.sus.askedAt = due
	for _, x := range c.subflows {
		if x != sf && x.usable() && x.lastHeard < due {
			x.sus.probeNow = true
		}
	}
}

// checkSuspect runs sf's suspicion and recovery rules at now.
func (c *Conn) checkSuspect(now mono.Time, sf *subflow) {
	s := &sf.sus
	if s.probeOut && !seqLess(sf.gar, s.probeNo) {
		s.probeOut = false
		s.probeRTT, s.probeAnswered = now.Sub(s.probeAt), now
	}
	if s.on {
		if s.waiting && !seqLess(sf.gar, s.waitSeq) {
			s.waiting = false
			s.answers++
			if s.answers >= recoverAnswers && !sf.failed {
				c.trustPath(now, sf)
			}
		}
		return
	}
	if sf.failed {
		return
	}
	to := sf.suspectTimeout()
	heard := c.otherHeard(sf)
	if heard == mono.Never {
		return
	}
	if due := sf.suspectDue(); due <= now && heard < due {
		if s.askedAt != due {
			c.askOthers(sf, due)
		}
		return
	}
	reason := ""
	if at, ok := sf.oldestUnreported(); ok && now.Sub(at) >= to {
		reason = fmt.Sprintf("no ack for %v", now.Sub(at).Round(time.Millisecond))
	} else if s.probeOut && now.Sub(s.probeAt) >= to {
		reason = fmt.Sprintf("probe unanswered for %v", now.Sub(s.probeAt).Round(time.Millisecond))
	}
	if reason != "" {
		c.suspectPath(now, sf, reason)
	}
}

// suspectPath stops sending data on sf and sends what it holds again on
// the other paths.
func (c *Conn) suspectPath(now mono.Time, sf *subflow, reason string) {
	s := &sf.sus
	if s.on {
		return
	}
	s.on, s.since, s.answers, s.waiting, s.probeOut = true, now, 0, false, false
	s.count++
	s.lossBefore = sf.lossRate
	n := c.reinject(now, sf)
	s.reinjected += uint64(n)
	c.holdUntil = 0
	// Probe at once: a path that was only slow answers quickly.
	sf.lastProbe = 0
	c.ep.emit(Event{Kind: EventPathSuspect, Conn: c, Path: sf.id, Remote: sf.remote,
		Reason: fmt.Sprintf("%s; %d packets re-injected", reason, n)})
}

// trustPath ends sf's suspicion.
func (c *Conn) trustPath(now mono.Time, sf *subflow) {
	s := &sf.sus
	s.on, s.waiting, s.probeOut = false, false, false
	c.holdUntil = 0
	// Judge the path by how it answers now. Its smoothed RTT holds the
	// round trips of packets that waited out the outage in its queue, and
	// its loss estimate what the outage lost: the scheduler kept off a
	// path that looked a second slow and 50 % lossy, and without traffic
	// neither estimate moved (5 s on a trace-driven LTE path).
	if r, ok := sf.cc.(ccid.RTTReseeder); ok && s.probeRTT > 0 && s.probeAnswered >= s.since {
		r.ReseedRTT(s.probeRTT)
	}
	st := sf.cc.State()
	sf.setLoss(now, &st, s.lossBefore)
	c.updatePaths()
	c.ep.emit(Event{Kind: EventPathRecover, Conn: c, Path: sf.id, Remote: sf.remote,
		Reason: fmt.Sprintf("%d probes answered after %v", s.answers, now.Sub(s.since).Round(time.Millisecond))})
}

// reinject moves every data packet sf's loss-repair ring holds to the
// repair queue, oldest first; pollRepair sends them on the fastest usable
// path. It returns how many.
func (c *Conn) reinject(now mono.Time, sf *subflow) int {
	h := sf.hist
	n := 0
	for i := h.RepairHead(); i != h.End(); i = h.RepairHead() {
		e := h.Repair(i)
		if e.B != nil && now.Sub(h.SentAt(i)) < reinjectMaxAge && len(c.rtxQ) < rtxRingSize {
			c.rtxQ = append(c.rtxQ, rtxItem{mpSeq: e.MPSeq, b: e.B, n: int(e.N)})
			e.B, e.N = nil, 0
			n++
		}
		c.rtxRelease(e)
		h.PopRepair()
	}
	if n > 0 {
		c.holdUntil, c.repairAt = 0, 0
	}
	return n
}

// probeDue is when sf should next be probed: an idle path after KeepAlive
// without hearing from it, a suspected or failed one every probeInterval.
func (c *Conn) probeDue(sf *subflow) mono.Time {
	if sf.state != sfOpen {
		return mono.Never
	}
	s := &sf.sus
	if s.probeNow {
		return 0
	}
	if s.on && s.answers > 0 && !s.waiting {
		return 0 // answered once: ask again at once
	}
	if !s.on && !sf.failed {
		return mono.Max(sf.lastHeard, sf.lastProbe).Add(c.keepAlive())
	}
	iv := sf.probeInterval()
	if silent := sf.lastProbe.Sub(sf.lastHeard); silent >= idleProbeAfter {
		iv = max(iv, c.keepAlive())
	} else if silent >= slowProbeAfter {
		iv = max(iv, slowProbeInterval)
	}
	return sf.lastProbe.Add(iv)
}

// pollProbe sends sf's probe (a Sync: the peer answers with a SyncAck at
// once) when it is due.
func (c *Conn) pollProbe(now mono.Time, sf *subflow, buf []byte) (Transmit, bool) {
	if c.probeDue(sf) > now {
		return Transmit{}, false
	}
	sf.lastProbe = now
	sf.sus.probeNow = false
	sf.stats.SyncsOut++
	t, ok := c.build(now, sf, buf, &pktSpec{typ: wire.TypeSync, ackNo: sf.gsr, hasAckNo: true})
	if !ok {
		return t, false
	}
	s := &sf.sus
	s.probeNo, s.probeAt, s.probeOut = sf.gss, now, true
	if s.on && !s.waiting {
		s.waitSeq, s.waiting = sf.gss, true
	}
	return t, true
}

// SuspectPath suspects path id at once (the path manager knows its
// interface went down): its data goes again on the other paths, and it is
// used again once probes are answered.
func (c *Conn) SuspectPath(now mono.Time, id int, reason string) error {
	c.touch()
	sf := c.pathByID(id)
	if sf == nil || sf.state == sfClosed {
		return fmt.Errorf("mpdccp: SuspectPath: no path %d", id)
	}
	if sf.state != sfOpen {
		return errors.New("mpdccp: SuspectPath: path not open")
	}
	c.suspectPath(now, sf, reason)
	return nil
}

// ProbePath probes path id at once (the path manager saw its interface
// or route come back).
func (c *Conn) ProbePath(now mono.Time, id int) error {
	c.touch()
	sf := c.pathByID(id)
	if sf == nil || sf.state != sfOpen {
		return fmt.Errorf("mpdccp: ProbePath: no open path %d", id)
	}
	sf.lastProbe = 0
	return nil
}
