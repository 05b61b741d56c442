// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// ConnState is a connection's life-cycle state.
type ConnState uint8

const (
	Connecting ConnState = iota
	Open
	Closing
	Closed
)

var connStateNames = [...]string{"connecting", "open", "closing", "closed"}

func (s ConnState) String() string { return connStateNames[s] }

type queued struct {
	b     []byte
	n     int
	class int
}

// ctrlItem is a reliable control option (MP_PRIO, MP_ADDADDR,
// MP_REMOVEADDR) retransmitted until the peer's MP_CONFIRM echoes it.
type ctrlItem struct {
	opt      wire.MPOption
	addr     [16]byte // backing for opt.Addr-independent copies
	seq      uint64   // the MP_SEQ it travels with
	sf       *subflow // MP_PRIO applies to the subflow it is sent on
	next     mono.Time
	tries    int
	interval time.Duration
}

const (
	ctrlRTO      = time.Second
	maxCtrlTries = 5
	maxConfirm   = 200 // bytes of pending MP_CONFIRM entries
)

// Conn is one MP-DCCP connection: a set of subflows.
type Conn struct {
	ep      *Endpoint
	state   ConnState
	created mono.Time
	removed bool

	localCI, peerCI   uint32
	keyType           uint8
	localKey, peerKey [64]byte
	keyLen            int
	mpConfirmed       bool

	subflows     []*subflow
	nextPathID   int
	pendingJoins []PathConfig

	// Sending.
	mpSeq     uint64 // next MP_SEQ
	sendQ     []queued
	qHead     int
	qLen      int
	pend      queued // a packet with copies still to send (redundant schedulers)
	pendSeq   uint64
	pendPaths []int
	holdUntil mono.Time
	sched     scheduler.Scheduler
	schedBuf  []scheduler.Path
	pickBuf   []int

	// Receiving.
	reo        reorder.Reorderer
	mayDeliver bool
	pathInfo   []reorder.PathInfo
	lastCtrlRx map[ctrlKey]uint64 // newest MP_SEQ per control dataset

	// Control options.
	ctrl       []ctrlItem
	confirmOut []byte

	closeReason string
	abort       bool
	stats       connCounters
}

type ctrlKey struct {
	typ wire.MPType
	id  int // AddrID, or path id for PRIO
}

type connCounters struct {
	SentPackets, SentBytes           uint64
	DeliveredPackets, DeliveredBytes uint64
	QueueDrops                       uint64
	TooBig                           uint64
	CopiesSkipped                    uint64
	Received                         uint64
	Duplicates                       uint64
	NoMPSeq                          uint64
	CtrlRetransmits                  uint64
	CtrlGivenUp                      uint64
}

// PathStats describe one subflow.
type PathStats struct {
	ID        int
	State     string
	Failed    bool
	Join      bool
	Local     int
	LocalAddr netip.AddrPort
	Remote    netip.AddrPort
	Prio      uint8
	CCID      string
	CC        ccid.State
	PeerRTT   time.Duration
	LastHeard mono.Time
	PathCounters
}

// ConnStats describe a connection.
type ConnStats struct {
	State     ConnState
	LocalCI   uint32
	PeerCI    uint32
	Paths     []PathStats
	Reorder   reorder.Stats
	Scheduler scheduler.Stats
	Queued    int
	connCounters
}

// State returns the connection state.
func (c *Conn) State() ConnState { return c.state }

// Stats returns a snapshot (it allocates; not for the data path).
func (c *Conn) Stats() ConnStats {
	s := ConnStats{State: c.state, LocalCI: c.localCI, PeerCI: c.peerCI, Reorder: c.reo.Stats(),
		Scheduler: c.sched.Stats(), Queued: c.qLen, connCounters: c.stats}
	for _, sf := range c.subflows {
		s.Paths = append(s.Paths, PathStats{ID: sf.id, State: sf.state.String(), Failed: sf.failed, Join: sf.join,
			Local: sf.local, LocalAddr: sf.localAddr, Remote: sf.remote, Prio: sf.prio, CCID: sf.cc.Name(),
			CC: sf.cc.State(), PeerRTT: sf.peerRTT, LastHeard: sf.lastHeard, PathCounters: sf.stats})
	}
	return s
}

// Send queues an inner packet (copied). It returns false when the packet
// is dropped: too big, queue full, or the connection is closing.
func (c *Conn) Send(now mono.Time, pkt []byte, class int) bool {
	if c.state != Open && c.state != Connecting {
		return false
	}
	if len(pkt) > c.ep.MaxPayload() {
		c.stats.TooBig++
		return false
	}
	if c.qLen == len(c.sendQ) {
		c.stats.QueueDrops++
		return false
	}
	b := c.ep.pool.get()
	n := copy(b, pkt)
	c.sendQ[(c.qHead+c.qLen)%len(c.sendQ)] = queued{b: b, n: n, class: class}
	c.qLen++
	return true
}

