// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/hmac"
	"net/netip"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/reorder"
)

// handlePacket processes one parsed, checksum-verified packet of sf:
// validity checks, options, handshake steps, congestion feedback, data.
func (c *Conn) handlePacket(now mono.Time, sf *subflow, p *wire.Packet, ecn uint8, size int) {
	c.touch()
	if !c.acceptable(now, sf, p) {
		return
	}
	var ro rxOpts
	if !c.readOptions(now, sf, p, &ro) {
		return
	}
	c.heard(now, sf, size)
	fresh, disorder, ok := c.advance(now, sf, p, &ro, ecn)
	if !ok {
		return
	}
	c.feedback(now, sf, p, &ro, size)
	c.dispatch(now, sf, p, &ro, ecn, fresh, disorder)
}

// acceptable checks a packet against the subflow's state and sequence
// windows (RFC 4340 §7.5.3, §8.5), answering what needs an answer (a
// retransmitted Request, a Sync for an out-of-window packet).
func (c *Conn) acceptable(now mono.Time, sf *subflow, p *wire.Packet) bool {
	e := c.ep
	switch {
	case sf.state == sfClosed:
		e.drop(DropNoConn)
		return false
	case p.Type == wire.TypeReset:
		if !sf.ackValid(p.Ack) && !(sf.state == sfRequest && wire.SeqInWindow(p.Ack, sf.iss, sf.gss)) {
			e.drop(DropOutOfWindow)
			return false
		}
	case sf.state == sfRequest:
		if p.Type != wire.TypeResponse || !wire.SeqInWindow(p.Ack, sf.iss, sf.gss) {
			e.drop(DropBadState)
			return false
		}
	case sf.state == sfRespond && p.Type == wire.TypeRequest:
		if p.Seq != sf.isr && seqLess(sf.gsr, p.Seq) {
			sf.gsr = p.Seq // a retransmitted Request has a new sequence number
			sf.rx.init(p.Seq)
		}
		// The Response answering it must carry the Confirms again.
		c.handleFeatures(sf, p.Options)
		sf.respOut = true
		return false
	case p.Type == wire.TypeRequest || p.Type == wire.TypeResponse:
		e.drop(DropBadState)
		return false
	case p.Type == wire.TypeSync || p.Type == wire.TypeSyncAck:
		if !sf.ackValid(p.Ack) {
			e.drop(DropOutOfWindow)
			sf.stats.OutOfWindow++
			return false
		}
	default:
		if !sf.seqValid(p) {
			e.drop(DropOutOfWindow)
			sf.stats.OutOfWindow++
			if now.Sub(sf.lastSync) >= syncInterval && sf.state >= sfPartOpen {
				sf.syncOut, sf.syncAckNo, sf.lastSync = true, p.Seq, now
			}
			return false
		}
	}

	return true
}

