// SPDX-License-Identifier: MIT

package mpdccp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/flow"
	"github.com/mptun/mptun/internal/defaults"
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
	b       []byte
	n       int
	class   int
	ordered bool // path-ordered (see flowOrdered)
}

// ctrlItem is a reliable control option (MP_PRIO, MP_ADDADDR,
// MP_REMOVEADDR) retransmitted until the peer's MP_CONFIRM echoes it.
type ctrlItem struct {
	opt      wire.MPOption
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

	localCI, peerCI uint32
	keys            connKeys
	mpConfirmed     bool
	sec             *connSec // secure mode (secure_handshake.go)

	subflows     []*subflow
	nextPathID   int
	pendingJoins []PathConfig

	// Sending.
	mpSeq uint64 // next MP_SEQ
	// fq holds the default class's inner packets waiting to be sent, one
	// CoDel queue per flow bucket (aqm.FQ); flowOrd keeps, per bucket,
	// what the receiver must be told about the flow's ordering, and
	// flowSeed keys the flow hash. head is a traffic-class packet taken
	// from classQ for scheduling.
	fq        *aqm.FQ
	aqmPast   aqm.Stats // counters of send queues released while idle
	flowOrd   []flowOrder
	flowSeed  uint64
	pickNow   mono.Time
	retryAt   mono.Time // earliest time a held flow may be taken (scheduler.FlowDecision.RetryIn)
	firstPass bool      // the flow queue's first walk (scheduler.FlowPacket.FirstPass)
	yielded   bool      // a spread flow yielded in it
	head      queued
	hasHead   bool
	pend      queued // a packet with copies still to send (redundant schedulers)
	pendSeq   uint64
	pendPaths []int
	holdUntil mono.Time
	sched     scheduler.Scheduler
	// classifier and classScheds implement per-traffic-class scheduling;
	// classScheds[0] is unused (class 0 is sched).
	rtxQ       []rtxItem      // packets to send once more (loss repair)
	repairAt   mono.Time      // when a waiting repair may go (pacing)
	nackOut    []reorder.NACK // repair requests waiting for a packet
	classifier *scheduler.Classifier
	// classQ holds packets of the traffic classes (class > 0), sent ahead
	// of the default class's queue: classes are for low-rate, latency- or
	// loss-sensitive traffic (VoIP), which must neither wait behind bulk
	// nor be dropped by its AQM. Ring of classQLimit entries.
	classQ               []queued
	classHead, classTail uint64
	classScheds          []scheduler.Scheduler
	schedBuf             []scheduler.Path
	pickBuf              []int

	// Receiving.
	reo        reorder.Reorderer
	mayDeliver bool
	pathInfo   []reorder.PathInfo
	pathInfoAt mono.Time          // last updatePaths
	lastCtrlRx map[ctrlKey]uint64 // newest MP_SEQ per control dataset

	// Control options.
	ctrl       []ctrlItem
	confirmOut []byte

	closeReason string
	abort       bool

	// Cached deadline(); every entry point that may change the connection
	// calls touch, so that idle connections cost nothing in Deadline,
	// PollTransmit and HandleTimer.
	dl      mono.Time
	dlValid bool
	stats   connCounters

	// Idle shrinking (idle.go).
	lastData mono.Time // last inner packet sent or received
	shrunk   bool      // released since lastData
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
	Repaired                         uint64 // lost packets sent once more (loss repair)
	NACKsSent, NACKsReceived         uint64 // repair requests (nack.go)
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
	// InQueue is the queueing delay of the packets received on the path,
	// from the peer's Timestamps (owd.go), and OutQueue what is left of
	// the RTT's for the way out; both 0 when the peer sends none.
	InQueue, OutQueue time.Duration
	// Suspect: no ack in time, the path carries no data until probes are
	// answered (suspect.go); Suspicions and Reinjected count its history.
	Suspect    bool
	Suspicions uint64
	Reinjected uint64
	// ShortSeqnos: the path's data packets carry 24-bit sequence numbers
	// (the peer agreed, RFC 4340 §7.6.1); HeaderChecksum: their DCCP
	// checksum covers the header only (the peer accepts CsCov 1, §9.2.1).
	ShortSeqnos, HeaderChecksum bool
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
	AQM       aqm.Stats
	connCounters
}

// ID is the connection's local Connection Identifier (RFC 9897 MP_KEY),
// unique within the Endpoint; for logs and metrics.
func (c *Conn) ID() uint32 { return c.localCI }

// State returns the connection state.
func (c *Conn) State() ConnState { return c.state }