func (c *Conn) releaseBuffers() {
	for c.qLen > 0 {
		q := c.sendQ[c.qHead]
		c.sendQ[c.qHead] = queued{}
		c.qHead = (c.qHead + 1) % len(c.sendQ)
		c.qLen--
		c.ep.pool.put(q.b)
	}
	if c.pend.b != nil {
		c.ep.pool.put(c.pend.b)
		c.pend = queued{}
		c.pendPaths = c.pendPaths[:0]
	}
	for {
		it, ok := c.reo.Pop(mono.Never)
		if !ok {
			break
		}
		c.ep.pool.put(it.Buf)
	}
}

// SetScheduler swaps the scheduler.
func (c *Conn) SetScheduler(name string) error {
	s, err := scheduler.New(resolveName(name, defaultScheduler, fallbackScheduler, scheduler.Names()), scheduler.Config{})
	if err != nil {
		return fmt.Errorf("mpdccp: %w", err)
	}
	c.sched = s
	c.holdUntil = 0
	return nil
}

// SetReorderer swaps the reorderer; packets held by the old one are
// delivered first (they are moved in arrival order).
func (c *Conn) SetReorderer(name string, cfg reorder.Config) error {
	r, err := reorder.New(resolveName(name, defaultReorderer, fallbackReorderer, reorder.Names()), cfg)
	if err != nil {
		return fmt.Errorf("mpdccp: %w", err)
	}
	old := c.reo
	c.reo = r
	c.updatePaths()
	for {
		it, ok := old.Pop(mono.Never)
		if !ok {
			break
		}
		if !r.Push(it.Arrival, it) {
			c.ep.pool.put(it.Buf)
		}
	}
	c.mayDeliver = true
	return nil
}

func (c *Conn) pathByID(id int) *subflow {
	for _, sf := range c.subflows {
		if sf.id == id {
			return sf
		}
	}
	return nil
}

func (c *Conn) newSubflow(now mono.Time, p PathConfig, join bool) (*subflow, error) {
	e := c.ep
	name := e.ccidName
	if p.CCID != "" {
		name = resolveName(p.CCID, defaultCCID, fallbackCCID, ccid.Names())
	}
	cfg := e.cfg.CC
	if cfg.MSS == 0 {
		cfg.MSS = e.cfg.MaxPacket
	}
	cc, err := ccid.New(name, cfg)
	if err != nil {
		return nil, fmt.Errorf("mpdccp: path %d: %w", p.ID, err)
	}
	sf := &subflow{conn: c, id: p.ID, local: p.Local, localAddr: p.LocalAddr, remote: p.Remote,
		prio: p.Prio, weight: max(p.Weight, 1), cc: cc, join: join,
		swLocal: defaultSeqWindow, swRemote: defaultSeqWindow, rxAckRatio: 2,
		ackDeadline: mono.Never, lastHeard: now, reqRTO: requestRTO, partRTO: partOpenRTO}
	if sf.prio == 0 {
		sf.prio = 3
	}
	sf.iss = e.rand48()
	sf.gss = seqAdd(sf.iss, -1)
	sf.gar = sf.iss
	c.subflows = append(c.subflows, sf)
	return sf, nil
}

// startRequest makes a client subflow send its Request now.
func (sf *subflow) startRequest(now mono.Time) {
	e := sf.conn.ep
	sf.state = sfRequest
	sf.remotePort = sf.remote.Port()
	if sf.remotePort == 0 {
		sf.remotePort = wire.DefaultPort
	}
	sf.localPort = e.pickPort(sf.remotePort)
	sf.initFeatures(true)
	if sf.join {
		sf.nonceLocal = e.rand32()
	}
	sf.reqDue = now
	e.index(sf)
}

// AddPath adds a path: on a client it starts a join (at once when the
// connection is open, else when it opens).
func (c *Conn) AddPath(now mono.Time, p PathConfig) error {
	if c.ep.cfg.Role != Client {
		return errors.New("mpdccp: AddPath: only clients initiate joins")
	}
	if c.state == Closing || c.state == Closed {
		return errors.New("mpdccp: AddPath: connection is closing")
	}
	if c.pathByID(p.ID) != nil {
		return fmt.Errorf("mpdccp: AddPath: path id %d in use", p.ID)
	}
	if !p.Remote.IsValid() {
		return fmt.Errorf("mpdccp: AddPath: path %d: invalid remote address", p.ID)
	}
	if c.state != Open {
		c.pendingJoins = append(c.pendingJoins, p)
		return nil
	}
	return c.startJoin(now, p)
}

func (c *Conn) startJoin(now mono.Time, p PathConfig) error {
	sf, err := c.newSubflow(now, p, true)
	if err != nil {
		return err
	}
	c.nextPathID++
	sf.addrID = uint8(c.nextPathID)
	sf.startRequest(now)
	return nil
}

// RemovePath closes one subflow gracefully (DCCP Close without MP_CLOSE).
func (c *Conn) RemovePath(now mono.Time, id int) error {
	sf := c.pathByID(id)
	if sf == nil {
		for i, p := range c.pendingJoins {
			if p.ID == id {
				c.pendingJoins = append(c.pendingJoins[:i], c.pendingJoins[i+1:]...)
				return nil
			}
		}
		return fmt.Errorf("mpdccp: RemovePath: no path %d", id)
	}
	c.closeSubflow(now, sf, false)
	return nil
}

