// SPDX-License-Identifier: MIT

package mpdccp

import (
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/scheduler"
)

// putControl adds the due control items (MP_ADDADDR/REMOVEADDR with their
// MP_HMAC, MP_PRIO), pending MP_CONFIRMs and MP_RTT.
//
// Placement, for interoperability (docs/interop.md): every control item
// directly follows an MP_SEQ, because its confirmation echoes that MP_SEQ
// with it and the reference implementation takes the 9 bytes before the
// option as the MP_SEQ. The packet's own MP_SEQ (ending at seqEnd, -1 when
// the packet has none) serves the first item; later ones get a copy of it,
// never another value (a data packet's MP_SEQ must stay the one its
// receiver reorders on). A packet without data carries the last MP_SEQ
// used, which it does not consume. Each MP_CONFIRM carries one entry: the
// reference implementation parses only the first.
func (c *Conn) putControl(now mono.Time, sf *subflow, b *wire.Builder, room func(int) bool, seq uint64, seqEnd int) {
	if seqEnd < 0 {
		seq = seqAdd(c.mpSeq, -1)
	}
	for i := range c.ctrl {
		ci := &c.ctrl[i]
		if ci.next > now || (ci.sf != nil && ci.sf != sf) || ci.tries >= maxCtrlTries {
			continue
		}
		l, err := wire.MPLen(&ci.opt)
		if err != nil || !room(l+wire.MPSeqLen+wire.MPHMACLen) {
			continue
		}
		if b.Len() != seqEnd && b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: seq}) != nil {
			continue
		}
		ci.seq = seq
		if b.MP(&ci.opt) == nil {
			if ci.opt.Type == wire.MPAddAddr || ci.opt.Type == wire.MPRemoveAddr {
				// Its MP_HMAC follows at once (RFC 9897 §3.2.6).
				var in [32]byte
				var mac [20]byte
				var dkey [2 * maxKeyLen]byte
				wire.HMAC(&mac, c.keys.ownDKey(dkey[:0]), wire.HMACInput(in[:0], &ci.opt))
				_ = b.MP(&wire.MPOption{Type: wire.MPHMAC, HMAC: mac[:]})
			}
			if ci.tries > 0 {
				c.stats.CtrlRetransmits++
			}
			ci.tries++
			ci.next = now.Add(ci.interval)
			ci.interval *= 2
		}
	}
	for len(c.confirmOut) > 0 {
		n := confirmEntryLen(c.confirmOut)
		if n == 0 {
			c.confirmOut = c.confirmOut[:0] // cannot happen: queueConfirm builds them
			break
		}
		if !room(3+n) || b.MP(&wire.MPOption{Type: wire.MPConfirm, Raw: c.confirmOut[:n]}) != nil {
			break
		}
		c.confirmOut = append(c.confirmOut[:0], c.confirmOut[n:]...)
	}
	if now.Sub(sf.rttSentAt) >= rttReportEvery && room(12) {
		if srtt := sf.cc.State().SRTT; srtt > 0 {
			ms := uint32(min(srtt/time.Millisecond, 1<<31))
			if b.MP(&wire.MPOption{Type: wire.MPRTT, RTTType: 3, RTT: ms}) == nil {
				sf.rttSentAt = now
			}
		}
	}
}

// confirmEntryLen is the length of the first MP_CONFIRM entry in q: an
// MP_SEQ option and the option it confirms, as queueConfirm appends them;
// 0 if q does not start with a whole entry.
func confirmEntryLen(q []byte) int {
	if len(q) < wire.MPSeqLen+2 || q[0] != wire.OptMultipath || q[1] != wire.MPSeqLen || q[2] != byte(wire.MPSeq) ||
		q[wire.MPSeqLen] != wire.OptMultipath {
		return 0
	}
	n := wire.MPSeqLen + int(q[wire.MPSeqLen+1])
	if n > len(q) || n < wire.MPSeqLen+3 {
		return 0
	}
	return n
}

func (c *Conn) ctrlDue(now mono.Time, sf *subflow) bool {
	if len(c.confirmOut) > 0 && sf == c.firstUsable() {
		return true
	}
	for i := range c.ctrl {
		ci := &c.ctrl[i]
		if ci.next <= now && ci.tries < maxCtrlTries && (ci.sf == sf || ci.sf == nil && sf == c.firstUsable()) {
			return true
		}
	}
	return false
}

func (c *Conn) firstUsable() *subflow {
	for _, sf := range c.subflows {
		if sf.state == sfOpen && !sf.failed {
			return sf
		}
	}
	for _, sf := range c.subflows {
		if sf.state == sfOpen {
			return sf
		}
	}
	return nil
}

