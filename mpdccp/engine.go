// SPDX-License-Identifier: MIT

// Package mpdccp is the sans-I/O MP-DCCP connection engine (RFC 4340 +
// RFC 9897): subflows with full DCCP half-connection state, the 4-way
// handshake with MP_CAPABLE/MP_KEY, joins with MP_JOIN/MP_HMAC, MP_SEQ
// numbering, reliable control options, path failure detection and close.
//
// The caller feeds datagrams and inner packets in (HandleDatagram,
// Conn.Send) and polls for datagrams to send (PollTransmit), inner packets
// to deliver (PollDeliver) and the next timer (Deadline, HandleTimer).
// Nothing here reads the clock, opens sockets or starts goroutines; one
// goroutine owns an Endpoint. A driver loop looks like this:
//
//	ep.HandleDatagram(now, sock, from, to, b, ecn) // for each datagram read
//	conn.Send(now, innerPkt)                       // for each packet from the TUN
//	if ep.Deadline() <= now { ep.HandleTimer(now) }
//	for t, ok := ep.PollTransmit(now, buf); ok; t, ok = ep.PollTransmit(now, buf) {
//		send buf[:t.N] on socket t.Local to t.Remote
//	}
//	for n, c, ok := ep.PollDeliver(now, buf); ok; n, c, ok = ep.PollDeliver(now, buf) {
//		write buf[:n] to the TUN of c
//	}
//	sleep until ep.Deadline() or the next datagram / inner packet
//
// Buffers passed to PollTransmit must hold Config.MaxPacket bytes; inner
// packets may be up to Endpoint.MaxPayload bytes.
//
// Wire choices worth knowing: DCCP ports are kept inside the UDP payload
// (the DCCP destination port is the server's UDP port, 6511 by default; the
// source port is random per subflow); the DCCP checksum uses a
// pseudo-header of the outer addresses, checked against the flow's NAT
// residual (see wire.ChecksumResidual); a client whose peer does
// not confirm MP_CAPABLE closes instead of falling back to plain DCCP; a
// failed join HMAC is answered with Reset code 5 (option error).
package mpdccp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// Role says which side of the handshake an Endpoint plays.
type Role uint8

const (
	Client Role = iota
	Server
)

// PathConfig describes one path (subflow) of a connection.
type PathConfig struct {
	ID        int            // caller's path id (client); on the server the engine assigns ids
	Local     int            // caller's socket index the path sends from
	LocalAddr netip.AddrPort // for the checksum pseudo-header; unspecified: learnt from received datagrams
	Remote    netip.AddrPort
	Prio      uint8 // MP_PRIO, default 3
	Weight    int
	CCID      string // override of Config.CCID, "" = default
}