// SetPrio changes a path's priority and tells the peer with MP_PRIO,
// retransmitted until MP_CONFIRM.
func (c *Conn) SetPrio(now mono.Time, id int, prio uint8) error {
	if prio > 15 {
		return fmt.Errorf("mpdccp: SetPrio: priority %d > 15", prio)
	}
	sf := c.pathByID(id)
	if sf == nil {
		return fmt.Errorf("mpdccp: SetPrio: no path %d", id)
	}
	sf.prio = prio
	c.holdUntil = 0
	for i := range c.ctrl {
		if c.ctrl[i].opt.Type == wire.MPPrio && c.ctrl[i].sf == sf {
			c.ctrl[i].opt.Prio = prio
			c.ctrl[i].next, c.ctrl[i].tries, c.ctrl[i].interval = now, 0, ctrlRTO
			return nil
		}
	}
	c.ctrl = append(c.ctrl, ctrlItem{opt: wire.MPOption{Type: wire.MPPrio, Prio: prio}, sf: sf, next: now, interval: ctrlRTO})
	return nil
}

// Close closes the connection gracefully: Close with MP_CLOSE on every
// subflow; the peer answers each with a Reset (code 1).
func (c *Conn) Close(now mono.Time) {
	if c.state == Closing || c.state == Closed {
		return
	}
	c.state = Closing
	c.closeReason = "local close"
	c.pendingJoins = nil
	live := false
	for _, sf := range c.subflows {
		if sf.state == sfOpen || sf.state == sfPartOpen || sf.state == sfRespond {
			c.closeSubflow(now, sf, true)
			live = true
		} else if sf.state != sfClosed {
			c.subflowClosed(sf, 0, "local close")
		}
	}
	if !live {
		c.setClosed("local close", 0)
	}
}

// Abort tears the connection down at once: Reset code 13 with
// MP_FAST_CLOSE on every subflow.
func (c *Conn) Abort(now mono.Time) {
	if c.state == Closed {
		return
	}
	c.abort = true
	for _, sf := range c.subflows {
		if sf.state != sfClosed && sf.state != sfRequest {
			sf.resetOut, sf.resetCode, sf.resetMPFast = true, wire.ResetMPAbrupt, true
		}
	}
	c.setClosed("local abort", wire.ResetMPAbrupt)
}

func (c *Conn) closeSubflow(now mono.Time, sf *subflow, mp bool) {
	if sf.state == sfClosed || sf.state == sfClosing {
		return
	}
	if sf.state == sfRequest {
		c.subflowClosed(sf, 0, "removed")
		return
	}
	sf.state = sfClosing
	sf.closeOut, sf.closeMP, sf.closeDue, sf.closeTries = true, mp, now, 0
	c.holdUntil = 0
}

func (c *Conn) setClosed(reason string, code wire.ResetCode) {
	if c.state == Closed {
		return
	}
	c.state = Closed
	if c.closeReason == "" {
		c.closeReason = reason
	}
	for _, sf := range c.subflows {
		if sf.state != sfClosed && !sf.resetOut {
			sf.state = sfClosed
		}
	}
	c.ep.emit(Event{Kind: EventConnClosed, Conn: c, Path: -1, Reset: code, Reason: c.closeReason})
}

// subflowClosed marks sf closed and closes the connection with its last subflow.
func (c *Conn) subflowClosed(sf *subflow, code wire.ResetCode, reason string) {
	if sf.state == sfClosed {
		return
	}
	wasUp := sf.state == sfOpen
	sf.state = sfClosed
	c.ep.unindex(sf)
	c.holdUntil = 0
	if wasUp || c.state == Closing {
		c.ep.emit(Event{Kind: EventPathClosed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: code, Reason: reason})
	} else if sf.join {
		c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: code, Reason: reason})
	}
	c.updatePaths()
	for _, x := range c.subflows {
		if x.state != sfClosed {
			return
		}
	}
	if c.state == Connecting && sf.join {
		return
	}
	c.setClosed(reason, code)
}