func (c *Conn) pollTransmit(now mono.Time, buf []byte) (Transmit, bool) {
	n := len(c.subflows)
	// Handshake, Sync, Close and Reset first.
	for i := 0; i < n; i++ {
		if t, ok := c.pollHandshake(now, c.subflows[i], buf); ok {
			return t, true
		}
	}
	if t, ok := c.pollData(now, buf); ok {
		return t, true
	}
	for i := 0; i < n; i++ {
		if t, ok := c.pollAck(now, c.subflows[i], buf); ok {
			return t, true
		}
	}
	return Transmit{}, false
}

func (c *Conn) pollHandshake(now mono.Time, sf *subflow, buf []byte) (Transmit, bool) {
	switch {
	case sf.resetOut:
		sf.resetOut = false
		t, ok := c.build(now, sf, buf, &pktSpec{typ: wire.TypeReset})
		switch {
		case sf.state == sfClosed:
			c.ep.unindex(sf)
		case sf.join && sf.state != sfOpen && sf.state != sfClosing:
			sf.state = sfClosed // JoinFailed was already reported
			c.ep.unindex(sf)
		default:
			c.subflowClosed(sf, sf.resetCode, "reset sent")
		}
		if ok {
			c.ep.stats.ResetsSent++
		}
		return t, ok
	case sf.state == sfRequest && sf.reqDue <= now:
		sf.reqTries++
		sf.reqDue = now.Add(sf.reqRTO)
		sf.reqRTO = min(2*sf.reqRTO, 16*time.Second)
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeRequest})
	case sf.state == sfRespond && sf.respOut:
		sf.respOut = false
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeResponse})
	case sf.state == sfPartOpen && (sf.ackNow || sf.partDue <= now):
		sf.partDue = now.Add(sf.partRTO)
		sf.partRTO = min(2*sf.partRTO, 4*time.Second)
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeAck})
	case sf.syncAckOut && sf.state >= sfPartOpen:
		sf.syncAckOut = false
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeSyncAck, ackNo: sf.syncAckAck, hasAckNo: true})
	case sf.syncOut && sf.state >= sfPartOpen:
		sf.syncOut = false
		sf.stats.SyncsOut++
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeSync, ackNo: sf.syncAckNo, hasAckNo: true})
	case sf.state == sfClosing && (sf.closeOut || sf.closeDue <= now):
		sf.closeOut = false
		sf.closeTries++
		sf.closeDue = now.Add(closeRTO << min(sf.closeTries, 6))
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeClose})
	}
	return Transmit{}, false
}

func (c *Conn) pollAck(now mono.Time, sf *subflow, buf []byte) (Transmit, bool) {
	if sf.state != sfOpen {
		return Transmit{}, false
	}
	if t, ok := c.pollProbe(now, sf, buf); ok { // keepalive and suspicion probes (suspect.go)
		return t, true
	}
	switch {
	case sf.ackNow || sf.dataSinceAck >= sf.rxAckRatio || sf.ackDeadline <= now,
		sf.lazyAckDue(now),
		sf.hasChanges() && now.Sub(sf.lastChangeSent) >= 200*time.Millisecond,
		c.ctrlDue(now, sf):
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeAck})
	case now.Sub(sf.lastHeard) >= c.keepAlive() && now.Sub(sf.lastProbe) >= c.keepAlive():
		// Keepalive: a Sync asks for a SyncAck, so both ends hear each other.
		sf.lastProbe = now
		sf.stats.SyncsOut++
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeSync, ackNo: sf.gsr, hasAckNo: true})
	}
	return Transmit{}, false
}

func (c *Conn) pollData(now mono.Time, buf []byte) (Transmit, bool) {
	if t, ok, stop := c.pollCopies(now, buf); stop {
		return t, ok
	}
	if len(c.rtxQ) > 0 && c.state == Open {
		if t, ok := c.pollRepair(now, buf); ok {
			return t, true
		}
	}
	if c.state != Open || c.holdUntil > now {
		return Transmit{}, false
	}
	if c.queued() == 0 {
		c.appLimited(now)
		return Transmit{}, false
	}
	if !c.pathView(now) {
		c.holdUntil = mono.Never
		return Transmit{}, false
	}
	hold := mono.Never
	if c.takeHead() {
		t, ok, retry := c.pollClass(now, buf)
		if ok {
			return t, true
		}
		hold = retry
	}
	t, ok, retry := c.pollFlows(now, buf)
	if ok {
		return t, true
	}
	c.holdUntil = mono.Min(hold, retry)
	return Transmit{}, false
}