// Config parameterises an Endpoint. Zero fields get the documented defaults.
type Config struct {
	Role        Role
	ServiceCode uint32
	CCID        string // congestion controller name; default defaults.CCID
	CC          ccid.Config
	Scheduler   string         // default defaults.Scheduler
	Reorderer   string         // default defaults.Reorderer
	Reorder     reorder.Config // zero MaxHold, BufferLimit: defaults.ReorderMaxHold, ReorderBuffer
	MaxSubflows int            // server side limit per connection, default defaults.MaxSubflows
	MaxPacket   int            // max DCCP packet (UDP payload) size, default defaults.MaxPacket
	SendQueue   int            // inner packets queued per connection, default defaults.SendQueue
	// Retransmit enables loss repair: a data packet a subflow reports lost
	// is sent once more with its MP_SEQ (see rtx.go). The receiver's
	// reorderer should then hold gaps for about a round trip. (Like AQM
	// and ECN, off when zero; the daemon sets the product's defaults.)
	Retransmit bool
	// NoNACK drops the receiver's repair requests (NACKs) as if they were
	// lost: losses are then repaired only from the Ack Vectors. For
	// ablation studies.
	NoNACK bool
	// Classes map inner packets (protocol, ports, DSCP) to their own
	// scheduler; unmatched packets use Scheduler.
	Classes []scheduler.Rule
	// AQM, when set, manages the send queue (CoDel marking CE on ECT inner
	// packets, dropping Not-ECT ones); nil keeps a drop-tail FIFO. Limit
	// and Drop are set by the engine, a zero Target is defaults.AQMTarget.
	AQM         *aqm.Config
	Rand        io.Reader     // keys, nonces, ISS, initial MP_SEQ; default crypto/rand
	KeepAlive   time.Duration // probe an idle subflow, default defaults.Keepalive
	PathTimeout time.Duration // subflow failed after this long without a packet, default defaults.PathTimeout
	// IdleTimeout closes a connection when nothing was heard on any of its
	// subflows for this long (default defaults.IdleTimeout): a peer that vanished.
	IdleTimeout time.Duration
	// MaxConns limits the connections a server accepts (default defaults.MaxConns).
	MaxConns int
	// ECN sets Transmit.ECN: a data packet's outer header carries its
	// inner packet's ECN field, the engine's own packets ECT(0); inner
	// packets arriving under CE are marked or dropped (RFC 6040, ecn.go).
	ECN bool
	// ACKFilter: a send queue drops a queued inner TCP ACK when a later
	// ACK of its connection arrives behind it (flow.ACKSupersedes). Such
	// ACKs queue only where they fill their path: the narrow uplink of an
	// ADSL line under a download.
	ACKFilter bool
	// InitialMPSeq, when non-zero, fixes the first MP_SEQ (tests).
	InitialMPSeq uint64
	// Security, when set, authenticates and encrypts everything
	// (secure.go); nil is plain RFC 9897.
	Security *Security
	// CIPrefix, when CIPrefixBits > 0, is the top CIPrefixBits bits of
	// every Connection Identifier this end assigns (on a server, the token
	// its peer's joins carry): a sharded data path, or a load balancer in
	// front of several concentrators, finds a connection's owner from a
	// join's token alone. At most 24 bits, so 8 stay random.
	CIPrefix     uint32
	CIPrefixBits uint8
	// Indexed, when set, hears every subflow the endpoint starts (up) or
	// stops matching datagrams from remote with the peer's DCCP port: a
	// data path that shards connections over several endpoints steers
	// datagrams to the right one with it. It runs in the owner goroutine.
	Indexed func(remote netip.AddrPort, peerPort uint16, up bool)
	// JoinRemote, when set on a client, picks where a join goes from the
	// peer's CI (the token the join carries) and the path's remote: behind
	// a load balancer each concentrator takes joins on a port of its own,
	// named by its server id in the CI (docs/scale-out.md).
	JoinRemote func(peerCI uint32, remote netip.AddrPort) netip.AddrPort
}

// Transmit describes a datagram PollTransmit wrote.
type Transmit struct {
	N     int // bytes written to buf
	Path  int // path id (-1 for replies outside any connection)
	Local int // socket index to send from
	// Src is our address the datagram leaves from: the one the peer sent
	// to. The DCCP checksum covers it, and a wildcard-bound socket on a
	// multi-homed host must answer from it (IP_PKTINFO). Unspecified if
	// not known: the socket's own.
	Src    netip.Addr
	Remote netip.AddrPort // destination
	ECN    uint8
}

// EventKind classifies an Event.
type EventKind uint8

const (
	EventConnOpen EventKind = iota + 1
	EventConnClosed
	EventPathUp   // subflow established, or heard from again after PathDown
	EventPathDown // nothing heard for PathTimeout
	EventPathClosed
	EventJoinFailed
	EventPeerAddr // the peer advertised an address (MP_ADDADDR)
	EventPeerRemoveAddr
	EventPathRebind  // the peer's address changed (NAT rebinding)
	EventPathSuspect // no ack in time: data re-injected on other paths (suspect.go)
	EventPathRecover // a suspected path answered probes again
)