func (c *Conn) hasPendingOutput() bool {
	for _, sf := range c.subflows {
		if sf.resetOut {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Server: new connections and joins

func (e *Endpoint) handleRequest(now mono.Time, local int, from netip.AddrPort, to netip.Addr, p *wire.Packet) {
	if p.ServiceCode != e.cfg.ServiceCode {
		e.drop(DropBadService)
		e.queueReset(local, from, to, p, wire.ResetBadServiceCode)
		return
	}
	var (
		mpVersionOK bool
		key         wire.MPOption
		join        wire.MPOption
		haveKey     bool
		haveJoin    bool
		mo          wire.MPOption
	)
	it := wire.NewOptionIter(p.Options)
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		switch o.Type {
		case wire.OptChangeR:
			if f, vals, err := wire.ParseFeature(o.Data); err == nil && f == wire.FeatMultipath {
				for _, v := range vals {
					mpVersionOK = mpVersionOK || v>>4 == 0
				}
			}
		case wire.OptMultipath:
			if wire.ParseMP(o.Data, &mo) != nil {
				continue
			}
			switch mo.Type {
			case wire.MPKey:
				key, haveKey = mo, true
			case wire.MPJoin:
				join, haveJoin = mo, true
			}
		}
	}
	if it.Err() != nil {
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetOptionError)
		return
	}
	if !mpVersionOK || haveKey == haveJoin {
		// No MP_CAPABLE: we do not serve plain DCCP (RFC 9897 fallback: close).
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetConnectionRefused)
		return
	}
	pc := PathConfig{Local: local, LocalAddr: netip.AddrPortFrom(to, 0), Remote: from}
	if haveJoin {
		c := e.byCI[join.Token]
		if c == nil || c.state != Open {
			e.drop(DropNoConn)
			e.queueReset(local, from, to, p, wire.ResetNoConnection)
			return
		}
		live := 0
		for _, sf := range c.subflows {
			if sf.state != sfClosed {
				live++
			}
		}
		if live >= e.cfg.MaxSubflows {
			e.drop(DropTooBusy)
			e.queueReset(local, from, to, p, wire.ResetTooBusy)
			return
		}
		c.nextPathID++
		pc.ID = c.nextPathID
		sf, err := c.newSubflow(now, pc, true)
		if err != nil {
			e.drop(DropTooBusy)
			return
		}
		sf.peerAddrID = join.AddrID
		sf.addrID = 0
		sf.noncePeer = join.Nonce
		sf.nonceLocal = e.rand32()
		c.acceptSubflow(now, sf, p)
		return
	}
	// New connection: MP_KEY with a key type we support.
	keys := key.Keys
	var kd []byte
	for {
		kt, k, rest, ok := wire.NextKey(keys)
		if !ok {
			break
		}
		if kt == wire.KeyTypePlain {
			kd = k
			break
		}
		keys = rest
	}
	if kd == nil {
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetOptionError)
		return
	}
	if len(e.conns) >= e.cfg.MaxConns {
		e.drop(DropTooBusy)
		e.queueReset(local, from, to, p, wire.ResetTooBusy)
		return
	}
	c, err := e.newConn(now)
	if err != nil {
		return
	}
	c.peerCI = key.Token
	c.keyType = wire.KeyTypePlain
	copy(c.peerKey[:], kd)
	c.mpConfirmed = true
	pc.ID = 0
	sf, err := c.newSubflow(now, pc, false)
	if err != nil {
		e.removeConn(c)
		return
	}
	c.acceptSubflow(now, sf, p)
}

// acceptSubflow is the server side of a Request: RESPOND state, Response out.
func (c *Conn) acceptSubflow(now mono.Time, sf *subflow, p *wire.Packet) {
	sf.state = sfRespond
	sf.localPort, sf.remotePort = p.DstPort, p.SrcPort
	sf.isr, sf.gsr, sf.gsrAt = p.Seq, p.Seq, now
	sf.rx.init(p.Seq)
	sf.initFeatures(false)
	sf.respOut = true
	sf.respUntil = now.Add(respondTimeout)
	sf.lastHeard = now
	sf.stats.PacketsIn++
	c.ep.index(sf)
	// Process the Request's feature options (Change R MP_CAPABLE etc).
	it := wire.NewOptionIter(p.Options)
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		if o.Type >= wire.OptChangeL && o.Type <= wire.OptConfirmR {
			c.handleFeature(sf, o)
		}
	}
}

// ---------------------------------------------------------------------------
// Receiving

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
	mpCapable bool
	confirmMP bool // Confirm L(MP_CAPABLE) seen
}