// readOptions walks the packet's options into ro, handling the ones that
// act at once (features, MP_PRIO, MP_ADDADDR/REMOVEADDR with their HMAC,
// MP_CONFIRM, MP_EXP), and rejects malformed or unknown-mandatory ones.
func (c *Conn) readOptions(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) bool {
	e := c.ep
	var mo wire.MPOption
	var lastCtrl wire.MPOption
	var haveCtrl bool
	it := wire.NewOptionIter(p.Options)
	e.cells = e.cells[:0]
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		switch o.Type {
		case wire.OptMandatory:
			ro.mandatory = true
		case wire.OptAckVector0, wire.OptAckVector1:
			if wire.ValidAckVector(o.Data) {
				e.cells = append(e.cells, o.Data...)
			}
		case wire.OptNDPCount:
			if v, err := wire.ParseNDPCount(o.Data); err == nil {
				ro.ndp, ro.hasNDP = v, true
			}
		case wire.OptTimestamp:
			if v, err := wire.ParseTimestamp(o.Data); err == nil {
				sf.inDelay.sample(now, v)
			}
		case wire.OptElapsedTime:
			if v, err := wire.ParseElapsedTime(o.Data); err == nil {
				ro.elapsed = time.Duration(v) * 10 * time.Microsecond
			}
		case wire.OptChangeL, wire.OptChangeR, wire.OptConfirmL, wire.OptConfirmR:
			if p.Type != wire.TypeData {
				c.handleFeature(sf, o)
				if o.Type == wire.OptConfirmL {
					if f, vals, err := wire.ParseFeature(o.Data); err == nil && f == wire.FeatMultipath {
						ro.confirmMP = len(vals) > 0 && vals[0]>>4 == 0
					}
				}
			}
		case wire.OptMultipath:
			if wire.ParseMP(o.Data, &mo) != nil {
				haveCtrl = false
				continue
			}
			switch mo.Type {
			case wire.MPSeq:
				ro.mpSeq, ro.hasMPSeq = mo.Seq, true
			case wire.MPKey:
				ro.keyCI, ro.hasKey = mo.Token, true
				ro.key = mo.Keys
			case wire.MPJoin:
				ro.join, ro.hasJoin = mo, true
			case wire.MPHMAC:
				if haveCtrl {
					c.handleAddrOption(now, sf, &lastCtrl, mo.HMAC, ro)
					haveCtrl = false
				} else {
					ro.hmac = mo.HMAC
				}
			case wire.MPClose:
				ro.closeKey, ro.hasClose = mo.KeyData, true
			case wire.MPFastClose:
				ro.fastKey, ro.hasFast = mo.KeyData, true
			case wire.MPConfirm:
				c.handleConfirm(mo.Raw)
			case wire.MPRTT:
				sf.peerRTT = time.Duration(mo.RTT) * time.Millisecond
				ro.rttUpdate = true
			case wire.MPPrio:
				c.handlePrio(sf, &mo, ro, o.Data)
			case wire.MPAddAddr, wire.MPRemoveAddr:
				lastCtrl, haveCtrl = mo, true
				lastCtrl.Raw = o.Data
			case wire.MPExp:
				c.handleExp(now, mo.Raw, ro)
			}
		}
	}
	if it.Err() != nil {
		e.drop(DropBadOption)
		return false
	}
	if ro.mandatory && p.Type != wire.TypeData && p.Type != wire.TypeReset {
		// RFC 4340 §5.8.2: Mandatory before an option we do not process.
		if code, ok := wire.MandatoryCheck(p.Options, understood); !ok {
			e.drop(DropBadOption)
			sf.resetOut, sf.resetCode = true, code
			return false
		}
	}
	if ro.rttUpdate {
		c.updatePaths()
	}

	return true
}

// heard records that the subflow is alive; a failed path comes back.
func (c *Conn) heard(now mono.Time, sf *subflow, size int) {
	e := c.ep
	sf.lastHeard = now
	sf.stats.PacketsIn++
	sf.stats.BytesIn += uint64(size)
	if sf.failed {
		sf.failed = false
		c.holdUntil = 0
		if r, ok := sf.cc.(ccid.PathRestorer); ok {
			r.OnPathRestored(now)
		}
		e.emit(Event{Kind: EventPathUp, Conn: c, Path: sf.id, Remote: sf.remote, Reason: "heard again"})
		c.updatePaths()
	}

}

// advance takes an accepted packet into the subflow's sequence state and
// completes the handshake's last steps (Reset and Response end here). It
// reports whether the packet is new (fresh), arrived out of order
// (disorder), and goes on to feedback and delivery (ok).
func (c *Conn) advance(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts, ecn uint8) (fresh, disorder, ok bool) {
	e := c.ep
	switch p.Type {
	case wire.TypeReset:
		c.handleReset(now, sf, p, ro)
		return false, false, false
	case wire.TypeResponse:
		c.handleResponse(now, sf, p, ro)
		return false, false, false
	}

	// Sequence bookkeeping for accepted packets.
	fresh, disorder = sf.rx.record(p.Seq, ecn == 3)
	if seqLess(sf.gsr, p.Seq) {
		sf.gsr, sf.gsrAt = p.Seq, now
	}
	if !fresh {
		sf.stats.Duplicates++
	}
	if p.Type.HasAck() && seqLess(sf.gar, p.Ack) {
		sf.gar, sf.sus.garAt = p.Ack, now // suspect.go samples ack waits by garAt
	}

	// State transitions on the handshake's last steps.
	switch sf.state {
	case sfRespond:
		if p.Type == wire.TypeAck || p.Type == wire.TypeDataAck {
			if sf.join {
				var want [20]byte
				c.joinHMAC(&want, false, sf)
				if ro.hmac == nil || !hmac.Equal(ro.hmac, want[:]) {
					e.drop(DropBadHMAC)
					sf.resetOut, sf.resetCode = true, wire.ResetOptionError
					return false, false, false
				}
			}
			sf.hsRTT = now.Sub(sf.lastSent)
			c.subflowOpen(now, sf)
			sf.ackNow = true // the 4th packet of the handshake
		}
	case sfPartOpen:
		c.subflowOpen(now, sf)
	}
	return fresh, disorder, true
}