var eventNames = [...]string{"", "conn-open", "conn-closed", "path-up", "path-down", "path-closed",
	"join-failed", "peer-addaddr", "peer-removeaddr", "path-rebind", "path-suspect", "path-recover"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is a connection or path state change, for logs and metrics.
type Event struct {
	Kind   EventKind
	Conn   *Conn
	Path   int
	Remote netip.AddrPort
	Reset  wire.ResetCode // reset code behind a close or failure, if any
	Reason string
}

// DropReason says why a datagram was dropped.
type DropReason uint8

const (
	DropMalformed   DropReason = iota // does not parse
	DropChecksum                      // bad DCCP checksum
	DropNoConn                        // no subflow matches
	DropOutOfWindow                   // sequence or ack number outside the window
	DropBadOption                     // malformed or missing options
	DropBadState                      // packet type not allowed in the subflow's state
	DropBadHMAC                       // join authentication failed
	DropTooBusy                       // subflow or connection limit
	DropBadService                    // service code mismatch
	DropDuplicate                     // duplicate MP_SEQ (redundant copy or replay)
	DropNoMPSeq                       // data without MP_SEQ
	DropClosed                        // connection closing
	// Secure mode (secure.go): each of these fails closed.
	DropAuth        // AEAD open failed or the packet may not be unsealed here
	DropReplay      // sequence number seen before, or too old; replayed first message or join
	DropHandshake   // malformed or unauthentic Noise message
	DropUnknownPeer // handshake from a key not in the peer list
	DropDowngrade   // Request offering only plain keys to a secure server
	DropRateLimited // handshakes over a source's rate
	DropInnerSource // inner source address outside the peer's allowed IPs
	numDropReasons
)

var dropNames = [...]string{"malformed", "checksum", "no-conn", "out-of-window", "bad-option",
	"bad-state", "bad-hmac", "too-busy", "bad-service", "duplicate", "no-mpseq", "closed",
	"auth", "replay", "bad-handshake", "unknown-peer", "downgrade", "rate-limited", "inner-source"}

func (r DropReason) String() string {
	if int(r) < len(dropNames) {
		return dropNames[r]
	}
	return fmt.Sprintf("drop(%d)", r)
}

// EndpointStats are the endpoint's counters.
type EndpointStats struct {
	DatagramsIn, DatagramsOut uint64
	BytesIn, BytesOut         uint64
	Dropped                   [numDropReasons]uint64 // indexed by DropReason
	ResetsSent                uint64
	EventsLost                uint64
	CookieReplies             uint64 // secure server: cookie replies sent (under load)
	CookiesTaken              uint64 // secure client: cookie replies accepted
	// Inner packets that arrived under an outer CE mark (RFC 6040):
	// marked CE, or dropped because they were Not-ECT.
	InnerCEMarked, InnerECNDropped uint64
	Conns                          int
}

// Endpoint is one side of MP-DCCP: a client with one connection or a
// server (concentrator) with many.
type Endpoint struct {
	cfg       Config
	ccidName  string
	schedName string
	reoName   string
	conns     []*Conn
	byKey     map[sfKey]*subflow
	byPorts   map[portKey][]*subflow
	byCI      map[uint32]*Conn
	pool      bufPool
	stateless []statelessReply
	events    []Event
	evHead    int
	evN       int
	stats     EndpointStats
	txRR      int
	dlRR      int
	pkt       wire.Packet
	bld       wire.Builder
	rbuf      [64]byte
	cells     []byte // scratch Ack Vector cells
	runs      []ccid.AckRun
	fb        ccid.Feedback
	// testBadJoinHMAC corrupts the MP_HMAC of joins (tests).
	testBadJoinHMAC bool
	// testLongSeqnos: neither offer nor allow short sequence numbers, as
	// an implementation without the feature (tests).
	testLongSeqnos bool
	sec            *epSec // secure mode (secure.go); nil: plain RFC 9897
	// limiter bounds the first-subflow Requests each source address may
	// make the server process (both modes; secure.go).
	limiter rateLimiter
}

type sfKey struct {
	remote     netip.AddrPort
	local, rem uint16 // DCCP ports: ours, the peer's
}

type portKey struct{ local, rem uint16 }

// statelessReply is a Reset for a packet that matched no subflow, or that
// was refused before a subflow existed.
type statelessReply struct {
	local    int
	remote   netip.AddrPort
	src      netip.Addr
	srcPort  uint16
	dstPort  uint16
	seq, ack uint64
	code     wire.ResetCode
	exp      [1 + noise.CookieReplyLen]byte // MP_EXP data (secure cookie reply)
	expLen   int
}

const maxStateless = 64
const maxEvents = 1024

// NewEndpoint validates cfg and returns an Endpoint.
func NewEndpoint(cfg Config) (*Endpoint, error) {
	if cfg.MaxSubflows == 0 {
		cfg.MaxSubflows = defaults.MaxSubflows
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = defaults.MaxPacket
	}
	if cfg.MaxPacket < 128 || cfg.MaxPacket > 65507 {
		return nil, fmt.Errorf("mpdccp: MaxPacket %d out of range [128, 65507]", cfg.MaxPacket)
	}
	if cfg.SendQueue == 0 {
		cfg.SendQueue = defaults.SendQueue
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = defaults.Keepalive
	}
	if cfg.PathTimeout == 0 {
		cfg.PathTimeout = defaults.PathTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = defaults.IdleTimeout
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = defaults.MaxConns
	}
	if cfg.Reorder.MaxHold == 0 {
		cfg.Reorder.MaxHold = defaults.ReorderMaxHold
	}
	if cfg.Reorder.BufferLimit == 0 {
		cfg.Reorder.BufferLimit = defaults.ReorderBuffer
	}
	if cfg.CIPrefixBits > 24 || cfg.CIPrefix>>cfg.CIPrefixBits != 0 {
		return nil, fmt.Errorf("mpdccp: CI prefix %#x does not fit in %d bits (at most 24)", cfg.CIPrefix, cfg.CIPrefixBits)
	}
	if cfg.AQM != nil && cfg.AQM.Target == 0 {
		a := *cfg.AQM
		a.Target = defaults.AQMTarget
		cfg.AQM = &a
	}
	e := &Endpoint{
		cfg:     cfg,
		byKey:   make(map[sfKey]*subflow),
		byPorts: make(map[portKey][]*subflow),
		byCI:    make(map[uint32]*Conn),
		events:  make([]Event, maxEvents),
		cells:   make([]byte, 0, 256),
		runs:    make([]ccid.AckRun, 0, 256),
	}
	e.pool.size = cfg.MaxPacket
	e.limiter.init(defaultHandshakeRate, defaultHandshakeBurst)
	if cfg.Security != nil {
		var err error
		if e.sec, err = newEPSec(cfg.Security, cfg.Role, cfg.MaxPacket); err != nil {
			return nil, err
		}
		e.limiter.init(e.sec.cfg.HandshakeRate, e.sec.cfg.HandshakeBurst)
	}
	e.ccidName = orDefault(cfg.CCID, defaults.CCID)
	e.schedName = orDefault(cfg.Scheduler, defaults.Scheduler)
	e.reoName = orDefault(cfg.Reorderer, defaults.Reorderer)
	if _, err := ccid.New(e.ccidName, cfg.CC); err != nil {
		return nil, fmt.Errorf("mpdccp: %w", err)
	}
	if _, err := scheduler.New(e.schedName, scheduler.Config{}); err != nil {
		return nil, fmt.Errorf("mpdccp: %w", err)
	}
	if _, err := reorder.New(e.reoName, e.reorderConfig(cfg.Reorder)); err != nil {
		return nil, fmt.Errorf("mpdccp: %w", err)
	}
	return e, nil
}

// reorderConfig completes a reorderer's config with what the engine
// decides: the receiver waits for repairs when loss repair is on.
func (e *Endpoint) reorderConfig(rc reorder.Config) reorder.Config {
	rc.Repair = e.cfg.Retransmit
	return rc
}

// orDefault is name, or def when name is empty.
func orDefault(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// MaxPayload is the largest inner packet Conn.Send accepts: MaxPacket minus
// the DataAck header, MP_SEQ and room for a short Ack Vector (dataHeaderLen).
func (e *Endpoint) MaxPayload() int { return e.cfg.MaxPacket - e.dataHeaderLen() }

// dataHeaderLen is what a data packet adds to its inner packet: the
// DataAck header, options and, sealed, the AEAD tag.
func (e *Endpoint) dataHeaderLen() int {
	if e.sec != nil {
		return dataOverhead + sealOverhead
	}
	return dataOverhead
}

// dataOverhead: a DataAck header (24) and what a full data packet must
// still carry: MP_SEQ (9), NDP Count after non-data packets (3: without
// it the receiver takes the Acks it did not see for lost data, and holds
// the flow for repairs), MP_EXP when the flow is path-ordered (3) and an
// Ack Vector of at least one cell (3); 42, padded to 44. A longer vector
// is truncated to the room left (putAckVector). Each byte reserved here is
// a byte less for every inner packet: with 40, full packets after an Ack
// lost their NDP Count and web flows beside a bulk download took 70 ms at
// the median instead of 40 (lab, latency-web).
const dataOverhead = 24 + 9 + 3 + 3 + 3 + 2

func (e *Endpoint) random(n int) []byte {
	b := e.rbuf[:n]
	if _, err := io.ReadFull(e.cfg.Rand, b); err != nil {
		// A failing entropy source is a broken host; fall back to a counter
		// mix rather than panic on the data path.
		for i := range b {
			b[i] = byte(e.stats.DatagramsOut>>(i%8)) ^ byte(i*131)
		}
	}
	return b
}

func (e *Endpoint) rand32() uint32 {
	b := e.random(4)
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (e *Endpoint) rand48() uint64 {
	b := e.random(6)
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v & wire.MaxSeq
}

func (e *Endpoint) drop(r DropReason) { e.stats.Dropped[r]++ }

func (e *Endpoint) emit(ev Event) {
	if e.evN == len(e.events) {
		e.evHead = (e.evHead + 1) % len(e.events)
		e.evN--
		e.stats.EventsLost++
	}
	e.events[(e.evHead+e.evN)%len(e.events)] = ev
	e.evN++
}

// PollEvent returns the next queued event.
func (e *Endpoint) PollEvent() (Event, bool) {
	if e.evN == 0 {
		return Event{}, false
	}
	ev := e.events[e.evHead]
	e.events[e.evHead] = Event{}
	e.evHead = (e.evHead + 1) % len(e.events)
	e.evN--
	return ev, true
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() EndpointStats {
	s := e.stats
	s.Conns = len(e.conns)
	return s
}

// Conns returns the live connections. The slice is shared with the
// Endpoint (no allocation, so it may be called per packet): do not modify
// it. It stays valid after later calls, which replace rather than edit it.
func (e *Endpoint) Conns() []*Conn { return e.conns[:len(e.conns):len(e.conns)] }

// Dial starts a client connection: the first subflow on paths[0], joins on
// the others once the 4-way handshake has completed.
func (e *Endpoint) Dial(now mono.Time, paths []PathConfig) (*Conn, error) {
	if e.cfg.Role != Client {
		return nil, errors.New("mpdccp: Dial on a server endpoint")
	}
	if len(paths) == 0 {
		return nil, errors.New("mpdccp: Dial needs at least one path")
	}
	for i, p := range paths {
		if !p.Remote.IsValid() {
			return nil, fmt.Errorf("mpdccp: path %d: invalid remote address", p.ID)
		}
		for _, q := range paths[:i] {
			if q.ID == p.ID {
				return nil, fmt.Errorf("mpdccp: duplicate path id %d", p.ID)
			}
		}
	}
	c, err := e.newConn(now)
	if err != nil {
		return nil, err
	}
	sf, err := c.newSubflow(now, paths[0], false)
	if err != nil {
		e.removeConn(c)
		return nil, err
	}
	sf.startRequest(now)
	c.pendingJoins = append(c.pendingJoins, paths[1:]...)
	return c, nil
}

func (e *Endpoint) newConn(now mono.Time) (*Conn, error) {
	c := &Conn{ep: e, state: Connecting, created: now}
	var err error
	if c.sched, err = scheduler.New(e.schedName, scheduler.Config{}); err != nil {
		return nil, fmt.Errorf("mpdccp: %w", err)
	}
	if len(e.cfg.Classes) > 0 {
		if c.classifier, err = scheduler.NewClassifier(e.schedName, e.cfg.Classes); err != nil {
			return nil, fmt.Errorf("mpdccp: traffic classes: %w", err)
		}
		c.classScheds = make([]scheduler.Scheduler, len(e.cfg.Classes)+1)
		for i, name := range c.classifier.Classes()[1:] {
			if c.classScheds[i+1], err = scheduler.New(name, scheduler.Config{}); err != nil {
				return nil, fmt.Errorf("mpdccp: traffic class %d: %w", i+1, err)
			}
		}
	}
	if c.reo, err = reorder.New(e.reoName, e.reorderConfig(e.cfg.Reorder)); err != nil {
		return nil, fmt.Errorf("mpdccp: %w", err)
	}
	for {
		c.localCI = e.rand32()
		if b := e.cfg.CIPrefixBits; b > 0 {
			c.localCI = e.cfg.CIPrefix<<(32-b) | c.localCI>>b
		}
		if _, dup := e.byCI[c.localCI]; !dup && c.localCI != 0 {
			break
		}
	}
	if e.cfg.Role == Client && e.sec != nil {
		if err := e.secInitClient(c); err != nil {
			return nil, fmt.Errorf("mpdccp: handshake: %w", err)
		}
	} else if e.cfg.Role == Client {
		c.keys.offered = make([][maxKeyLen]byte, len(keySchemes))
		for i, s := range keySchemes {
			copy(c.keys.offered[i][:], e.random(s.len))
		}
	}
	c.mpSeq = e.rand48()
	if e.cfg.InitialMPSeq != 0 {
		c.mpSeq = e.cfg.InitialMPSeq & wire.MaxSeq
	}
	e.byCI[c.localCI] = c
	e.conns = append(e.conns[:len(e.conns):len(e.conns)], c) // never write into a shared array
	return c, nil
}

func (e *Endpoint) removeConn(c *Conn) {
	// A new slice: callers may still hold the one Conns returned.
	conns := make([]*Conn, 0, len(e.conns))
	for _, x := range e.conns {
		if x != c {
			conns = append(conns, x)
		}
	}
	e.conns = conns
	if e.byCI[c.localCI] == c {
		delete(e.byCI, c.localCI)
	}
	e.secForget(c)
	for _, sf := range c.subflows {
		e.unindex(sf)
	}
	c.releaseBuffers()
}

func (e *Endpoint) index(sf *subflow) {
	k := sf.key()
	if _, had := e.byKey[k]; !had && e.cfg.Indexed != nil {
		e.cfg.Indexed(k.remote, k.rem, true)
	}
	e.byKey[k] = sf
	pk := portKey{sf.localPort, sf.remotePort}
	e.byPorts[pk] = append(e.byPorts[pk], sf)
}

func (e *Endpoint) unindex(sf *subflow) {
	if k := sf.key(); e.byKey[k] == sf {
		delete(e.byKey, k)
		if e.cfg.Indexed != nil {
			e.cfg.Indexed(k.remote, k.rem, false)
		}
	}
	pk := portKey{sf.localPort, sf.remotePort}
	l := e.byPorts[pk]
	for i, x := range l {
		if x == sf {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(e.byPorts, pk)
	} else {
		e.byPorts[pk] = l
	}
}

// localPortFree picks a random DCCP port not used with remotePort.
func (e *Endpoint) pickPort(remotePort uint16) uint16 {
	for {
		b := e.random(2)
		p := uint16(b[0])<<8 | uint16(b[1])
		if p < 1024 {
			continue
		}
		if _, used := e.byPorts[portKey{p, remotePort}]; !used {
			return p
		}
	}
}

func (e *Endpoint) queueReset(local int, remote netip.AddrPort, src netip.Addr, p *wire.Packet, code wire.ResetCode) {
	if p.Type == wire.TypeReset || e.sec != nil {
		// Never answer a Reset with a Reset (RFC 4340 §8.5). A secure end
		// stays silent: an unauthenticated Reset means nothing to its
		// peer, and silence reflects nothing.
		return
	}
	if len(e.stateless) >= maxStateless {
		return
	}
	r := statelessReply{local: local, remote: remote, src: src, srcPort: p.DstPort, dstPort: p.SrcPort,
		ack: p.Seq, code: code}
	if p.Type.HasAck() {
		r.seq = wire.SeqAdd(p.Ack, 1)
	}
	e.stateless = append(e.stateless, r)
}

// HandleDatagram processes one received UDP payload, whose UDP checksum
// the kernel has verified. local is the socket index it arrived on, from
// the sender's address, to our address as the datagram named it (for the
// DCCP checksum; unspecified if the socket cannot tell), ecn the IP ECN
// bits.
func (e *Endpoint) HandleDatagram(now mono.Time, local int, from netip.AddrPort, to netip.Addr, b []byte, ecn uint8) {
	e.stats.DatagramsIn++
	e.stats.BytesIn += uint64(len(b))
	p := &e.pkt
	if err := wire.Parse(b, p); err != nil {
		e.drop(DropMalformed)
		return
	}
	residual, ok := wire.ChecksumResidual(b, from.Addr(), to)
	if !ok {
		e.drop(DropChecksum) // CsCov beyond the packet (RFC 4340 §9.2)
		return
	}
	key := sfKey{remote: from, local: p.DstPort, rem: p.SrcPort}
	sf := e.byKey[key]
	if sf != nil && p.Short && !sf.extendShort(p, p.Seq, p.Ack) {
		e.drop(DropMalformed)
		return
	}
	opened := false
	if sf == nil && p.Type != wire.TypeRequest {
		sf, opened = e.rebind(now, from, p, residual, b, ecn)
	}
	if sf == nil {
		// No flow to hold a NAT residual against: the kernel's UDP checksum
		// vouches for the datagram (see checksum.go).
		if p.Type == wire.TypeRequest && e.cfg.Role == Server {
			e.handleRequest(now, local, from, to, p, residual, b)
			return
		}
		e.drop(DropNoConn)
		// Ports of a live subflow from another address: a stale packet after
		// NAT rebinding, or a spoofed one. A Reset could reach the real peer
		// and kill the subflow, so stay silent.
		if _, live := e.byPorts[portKey{p.DstPort, p.SrcPort}]; !live {
			e.queueReset(local, from, to, p, wire.ResetNoConnection)
		}
		return
	}
	if !opened && !sf.checksumOK(p, residual) {
		e.drop(DropChecksum)
		return
	}
	if e.sec != nil && !opened && !sf.conn.secOpen(now, sf, b, p, ecn) {
		return // secure mode: unauthenticated, dropped and counted
	}
	if to.IsValid() && !to.IsUnspecified() && to != sf.localAddr.Addr() {
		// A wildcard-bound socket learns its address per datagram.
		sf.localAddr = netip.AddrPortFrom(to, sf.localAddr.Port())
	}
	sf.conn.handlePacket(now, sf, p, ecn, len(b))
}

// rebind finds a subflow for a packet from an unknown address by its DCCP
// ports and a sequence number valid for that subflow (NAT rebinding), and
// moves the subflow to the new address. In secure mode only a packet that
// opens under the subflow's key moves it (opened reports that it was).
func (e *Endpoint) rebind(now mono.Time, from netip.AddrPort, p *wire.Packet, residual uint16, b []byte, ecn uint8) (*subflow, bool) {
	seq, ack := p.Seq, p.Ack // as received: short ones are read per subflow
	for _, sf := range e.byPorts[portKey{p.DstPort, p.SrcPort}] {
		if p.Short && !sf.extendShort(p, seq, ack) {
			continue
		}
		// Only a packet newer than anything received may move a subflow: a
		// replayed packet from another address must not hijack it.
		if sf.state < sfPartOpen || sf.state >= sfClosed || !sf.seqValid(p) || !seqLess(sf.gsr, p.Seq) ||
			!sf.rebindChecksumOK(from, p, residual) {
			continue
		}
		if e.sec != nil {
			if !e.secRebindOpen(now, sf, p, b, ecn) {
				continue
			}
			e.moveSubflow(sf, from)
			return sf, true
		}
		e.moveSubflow(sf, from)
		return sf, false
	}
	return nil, false
}

func (e *Endpoint) moveSubflow(sf *subflow, from netip.AddrPort) {
	e.unindex(sf)
	old := sf.remote
	sf.remote = from
	e.index(sf)
	e.emit(Event{Kind: EventPathRebind, Conn: sf.conn, Path: sf.id, Remote: from, Reason: "from " + old.String()})
}

// PollTransmit writes the next datagram that may leave now into buf.
func (e *Endpoint) PollTransmit(now mono.Time, buf []byte) (Transmit, bool) {
	if len(buf) > e.cfg.MaxPacket {
		buf = buf[:e.cfg.MaxPacket]
	}
	if len(e.stateless) > 0 {
		r := e.stateless[0]
		e.stateless = append(e.stateless[:0], e.stateless[1:]...)
		h := wire.Header{SrcPort: r.srcPort, DstPort: r.dstPort, Type: wire.TypeReset, Seq: r.seq, Ack: r.ack, ResetCode: r.code}
		if e.bld.Begin(buf, &h) == nil {
			if r.expLen > 0 {
				_ = e.bld.MP(&wire.MPOption{Type: wire.MPExp, Raw: r.exp[:r.expLen]})
			}
			if n, err := e.bld.Finish(nil); err == nil {
				wire.SetChecksum(buf[:n], r.src, r.remote.Addr())
				e.stats.ResetsSent++
				return e.sent(Transmit{N: n, Path: -1, Local: r.local, Src: r.src, Remote: r.remote}), true
			}
		}
	}
	n := len(e.conns)
	for i := 0; i < n; i++ {
		c := e.conns[(e.txRR+i)%n]
		if c.idle(now) {
			continue
		}
		c.touch()
		if t, ok := c.pollTransmit(now, buf); ok {
			e.txRR = (e.txRR + i) % n
			if c.state == Closed {
				e.finishClosed(c)
			}
			return e.sent(t), true
		}
	}
	// Connections that closed without anything more to send.
	for i := 0; i < len(e.conns); i++ {
		if c := e.conns[i]; c.state == Closed && !c.hasPendingOutput() {
			e.finishClosed(c)
			i--
		}
	}
	return Transmit{}, false
}

func (e *Endpoint) sent(t Transmit) Transmit {
	e.stats.DatagramsOut++
	e.stats.BytesOut += uint64(t.N)
	return t
}

func (e *Endpoint) finishClosed(c *Conn) {
	if c.hasPendingOutput() {
		return
	}
	if c.removed {
		return
	}
	c.removed = true
	e.removeConn(c)
}

// PollDeliver copies the next inner packet ready for delivery into buf.
func (e *Endpoint) PollDeliver(now mono.Time, buf []byte) (int, *Conn, bool) {
	n := len(e.conns)
	for i := 0; i < n; i++ {
		c := e.conns[(e.dlRR+i)%n]
		if !c.mayDeliver {
			continue
		}
		c.touch()
		it, ok := c.reo.Pop(now)
		if !ok {
			c.mayDeliver = false
			if e.cfg.Retransmit {
				c.pollNACKs(now) // Pop may have found a gap to ask for
			}
			continue
		}
		if len(it.Buf) == 0 { // its MP_SEQ, without the packet RFC 6040 dropped
			e.pool.put(it.Buf)
			i--
			continue
		}
		e.dlRR = (e.dlRR + i) % n
		m := copy(buf, it.Buf)
		c.stats.DeliveredPackets++
		c.stats.DeliveredBytes += uint64(m)
		e.pool.put(it.Buf)
		return m, c, true
	}
	return 0, nil, false
}

// Deadline returns the earliest time HandleTimer (or PollTransmit) has
// work to do, or mono.Never.
func (e *Endpoint) Deadline() mono.Time {
	d := mono.Never
	if len(e.stateless) > 0 {
		return 0
	}
	for _, c := range e.conns {
		d = mono.Min(d, c.cachedDeadline())
	}
	return d
}

// HandleTimer runs the timers that are due at now.
func (e *Endpoint) HandleTimer(now mono.Time) {
	for i := 0; i < len(e.conns); i++ {
		c := e.conns[i]
		if c.idle(now) {
			continue
		}
		c.touch()
		c.handleTimer(now)
		if c.state == Closed && !c.hasPendingOutput() {
			e.finishClosed(c)
			i--
		}
	}
}

// ---------------------------------------------------------------------------
// bufPool is a free list of MaxPacket-sized buffers.
type bufPool struct {
	size int
	free [][]byte
}

func (p *bufPool) get() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b[:p.size]
	}
	return make([]byte, p.size)
}

func (p *bufPool) put(b []byte) {
	if cap(b) < p.size || len(p.free) >= 8192 {
		return
	}
	p.free = append(p.free, b[:p.size])
}

func seqAdd(a uint64, d int64) uint64 { return wire.SeqAdd(a, d) }
func seqDiff(a, b uint64) int64       { return wire.SeqDiff(a, b) }
func seqLess(a, b uint64) bool        { return wire.SeqLess(a, b) }