func (c *Conn) handlePacket(now mono.Time, sf *subflow, p *wire.Packet, ecn uint8, size int) {
	e := c.ep
	// Validity (RFC 4340 §7.5.3, §8.5).
	switch {
	case sf.state == sfClosed:
		e.drop(DropNoConn)
		return
	case p.Type == wire.TypeReset:
		if !sf.ackValid(p.Ack) && !(sf.state == sfRequest && wire.SeqInWindow(p.Ack, sf.iss, sf.gss)) {
			e.drop(DropOutOfWindow)
			return
		}
	case sf.state == sfRequest:
		if p.Type != wire.TypeResponse || !wire.SeqInWindow(p.Ack, sf.iss, sf.gss) {
			e.drop(DropBadState)
			return
		}
	case sf.state == sfRespond && p.Type == wire.TypeRequest:
		if p.Seq != sf.isr && seqLess(sf.gsr, p.Seq) {
			sf.gsr = p.Seq // a retransmitted Request has a new sequence number
			sf.rx.init(p.Seq)
		}
		// The Response answering it must carry the Confirms again.
		it := wire.NewOptionIter(p.Options)
		for {
			o, ok := it.Next()
			if !ok {
				break
			}
			if o.Type >= wire.OptChangeL && o.Type <= wire.OptConfirmR {
				c.handleFeature(sf, o)
			}
		}
		sf.respOut = true
		return
	case p.Type == wire.TypeRequest || p.Type == wire.TypeResponse:
		e.drop(DropBadState)
		return
	case p.Type == wire.TypeSync || p.Type == wire.TypeSyncAck:
		if !sf.ackValid(p.Ack) {
			e.drop(DropOutOfWindow)
			sf.stats.OutOfWindow++
			return
		}
	default:
		if !sf.seqValid(p) {
			e.drop(DropOutOfWindow)
			sf.stats.OutOfWindow++
			if now.Sub(sf.lastSync) >= syncInterval && sf.state >= sfPartOpen {
				sf.syncOut, sf.syncAckNo, sf.lastSync = true, p.Seq, now
			}
			return
		}
	}

	// Options.
	var ro rxOpts
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
		case wire.OptAckVector0, wire.OptAckVector1:
			if wire.ValidAckVector(o.Data) {
				e.cells = append(e.cells, o.Data...)
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
					c.handleAddrOption(now, sf, &lastCtrl, mo.HMAC, &ro)
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
			case wire.MPPrio:
				c.handlePrio(sf, &mo, &ro, o.Data)
			case wire.MPAddAddr, wire.MPRemoveAddr:
				lastCtrl, haveCtrl = mo, true
				lastCtrl.Raw = o.Data
			}
		}
	}
	if it.Err() != nil {
		e.drop(DropBadOption)
		return
	}

	// Liveness.
	sf.lastHeard = now
	sf.stats.PacketsIn++
	sf.stats.BytesIn += uint64(size)
	if sf.failed {
		sf.failed = false
		c.holdUntil = 0
		e.emit(Event{Kind: EventPathUp, Conn: c, Path: sf.id, Remote: sf.remote, Reason: "heard again"})
		c.updatePaths()
	}

	switch p.Type {
	case wire.TypeReset:
		c.handleReset(now, sf, p, &ro)
		return
	case wire.TypeResponse:
		c.handleResponse(now, sf, p, &ro)
		return
	}

	// Sequence bookkeeping for accepted packets.
	fresh, disorder := sf.rx.record(p.Seq, ecn == 3)
	if seqLess(sf.gsr, p.Seq) {
		sf.gsr, sf.gsrAt = p.Seq, now
	}
	if !fresh {
		sf.stats.Duplicates++
	}
	if p.Type.HasAck() && seqLess(sf.gar, p.Ack) {
		sf.gar = p.Ack
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
					return
				}
			}
			c.subflowOpen(now, sf)
			sf.ackNow = true // the 4th packet of the handshake
		}
	case sfPartOpen:
		c.subflowOpen(now, sf)
	}

	// Feedback for the congestion controller and ack-of-ack.
	if (p.Type == wire.TypeAck || p.Type == wire.TypeDataAck) && sf.state >= sfOpen {
		e.runs = e.runs[:0]
		if len(e.cells) > 0 {
			e.runs = decodeRuns(e.runs, p.Ack, e.cells)
		} else {
			e.runs = append(e.runs, ccid.AckRun{High: p.Ack, N: 1, State: ccid.Received})
		}
		if a, ok := sf.acks.ackedBy(p.Ack, e.runs); ok {
			sf.rx.trim(a)
		}
		// e.fb, not a local: a pointer passed through an interface escapes.
		e.fb = ccid.Feedback{AckNo: p.Ack, Runs: e.runs, Elapsed: ro.elapsed, Size: size}
		sf.cc.OnFeedback(now, &e.fb)
		sf.updateFeatures()
		c.holdUntil = 0
	}

	switch p.Type {
	case wire.TypeData, wire.TypeDataAck:
		if fresh {
			c.receiveData(now, sf, p, &ro)
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
		mp := ro.hasClose && hmac.Equal(ro.closeKey, c.localKey[:c.keyLen])
		if mp && c.state != Closing && c.state != Closed {
			c.state = Closing
			c.closeReason = "peer close"
			c.pendingJoins = nil
		}
		sf.resetOut, sf.resetCode = true, wire.ResetClosed
	}
}

func (c *Conn) subflowOpen(now mono.Time, sf *subflow) {
	if sf.state == sfOpen {
		return
	}
	sf.state = sfOpen
	sf.lastHeard = now
	c.holdUntil = 0
	c.updatePaths()
	c.ep.emit(Event{Kind: EventPathUp, Conn: c, Path: sf.id, Remote: sf.remote, Reason: "established"})
	if c.state == Connecting && !sf.join {
		c.state = Open
		c.ep.emit(Event{Kind: EventConnOpen, Conn: c, Path: sf.id, Remote: sf.remote})
		if c.ep.cfg.Role == Client {
			joins := c.pendingJoins
			c.pendingJoins = nil
			for _, p := range joins {
				_ = c.startJoin(now, p)
			}
		}
	}
}