// feedback gives an acknowledgement to the congestion controller, the
// ack-of-ack bookkeeping and the retransmission ring.
func (c *Conn) feedback(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts, size int) {
	e := c.ep
	if (p.Type == wire.TypeAck || p.Type == wire.TypeDataAck) && sf.state >= sfOpen {
		e.runs = e.runs[:0]
		if len(e.cells) > 0 {
			e.runs = decodeRuns(e.runs, p.Ack, e.cells)
		} else {
			e.runs = append(e.runs, ccid.AckRun{High: p.Ack, N: 1, State: ccid.Received})
		}
		if a, ok := sf.hist.AckOfAck(p.Ack, e.runs); ok {
			sf.rx.trim(a)
		}
		// e.fb, not a local: a pointer passed through an interface escapes.
		e.fb = ccid.Feedback{AckNo: p.Ack, Runs: e.runs, Elapsed: ro.elapsed, Size: size}
		sf.cc.OnFeedback(now, &e.fb)
		if c.ep.cfg.Retransmit {
			c.rtxOnFeedback(now, sf, p.Ack, e.runs)
		}
		sf.updateFeatures()
		c.holdUntil = 0
	}

}

// dispatch does what the packet's type asks once it is accepted.
func (c *Conn) dispatch(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts, ecn uint8, fresh, disorder bool) {
	switch p.Type {
	case wire.TypeData, wire.TypeDataAck:
		if fresh {
			c.receiveData(now, sf, p, ro, ecn)
			sf.dataSinceAck++
			if disorder || sf.dataSinceAck >= sf.rxAckRatio {
				sf.ackNow = true
			} else if sf.ackDeadline == mono.Never {
				sf.ackDeadline = now.Add(ackDelay)
			}
		} else {
			sf.ackNow = true
		}
	case wire.TypeAck:
		sf.ackLazy = true
	case wire.TypeSync:
		sf.syncAckOut, sf.syncAckAck = true, p.Seq
		if seqLess(sf.gsr, p.Seq) {
			sf.gsr = p.Seq
		}
	case wire.TypeSyncAck:
		if seqLess(sf.gsr, p.Seq) {
			sf.gsr = p.Seq
		}
	case wire.TypeCloseReq:
		if sf.state == sfOpen {
			sf.state = sfClosing
			sf.closeOut, sf.closeDue, sf.closeMP = true, now, ro.hasClose
		}
	case wire.TypeClose:
		mp := ro.hasClose && c.keys.isOwnKey(ro.closeKey)
		if mp && c.state != Closing && c.state != Closed {
			c.state = Closing
			c.closeReason = "peer close"
			c.pendingJoins = nil
		}
		sf.resetOut, sf.resetCode = true, wire.ResetClosed
	}
}

// receiveData hands a data packet's payload to the reorderer.
func (c *Conn) receiveData(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts, ecn uint8) {
	sf.stats.DataIn++
	if !ro.hasMPSeq {
		c.ep.drop(DropNoMPSeq)
		c.stats.NoMPSeq++
		return
	}
	if len(p.Payload) == 0 {
		return
	}
	if c.sec != nil && c.sec.peer != nil {
		// Cryptokey routing: a peer sources only its allowed IPs.
		if src, ok := innerSource(p.Payload); !ok || !c.sec.peer.allows(src) {
			c.ep.drop(DropInnerSource)
			return
		}
	}
	c.noteData(now)
	c.stats.Received++
	if now.Sub(c.pathInfoAt) >= pathInfoEvery {
		// RTT estimates move with every ack; the reorderer's view of
		// the paths follows them a few times a second.
		c.updatePaths()
		c.pathInfoAt = now
	}
	b := c.ep.pool.get()
	n := copy(b, p.Payload)
	if !c.ep.decapInner(ecn, b[:n]) {
		n = 0 // its MP_SEQ still counts; PollDeliver skips it
	}
	it := reorder.Item{Seq: ro.mpSeq, Path: sf.id, PathSeq: sf.dataSeq(p.Seq, ro), Arrival: now, Buf: b[:n],
		PathOrdered: ro.pathOrdered}
	// Redundant traffic classes (VoIP) are delivered at once: they must not
	// wait behind a gap in the bulk traffic nor be equalised, and as every
	// packet of theirs crosses every path the first copies arrive in order.
	// Classes spread over paths (a TCP class on rr, say) stay ordered.
	if c.classifier != nil {
		if cl := c.classifier.Classify(p.Payload); cl > 0 && cl < len(c.classScheds) {
			it.Urgent = c.classScheds[cl].Name() == "redundant"
		}
	}
	if !c.reo.Push(now, it) {
		c.ep.pool.put(b)
		c.ep.drop(DropDuplicate)
		c.stats.Duplicates++
		return
	}
	c.mayDeliver = true
	if c.ep.cfg.Retransmit {
		c.pollNACKs(now)
	}
}

