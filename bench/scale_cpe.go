// SPDX-License-Identifier: MIT

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/internal/inetsum"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/noise"
)

// The CPEs of `mptun bench scale` run in this process: each is a client
// mpdccp.Endpoint, in secure mode with its own key, with one UDP socket
// per path bound to an address of its own (the client namespace treats
// all of 10.92.0.0/16 as local). A worker goroutine owns cpesPerWorker
// of them: it waits for their sockets with one epoll, moves datagrams
// with recvmmsg/sendmmsg, runs their timers and feeds the active ones'
// bulk flows, like a small data path per CPE.

const (
	cpesPerWorker = 250
	// workerTick bounds a worker's sleep, so that commands and dials
	// scheduled by the orchestrator run within it.
	workerTick = 20 * time.Millisecond
	// bulkQueue is how many inner packets an active CPE keeps queued in
	// its engine: enough to fill its window, few enough that the send
	// queue's CoDel never needs to drop them.
	bulkQueue = 64
)

type cpeState uint8

const (
	cpeWaiting cpeState = iota // not dialled yet
	cpeDialling
	cpeOpen
	cpeFailed
)

type cpeSock struct {
	fd    int
	local netip.AddrPort
}

// cpe is one in-process CPE. Only its worker's goroutine touches it,
// except where noted.
type cpe struct {
	id     int
	ep     *mpdccp.Endpoint
	conn   *mpdccp.Conn
	socks  []cpeSock
	paths  []mpdccp.PathConfig
	inner  netip.Addr
	dialAt mono.Time // when the worker dials; mono.Never: not scheduled
	state  cpeState
	openAt mono.Time
	reason string // why it failed or closed
	dirty  bool

	// The bulk flow of an active CPE: a prebuilt inner UDP packet to the
	// sink, sent again and again.
	active   bool
	pkt      []byte
	fed      uint64 // inner packets the engine accepted
	sentData uint64 // data datagrams that left
	queued   int    // estimate of the engine's queue
	resyncAt mono.Time

	closedAfterOpen bool

	// Scale-out (scale_out.go): the engine's join address hook, and a new
	// connection on a fresh engine when nothing was heard for
	// redialSilence or the connection failed (0: never), as a CPE's path
	// manager does when its concentrator is gone.
	joinRemote    func(peerCI uint32, remote netip.AddrPort) netip.AddrPort
	redialSilence time.Duration
	lastHeard     mono.Time
	redials       int
	key, srvPub   noise.Key
}

type sockRef struct {
	c    *cpe
	path int
}

type cpeWorker struct {
	epfd   int
	cpes   []*cpe
	socks  []sockRef // by epoll data
	events []unix.EpollEvent
	tx, rx *mmsg
	cmds   chan func()
	stop   atomic.Bool
	done   chan struct{}
	// SendDrops counts datagrams a full socket buffer refused.
	sendDrops atomic.Uint64
}

func newCPEWorker(cpes []*cpe, maxPacket int) (*cpeWorker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	w := &cpeWorker{epfd: epfd, cpes: cpes, events: make([]unix.EpollEvent, 64),
		tx: newMmsg(64, maxPacket), rx: newMmsg(64, 2048), cmds: make(chan func(), 4), done: make(chan struct{})}
	for _, c := range cpes {
		for i, s := range c.socks {
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(len(w.socks))}
			if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
				unix.Close(epfd)
				return nil, fmt.Errorf("epoll add: %w", err)
			}
			w.socks = append(w.socks, sockRef{c, i})
		}
	}
	return w, nil
}

// do runs fn in the worker's goroutine and waits for it.
func (w *cpeWorker) do(fn func()) {
	done := make(chan struct{})
	select {
	case w.cmds <- func() { fn(); close(done) }:
	case <-w.done:
		return
	}
	select {
	case <-done:
	case <-w.done:
	}
}

func (w *cpeWorker) close() {
	w.stop.Store(true)
	<-w.done
	unix.Close(w.epfd)
	for _, c := range w.cpes {
		for _, s := range c.socks {
			unix.Close(s.fd)
		}
	}
}