// Stats returns a snapshot (it allocates; not for the data path).
func (c *Conn) Stats() ConnStats {
	s := ConnStats{State: c.state, LocalCI: c.localCI, PeerCI: c.peerCI, Reorder: c.reo.Stats(),
		Scheduler: c.sched.Stats(), Queued: c.queued(), connCounters: c.stats}
	s.AQM = c.aqmPast
	if c.fq != nil {
		s.AQM = addAQMStats(s.AQM, c.fq.Stats())
	}
	for _, sf := range c.subflows {
		s.Paths = append(s.Paths, PathStats{ID: sf.id, State: sf.state.String(), Failed: sf.failed, Join: sf.join,
			Local: sf.local, LocalAddr: sf.localAddr, Remote: sf.remote, Prio: sf.prio, CCID: sf.cc.Name(),
			CC: sf.cc.State(), PeerRTT: sf.peerRTT, LastHeard: sf.lastHeard, Suspect: sf.sus.on,
			Suspicions: sf.sus.count, Reinjected: sf.sus.reinjected, PathCounters: sf.stats,
			ShortSeqnos: sf.shortTx, HeaderChecksum: sf.sendCsCov() == headerCsCov || c.sec != nil})
		if t := &sf.inDelay; t.set {
			ps := &s.Paths[len(s.Paths)-1]
			ps.InQueue, ps.OutQueue = t.excess, outOfRTT(&ps.CC, t.excess)
		}
	}
	return s
}

// Send queues an inner packet (copied). It returns false when the packet
// is dropped: too big, queue full, or the connection is closing.
func (c *Conn) Send(now mono.Time, pkt []byte) bool {
	c.touch()
	c.noteData(now)
	if c.state != Open && c.state != Connecting {
		return false
	}
	if len(pkt) > c.ep.MaxPayload() {
		c.stats.TooBig++
		return false
	}
	if c.fq == nil {
		c.initFQ()
	}
	b := c.ep.pool.get()
	n := copy(b, pkt)
	if c.classifier != nil {
		if cl := c.classifier.Classify(pkt); cl > 0 {
			if c.classQ == nil {
				c.classQ = make([]queued, classQLimit)
			}
			if c.classTail-c.classHead >= classQLimit {
				c.ep.pool.put(b)
				c.stats.QueueDrops++
				return false
			}
			c.classQ[c.classTail%classQLimit] = queued{b: b, n: n, class: cl}
			c.classTail++
			return true
		}
	}
	if _, ok := c.fq.Enqueue(now, b[:n], flow.Hash(pkt, c.flowSeed)); !ok {
		c.stats.QueueDrops++
		return false
	}
	return true
}

// initFQ allocates the send queue on first use, so that half-open
// connections (a Request flood) stay small.
func (c *Conn) initFQ() {
	cfg := aqm.FQConfig{Config: aqm.Config{Disabled: true}}
	if c.ep.cfg.AQM != nil {
		cfg.Config = *c.ep.cfg.AQM
	}
	cfg.Limit = c.ep.cfg.SendQueue
	cfg.Drop = c.ep.pool.put
	if c.ep.cfg.ACKFilter {
		cfg.Supersedes = flow.ACKSupersedes
	}
	c.fq = aqm.NewFQ(cfg)
	c.flowOrd = make([]flowOrder, c.fq.Buckets())
	if c.flowSeed == 0 {
		// Kept across idle spells, so that a flow keeps its bucket.
		c.flowSeed = uint64(c.ep.rand32())<<32 | uint64(c.ep.rand32())
	}
}

// queued is the number of inner packets waiting to be sent.
func (c *Conn) queued() int {
	n := 0
	if c.fq != nil {
		n = c.fq.Len()
	}
	if c.hasHead {
		n++
	}
	return n + int(c.classTail-c.classHead)
}

// classQLimit bounds the traffic classes' queue (packets).
const classQLimit = 256

// takeHead makes the oldest traffic-class packet the head to schedule.
func (c *Conn) takeHead() bool {
	if c.hasHead {
		return true
	}
	if c.classHead == c.classTail {
		return false
	}
	i := c.classHead % classQLimit
	c.head, c.classQ[i] = c.classQ[i], queued{}
	c.classHead++
	c.hasHead = true
	return true
}