func (c *Conn) handleResponse(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) {
	e := c.ep
	if sf.state != sfRequest {
		e.drop(DropBadState)
		return
	}
	sf.isr, sf.gsr, sf.gsrAt = p.Seq, p.Seq, now
	sf.rx.init(p.Seq)
	sf.gar = p.Ack
	if !ro.confirmMP {
		// RFC 9897 fallback: no MP_CAPABLE. mptun does not run plain DCCP, so
		// the first subflow is closed; a join failing only loses that path.
		e.drop(DropBadOption)
		sf.resetOut, sf.resetCode = true, wire.ResetOptionError
		c.failSubflow(sf, wire.ResetOptionError, "peer not MP_CAPABLE")
		return
	}
	if !sf.join {
		kt, k, _, ok := wire.NextKey(ro.key)
		if !ro.hasKey || !ok || kt != c.keyType || len(k) != c.keyLen {
			e.drop(DropBadOption)
			sf.resetOut, sf.resetCode = true, wire.ResetOptionError
			c.failSubflow(sf, wire.ResetOptionError, "bad MP_KEY in Response")
			return
		}
		c.peerCI = ro.keyCI
		copy(c.peerKey[:], k)
	} else {
		var want [20]byte
		sf.noncePeer = ro.join.Nonce
		sf.peerAddrID = ro.join.AddrID
		c.joinHMAC(&want, false, sf)
		if !ro.hasJoin || ro.hmac == nil || !hmac.Equal(ro.hmac, want[:]) {
			e.drop(DropBadHMAC)
			sf.resetOut, sf.resetCode = true, wire.ResetOptionError
			c.failSubflow(sf, wire.ResetOptionError, "bad MP_HMAC in Response")
			return
		}
	}
	sf.state = sfPartOpen
	sf.ackNow = true
	sf.partDue = now.Add(sf.partRTO)
}

// failSubflow ends a subflow that is sending a Reset (the Reset goes out
// first, then PollTransmit closes it).
func (c *Conn) failSubflow(sf *subflow, code wire.ResetCode, reason string) {
	c.closeReason = reason
	if !sf.join && c.state == Connecting {
		c.ep.emit(Event{Kind: EventConnClosed, Conn: c, Path: sf.id, Reset: code, Reason: reason})
		c.state = Closed
		return
	}
	c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: code, Reason: reason})
}

func (c *Conn) handleReset(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) {
	if p.ResetCode == wire.ResetMPAbrupt && ro.hasFast && hmac.Equal(ro.fastKey, c.localKey[:c.keyLen]) {
		for _, x := range c.subflows {
			if x.state != sfClosed {
				x.state = sfClosed
				c.ep.unindex(x)
			}
		}
		c.closeReason = "peer abort"
		c.setClosed("peer abort", wire.ResetMPAbrupt)
		return
	}
	reason := "peer reset: " + p.ResetCode.String()
	if sf.state == sfRequest && sf.join || sf.state == sfPartOpen && sf.join {
		sf.state = sfClosed
		c.ep.unindex(sf)
		c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: p.ResetCode, Reason: reason})
		return
	}
	c.subflowClosed(sf, p.ResetCode, reason)
}

// receiveData hands a data packet's payload to the reorderer.
func (c *Conn) receiveData(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) {
	sf.stats.DataIn++
	if !ro.hasMPSeq {
		c.ep.drop(DropNoMPSeq)
		c.stats.NoMPSeq++
		return
	}
	if len(p.Payload) == 0 {
		return
	}
	c.stats.Received++
	b := c.ep.pool.get()
	n := copy(b, p.Payload)
	it := reorder.Item{Seq: ro.mpSeq, Path: sf.id, PathSeq: p.Seq, Arrival: now, Buf: b[:n]}
	if !c.reo.Push(now, it) {
		c.ep.pool.put(b)
		c.ep.drop(DropDuplicate)
		c.stats.Duplicates++
		return
	}
	c.mayDeliver = true
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
	var in [32]byte
	msg := wire.HMACInput(in[:0], mo)
	var want [20]byte
	var dkey [128]byte
	n := copy(dkey[:], c.peerKey[:c.keyLen])
	n += copy(dkey[n:], c.localKey[:c.keyLen])
	wire.HMAC(&want, dkey[:n], msg)
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
		ev.Remote = netip.AddrPortFrom(mo.Addr, mo.Port)
	}
	c.ep.emit(ev)
}

