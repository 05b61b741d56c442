// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

type sfState uint8

const (
	sfRequest  sfState = iota // client: Request sent
	sfRespond                 // server: Response sent, waiting for the Ack
	sfPartOpen                // client: Ack sent, waiting for the server's Ack
	sfOpen
	sfClosing // Close sent, waiting for the Reset
	sfClosed
)

var sfStateNames = [...]string{"request", "respond", "partopen", "open", "closing", "closed"}

func (s sfState) String() string { return sfStateNames[s] }

const (
	defaultSeqWindow = 100
	maxSeqWindow     = 1 << 20
	requestRTO       = time.Second
	maxRequestTries  = 8
	partOpenRTO      = 200 * time.Millisecond
	closeRTO         = 500 * time.Millisecond
	maxCloseTries    = 6
	respondTimeout   = 30 * time.Second
	ackDelay         = 5 * time.Millisecond
	syncInterval     = 50 * time.Millisecond
	rttReportEvery   = time.Second
	lazyAckSpan      = 64
	lazyAckInterval  = 50 * time.Millisecond
	// A data sender acknowledges the peer's Acks once this many are
	// unacknowledged or this long after its last Ack Vector.
	ackOfAckSpan     = 16
	ackOfAckInterval = 10 * time.Millisecond
)

// featOpt is one pending feature negotiation option (RFC 4340 §6).
type featOpt struct {
	opt    uint8 // OptChangeL/R or OptConfirmL/R
	feat   uint8
	n      int
	val    [6]byte
	active bool
}

// subflow is one DCCP connection of an MP-DCCP connection.
type subflow struct {
	// ndpRun counts non-data packets sent since the last data packet (NDP
	// Count); rxData, rxLastData and rxDataSeq number received data packets
	// for the reorderer (see dataSeq).
	ndpRun uint64
	// hist is the sent-packet history the controller, loss repair
	// (Config.Retransmit) and ack-of-ack share.
	hist       *ccid.History
	sus        suspectState
	rxData     bool
	rxLastData uint64
	rxDataSeq  uint64
	conn       *Conn
	id         int
	local      int
	localAddr  netip.AddrPort
	remote     netip.AddrPort
	// natResidual is the DCCP checksum residual a NAT on the path leaves
	// (see checksum.go); 0 until learnt. newResidual is a candidate seen
	// newResidualN times in a row, last at newResidualSeq.
	natResidual     uint16
	newResidual     uint16
	newResidualN    int
	newResidualSeq  uint64
	newResidualFrom netip.AddrPort
	localPort       uint16 // DCCP ports
	remotePort      uint16
	state           sfState
	join            bool
	prio            uint8
	weight          int
	cc              ccid.Controller

	// Sequence numbers (RFC 4340 §7).
	iss, isr, gss, gsr, gar uint64
	swLocal, swRemote       uint64 // Sequence Window/local (for our seqs), /remote (the peer's)
	// Short sequence numbers (X=0, Allow Short Seqnos): shortTx, the peer
	// confirmed ours, so our Data, Ack and DataAck carry them; shortRx,
	// we confirmed the peer's, so we accept them.
	shortTx, shortRx bool
	rx               rxState
	gsrAt            mono.Time

	// Receiver-side ack scheduling.
	rxAckRatio     int // the peer's Ack Ratio: ack every this many data packets
	dataSinceAck   int
	ackNow         bool
	ackLazy        bool // something unacknowledged, piggyback only
	ackDeadline    mono.Time
	ackRatioWanted int
	lastAckAt      mono.Time

	// Feature negotiation.
	ccidOffered  [maxCCIDList]uint8 // our CCID preference list (Change L)
	ccidOfferedN int
	peerCCID     uint8      // the CCID agreed for the peer's half-connection
	changes      [7]featOpt // retransmitted until confirmed
	confirms     [7]featOpt // one-shot answers
	// peerMinCsCov is the peer's Minimum Checksum Coverage (RFC 4340
	// §9.2.1): 0, its initial value, accepts only full coverage.
	peerMinCsCov   uint8
	lastChangeSent mono.Time

	// Handshake.
	reqDue     mono.Time
	reqRTO     time.Duration
	reqTries   int
	respOut    bool
	respUntil  mono.Time
	partDue    mono.Time
	partRTO    time.Duration
	nonceLocal uint32
	noncePeer  uint32
	peerAddrID uint8
	addrID     uint8

	// Sync, Close, Reset.
	syncOut     bool
	syncAckNo   uint64
	syncAckOut  bool
	syncAckAck  uint64
	lastSync    mono.Time
	closeOut    bool
	closeDue    mono.Time
	closeTries  int
	closeMP     bool // carry MP_CLOSE
	resetOut    bool
	resetCode   wire.ResetCode
	resetMPFast bool

	// Liveness.
	lastHeard mono.Time
	lastSent  mono.Time
	// hsRTT is the handshake's round trip (Request→Response at the client,
	// Response→Ack at the server): an RTT known before any data flows.
	hsRTT     time.Duration
	lastProbe mono.Time
	failed    bool

	peerRTT   time.Duration
	rttSentAt mono.Time
	// One-way queueing (owd.go): the last Timestamp sent, the delay of
	// the peer's.
	tsSentAt mono.Time
	inDelay  owdTrack
	stats    PathCounters
	crypt    *sfCrypto // secure mode: packet keys, replay window

	// Loss estimate (lossEstimate).
	lossRate           float64
	lossSent, lossLost uint64
	lossAt             mono.Time
}