// pollCopies sends the remaining copies of a packet a redundant scheduler
// put on several paths. stop says the caller must return (t, ok): a copy
// went out, or one waits for its path's pacer.
func (c *Conn) pollCopies(now mono.Time, buf []byte) (t Transmit, ok, stop bool) {
	for len(c.pendPaths) > 0 {
		sf := c.pathByID(c.pendPaths[0])
		classCopy := c.pend.class > 0 && sf != nil && c.classReady(sf)
		if sf != nil && sf.usable() && sf.cc.CanSend(now) && sf.cc.SendTime(now) > now && !classCopy {
			// Only pacing holds this copy back: wait for it rather than
			// lose the redundancy.
			c.holdUntil = sf.cc.SendTime(now)
			return Transmit{}, false, true
		}
		c.pendPaths = c.pendPaths[1:]
		if sf == nil || !sf.usable() || !sf.ready(now) && !classCopy {
			c.stats.CopiesSkipped++
			continue
		}
		t, ok := c.sendData(now, sf, buf, c.pend.b[:c.pend.n], c.pendSeq, false)
		if len(c.pendPaths) == 0 {
			c.ep.pool.put(c.pend.b)
			c.pend = queued{}
		}
		if ok {
			return t, true, true
		}
	}
	if c.pend.b != nil {
		c.ep.pool.put(c.pend.b)
		c.pend = queued{}
	}
	return Transmit{}, false, false
}

// pathView refreshes the scheduler's view of the open subflows and
// reports whether any of them is usable.
func (c *Conn) pathView(now mono.Time) bool {
	c.schedBuf = c.schedBuf[:0]
	anyUsable := false
	for _, sf := range c.subflows {
		if sf.state != sfOpen {
			continue
		}
		st := sf.cc.State()
		u := sf.usable()
		anyUsable = anyUsable || u
		c.schedBuf = append(c.schedBuf, scheduler.Path{ID: sf.id, Usable: u, Prio: sf.prio, Weight: sf.weight,
			Cwnd: st.Cwnd, InFlight: st.InFlight, CanSend: sf.cc.CanSend(now), SendTime: sf.cc.SendTime(now),
			SRTT: st.SRTT, RTTVar: st.RTTVar, MinRTT: st.MinRTT, PacingRate: st.PacingRate,
			Rate: st.DeliveryRate, RateMeasured: st.RateMeasured, OWD: sf.baseOWD(&st), Loss: sf.lossEstimate(now, &st),
			OutQueue: sf.outQueue(now, &st)})
	}
	return anyUsable
}

// pollClass schedules the traffic-class packet at the head (c.head). It
// returns the time to retry when the packet must wait.
func (c *Conn) pollClass(now mono.Time, buf []byte) (Transmit, bool, mono.Time) {
	q := c.head
	// Traffic classes may exceed a path's window by a few packets
	// (classReady): a redundant VoIP copy must not be skipped because bulk
	// traffic fills the window at that instant.
	for i := range c.schedBuf {
		p := &c.schedBuf[i]
		if p.Usable && withinClassAllowance(p.InFlight, p.Cwnd) {
			p.CanSend, p.SendTime = true, min(p.SendTime, now)
		}
	}
	c.pickBuf = c.schedulerFor(q.class).Pick(now, c.schedBuf,
		scheduler.Packet{Size: q.n, Class: q.class, Backlog: q.n}, c.pickBuf[:0])
	c.pathView(now) // undo the allowance for the flows
	if len(c.pickBuf) == 0 {
		return Transmit{}, false, c.retryTime(now)
	}
	first := c.pathByID(c.pickBuf[0])
	if first == nil || !first.usable() {
		return Transmit{}, false, mono.Never
	}
	if !first.ready(now) && !c.classReady(first) {
		if first.cc.CanSend(now) {
			return Transmit{}, false, first.cc.SendTime(now)
		}
		return Transmit{}, false, mono.Never // wait for an ack
	}
	c.head, c.hasHead = queued{}, false
	t, ok := c.sendScheduled(now, first, buf, q)
	return t, ok, mono.Never
}