// putControl adds pending MP_CONFIRM, due control items and MP_RTT.
func (c *Conn) putControl(now mono.Time, sf *subflow, b *wire.Builder, room func(int) bool, hasMPSeq bool) {
	if len(c.confirmOut) > 0 && room(3+len(c.confirmOut)) {
		if b.MP(&wire.MPOption{Type: wire.MPConfirm, Raw: c.confirmOut}) == nil {
			c.confirmOut = c.confirmOut[:0]
		}
	}
	for i := range c.ctrl {
		ci := &c.ctrl[i]
		if ci.next > now || (ci.sf != nil && ci.sf != sf) || ci.tries >= maxCtrlTries {
			continue
		}
		l, err := wire.MPLen(&ci.opt)
		if err != nil || !room(l+9) {
			continue
		}
		if !hasMPSeq {
			// Control options travel with an MP_SEQ; a packet without data
			// carries the last MP_SEQ used (it does not consume one).
			if b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: seqAdd(c.mpSeq, -1)}) != nil {
				continue
			}
			hasMPSeq = true
		}
		ci.seq = seqAdd(c.mpSeq, -1)
		if b.MP(&ci.opt) == nil {
			if ci.tries > 0 {
				c.stats.CtrlRetransmits++
			}
			ci.tries++
			ci.next = now.Add(ci.interval)
			ci.interval *= 2
		}
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

// updatePaths refreshes the reorderer's view of the receiving paths.
func (c *Conn) updatePaths() {
	c.pathInfo = c.pathInfo[:0]
	for _, sf := range c.subflows {
		if sf.state == sfClosed {
			continue
		}
		st := sf.cc.State()
		c.pathInfo = append(c.pathInfo, reorder.PathInfo{ID: sf.id, Active: sf.state == sfOpen && !sf.failed,
			SRTT: st.SRTT, MinRTT: st.MinRTT, RTTVar: st.RTTVar, PeerRTT: sf.peerRTT})
	}
	c.reo.SetPaths(c.pathInfo)
}

// ---------------------------------------------------------------------------
// Sending

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
	switch {
	case sf.ackNow || sf.dataSinceAck >= sf.rxAckRatio || sf.ackDeadline <= now,
		sf.ackLazy && sf.rx.span() >= lazyAckSpan,
		sf.hasChanges() && now.Sub(sf.lastChangeSent) >= 200*time.Millisecond,
		c.ctrlDue(now, sf):
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeAck})
	case now.Sub(sf.lastHeard) >= c.ep.cfg.KeepAlive && now.Sub(sf.lastProbe) >= c.ep.cfg.KeepAlive:
		// Keepalive: a Sync asks for a SyncAck, so both ends hear each other.
		sf.lastProbe = now
		sf.stats.SyncsOut++
		return c.build(now, sf, buf, &pktSpec{typ: wire.TypeSync, ackNo: sf.gsr, hasAckNo: true})
	}
	return Transmit{}, false
}

func (c *Conn) pollData(now mono.Time, buf []byte) (Transmit, bool) {
	// Remaining copies of a packet a redundant scheduler sent on several paths.
	for len(c.pendPaths) > 0 {
		sf := c.pathByID(c.pendPaths[0])
		c.pendPaths = c.pendPaths[1:]
		if sf == nil || !sf.usable() || !sf.ready(now) {
			c.stats.CopiesSkipped++
			continue
		}
		t, ok := c.sendData(now, sf, buf, c.pend.b[:c.pend.n], c.pendSeq)
		if len(c.pendPaths) == 0 {
			c.ep.pool.put(c.pend.b)
			c.pend = queued{}
		}
		if ok {
			return t, true
		}
	}
	if c.pend.b != nil {
		c.ep.pool.put(c.pend.b)
		c.pend = queued{}
	}
	if c.qLen == 0 || c.state != Open || c.holdUntil > now {
		return Transmit{}, false
	}
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
			SRTT: st.SRTT, RTTVar: st.RTTVar, MinRTT: st.MinRTT, PacingRate: st.PacingRate})
	}
	if !anyUsable {
		c.holdUntil = mono.Never
		return Transmit{}, false
	}
	q := c.sendQ[c.qHead]
	c.pickBuf = c.sched.Pick(now, c.schedBuf, scheduler.Packet{Size: q.n, Class: q.class}, c.pickBuf[:0])
	if len(c.pickBuf) == 0 {
		c.holdUntil = c.retryTime(now)
		return Transmit{}, false
	}
	first := c.pathByID(c.pickBuf[0])
	if first == nil || !first.usable() {
		c.holdUntil = mono.Never
		return Transmit{}, false
	}
	if !first.ready(now) {
		if first.cc.CanSend(now) {
			c.holdUntil = first.cc.SendTime(now)
		} else {
			c.holdUntil = mono.Never // wait for an ack
		}
		return Transmit{}, false
	}
	c.sendQ[c.qHead] = queued{}
	c.qHead = (c.qHead + 1) % len(c.sendQ)
	c.qLen--
	seq := c.mpSeq
	c.mpSeq = seqAdd(c.mpSeq, 1)
	t, ok := c.sendData(now, first, buf, q.b[:q.n], seq)
	if len(c.pickBuf) > 1 {
		c.pend, c.pendSeq = q, seq
		c.pendPaths = append(c.pendPaths[:0], c.pickBuf[1:]...)
	} else {
		c.ep.pool.put(q.b)
	}
	return t, ok
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