// PathCounters are a subflow's packet counters.
type PathCounters struct {
	PacketsIn, PacketsOut uint64
	BytesIn, BytesOut     uint64
	DataIn, DataOut       uint64 // datagrams carrying an inner packet
	AcksOut               uint64
	SyncsOut              uint64
	OutOfWindow           uint64
	Duplicates            uint64 // DCCP-level duplicate sequence numbers
}

func (sf *subflow) key() sfKey {
	return sfKey{remote: sf.remote, local: sf.localPort, rem: sf.remotePort}
}

func (sf *subflow) nextSeq() uint64 {
	sf.gss = seqAdd(sf.gss, 1)
	return sf.gss
}

// seqValid is the sequence/ack validity test of RFC 4340 §7.5.3.
func (sf *subflow) seqValid(p *wire.Packet) bool {
	w := sf.swRemote
	swl := seqAdd(sf.gsr, 1-int64(w/4))
	if seqLess(swl, sf.isr) {
		swl = sf.isr
	}
	swh := seqAdd(sf.gsr, int64((3*w+3)/4))
	if !wire.SeqInWindow(p.Seq, swl, swh) {
		return false
	}
	if p.Type.HasAck() {
		return sf.ackValid(p.Ack)
	}
	return true
}

func (sf *subflow) ackValid(ack uint64) bool {
	awl := seqAdd(sf.gss, 1-int64(sf.swLocal))
	if seqLess(awl, sf.iss) {
		awl = sf.iss
	}
	return wire.SeqInWindow(ack, awl, sf.gss)
}

func (sf *subflow) usable() bool {
	return sf.state == sfOpen && !sf.failed && !sf.sus.on && sf.prio > 0
}

// baseOWD is the subflow's one-way delay without queueing: half its
// minimum RTT, or of the handshake's before data has flowed.
func (sf *subflow) baseOWD(st *ccid.State) time.Duration {
	r := st.MinRTT
	if sf.hsRTT > 0 && (r <= 0 || sf.hsRTT < r) {
		r = sf.hsRTT
	}
	return r / 2
}

// lossEvery is how often the loss estimate takes a sample.
const lossEvery = 100 * time.Millisecond