// pollFlows sends the next packet of the default class: the flow queue
// offers its flows in service order and the scheduler places each (see
// fqPicker). It returns the time to retry when every flow must wait.
func (c *Conn) pollFlows(now mono.Time, buf []byte) (Transmit, bool, mono.Time) {
	if c.fq == nil || c.fq.Len() == 0 {
		return Transmit{}, false, mono.Never
	}
	c.pickNow, c.retryAt = now, mono.Never
	// Flows kept on one path go first (scheduler.FlowPacket.FirstPass);
	// the second pass, only if a spread flow yielded, offers every flow.
	c.firstPass, c.yielded = true, false
	pkt, f, ok := c.fq.Dequeue(now, (*fqPicker)(c))
	if !ok && c.yielded {
		c.firstPass = false
		pkt, f, ok = c.fq.Dequeue(now, (*fqPicker)(c))
	}
	if !ok {
		return Transmit{}, false, mono.Min(c.retryTime(now), c.retryAt)
	}
	first := c.pathByID(c.pickBuf[0])
	q := queued{b: pkt[:cap(pkt)], n: len(pkt)}
	if first == nil {
		c.ep.pool.put(q.b)
		return Transmit{}, false, mono.Never
	}
	q.ordered = c.flowOrdered(now, f, first) && len(c.pickBuf) == 1
	t, ok := c.sendScheduled(now, first, buf, q)
	return t, ok, mono.Never
}

// sendScheduled sends q on first with the next MP_SEQ, and keeps it for
// the remaining copies (c.pickBuf[1:]) or for loss repair.
func (c *Conn) sendScheduled(now mono.Time, first *subflow, buf []byte, q queued) (Transmit, bool) {
	seq := c.mpSeq
	c.mpSeq = seqAdd(c.mpSeq, 1)
	t, ok := c.sendData(now, first, buf, q.b[:q.n], seq, q.ordered)
	switch {
	case len(c.pickBuf) > 1:
		c.pend, c.pendSeq = q, seq
		c.pendPaths = append(c.pendPaths[:0], c.pickBuf[1:]...)
	case ok && c.ep.cfg.Retransmit:
		c.rtxKeep(now, first, seq, q.b, q.n, false)
	default:
		c.ep.pool.put(q.b)
	}
	return t, ok
}

// fqPicker lets the flow queue ask the scheduler about each flow (it is
// the Conn itself; the conversion costs nothing).
type fqPicker Conn

// Pick places flow f's oldest packet: on a path that can send it now
// (recorded in c.pickBuf), or not at all.
func (p *fqPicker) Pick(f int, head []byte, sojourn time.Duration) (bool, aqm.Allowance) {
	c := (*Conn)(p)
	now := c.pickNow
	if fp, ok := c.sched.(scheduler.FlowPicker); ok {
		d := fp.PickFlow(now, c.schedBuf, scheduler.FlowPacket{Flow: f, Size: len(head), Overhead: c.ep.dataHeaderLen(), Sojourn: sojourn, FirstPass: c.firstPass,
			Signals: c.fq.FlowSignals(f)})
		allow := aqm.Allowance{Extra: d.Extra}
		if !d.OK {
			c.yielded = c.yielded || d.Yielded
			if d.RetryIn > 0 {
				c.retryAt = mono.Min(c.retryAt, now.Add(d.RetryIn))
			}
			return false, allow
		}
		c.pickBuf = append(c.pickBuf[:0], d.Path)
		allow.RTT = d.RTT
		return true, allow
	}
	c.pickBuf = c.sched.Pick(now, c.schedBuf,
		scheduler.Packet{Size: len(head), Backlog: c.fq.Bytes()}, c.pickBuf[:0])
	if len(c.pickBuf) == 0 {
		return false, aqm.Allowance{}
	}
	sf := c.pathByID(c.pickBuf[0])
	return sf != nil && sf.usable() && sf.ready(now), aqm.Allowance{RTT: c.pathRTT(c.pickBuf[0])}
}

// pathRTT is path id's minimum RTT, the round trip of a flow sent on it.
func (c *Conn) pathRTT(id int) time.Duration {
	for i := range c.schedBuf {
		if p := &c.schedBuf[i]; p.ID == id {
			return p.MinRTT
		}
	}
	return 0
}

// flowOrder is what the sender remembers of a flow (bucket) to tell the
// receiver how it may deliver the flow's packets.
type flowOrder struct {
	used         bool
	lastPath     int
	lastSent     mono.Time
	orderedUntil mono.Time // until then the flow's packets need connection order
}

// orderMargin is the allowance for jitter when judging that a flow's
// packets on a slower path have arrived.
const orderMargin = 2 * time.Millisecond