// dataSeq numbers the data packets of a subflow as the reorderer needs
// them: consecutive unless data packets were lost on this path. Every DCCP
// packet consumes a sequence number, so a hole in the DCCP sequence may be
// lost or simply unseen Acks; the sender's NDP Count (RFC 4340 §7.7) says
// how many of the packets just before this one carried no data.
func (sf *subflow) dataSeq(seq uint64, ro *rxOpts) uint64 {
	if !sf.rxData {
		sf.rxData, sf.rxLastData, sf.rxDataSeq = true, seq, 0
		return 0
	}
	hole := seqDiff(seq, sf.rxLastData) - 1
	if hole < 0 {
		// Reordered on the path itself: numbered as far behind the last
		// data packet as its sequence number is (non-data packets in
		// between would make it less; only "behind" matters), so that
		// the reorderer sees it came late and waits that long before it
		// asks for a repair of the path's next hole.
		return (sf.rxDataSeq - uint64(-hole-1)) & wire.MaxSeq
	}
	// A sender sends NDP Count after non-data packets (RFC 4340 §7.7):
	// without one, the packets missing before this one carried data.
	lost := max(0, hole-int64(ro.ndp))
	sf.rxLastData = seq
	sf.rxDataSeq = (sf.rxDataSeq + 1 + uint64(lost)) & wire.MaxSeq
	return sf.rxDataSeq
}

// handleConfirm removes the control items that an MP_CONFIRM echoes.
func (c *Conn) handleConfirm(raw []byte) {
	it := wire.NewOptionIter(raw)
	var seq uint64
	var haveSeq bool
	var mo wire.MPOption
	for {
		o, ok := it.Next()
		if !ok {
			return
		}
		if o.Type != wire.OptMultipath || wire.ParseMP(o.Data, &mo) != nil {
			continue
		}
		if mo.Type == wire.MPSeq {
			seq, haveSeq = mo.Seq, true
			continue
		}
		if !haveSeq {
			continue
		}
		for i := 0; i < len(c.ctrl); i++ {
			ci := &c.ctrl[i]
			if ci.opt.Type == mo.Type && ci.seq == seq && ci.tries > 0 &&
				(mo.Type != wire.MPPrio || ci.opt.Prio == mo.Prio) &&
				(mo.Type == wire.MPPrio || ci.opt.AddrID == mo.AddrID) {
				c.ctrl = append(c.ctrl[:i], c.ctrl[i+1:]...)
				i--
			}
		}
	}
}

// queueConfirm adds an MP_CONFIRM entry (MP_SEQ + the option verbatim).
func (c *Conn) queueConfirm(seq uint64, opt []byte) {
	var tmp [16]byte
	n, err := wire.PutMP(tmp[:], &wire.MPOption{Type: wire.MPSeq, Seq: seq})
	if err != nil || len(c.confirmOut)+n+2+len(opt) > maxConfirm {
		return
	}
	c.confirmOut = append(c.confirmOut, tmp[:n]...)
	c.confirmOut = append(c.confirmOut, wire.OptMultipath, byte(2+len(opt)))
	c.confirmOut = append(c.confirmOut, opt...)
}

func (c *Conn) handlePrio(sf *subflow, mo *wire.MPOption, ro *rxOpts, raw []byte) {
	if !ro.hasMPSeq {
		return // RFC 9897: travels with an MP_SEQ
	}
	c.queueConfirm(ro.mpSeq, raw)
	k := ctrlKey{wire.MPPrio, sf.id}
	if c.lastCtrlRx == nil {
		c.lastCtrlRx = make(map[ctrlKey]uint64)
	}
	if last, ok := c.lastCtrlRx[k]; ok && seqLess(ro.mpSeq, last) {
		return // stale
	}
	c.lastCtrlRx[k] = ro.mpSeq
	if sf.prio != mo.Prio {
		sf.prio = mo.Prio
		c.holdUntil = 0
	}
}

