// SPDX-License-Identifier: MIT

// Package datapath is the I/O shell around the protocol engine: it moves
// batches of packets between the TUN device, the engine and the per-path
// UDP sockets. It is the only package with goroutines on the packet path.
//
// The mpdccp.Endpoint is driven by whichever goroutine has work, one at
// a time (Datapath.mu): a reader that filled its preallocated batch from
// the TUN device or a socket, the timer goroutine, or Run for control
// calls. It feeds the engine, then drains what the engine wants sent into
// sendmmsg batches per socket and what it delivers into one TUN write
// batch. Every buffer is preallocated, so the steady state allocates
// nothing.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ptimer"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/tun"
)

const (
	// tunOffset is the headroom in front of every TUN buffer; the Linux
	// device needs at least 10 bytes for its virtio-net header.
	tunOffset = 16
	// tunWriteBufSize lets the device coalesce (GRO) into a write buffer.
	tunWriteBufSize = 64 << 10
	udpBufSize      = 2048
	maxBatch        = 128
)

// Socket is one batched UDP socket. Its index in Config.Sockets (or the
// index AddSocket returns) is the "local" index the engine uses.
type Socket interface {
	ReadBatch(msgs []netio.Message) (int, error)
	WriteBatch(msgs []netio.Message) (int, error)
	LocalAddr() netip.AddrPort
	Close() error
}

// Capture records tunnel datagrams for debugging (a pcap writer): the UDP
// payload as sent or received, between the outer addresses and ports.
type Capture interface {
	WritePacket(t time.Time, src, dst netip.AddrPort, dg []byte) error
}

// Config is what a Datapath runs.
type Config struct {
	Endpoint *mpdccp.Endpoint
	Device   tun.Device
	Sockets  []Socket
	// InnerMTU is the largest inner packet the tunnel carries; bigger
	// ones get an ICMP "too big" back.
	InnerMTU int
	// InnerAddrs are the tunnel's own inner addresses, used as the source
	// of ICMP errors.
	InnerAddrs []netip.Addr
	Logger     *slog.Logger
	Capture    Capture
	// Hook, if set, runs under the owner's lock next to the engine: it
	// gets every engine event (instead of the log) and its own timer.
	// The path manager is driven this way.
	Hook Hook
	// Sharding, when set, spreads the connections over several owners,
	// each an engine behind its own lock (sharded.go): Endpoint and
	// Sockets are the first.
	Sharding *Sharding
}

// Hook is driven by the goroutine that owns the engine. When the data
// path starts closing its connections, Stop is called and the hook's timer
// no longer runs; engine events still arrive.
type Hook interface {
	HandleEngineEvent(now mono.Time, ev mpdccp.Event)
	Deadline() mono.Time
	HandleTimer(now mono.Time)
	Stop(now mono.Time)
}

// Stats are the data path's counters. They are updated by the owner
// goroutine and read by anyone.
type Stats struct {
	TUNRead, TUNWritten           atomic.Uint64
	UDPRead, UDPWritten           atomic.Uint64
	UDPReadBatches, UDPSendCalls  atomic.Uint64
	DroppedTooBig, DroppedNoRoute atomic.Uint64
	DroppedQueueFull              atomic.Uint64
	SendErrors, TUNWriteErrors    atomic.Uint64
}

type tunBatch struct {
	bufs  [][]byte
	sizes []int
	n     int
}

type udpBatch struct {
	slot *sockSlot // the socket it was read from
	msgs []netio.Message
	n    int
}

// sockSlot is one socket and its send batch. A removed socket's slot
// index may be reused; a batch its reader still holds is recognised by
// its slot pointer and dropped.
type sockSlot struct {
	idx     int
	sock    Socket
	tx      []netio.Message
	txN     int
	removed atomic.Bool
}