// flowOrdered records that flow f sends a packet on sf now and reports
// whether the receiver may deliver it in sf's own order ("path-ordered",
// an empty MP_EXP): true when every earlier packet of the flow went over
// sf or has surely arrived. A flow spread over paths, or one that just
// moved, needs connection (MP_SEQ) order instead.
func (c *Conn) flowOrdered(now mono.Time, f int, sf *subflow) bool {
	o := &c.flowOrd[f]
	if o.used && o.lastPath != sf.id {
		// The flow's last packet on the other path arrives by lastSent plus
		// that path's delay now (queueing included, with its variation);
		// this path's packets take at least its base delay.
		wait := time.Second // an unknown path: be safe
		if prev := c.pathByID(o.lastPath); prev != nil {
			st, cur := prev.cc.State(), sf.cc.State()
			wait = max(0, max(st.SRTT, st.MinRTT)/2+st.RTTVar-sf.baseOWD(&cur)) + orderMargin
		}
		o.orderedUntil = mono.Max(o.orderedUntil, o.lastSent.Add(wait))
	}
	o.used, o.lastPath, o.lastSent = true, sf.id, now
	return now >= o.orderedUntil
}

// classAllowance is how many packets beyond a path's congestion window
// the traffic classes may have in flight. Classes are meant for low-rate
// traffic (VoIP, control): a few packets over the window cost the path
// little and keep redundant copies and priority packets from waiting for
// bulk traffic's acks or being skipped.
const classAllowance = 4

// classReady reports whether a packet of a traffic class may go on sf now,
// regardless of pacing and up to classAllowance packets over its window.
func (c *Conn) classReady(sf *subflow) bool {
	if !sf.usable() {
		return false
	}
	st := sf.cc.State()
	return withinClassAllowance(st.InFlight, st.Cwnd)
}

func withinClassAllowance(inFlight, cwnd int) bool { return inFlight < cwnd+classAllowance }

// appLimited tells the controllers that want to know (BBR) that the
// connection has nothing to send while they still have window room, so
// their delivery-rate samples are not taken as the path's capacity.
func (c *Conn) appLimited(now mono.Time) {
	for _, sf := range c.subflows {
		if n, ok := sf.cc.(ccid.AppLimitedNotifier); ok && sf.state == sfOpen && sf.cc.CanSend(now) {
			n.OnAppLimited(now)
		}
	}
}

// retryTime is when a held packet should be offered to the scheduler again:
// the earliest pacing release of a path with window room, or Never (an ack
// or a path change clears the hold).
func (c *Conn) retryTime(now mono.Time) mono.Time {
	t := mono.Never
	for i := range c.schedBuf {
		p := &c.schedBuf[i]
		if p.Usable && p.CanSend && p.SendTime > now {
			t = mono.Min(t, p.SendTime)
		}
	}
	return t
}

func (c *Conn) sendData(now mono.Time, sf *subflow, buf, payload []byte, seq uint64, pathOrdered bool) (Transmit, bool) {
	typ := wire.TypeData
	if sf.ackNow || sf.dataSinceAck > 0 || sf.ackOfAckDue(now) || sf.hasChanges() || c.ctrlDue(now, sf) ||
		now.Sub(sf.rttSentAt) >= rttReportEvery {
		typ = wire.TypeDataAck
	}
	t, ok := c.build(now, sf, buf, &pktSpec{typ: typ, payload: payload, mpSeq: seq, hasMPSeq: true, inFlight: true,
		pathOrdered: pathOrdered})
	if ok {
		c.stats.SentPackets++
		c.stats.SentBytes += uint64(len(payload))
	}
	return t, ok
}

// ackOfAckDue reports whether a data packet should carry an Ack Vector
// that only acknowledges the peer's Acks. The peer needs those to trim its
// own Ack Vector state, but not on every packet: a Data header is 12–16
// bytes shorter than a DataAck with its vector and Elapsed Time, about 1 %
// of a full packet's goodput.
func (sf *subflow) ackOfAckDue(now mono.Time) bool {
	return sf.ackLazy && (sf.rx.span() >= ackOfAckSpan || now.Sub(sf.lastAckAt) >= ackOfAckInterval)
}

// lazyAckDue: acks that only acknowledge acks are piggybacked, but when
// the Ack Vector state grows (the peer sends no data to carry them) a pure
// Ack goes out, at most every lazyAckInterval so that two idle ends never
// ping-pong.
func (sf *subflow) lazyAckDue(now mono.Time) bool {
	return sf.ackLazy && sf.rx.span() >= lazyAckSpan && now.Sub(sf.lastAckAt) >= lazyAckInterval
}

// keepAlive is the idle time after which a subflow is probed. The server
// waits half as long again, so that on an idle path the client's probe
// usually comes first and one Sync/SyncAck pair per interval suffices.
func (c *Conn) keepAlive() time.Duration {
	if c.ep.cfg.Role == Server {
		return c.ep.cfg.KeepAlive * 3 / 2
	}
	return c.ep.cfg.KeepAlive
}