func (c *Conn) sendData(now mono.Time, sf *subflow, buf, payload []byte, seq uint64) (Transmit, bool) {
	typ := wire.TypeData
	if sf.ackNow || sf.ackLazy || sf.dataSinceAck > 0 || sf.hasChanges() || c.ctrlDue(now, sf) ||
		now.Sub(sf.rttSentAt) >= rttReportEvery {
		typ = wire.TypeDataAck
	}
	t, ok := c.build(now, sf, buf, &pktSpec{typ: typ, payload: payload, mpSeq: seq, hasMPSeq: true, inFlight: true})
	if ok {
		c.stats.SentPackets++
		c.stats.SentBytes += uint64(len(payload))
	}
	return t, ok
}

// ---------------------------------------------------------------------------
// Timers

func (c *Conn) deadline() mono.Time {
	d := mono.Never
	if c.qLen > 0 && c.state == Open && c.holdUntil != mono.Never {
		d = c.holdUntil
	}
	if len(c.pendPaths) > 0 {
		return 0
	}
	if rd := c.reo.Deadline(); rd < d {
		d = rd
	}
	if c.mayDeliver {
		d = 0
	}
	ka := c.ep.cfg.KeepAlive
	for _, sf := range c.subflows {
		if sf.resetOut || sf.respOut || sf.syncOut || sf.syncAckOut || sf.closeOut {
			return 0
		}
		switch sf.state {
		case sfRequest:
			d = mono.Min(d, sf.reqDue)
		case sfRespond:
			d = mono.Min(d, sf.respUntil)
		case sfPartOpen:
			if sf.ackNow {
				return 0
			}
			d = mono.Min(d, sf.partDue)
		case sfClosing:
			d = mono.Min(d, sf.closeDue)
		case sfOpen:
			if sf.ackNow || sf.dataSinceAck >= sf.rxAckRatio {
				return 0
			}
			d = mono.Min(d, sf.ackDeadline)
			d = mono.Min(d, sf.cc.Deadline())
			d = mono.Min(d, mono.Max(sf.lastHeard, sf.lastProbe).Add(ka))
			if !sf.failed {
				d = mono.Min(d, sf.lastHeard.Add(c.ep.cfg.PathTimeout))
			}
			if sf.hasChanges() {
				d = mono.Min(d, sf.lastChangeSent.Add(200*time.Millisecond))
			}
		}
	}
	for i := range c.ctrl {
		if c.ctrl[i].tries < maxCtrlTries {
			d = mono.Min(d, c.ctrl[i].next)
		}
	}
	if len(c.confirmOut) > 0 {
		return 0
	}
	if c.state == Open || c.state == Closing {
		d = mono.Min(d, c.lastHeard().Add(c.ep.cfg.IdleTimeout))
	}
	return d
}

func (c *Conn) lastHeard() mono.Time {
	t := c.created
	for _, sf := range c.subflows {
		t = mono.Max(t, sf.lastHeard)
	}
	return t
}

func (c *Conn) handleTimer(now mono.Time) {
	if c.reo.Deadline() <= now {
		c.reo.OnTimer(now)
		c.mayDeliver = true
	}
	for _, sf := range c.subflows {
		switch sf.state {
		case sfRequest:
			if sf.reqDue <= now && sf.reqTries >= maxRequestTries {
				reason := "no answer to Request"
				if sf.join {
					sf.state = sfClosed
					c.ep.unindex(sf)
					c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reason: reason})
				} else {
					c.subflowClosed(sf, 0, reason)
				}
			}
		case sfRespond:
			if sf.respUntil <= now {
				c.subflowClosed(sf, 0, "handshake timeout")
			}
		case sfClosing:
			if sf.closeDue <= now && sf.closeTries >= maxCloseTries {
				c.subflowClosed(sf, 0, "close timeout")
			}
		case sfOpen:
			if sf.cc.Deadline() <= now {
				sf.cc.OnTimer(now)
				c.holdUntil = 0
			}
			if !sf.failed && now.Sub(sf.lastHeard) >= c.ep.cfg.PathTimeout {
				sf.failed = true
				c.holdUntil = 0
				c.ep.emit(Event{Kind: EventPathDown, Conn: c, Path: sf.id, Remote: sf.remote,
					Reason: fmt.Sprintf("nothing heard for %v", now.Sub(sf.lastHeard))})
				c.updatePaths()
			}
		}
	}
	for i := 0; i < len(c.ctrl); i++ {
		ci := &c.ctrl[i]
		if ci.tries >= maxCtrlTries && ci.next <= now || ci.sf != nil && ci.sf.state == sfClosed {
			c.stats.CtrlGivenUp++
			c.ctrl = append(c.ctrl[:i], c.ctrl[i+1:]...)
			i--
		}
	}
	if c.state == Open || c.state == Closing {
		if last := c.lastHeard(); now.Sub(last) >= c.ep.cfg.IdleTimeout {
			c.closeReason = "idle timeout"
			c.setClosed("idle timeout", 0)
			return
		}
	}
	if c.state == Closing {
		live := false
		for _, sf := range c.subflows {
			if sf.state != sfClosed {
				live = true
			}
		}
		if !live {
			c.setClosed(c.closeReason, 0)
		}
	}
}