// Datapath runs one endpoint.
type Datapath struct {
	cfg   Config
	ep    *mpdccp.Endpoint
	log   *slog.Logger
	Stats *Stats // shared by a sharded data path's owners

	// Sharded data paths (sharded.go): the front has shards and no
	// engine of its own; a shard is fed by the front's readers.
	shards  []*Datapath
	front   *front
	fed     bool
	onEvent func(ev mpdccp.Event)
	learn   func(src netip.Addr)

	// mu is held by the goroutine driving the engine; everything below
	// is guarded by it.
	mu      sync.Mutex
	running bool // between Run's start and its return
	closing bool // Run's context is done: the connections are closing
	closeBy mono.Time
	closed  chan struct{} // every connection closed (or closeBy passed)

	slots []*sockSlot // by socket index; nil: free
	ctl   chan func()
	hook  Hook

	// Readers started after Run began use these.
	readCtx context.Context
	readers *sync.WaitGroup

	timer   *ptimer.Timer
	armed   mono.Time
	tunOut  [][]byte
	tunOutN int
	spare   netio.Message
	icmpBuf []byte
	routes  map[netip.Addr]*mpdccp.Conn
	errOnce sync.Once
	fatal   chan error
	capture atomic.Pointer[captureBox]
}

type captureBox struct{ c Capture }

// SetCapture starts (c != nil) or stops (nil) recording datagrams.
func (d *Datapath) SetCapture(c Capture) {
	for _, s := range d.shards {
		s.SetCapture(c)
	}
	if c == nil {
		d.capture.Store(nil)
		return
	}
	d.capture.Store(&captureBox{c})
}