func (c *Conn) releaseBuffers() {
	c.rtxReleaseAll()
	if c.hasHead {
		c.ep.pool.put(c.head.b)
		c.head, c.hasHead = queued{}, false
	}
	for ; c.classHead != c.classTail; c.classHead++ {
		i := c.classHead % classQLimit
		c.ep.pool.put(c.classQ[i].b)
		c.classQ[i] = queued{}
	}
	if c.fq != nil {
		c.fq.Flush(c.ep.pool.put)
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

// schedulerFor returns the scheduler of a traffic class.
func (c *Conn) schedulerFor(class int) scheduler.Scheduler {
	if class > 0 && class < len(c.classScheds) {
		return c.classScheds[class]
	}
	return c.sched
}

// SetScheduler swaps the scheduler of the default traffic class.
func (c *Conn) SetScheduler(name string) error {
	c.touch()
	s, err := scheduler.New(orDefault(name, defaults.Scheduler), scheduler.Config{})
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
	c.touch()
	r, err := reorder.New(orDefault(name, defaults.Reorderer), c.ep.reorderConfig(cfg))
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
	c.touch()
	e := c.ep
	name := orDefault(p.CCID, e.ccidName)
	cfg := e.cfg.CC
	if cfg.MSS == 0 {
		cfg.MSS = e.cfg.MaxPacket
	}
	cfg.History = ccid.NewHistory()
	cc, err := ccid.New(name, cfg)
	if err != nil {
		return nil, fmt.Errorf("mpdccp: path %d: %w", p.ID, err)
	}
	sf := &subflow{conn: c, id: p.ID, local: p.Local, localAddr: p.LocalAddr, remote: p.Remote,
		prio: p.Prio, weight: max(p.Weight, 1), cc: cc, hist: cfg.History, join: join,
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
	c.touch()
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
	if j := c.ep.cfg.JoinRemote; j != nil {
		p.Remote = j(c.peerCI, p.Remote)
	}
	sf, err := c.newSubflow(now, p, true)
	if err != nil {
		return err
	}
	c.nextPathID++
	sf.addrID = uint8(c.nextPathID)
	sf.startRequest(now)
	return nil
}

// cancelPendingJoin forgets the join of path id still waiting for the
// connection to open; it reports whether there was one.
func (c *Conn) cancelPendingJoin(id int) bool {
	for i, p := range c.pendingJoins {
		if p.ID == id {
			c.pendingJoins = append(c.pendingJoins[:i], c.pendingJoins[i+1:]...)
			return true
		}
	}
	return false
}

// RemovePath closes one subflow gracefully (DCCP Close without MP_CLOSE).
func (c *Conn) RemovePath(now mono.Time, id int) error {
	c.touch()
	sf := c.pathByID(id)
	if sf == nil {
		if c.cancelPendingJoin(id) {
			return nil
		}
		return fmt.Errorf("mpdccp: RemovePath: no path %d", id)
	}
	c.closeSubflow(now, sf, false)
	return nil
}

// SetPrio changes a path's priority and tells the peer with MP_PRIO,
// retransmitted until MP_CONFIRM.
func (c *Conn) SetPrio(now mono.Time, id int, prio uint8) error {
	c.touch()
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

// AdvertiseAddr tells the peer about an address of ours (MP_ADDADDR with
// MP_HMAC), retransmitted until MP_CONFIRM. A zero port is left out.
func (c *Conn) AdvertiseAddr(now mono.Time, id uint8, addr netip.AddrPort) error {
	c.touch()
	if c.state != Open {
		return errors.New("mpdccp: AdvertiseAddr: connection not open")
	}
	if !addr.Addr().IsValid() || addr.Addr().IsMulticast() || addr.Addr().IsUnspecified() {
		return fmt.Errorf("mpdccp: AdvertiseAddr: bad address %v", addr)
	}
	c.addCtrl(now, wire.MPOption{Type: wire.MPAddAddr, AddrID: id, Nonce: c.ep.rand32(),
		Addr: addr.Addr().Unmap(), Port: addr.Port()})
	return nil
}

// WithdrawAddr tells the peer that address id is gone (MP_REMOVEADDR).
func (c *Conn) WithdrawAddr(now mono.Time, id uint8) error {
	c.touch()
	if c.state != Open {
		return errors.New("mpdccp: WithdrawAddr: connection not open")
	}
	for i := 0; i < len(c.ctrl); i++ {
		if c.ctrl[i].opt.Type == wire.MPAddAddr && c.ctrl[i].opt.AddrID == id {
			c.ctrl = append(c.ctrl[:i], c.ctrl[i+1:]...) // superseded
			i--
		}
	}
	c.addCtrl(now, wire.MPOption{Type: wire.MPRemoveAddr, AddrID: id, Nonce: c.ep.rand32()})
	return nil
}

func (c *Conn) addCtrl(now mono.Time, o wire.MPOption) {
	c.ctrl = append(c.ctrl, ctrlItem{opt: o, next: now, interval: ctrlRTO})
}

// Close closes the connection gracefully: Close with MP_CLOSE on every
// subflow; the peer answers each with a Reset (code 1).
func (c *Conn) Close(now mono.Time) {
	c.touch()
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
	c.touch()
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

func (c *Conn) touch() { c.dlValid = false }

// cachedDeadline is deadline, recomputed only after the connection changed.
func (c *Conn) cachedDeadline() mono.Time {
	if !c.dlValid {
		c.dl, c.dlValid = c.deadline(), true
	}
	return c.dl
}

// idle reports whether nothing of c is due at now (so it need not be polled).
func (c *Conn) idle(now mono.Time) bool { return c.dlValid && c.dl > now }