// handleAddrOption processes MP_ADDADDR/MP_REMOVEADDR with its MP_HMAC.
func (c *Conn) handleAddrOption(now mono.Time, sf *subflow, mo *wire.MPOption, mac []byte, ro *rxOpts) {
	if !c.keys.ready() {
		// Before the key exchange completed (say, on a Response) there is
		// no key to check the HMAC with: ignore it, as a bad one.
		c.ep.drop(DropBadHMAC)
		return
	}
	var in [32]byte
	msg := wire.HMACInput(in[:0], mo)
	var want [20]byte
	var dkey [2 * maxKeyLen]byte
	wire.HMAC(&want, c.keys.peerDKey(dkey[:0]), msg)
	if !hmac.Equal(mac, want[:]) {
		c.ep.drop(DropBadHMAC) // RFC 9897: silently ignored
		return
	}
	if !ro.hasMPSeq {
		return
	}
	c.queueConfirm(ro.mpSeq, mo.Raw)
	k := ctrlKey{wire.MPAddAddr, int(mo.AddrID)}
	if c.lastCtrlRx == nil {
		c.lastCtrlRx = make(map[ctrlKey]uint64)
	}
	if last, ok := c.lastCtrlRx[k]; ok && seqLess(ro.mpSeq, last) {
		return
	}
	c.lastCtrlRx[k] = ro.mpSeq
	ev := Event{Kind: EventPeerAddr, Conn: c, Path: int(mo.AddrID)}
	if mo.Type == wire.MPRemoveAddr {
		ev.Kind = EventPeerRemoveAddr
	} else {
		port := mo.Port
		if port == 0 { // absent, or an explicit 0: the same port (RFC 9897)
			port = sf.remote.Port()
		}
		ev.Remote = netip.AddrPortFrom(mo.Addr, port)
	}
	c.ep.emit(ev)
}

// pathInfoEvery is how often received data refreshes the reorderer's view
// of the paths.
const pathInfoEvery = 100 * time.Millisecond

// updatePaths refreshes the reorderer's view of the receiving paths.
func (c *Conn) updatePaths() {
	c.pathInfo = c.pathInfo[:0]
	for _, sf := range c.subflows {
		if sf.state == sfClosed {
			continue
		}
		st := sf.cc.State()
		minRTT := st.MinRTT
		if sf.hsRTT > 0 && (minRTT <= 0 || sf.hsRTT < minRTT) {
			// Before data has flowed on a path its controller has no
			// sample yet; the handshake's is enough for the reorderer.
			minRTT = sf.hsRTT
		}
		c.pathInfo = append(c.pathInfo, reorder.PathInfo{ID: sf.id, Active: sf.state == sfOpen && !sf.failed,
			SRTT: st.SRTT, MinRTT: minRTT, RTTVar: st.RTTVar, PeerRTT: sf.peerRTT})
	}
	c.reo.SetPaths(c.pathInfo)
}

// understood reports whether the engine processes option o (for the
// Mandatory option check).
func understood(o wire.Option) bool {
	switch o.Type {
	case wire.OptSlowReceiver, wire.OptChangeL, wire.OptChangeR, wire.OptConfirmL, wire.OptConfirmR,
		wire.OptAckVector0, wire.OptAckVector1, wire.OptElapsedTime, wire.OptTimestamp,
		wire.OptTimestampEcho, wire.OptNDPCount:
		return true
	case wire.OptMultipath:
		var mo wire.MPOption
		return wire.ParseMP(o.Data, &mo) == nil && mo.Type != wire.MPExp
	}
	return false
}

// rxOpts collects what one packet's options say.
type rxOpts struct {
	mpSeq     uint64
	hasMPSeq  bool
	key       []byte
	keyCI     uint32
	hasKey    bool
	join      wire.MPOption
	hasJoin   bool
	hmac      []byte
	closeKey  []byte
	hasClose  bool
	fastKey   []byte
	hasFast   bool
	elapsed   time.Duration
	confirmMP bool // Confirm L(MP_CAPABLE) seen
	rttUpdate bool
	mandatory bool
	ndp       uint64 // NDP Count: non-data packets sent just before this one
	hasNDP    bool
	// pathOrdered: the sender's empty MP_EXP (nack.go).
	pathOrdered bool
}