// lossEstimate is the fraction of the subflow's packets recently lost: a
// moving average over samples of lossEvery, of the controller's counters.
func (sf *subflow) lossEstimate(now mono.Time, st *ccid.State) float64 {
	if now.Sub(sf.lossAt) < lossEvery {
		return sf.lossRate
	}
	sent, lost := st.PacketsSent-sf.lossSent, st.PacketsLost-sf.lossLost
	switch {
	case sent >= 20:
		sf.setLoss(now, st, sf.lossRate+(float64(lost)/float64(sent)-sf.lossRate)/4)
	case now.Sub(sf.lossAt) >= 5*lossEvery:
		// Too little traffic to measure: let an old verdict fade, so a
		// path that looked lossy is tried again.
		sf.lossRate /= 2
		sf.lossAt = now
	}
	return sf.lossRate
}

// setLoss sets the loss estimate to rate and starts its next sample from
// the controller's counters now.
func (sf *subflow) setLoss(now mono.Time, st *ccid.State, rate float64) {
	sf.lossRate = rate
	sf.lossSent, sf.lossLost, sf.lossAt = st.PacketsSent, st.PacketsLost, now
}

func (sf *subflow) ready(now mono.Time) bool {
	return sf.cc.CanSend(now) && sf.cc.SendTime(now) <= now
}

// ---------------------------------------------------------------------------
// Feature negotiation

func (sf *subflow) setChange(opt, feat uint8, val uint64, n int) {
	for i := range sf.changes {
		f := &sf.changes[i]
		if f.active && f.feat == feat && f.opt == opt {
			putNN(f.val[:n], val)
			f.n = n
			return
		}
	}
	for i := range sf.changes {
		f := &sf.changes[i]
		if !f.active {
			*f = featOpt{opt: opt, feat: feat, n: n, active: true}
			putNN(f.val[:n], val)
			return
		}
	}
}

// setChangeBytes queues a Change option with a list of byte values (a
// server-priority feature's preference list).
func (sf *subflow) setChangeBytes(opt, feat uint8, vals []uint8) {
	var v uint64
	for _, b := range vals {
		v = v<<8 | uint64(b)
	}
	sf.setChange(opt, feat, v, len(vals))
}

func (sf *subflow) hasChanges() bool {
	for i := range sf.changes {
		if sf.changes[i].active {
			return true
		}
	}
	return false
}

func (sf *subflow) changePending(opt, feat uint8) bool {
	for i := range sf.changes {
		if f := &sf.changes[i]; f.active && f.opt == opt && f.feat == feat {
			return true
		}
	}
	return false
}

func (sf *subflow) clearChange(opt, feat uint8) {
	for i := range sf.changes {
		if f := &sf.changes[i]; f.active && f.opt == opt && f.feat == feat {
			f.active = false
		}
	}
}

func (sf *subflow) addConfirm(opt, feat uint8, val []byte) {
	for i := range sf.confirms {
		f := &sf.confirms[i]
		if !f.active || f.feat == feat && f.opt == opt {
			*f = featOpt{opt: opt, feat: feat, active: true, n: min(len(val), 6)}
			copy(f.val[:], val)
			return
		}
	}
}