func (w *cpeWorker) run() {
	defer close(w.done)
	for !w.stop.Load() {
		now := mono.Now()
		next := now.Add(workerTick)
		for _, c := range w.cpes {
			next = mono.Min(next, c.deadline())
		}
		timeout := 0
		if next > now {
			timeout = int((next.Sub(now) + time.Millisecond - 1) / time.Millisecond)
		}
		n, err := unix.EpollWait(w.epfd, w.events, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		now = mono.Now()
		for i := 0; i < n; i++ {
			r := w.socks[w.events[i].Fd]
			w.read(now, r.c, r.path)
		}
		for len(w.cmds) > 0 {
			(<-w.cmds)()
		}
		for _, c := range w.cpes {
			w.service(now, c)
		}
	}
}

// deadline is when the CPE needs its worker next.
func (c *cpe) deadline() mono.Time {
	switch c.state {
	case cpeWaiting:
		return c.dialAt
	case cpeFailed:
		return mono.Never
	}
	return c.ep.Deadline()
}

func (w *cpeWorker) read(now mono.Time, c *cpe, path int) {
	s := c.socks[path]
	for range 4 { // a few batches, then the others' turn (level-triggered)
		n := w.rx.recv(s.fd)
		for i := 0; i < n; i++ {
			c.ep.HandleDatagram(now, path, w.rx.addrs[i], s.local.Addr(), w.rx.bufs[i][:w.rx.lens[i]], 0)
		}
		c.dirty = c.dirty || n > 0
		if n > 0 {
			c.lastHeard = now
		}
		if n < len(w.rx.bufs) {
			return
		}
	}
}

func (w *cpeWorker) service(now mono.Time, c *cpe) {
	switch c.state {
	case cpeWaiting:
		if c.dialAt > now {
			return
		}
		conn, err := c.ep.Dial(now, c.paths)
		if err != nil {
			c.state, c.reason = cpeFailed, "dial: "+err.Error()
			return
		}
		c.conn, c.state, c.dirty = conn, cpeDialling, true
		c.dialAt, c.lastHeard = now, now
	case cpeFailed:
		if c.redialSilence > 0 {
			c.redial(now)
		}
		return
	}
	if c.redialSilence > 0 && c.state == cpeOpen && now.Sub(c.lastHeard) > c.redialSilence {
		c.redial(now)
		return
	}
	if c.ep.Deadline() <= now {
		c.ep.HandleTimer(now)
		c.dirty = true
	}
	if c.active && c.state == cpeOpen {
		w.feed(now, c)
	}
	if c.dirty {
		c.dirty = false
		w.flush(now, c)
	}
}

// feed keeps about bulkQueue inner packets queued in an active CPE's
// engine; the engine's congestion control decides when they leave.
func (w *cpeWorker) feed(now mono.Time, c *cpe) {
	if now >= c.resyncAt {
		// The estimate misses what the send queue's AQM dropped.
		c.queued = c.conn.Stats().Queued
		c.resyncAt = now.Add(50 * time.Millisecond)
	}
	for c.queued < bulkQueue {
		if !c.conn.Send(now, c.pkt) {
			break
		}
		c.fed++
		c.queued++
		c.dirty = true
	}
}

// flush sends what the engine has to send, batched per socket, takes
// delivered packets (counted, then dropped) and follows the events.
func (w *cpeWorker) flush(now mono.Time, c *cpe) {
	k, sock := 0, -1
	for {
		buf := w.tx.bufs[k]
		tx, ok := c.ep.PollTransmit(now, buf[:cap(buf)])
		if !ok {
			break
		}
		if tx.Local < 0 || tx.Local >= len(c.socks) {
			continue
		}
		if sock >= 0 && tx.Local != sock {
			// Another socket: send the batch so far, keep this datagram.
			w.sendBatch(c.socks[sock].fd, k)
			w.tx.swap(0, k)
			k = 0
		}
		sock = tx.Local
		w.tx.lens[k], w.tx.addrs[k] = tx.N, tx.Remote
		if c.pkt != nil && tx.N > len(c.pkt) {
			c.sentData++
			c.queued = max(c.queued-1, 0)
		}
		k++
		if k == len(w.tx.bufs) {
			w.sendBatch(c.socks[sock].fd, k)
			k = 0
		}
	}
	if k > 0 {
		w.sendBatch(c.socks[sock].fd, k)
	}
	for {
		if _, _, ok := c.ep.PollDeliver(now, w.rx.bufs[0]); !ok {
			break
		}
	}
	for {
		ev, ok := c.ep.PollEvent()
		if !ok {
			break
		}
		switch ev.Kind {
		case mpdccp.EventConnOpen:
			if c.state == cpeDialling {
				c.state, c.openAt = cpeOpen, now
			}
		case mpdccp.EventConnClosed:
			if c.state == cpeOpen {
				c.closedAfterOpen = true
			}
			c.state, c.reason = cpeFailed, ev.Reason
		}
	}
}

func (w *cpeWorker) sendBatch(fd, n int) {
	if sent := w.tx.send(fd, n); sent < n {
		w.sendDrops.Add(uint64(n - sent))
	}
}

// newCPE creates CPE id's engine: a client in secure mode with its own
// key, talking to the concentrator whose public key is srvPub.
func newCPE(id int, key, srvPub noise.Key, inner netip.Addr, socks []cpeSock, remotes []netip.AddrPort) (*cpe, error) {
	ep, err := newCPEEngine(key, srvPub, nil)
	if err != nil {
		return nil, err
	}
	c := &cpe{id: id, ep: ep, socks: socks, inner: inner, dialAt: mono.Never, key: key, srvPub: srvPub}
	for i, s := range socks {
		c.paths = append(c.paths, mpdccp.PathConfig{ID: i, Local: i, LocalAddr: s.local, Remote: remotes[i%len(remotes)]})
	}
	return c, nil
}

func newCPEEngine(key, srvPub noise.Key, joinRemote func(uint32, netip.AddrPort) netip.AddrPort) (*mpdccp.Endpoint, error) {
	return mpdccp.NewEndpoint(mpdccp.Config{
		Role: mpdccp.Client, ServiceCode: defaults.ServiceCode, Retransmit: defaults.Retransmit, AQM: &aqm.Config{}, ECN: defaults.ECN,
		Security: &mpdccp.Security{PrivateKey: key, Peers: []mpdccp.Peer{{PublicKey: srvPub,
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}},
		JoinRemote: joinRemote,
	})
}

// redial drops the connection and dials again on a fresh engine (same
// key, same sockets) at once.
func (c *cpe) redial(now mono.Time) {
	ep, err := newCPEEngine(c.key, c.srvPub, c.joinRemote)
	if err != nil {
		c.reason = "redial: " + err.Error()
		return
	}
	c.ep, c.conn, c.state, c.dialAt = ep, nil, cpeWaiting, now
	c.redials++
}

// bulkPacket is an inner IPv4/UDP packet of size n from src to dst.
func bulkPacket(src, dst netip.Addr, n int) []byte {
	p := make([]byte, n)
	p[0], p[1] = 0x45, 0
	p[2], p[3] = byte(n>>8), byte(n)
	p[8], p[9] = 64, 17 // TTL, UDP
	copy(p[12:16], src.AsSlice())
	copy(p[16:20], dst.AsSlice())
	binary.BigEndian.PutUint16(p[10:], inetsum.Checksum(p[:20]))
	udp := p[20:]
	udp[0], udp[1], udp[2], udp[3] = 0x9c, 0x40, 0x9c, 0x41 // 40000 → 40001
	l := n - 20
	udp[4], udp[5] = byte(l>>8), byte(l)
	// A real checksum, as senders use: the concentrator's TUN coalesces
	// (GRO) only packets whose checksum verifies.
	c := inetsum.Finish(inetsum.Sum(inetsum.PseudoHeader(src, dst, 17, l), udp))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return p
}