// New prepares a data path; Run starts it.
func New(cfg Config) (*Datapath, error) {
	if cfg.Endpoint == nil || cfg.Device == nil {
		return nil, errors.New("datapath: endpoint and device are required")
	}
	if cfg.Sharding != nil {
		return newSharded(cfg)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.InnerMTU <= 0 {
		cfg.InnerMTU = 1380
	}
	t, err := ptimer.New()
	if err != nil {
		return nil, err
	}
	d := &Datapath{
		cfg:     cfg,
		ep:      cfg.Endpoint,
		log:     cfg.Logger,
		Stats:   new(Stats),
		closed:  make(chan struct{}, 1),
		ctl:     make(chan func(), 16),
		hook:    cfg.Hook,
		timer:   t,
		armed:   mono.Never,
		icmpBuf: make([]byte, 0, 1500),
		routes:  make(map[netip.Addr]*mpdccp.Conn),
		fatal:   make(chan error, 1),
	}
	d.SetCapture(cfg.Capture)
	d.spare.Buf = make([]byte, udpBufSize)
	d.tunOut = make([][]byte, maxBatch)
	for i := range d.tunOut {
		d.tunOut[i] = make([]byte, tunWriteBufSize)
	}
	for _, s := range cfg.Sockets {
		d.addSlot(s)
	}
	return d, nil
}

// addSlot gives s the lowest free socket index, with its buffers.
func (d *Datapath) addSlot(s Socket) *sockSlot {
	idx := len(d.slots)
	for i, sl := range d.slots {
		if sl == nil {
			idx = i
			break
		}
	}
	sl := &sockSlot{idx: idx, sock: s, tx: make([]netio.Message, maxBatch)}
	for i := range sl.tx {
		sl.tx[i].Buf = make([]byte, udpBufSize)
	}
	if idx == len(d.slots) {
		d.slots = append(d.slots, sl)
	} else {
		d.slots[idx] = sl
	}
	return sl
}

// AddSocket adds a socket while the data path runs and returns its index
// (the engine's "local"). Call it under the owner's lock (Do, Hook).
func (d *Datapath) AddSocket(s Socket) int {
	sl := d.addSlot(s)
	if d.readCtx != nil {
		d.readers.Add(1)
		go func() { defer d.readers.Done(); d.routineReadUDP(d.readCtx, sl) }()
	}
	return sl.idx
}

// RemoveSocket closes socket i; its index may be given to a later
// AddSocket. Call it under the owner's lock (Do, Hook).
func (d *Datapath) RemoveSocket(i int) error {
	if i < 0 || i >= len(d.slots) || d.slots[i] == nil {
		return fmt.Errorf("datapath: no socket %d", i)
	}
	sl := d.slots[i]
	d.slots[i] = nil
	sl.removed.Store(true)
	sl.txN = 0
	return sl.sock.Close()
}

// Socket returns socket i, or nil.
func (d *Datapath) Socket(i int) Socket {
	if i < 0 || i >= len(d.slots) || d.slots[i] == nil {
		return nil
	}
	return d.slots[i].sock
}

// Do runs fn in the goroutine that owns the endpoint and waits for it. The
// control API uses it to read or change engine state safely.
func (d *Datapath) Do(ctx context.Context, fn func(now mono.Time, ep *mpdccp.Endpoint)) error {
	if d.shards != nil {
		return d.doEach(ctx, fn)
	}
	done := make(chan struct{})
	select {
	case d.ctl <- func() { fn(mono.Now(), d.ep); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TimerLateness reports the precise timer's wake-up lateness quantiles.
func (d *Datapath) TimerLateness() (p50, p99, max time.Duration) {
	if d.shards != nil {
		return d.shardLateness()
	}
	h := &d.timer.Lateness
	return h.Quantile(0.5), h.Quantile(0.99), h.Max()
}

// Run moves packets until ctx is cancelled, then closes every connection
// gracefully (MP_CLOSE) and returns after they closed or closeGrace passed.
//
// Whoever has input runs the engine: a reader that got a batch, the timer
// goroutine when the timer fires, Run for control calls, each holding
// d.mu for one round (input, flush, timers due, re-arm). Handing each
// batch to an owner goroutine instead cost a wake-up and a context switch
// per batch, the largest cost after the syscalls themselves.
func (d *Datapath) Run(ctx context.Context, closeGrace time.Duration) error {
	if d.shards != nil {
		return d.runSharded(ctx, closeGrace)
	}
	readCtx, stopReaders := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	d.mu.Lock()
	d.readCtx, d.readers = readCtx, &wg
	d.running = true
	d.arm(mono.Now(), d.ep.Deadline()) // a connection dialled before Run sends its Request now
	d.mu.Unlock()
	wg.Add(1)
	go func() { defer wg.Done(); d.routineTimer() }()
	if !d.fed { // a shard's datagrams and packets come from the front
		wg.Add(1)
		go func() { defer wg.Done(); d.routineReadTUN(readCtx) }()
		for _, sl := range d.slots {
			if sl != nil {
				wg.Add(1)
				go func() { defer wg.Done(); d.routineReadUDP(readCtx, sl) }()
			}
		}
	}
	defer func() {
		d.mu.Lock()
		d.running = false // late rounds of readers and the timer do nothing
		d.mu.Unlock()
		stopReaders()
		d.timer.Close()
		// Readers blocked in syscalls return once the device and sockets
		// are closed by the caller; do not wait for them here.
		go wg.Wait()
	}()

	done := ctx.Done()
	for {
		select {
		case fn := <-d.ctl:
			d.mu.Lock()
			fn()
			d.endRound()
			d.mu.Unlock()
		case err := <-d.fatal:
			return err
		case <-d.closed:
			return nil
		case <-done:
			done = nil
			d.mu.Lock()
			d.closing = true
			now := mono.Now()
			d.closeBy = now.Add(closeGrace)
			if d.hook != nil {
				d.hook.Stop(now)
			}
			for _, c := range d.ep.Conns() {
				c.Close(now)
			}
			d.endRound()
			d.mu.Unlock()
		}
	}
}

// round runs one round of the engine for input (nil: the timer); before
// Run started and after it returned, the input is dropped.
func (d *Datapath) round(tb *tunBatch, ub *udpBatch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running {
		return
	}
	switch {
	case tb != nil:
		d.handleTUN(mono.Now(), tb)
	case ub != nil:
		if !ub.slot.removed.Load() {
			d.handleUDP(mono.Now(), ub)
		}
	default:
		d.runTimers()
	}
	d.endRound()
}

// endRound sends and delivers what the round produced, runs what fell
// due meanwhile and re-arms the timer. Call it with d.mu held.
func (d *Datapath) endRound() {
	now := mono.Now()
	d.flush(now)
	if d.closing {
		if d.allClosed() || now >= d.closeBy {
			select {
			case d.closed <- struct{}{}:
			default:
			}
			return
		}
		d.arm(mono.Now(), mono.Min(d.ep.Deadline(), d.closeBy))
		return
	}
	// What fell due while this round ran (a pacing release during a
	// long flush, an ack to send now) runs at once rather than by a
	// timer that fires immediately: that costs a timerfd_settime and a
	// wake of the timer goroutine.
	for range dueRounds {
		now = mono.Now()
		if d.deadline() > now {
			break
		}
		d.runTimers()
		d.flush(now)
	}
	d.arm(mono.Now(), d.deadline())
}

// dueRounds bounds how often one round runs timers that fell due during
// it, so that a deadline the engine cannot clear does not spin here; the
// timer (timerSlack later) handles it then.
const dueRounds = 2

// deadline is the earliest of the engine's and the hook's deadlines.
func (d *Datapath) deadline() mono.Time {
	dl := d.ep.Deadline()
	if d.hook != nil && !d.closing {
		dl = mono.Min(dl, d.hook.Deadline())
	}
	return dl
}

// runTimers runs the engine's and the hook's timers that are due.
func (d *Datapath) runTimers() {
	now := mono.Now()
	if now >= d.ep.Deadline() {
		d.ep.HandleTimer(now)
	}
	if d.hook != nil && !d.closing && now >= d.hook.Deadline() {
		d.hook.HandleTimer(now)
	}
}

func (d *Datapath) allClosed() bool {
	for _, c := range d.ep.Conns() {
		if c.State() != mpdccp.Closed {
			return false
		}
	}
	return true
}

// timerSlack is how late the timer may wake, and the shortest wait it is
// armed for. Setting a timerfd a few microseconds ahead costs 5–15 µs in a
// virtual machine (the host reprograms its timer), and every wake costs two
// goroutine switches; at 1 Gbit/s the pacer's next release is ~10 µs away
// after each packet, so without a slack the sender would pay a wake per
// packet or two. The pacer's bucket (BBR: 250 µs of data) absorbs this
// lateness: the packets go as a slightly larger burst, the rate is kept.
const timerSlack = 50 * time.Microsecond

// arm sets the precise timer to fire at deadline, or up to timerSlack
// after it, avoiding a syscall when the armed time already does.
func (d *Datapath) arm(now, deadline mono.Time) {
	if deadline != mono.Never {
		if d.armed != mono.Never && d.armed > now && d.armed >= deadline && d.armed.Sub(deadline) <= timerSlack {
			return
		}
		deadline = mono.Max(deadline, now.Add(timerSlack))
	}
	if deadline == d.armed {
		return
	}
	d.armed = deadline
	if err := d.timer.Reset(deadline); err != nil {
		d.log.Error("timer", "err", err)
	}
}

// routineTimer runs the engine's timers when the precise timer fires.
func (d *Datapath) routineTimer() {
	for {
		if _, err := d.timer.Wait(); err != nil {
			return
		}
		d.round(nil, nil)
	}
}

// newTunBatch is a reader's batch of bs packet buffers.
func (d *Datapath) newTunBatch(bs int) *tunBatch {
	readBuf := tunOffset + max(d.cfg.InnerMTU, 1500) + 64
	b := &tunBatch{bufs: make([][]byte, bs), sizes: make([]int, bs)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, readBuf)
	}
	return b
}

// newUDPBatch is a reader's batch for socket slot sl.
func newUDPBatch(sl *sockSlot) *udpBatch {
	b := &udpBatch{slot: sl, msgs: make([]netio.Message, maxBatch)}
	for i := range b.msgs {
		b.msgs[i].Buf = make([]byte, udpBufSize)
	}
	return b
}

func (d *Datapath) routineReadTUN(ctx context.Context) {
	b := d.newTunBatch(min(max(d.cfg.Device.BatchSize(), 1), maxBatch))
	for {
		n, err := d.cfg.Device.Read(b.bufs, b.sizes, tunOffset)
		if err != nil && n == 0 {
			if errors.Is(err, tun.ErrTooManySegments) {
				continue
			}
			if ctx.Err() == nil {
				d.fail(fmt.Errorf("tun read: %w", err))
			}
			return
		}
		b.n = n
		if ctx.Err() != nil {
			return
		}
		d.round(b, nil)
	}
}

func (d *Datapath) routineReadUDP(ctx context.Context, sl *sockSlot) {
	s := sl.sock
	b := newUDPBatch(sl)
	for {
		for i := range b.msgs {
			b.msgs[i].Buf = b.msgs[i].Buf[:cap(b.msgs[i].Buf)]
		}
		n, err := s.ReadBatch(b.msgs)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || sl.removed.Load() {
				return
			}
			// Transient errors (e.g. ICMP port unreachable reported on a
			// connected socket) must not kill the path.
			d.log.Debug("udp read", "socket", sl.idx, "err", err)
			time.Sleep(time.Millisecond)
			continue
		}
		b.n = n
		if ctx.Err() != nil {
			return
		}
		d.round(nil, b)
	}
}

func (d *Datapath) fail(err error) {
	d.errOnce.Do(func() { d.fatal <- err })
}

// handleTUN feeds packets read from the TUN device to their connection.
func (d *Datapath) handleTUN(now mono.Time, b *tunBatch) {
	d.Stats.TUNRead.Add(uint64(b.n))
	conns := d.ep.Conns()
	for i := 0; i < b.n; i++ {
		pkt := b.bufs[i][tunOffset : tunOffset+b.sizes[i]]
		if len(pkt) == 0 {
			continue
		}
		if len(pkt) > d.cfg.InnerMTU {
			d.Stats.DroppedTooBig.Add(1)
			d.sendTooBig(pkt)
			continue
		}
		c := d.route(pkt, conns)
		if c == nil {
			d.Stats.DroppedNoRoute.Add(1)
			continue
		}
		if !c.Send(now, pkt) {
			d.Stats.DroppedQueueFull.Add(1)
		}
	}
}

// route picks the connection for an inner packet: a client's open one, or
// on a concentrator the one its destination was learned from.
func (d *Datapath) route(pkt []byte, conns []*mpdccp.Conn) *mpdccp.Conn {
	if d.ep.Sealed() {
		// Secure mode: cryptokey routing by the peers' allowed IPs, never
		// by learnt source addresses.
		dst, ok := innerAddr(pkt, false)
		if !ok {
			return nil
		}
		return d.ep.RouteInner(dst)
	}
	if len(conns) == 1 {
		return conns[0]
	}
	if d.ep.Role() == mpdccp.Client {
		// A client has one connection, and a second only while it tries
		// a fresh one beside a silent one (pathmgr): the open one
		// carries the packets.
		for _, c := range conns {
			if c.State() == mpdccp.Open {
				return c
			}
		}
		if len(conns) > 0 {
			return conns[0]
		}
		return nil
	}
	dst, ok := innerAddr(pkt, false)
	if !ok {
		return nil
	}
	return d.routes[dst]
}

// innerAddr returns the source (src=true) or destination address of an
// inner IP packet.
func innerAddr(pkt []byte, src bool) (netip.Addr, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		off := 16
		if src {
			off = 12
		}
		return netip.AddrFrom4([4]byte(pkt[off : off+4])), true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		off := 24
		if src {
			off = 8
		}
		return netip.AddrFrom16([16]byte(pkt[off : off+16])), true
	}
	return netip.Addr{}, false
}

func (d *Datapath) sendTooBig(pkt []byte) {
	var src netip.Addr
	v4 := pkt[0]>>4 == 4
	for _, a := range d.cfg.InnerAddrs {
		if a.Is4() == v4 {
			src = a
			break
		}
	}
	icmp := tooBig(d.icmpBuf[:0], pkt, d.cfg.InnerMTU, src)
	if icmp == nil {
		return
	}
	out := d.tunOut[d.tunOutN]
	copy(out[tunOffset:], icmp)
	d.tunOut[d.tunOutN] = out[:tunOffset+len(icmp)]
	d.tunOutN++
	if d.tunOutN == len(d.tunOut) {
		d.writeTUN()
	}
}

// handleUDP feeds each datagram to the engine with its outer ECN field;
// the engine records a CE mark for the subflow, then marks or drops the
// inner packet (RFC 6040).
func (d *Datapath) handleUDP(now mono.Time, b *udpBatch) {
	d.Stats.UDPRead.Add(uint64(b.n))
	d.Stats.UDPReadBatches.Add(1)
	local := b.slot.sock.LocalAddr()
	for i := 0; i < b.n; i++ {
		m := &b.msgs[i]
		dg := m.Buf[:m.N]
		to := local
		if m.Local.IsValid() {
			to = netip.AddrPortFrom(m.Local, local.Port()) // a wildcard socket: the address the peer sent to
		}
		if cb := d.capture.Load(); cb != nil {
			cb.c.WritePacket(time.Now(), m.Addr, to, dg) // as received
		}
		d.ep.HandleDatagram(now, b.slot.idx, m.Addr, to.Addr(), dg, m.TOS&3)
	}
}

// flush drains what the engine has to send, to deliver and to report;
// the hook's reactions to events may queue more to send.
func (d *Datapath) flush(now mono.Time) {
	for range 16 {
		d.flushTx(now)
		d.flushDeliver(now)
		if !d.flushEvents(now) {
			return
		}
	}
}

func (d *Datapath) flushTx(now mono.Time) {
	for {
		// The socket is known only after polling, so poll into a spare
		// buffer and swap it into that socket's batch.
		m := &d.spare
		m.Buf = m.Buf[:cap(m.Buf)]
		tx, ok := d.ep.PollTransmit(now, m.Buf)
		if !ok {
			break
		}
		if tx.Local < 0 || tx.Local >= len(d.slots) || d.slots[tx.Local] == nil {
			d.Stats.SendErrors.Add(1) // its socket is gone (the path is being rebound)
			continue
		}
		sl := d.slots[tx.Local]
		dg := m.Buf[:tx.N]
		src := sl.sock.LocalAddr()
		if tx.Src.IsValid() && !tx.Src.IsUnspecified() {
			src = netip.AddrPortFrom(tx.Src, src.Port())
		}
		if cb := d.capture.Load(); cb != nil {
			cb.c.WritePacket(time.Now(), src, tx.Remote, dg)
		}
		slot := &sl.tx[sl.txN]
		// Swap buffers: the polled datagram becomes the slot's buffer.
		slot.Buf, m.Buf = m.Buf, slot.Buf
		slot.N = tx.N
		slot.Addr = tx.Remote
		slot.TOS = tx.ECN // the engine's RFC 6040 encapsulation
		slot.Local = tx.Src
		sl.txN++
		if sl.txN == len(sl.tx) {
			d.writeUDP(sl)
		}
	}
	for _, sl := range d.slots {
		if sl != nil && sl.txN > 0 {
			d.writeUDP(sl)
		}
	}
}

func (d *Datapath) flushDeliver(now mono.Time) {
	for {
		out := d.tunOut[d.tunOutN]
		out = out[:cap(out)]
		n, c, ok := d.ep.PollDeliver(now, out[tunOffset:])
		if !ok {
			break
		}
		pkt := out[tunOffset : tunOffset+n]
		if c != nil && (len(d.ep.Conns()) > 1 || d.learn != nil) && !d.ep.Sealed() {
			if src, ok := innerAddr(pkt, true); ok {
				if d.routes[src] != c {
					d.routes[src] = c
					if d.learn != nil {
						d.learn(src) // the front's TUN reader steers to this shard
					}
				}
			}
		}
		d.tunOut[d.tunOutN] = out[:tunOffset+n]
		d.tunOutN++
		if d.tunOutN == len(d.tunOut) {
			d.writeTUN()
		}
	}
	if d.tunOutN > 0 {
		d.writeTUN()
	}
}

// flushEvents hands the engine's events to the hook (or the log); it
// reports whether there were any.
func (d *Datapath) flushEvents(now mono.Time) bool {
	any := false
	for {
		ev, ok := d.ep.PollEvent()
		if !ok {
			return any
		}
		any = true
		if d.onEvent != nil {
			d.onEvent(ev) // a shard's: the front learns whose connection it is
		}
		if d.hook != nil {
			d.hook.HandleEngineEvent(now, ev)
			continue
		}
		d.log.Info("mpdccp event", "event", ev.Kind.String(), "path", ev.Path, "remote", ev.Remote, "reason", ev.Reason)
	}
}

func (d *Datapath) writeUDP(sl *sockSlot) {
	msgs := sl.tx[:sl.txN]
	sl.txN = 0
	for len(msgs) > 0 {
		n, err := sl.sock.WriteBatch(msgs)
		d.Stats.UDPSendCalls.Add(1)
		d.Stats.UDPWritten.Add(uint64(n))
		if err != nil {
			// A path that cannot send (route gone, interface down) must not
			// stall the others: drop the rest of this batch; the subflow's
			// congestion control sees the loss.
			d.Stats.SendErrors.Add(uint64(len(msgs) - n))
			return
		}
		msgs = msgs[n:]
	}
}

func (d *Datapath) writeTUN() {
	bufs := d.tunOut[:d.tunOutN]
	n := d.tunOutN
	d.tunOutN = 0
	if _, err := d.cfg.Device.Write(bufs, tunOffset); err != nil {
		d.Stats.TUNWriteErrors.Add(1)
		d.log.Debug("tun write", "err", err)
	}
	d.Stats.TUNWritten.Add(uint64(n))
	// Write may have reordered or resliced bufs; restore full capacity.
	for i := range bufs {
		bufs[i] = bufs[i][:cap(bufs[i])]
	}
}

// CloseSockets closes every socket still in the data path; call it after
// Run returned.
func (d *Datapath) CloseSockets() {
	for i, sl := range d.slots {
		if sl != nil {
			sl.removed.Store(true)
			sl.sock.Close()
			d.slots[i] = nil
		}
	}
}