func putNN(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

// mpVersion is the MP_CAPABLE value byte of RFC 9897: version 0 in the high
// nibble, the low nibble unassigned.
const mpVersion = 0x00

// shortSeqnosPrefs is our preference list for Allow Short Seqnos: yes, else no.
var shortSeqnosPrefs = []byte{1, 0}

// headerCsCov is the checksum coverage of the header and options alone
// (RFC 4340 §9.2): the Minimum Checksum Coverage we announce and, once the
// peer announces it too, the coverage we send with.
const headerCsCov = 1

// sendCsCov is the CsCov of the packets sf sends. The DCCP checksum over
// the payload repeats the UDP checksum's work (it covers the whole
// datagram, and the kernel checks it before we see the datagram), so it
// covers the header only once the peer accepts that; until then, and with
// a peer that never does, the whole packet.
func (sf *subflow) sendCsCov() uint8 {
	if sf.peerMinCsCov == headerCsCov {
		return headerCsCov
	}
	return 0
}

// initFeatures queues the Change options a new subflow sends in its
// Request or Response.
func (sf *subflow) initFeatures(client bool) {
	sf.ccidOfferedN = copy(sf.ccidOffered[:], ccidOffer(sf.cc))
	sf.setChangeBytes(wire.OptChangeL, wire.FeatCCID, sf.ccidOffered[:sf.ccidOfferedN]) // preference list
	sf.setChange(wire.OptChangeR, wire.FeatSendAckVector, 1, 1)
	// We accept a checksum over the header alone: the UDP checksum covers
	// the whole datagram, and the inner packet carries its own.
	sf.setChange(wire.OptChangeL, wire.FeatMinCsCov, headerCsCov, 1)
	if !sf.conn.ep.testLongSeqnos {
		// Short sequence numbers save 8 bytes on every data packet (a
		// DataAck header of 16 bytes instead of 24), about 0.5 % of a full
		// packet's goodput; our preference list, 1 first.
		sf.setChangeBytes(wire.OptChangeL, wire.FeatShortSeqnos, shortSeqnosPrefs)
	}
	if client {
		sf.setChange(wire.OptChangeR, wire.FeatMultipath, mpVersion, 1) // MP_CAPABLE: our versions
	}
	if r := sf.cc.AckRatio(); r != 2 && r > 0 {
		sf.setChange(wire.OptChangeL, wire.FeatAckRatio, uint64(r), 2)
		sf.ackRatioWanted = r
	} else {
		sf.ackRatioWanted = 2
	}
}

// updateFeatures renegotiates Sequence Window and Ack Ratio as the
// congestion window moves (RFC 4340 §7.5.2: about 5 windows; RFC 4341 §6).
func (sf *subflow) updateFeatures() {
	// The window must cover what we send per round trip, acks included:
	// GSS-GAR is about one round trip of our packets.
	st := sf.cc.State()
	want := uint64(max(defaultSeqWindow, 5*st.Cwnd, 4*int(max(seqDiff(sf.gss, sf.gar), 0))))
	if want > sf.swLocal && !sf.changePending(wire.OptChangeL, wire.FeatSequenceWindow) {
		sf.setChange(wire.OptChangeL, wire.FeatSequenceWindow, min(2*want, maxSeqWindow), 6)
	}
	if r := sf.cc.AckRatio(); r > 0 && r != sf.ackRatioWanted {
		sf.ackRatioWanted = r
		sf.setChange(wire.OptChangeL, wire.FeatAckRatio, uint64(r), 2)
	}
}

// handleFeature processes one Change or Confirm option from the peer.
func (c *Conn) handleFeature(sf *subflow, opt wire.Option) bool {
	feat, vals, err := wire.ParseFeature(opt.Data)
	if err != nil {
		return false
	}
	switch opt.Type {
	case wire.OptChangeL: // the peer changes its own feature
		switch feat {
		case wire.FeatCCID:
			if len(vals) == 0 {
				return false
			}
			sf.peerCCIDChange(vals)
		case wire.FeatSequenceWindow:
			v, err := wire.FeatureNN(vals)
			if err != nil || v < 32 {
				return false
			}
			sf.swRemote = min(v, maxSeqWindow*4)
			sf.addConfirm(wire.OptConfirmR, feat, vals)
		case wire.FeatAckRatio:
			v, err := wire.FeatureNN(vals)
			if err != nil || v == 0 {
				return false
			}
			sf.rxAckRatio = int(min(v, 64))
			sf.addConfirm(wire.OptConfirmR, feat, vals)
		case wire.FeatMinCsCov:
			// Server priority, but the value is the peer's own threshold:
			// take its first choice, as any coverage suits us (§9.2.1).
			if len(vals) == 0 || vals[0] > 15 {
				return false
			}
			sf.peerMinCsCov = vals[0]
			sf.addConfirm(wire.OptConfirmR, feat, []byte{vals[0], vals[0]})
		case wire.FeatShortSeqnos:
			if c.ep.testLongSeqnos {
				sf.addConfirm(wire.OptConfirmR, feat, nil) // as a peer that knows no such feature
				return true
			}
			// Server priority (RFC 4340 §6.3.1), and both lists are ours.
			server, client := vals, shortSeqnosPrefs
			if c.ep.cfg.Role == Server {
				server, client = client, server
			}
			v, ok := reconcileSP(server, client)
			if !ok {
				return false
			}
			sf.shortRx = v == 1
			sf.addConfirm(wire.OptConfirmR, feat, confirmList(nil, v, shortSeqnosPrefs))
		default:
			sf.addConfirm(wire.OptConfirmR, feat, nil)
		}
	case wire.OptChangeR: // the peer asks us to change ours
		switch feat {
		case wire.FeatMultipath:
			// Server priority over our list, which is version 0 alone (the
			// low nibble is unassigned and ignored): Confirm L(MP_CAPABLE,
			// chosen, our list), or an empty Confirm L if the client offers
			// no version 0 (RFC 9897 §3.1).
			for _, v := range vals {
				if v>>4 == 0 {
					sf.addConfirm(wire.OptConfirmL, feat, []byte{mpVersion, mpVersion})
					return true
				}
			}
			sf.addConfirm(wire.OptConfirmL, feat, nil)
		case wire.FeatSendAckVector:
			sf.addConfirm(wire.OptConfirmL, feat, []byte{1})
		case wire.FeatCCID:
			sf.ownCCIDChange(vals)
		default:
			sf.addConfirm(wire.OptConfirmL, feat, nil)
		}
	case wire.OptConfirmR: // answer to our Change L
		switch {
		case feat == wire.FeatCCID:
			if !sf.ownCCIDConfirmed(vals) {
				// A CCID we did not offer: the negotiation failed (§6.6.7).
				sf.resetOut, sf.resetCode = true, wire.ResetOptionError
				c.failSubflow(sf, wire.ResetOptionError, "peer confirmed a CCID not offered")
				return false
			}
			return true
		case feat == wire.FeatSequenceWindow && len(vals) > 0:
			if v, err := wire.FeatureNN(vals); err == nil && v >= 32 {
				sf.swLocal = v
			}
		case feat == wire.FeatShortSeqnos:
			// An empty Confirm: the peer does not know the feature.
			sf.shortTx = len(vals) > 0 && vals[0] == 1
		}
		sf.clearChange(wire.OptChangeL, feat)
	case wire.OptConfirmL: // answer to our Change R
		if feat == wire.FeatMultipath {
			c.mpConfirmed = len(vals) > 0 && vals[0]>>4 == 0
		}
		sf.clearChange(wire.OptChangeR, feat)
	}
	return true
}

// ---------------------------------------------------------------------------
// Packet building

// pktSpec says what build puts into a packet.
type pktSpec struct {
	typ      wire.Type
	payload  []byte
	mpSeq    uint64
	hasMPSeq bool
	ackNo    uint64 // for Sync/SyncAck: the Acknowledgement Number
	hasAckNo bool
	inFlight bool
	// pathOrdered tells the receiver (an empty MP_EXP) that it may deliver
	// this data packet once the subflow's earlier ones are in: its flow
	// has no packet on another path that could still be in flight.
	pathOrdered bool
}

// putAckVector adds sf's Ack Vector (and Elapsed Time) to the packet
// being built in buf when it carries one; it reports whether it does.
func (c *Conn) putAckVector(now mono.Time, sf *subflow, buf []byte, ps *pktSpec, room func(int) bool) bool {
	e := c.ep
	b := &e.bld
	carriesAck := ps.typ == wire.TypeAck || ps.typ == wire.TypeDataAck
	if !(carriesAck && sf.state >= sfPartOpen || ps.typ == wire.TypeAck && sf.state == sfRespond) {
		return false
	}
	// A long vector is truncated to the room left (it need not cover the
	// whole window, RFC 4340 §11.4).
	maxc := min(maxAckCells, (len(buf)-len(ps.payload))&^3-b.Len()-2)
	e.cells = sf.rx.cells(e.cells[:0], max(maxc, 1))
	if maxc <= 0 || b.AckVector(0, e.cells) != nil {
		return false
	}
	sf.lastAckAt = now
	sf.dataSinceAck, sf.ackNow, sf.ackLazy = 0, false, false
	sf.ackDeadline = mono.Never
	if el := now.Sub(sf.gsrAt); el >= 100*time.Microsecond && room(6) {
		_ = b.ElapsedTime(uint32(min(el/(10*time.Microsecond), 0xffffffff)))
	}
	return true
}

// build writes one packet of sf into buf and does the sender bookkeeping.
func (c *Conn) build(now mono.Time, sf *subflow, buf []byte, ps *pktSpec) (Transmit, bool) {
	e := c.ep
	b := &e.bld
	buf, seal, ok := c.secReserve(sf, ps.typ, buf) // secure mode: room for the tag
	if !ok {
		return Transmit{}, false
	}
	h := wire.Header{SrcPort: sf.localPort, DstPort: sf.remotePort, Type: ps.typ, Seq: sf.nextSeq(), CsCov: sf.sendCsCov(),
		Short: sf.shortTx && sf.state == sfOpen && ps.typ.ShortCapable() && !ps.hasAckNo}
	if ps.typ.HasAck() {
		h.Ack = sf.gsr
		if ps.hasAckNo {
			h.Ack = ps.ackNo
		}
	}
	switch ps.typ {
	case wire.TypeRequest, wire.TypeResponse:
		h.ServiceCode = e.cfg.ServiceCode
	case wire.TypeReset:
		h.ResetCode = sf.resetCode
	}
	if err := b.Begin(buf, &h); err != nil {
		sf.gss = seqAdd(sf.gss, -1)
		return Transmit{}, false
	}
	// Options are padded to whole words (Finish): n more bytes fit when
	// the padded header still leaves the payload its room.
	room := func(n int) bool { return (b.Len()+n+3)&^3+len(ps.payload) <= len(buf) }
	isData := ps.typ == wire.TypeData || ps.typ == wire.TypeDataAck
	seqEnd := -1
	if ps.hasMPSeq {
		// MP_SEQ first: it is mandatory on data, everything else is optional.
		if b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: ps.mpSeq}) != nil {
			sf.gss = seqAdd(sf.gss, -1)
			return Transmit{}, false
		}
		seqEnd = b.Len()
	}
	// Connection-level control options ride on open subflows, right after
	// the MP_SEQ (see putControl).
	if sf.state == sfOpen && ps.typ != wire.TypeReset && ps.typ != wire.TypeData {
		c.putControl(now, sf, b, room, ps.mpSeq, seqEnd)
	}
	if isData && sf.ndpRun > 0 && room(wire.NDPCountLen(sf.ndpRun)) {
		// Lets the receiver tell lost data from unseen Acks (RFC 4340 §7.7).
		_ = b.NDPCount(sf.ndpRun)
	}
	if ps.pathOrdered && room(3) {
		_ = b.MP(&wire.MPOption{Type: wire.MPExp}) // often fills MP_SEQ's padding
	}

	// Feature negotiation (never on Data, RFC 4340 §6).
	if ps.typ != wire.TypeData && ps.typ != wire.TypeReset {
		for i := range sf.confirms {
			f := &sf.confirms[i]
			if f.active && room(3+f.n) {
				if b.Feature(f.opt, f.feat, f.val[:f.n]...) == nil {
					f.active = false
				}
			}
		}
		for i := range sf.changes {
			f := &sf.changes[i]
			if f.active && room(3+f.n) {
				_ = b.Feature(f.opt, f.feat, f.val[:f.n]...)
				sf.lastChangeSent = now
			}
		}
	}
	c.putHandshake(b, sf, ps.typ)
	ackCarried := c.putAckVector(now, sf, buf, ps, room)
	// Repair requests ride on any packet of the fastest subflow.
	if sf.state == sfOpen && ps.typ != wire.TypeReset {
		c.putNACKs(now, sf, b, room)
		if now.Sub(sf.tsSentAt) >= tsEvery && room(6) && b.Timestamp(tsNow(now)) == nil {
			sf.tsSentAt = now
		}
	}
	switch {
	case ps.typ == wire.TypeClose && sf.closeMP:
		_ = b.MP(&wire.MPOption{Type: wire.MPClose, KeyData: c.keys.peerKey()})
	case ps.typ == wire.TypeReset && sf.resetMPFast:
		_ = b.MP(&wire.MPOption{Type: wire.MPFastClose, KeyData: c.keys.peerKey()})
	}
	var n int
	var err error
	if seal {
		n, err = b.FinishInPlace(len(ps.payload)) // secFinish seals from ps.payload
	} else {
		n, err = b.Finish(ps.payload)
	}
	if err != nil {
		sf.gss = seqAdd(sf.gss, -1)
		return Transmit{}, false
	}
	buf, n = c.secFinish(now, sf, buf, n, seal, ps, h.Seq)
	wire.SetChecksum(buf[:n], sf.localAddr.Addr(), sf.remote.Addr())
	sf.cc.OnPacketSent(now, h.Seq, n, ps.inFlight)
	if ackCarried {
		sf.hist.NoteAck(h.Seq, h.Ack)
	}
	sf.lastSent = now
	sf.stats.PacketsOut++
	sf.stats.BytesOut += uint64(n)
	if isData {
		sf.stats.DataOut++
		sf.ndpRun = 0
	} else {
		sf.ndpRun++
	}
	if ps.typ == wire.TypeAck {
		sf.stats.AcksOut++
	}
	t := Transmit{N: n, Path: sf.id, Local: sf.local, Src: sf.localAddr.Addr(), Remote: sf.remote}
	if c.ep.cfg.ECN {
		t.ECN = outerECN(isData, ps.payload)
	}
	return t, true
}

func (c *Conn) putKey(b *wire.Builder) {
	var buf [1 + 4*(1+maxKeyLen)]byte
	var keys []byte
	if c.keys.ks == nil {
		keys = c.keys.appendOffer(buf[:0]) // client Request: every key type
	} else {
		keys = c.keys.appendChosen(buf[:0])
	}
	_ = b.MP(&wire.MPOption{Type: wire.MPKey, Token: c.localCI, Keys: keys})
}

// joinHMAC computes the MP_HMAC of a join: HMAC-SHA256 over the nonces
// (sender's first) keyed with the sender's derived key, RFC 9897.
func (c *Conn) joinHMAC(dst *[20]byte, local bool, sf *subflow) {
	var dkey [2 * maxKeyLen]byte
	var msg [8]byte
	if local {
		binary.BigEndian.PutUint32(msg[0:], sf.nonceLocal)
		binary.BigEndian.PutUint32(msg[4:], sf.noncePeer)
		wire.HMAC(dst, c.keys.ownDKey(dkey[:0]), msg[:])
		return
	}
	binary.BigEndian.PutUint32(msg[0:], sf.noncePeer)
	binary.BigEndian.PutUint32(msg[4:], sf.nonceLocal)
	wire.HMAC(dst, c.keys.peerDKey(dkey[:0]), msg[:])
}

func (c *Conn) putJoinHMAC(b *wire.Builder, sf *subflow) {
	var mac [20]byte
	c.joinHMAC(&mac, true, sf)
	if c.ep.testBadJoinHMAC {
		mac[0] ^= 1
	}
	_ = b.MP(&wire.MPOption{Type: wire.MPHMAC, HMAC: mac[:]})
}

// extendShort reads a short-seqno packet's Sequence and Acknowledgement
// Numbers against GSR and GSS (RFC 4340 §7.6); false when sf never allowed
// short sequence numbers (§7.6.1: such packets are ignored).
func (sf *subflow) extendShort(p *wire.Packet, seq, ack uint64) bool {
	if !sf.shortRx {
		return false
	}
	p.Seq = wire.ExtendSeq(sf.gsr, seq)
	if p.Type.HasAck() {
		p.Ack = wire.ExtendSeq(sf.gss, ack)
	}
	return true
}
