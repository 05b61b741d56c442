// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

const (
	sideClient = 0
	sideServer = 1
)

var srvAddr = netip.MustParseAddrPort("10.9.0.1:6511")

func cliAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}), uint16(40000+i))
}

type simPath struct {
	up, down *netsim.Link // up: client -> server
	cli      netip.AddrPort
}

// harness joins a client and a server Endpoint over netsim paths and
// drives both engines in virtual time.
type harness struct {
	t      testing.TB
	sim    *netsim.Sim
	ep     [2]*Endpoint
	paths  []*simPath
	conn   *Conn // the client's connection
	wake   [2]mono.Time
	buf    []byte
	dbuf   []byte
	events [2][]Event
	// onDeliver gets every inner packet delivered on side.
	onDeliver func(side int, c *Conn, b []byte)
	// tap sees every datagram sent (side, path index); returning false drops it.
	tap        func(side, path int, b []byte) bool
	spins      int
	unroutable int
}

type harnessConfig struct {
	seed  int64
	links []netsim.LinkConfig // one per path, used in both directions
	// down, when set, replaces links from server to client (an
	// asymmetric access line: ADSL's uplink is a tenth of its downlink).
	down []netsim.LinkConfig
	cli  Config
	srv  Config
}

func newHarness(t testing.TB, hc harnessConfig) *harness {
	t.Helper()
	h := &harness{t: t, sim: netsim.New(hc.seed), buf: make([]byte, 2048), dbuf: make([]byte, 2048)}
	rng := rand.New(rand.NewPCG(uint64(hc.seed), 99))
	hc.cli.Role, hc.srv.Role = Client, Server
	hc.cli.Rand, hc.srv.Rand = netsim.RandReader(rng), netsim.RandReader(rng)
	var err error
	if h.ep[0], err = NewEndpoint(hc.cli); err != nil {
		t.Fatal(err)
	}
	if h.ep[1], err = NewEndpoint(hc.srv); err != nil {
		t.Fatal(err)
	}
	for i, lc := range hc.links {
		p := &simPath{cli: cliAddr(i)}
		p.up = h.sim.NewLink(lc, func(pk netsim.Packet) {
			h.ep[1].HandleDatagram(h.sim.Now(), i, pk.Meta.(netip.AddrPort), srvAddr.Addr(), pk.Data, pk.ECN)
			h.service(sideServer)
		})
		dc := lc
		if i < len(hc.down) {
			dc = hc.down[i]
		}
		p.down = h.sim.NewLink(dc, func(pk netsim.Packet) {
			h.ep[0].HandleDatagram(h.sim.Now(), i, srvAddr, p.cli.Addr(), pk.Data, pk.ECN)
			h.service(sideClient)
		})
		h.paths = append(h.paths, p)
	}
	h.wake = [2]mono.Time{mono.Never, mono.Never}
	return h
}

// directPaths are the first n paths of the pipe tests' direct topology
// (no NAT): path i from cliAddr(i) to srvAddr.
func directPaths(n int) []PathConfig {
	pcs := make([]PathConfig, n)
	for i := range pcs {
		pcs[i] = PathConfig{ID: i, Local: i, LocalAddr: cliAddr(i), Remote: srvAddr}
	}
	return pcs
}

// pumpOut fires e's timer when it is due at now and hands each datagram
// e sends (in buf) to out; it reports whether there was any.
func pumpOut(e *Endpoint, now mono.Time, buf []byte, out func(t Transmit, dg []byte)) bool {
	if e.Deadline() <= now {
		e.HandleTimer(now)
	}
	sent := false
	for {
		t, ok := e.PollTransmit(now, buf)
		if !ok {
			return sent
		}
		sent = true
		out(t, buf[:t.N])
	}
}

// drainDelivered takes every inner packet e delivers (in buf), hands each
// to each when it is not nil, and returns how many there were.
func drainDelivered(e *Endpoint, now mono.Time, buf []byte, each func(pkt []byte)) int {
	n := 0
	for {
		l, _, ok := e.PollDeliver(now, buf)
		if !ok {
			return n
		}
		n++
		if each != nil {
			each(buf[:l])
		}
	}
}

// handOver gives peer the datagram dg that side sent (t) as it arrives on
// the direct topology: the client's from cliAddr(t.Local) to srvAddr, the
// server's from srvAddr to the client's address; ecn is its outer field.
func handOver(peer *Endpoint, now mono.Time, side int, t Transmit, dg []byte, ecn uint8) {
	if side == 0 {
		peer.HandleDatagram(now, t.Local, cliAddr(t.Local), srvAddr.Addr(), dg, ecn)
	} else {
		peer.HandleDatagram(now, t.Local, srvAddr, t.Remote.Addr(), dg, ecn)
	}
}

func (h *harness) pathConfigs() []PathConfig {
	var pcs []PathConfig
	for i, p := range h.paths {
		pcs = append(pcs, PathConfig{ID: i, Local: i, LocalAddr: p.cli, Remote: srvAddr})
	}
	return pcs
}

func (h *harness) dial(n int) *Conn {
	h.t.Helper()
	c, err := h.ep[0].Dial(h.sim.Now(), h.pathConfigs()[:n])
	if err != nil {
		h.t.Fatal(err)
	}
	h.conn = c
	h.service(sideClient)
	return c
}

// service runs one endpoint: timers, transmit, deliver, events, then
// schedules its next wake-up.
func (h *harness) service(side int) {
	e := h.ep[side]
	now := h.sim.Now()
	if e.Deadline() <= now {
		e.HandleTimer(now)
	}
	for {
		t, ok := e.PollTransmit(now, h.buf)
		if !ok {
			break
		}
		h.transmit(side, t, h.buf[:t.N])
	}
	for {
		n, c, ok := e.PollDeliver(now, h.dbuf)
		if !ok {
			break
		}
		if h.onDeliver != nil {
			h.onDeliver(side, c, h.dbuf[:n])
		}
	}
	for {
		ev, ok := e.PollEvent()
		if !ok {
			break
		}
		h.events[side] = append(h.events[side], ev)
	}
	d := e.Deadline()
	if d <= now {
		h.spins++
		if h.spins > 10000 {
			h.t.Fatalf("side %d: deadline %v stays in the past at %v (busy loop)", side, d, now)
		}
		d = now.Add(time.Microsecond)
	} else {
		h.spins = 0
	}
	if d < h.wake[side] || h.wake[side] <= now {
		h.wake[side] = d
		if d != mono.Never {
			h.sim.At(d, func() {
				if h.sim.Now() >= h.wake[side] {
					h.wake[side] = mono.Never
					h.service(side)
				}
			})
		}
	}
}

func (h *harness) transmit(side int, t Transmit, b []byte) {
	if t.Local < 0 || t.Local >= len(h.paths) {
		h.t.Fatalf("transmit on unknown socket %d", t.Local)
	}
	if h.tap != nil && !h.tap(side, t.Local, b) {
		return
	}
	p := h.paths[t.Local]
	data := append([]byte(nil), b...)
	if side == sideClient {
		if t.Remote != srvAddr {
			h.t.Fatalf("client sends to %v", t.Remote)
		}
		p.up.Send(netsim.Packet{Size: len(data) + 28, Data: data, Meta: p.cli, ECN: t.ECN})
	} else {
		// Route by destination address: datagrams to an address no client
		// has (say, a spoofed source) go nowhere.
		for _, q := range h.paths {
			if q.cli == t.Remote {
				q.down.Send(netsim.Packet{Size: len(data) + 28, Data: data, ECN: t.ECN})
				return
			}
		}
		h.unroutable++
	}
}

func (h *harness) run(d time.Duration) { h.sim.RunUntil(h.sim.Now().Add(d)) }

// setPathRate changes path i's rate, both directions, from now on (a
// radio path whose capacity moves under the flow).
func (h *harness) setPathRate(i int, r float64) {
	p := h.paths[i]
	up, down := p.up.Config(), p.down.Config()
	up.Rate, down.Rate = r, r
	p.up.SetConfig(up)
	p.down.SetConfig(down)
}

// runUntil runs until cond holds or limit passes; it reports whether cond held.
func (h *harness) runUntil(limit time.Duration, cond func() bool) bool {
	end := h.sim.Now().Add(limit)
	for h.sim.Now() < end {
		if cond() {
			return true
		}
		next := h.sim.NextEvent()
		if next == mono.Never || next > end {
			h.sim.RunUntil(end)
			break
		}
		h.sim.Step()
	}
	return cond()
}

func (h *harness) serverConn() *Conn {
	cs := h.ep[1].Conns()
	if len(cs) == 0 {
		return nil
	}
	return cs[0]
}

func (h *harness) openPaths(c *Conn) int {
	if c == nil {
		return 0
	}
	n := 0
	for _, sf := range c.subflows {
		if sf.state == sfOpen {
			n++
		}
	}
	return n
}

func (h *harness) countEvents(side int, k EventKind) int {
	n := 0
	for _, ev := range h.events[side] {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func link(rate float64, delay time.Duration, loss float64) netsim.LinkConfig {
	return netsim.LinkConfig{Rate: rate, Delay: delay, Loss: loss, Queue: 256 * 1024}
}

// source feeds numbered inner packets into a connection as fast as its
// send queue takes them.
type source struct {
	h      *harness
	c      *Conn
	side   int
	next   uint64
	total  uint64
	size   int
	pkt    []byte
	period time.Duration
	// perTick limits the packets offered per period (0 = as many as fit).
	perTick int
}

func (s *source) start() {
	s.pkt = make([]byte, s.size)
	s.tick()
}

func (s *source) tick() {
	now := s.h.sim.Now()
	sent := false
	for n := 0; s.next < s.total && s.c.queued() < s.h.ep[s.side].cfg.SendQueue/2 && (s.perTick == 0 || n < s.perTick); n++ {
		binary.BigEndian.PutUint64(s.pkt, s.next)
		if !s.c.Send(now, s.pkt) {
			break
		}
		s.next++
		sent = true
	}
	if sent {
		s.h.service(s.side)
	}
	if s.next < s.total && s.c.state == Open {
		s.h.sim.After(s.period, s.tick)
	}
}

// sink records which numbered packets arrived.
type sink struct {
	seen  map[uint64]int
	count uint64
	dups  uint64
}

func newSink() *sink { return &sink{seen: map[uint64]int{}} }

// serverSink counts in a new sink what the server delivers (it replaces
// onDeliver).
func (h *harness) serverSink() *sink {
	snk := newSink()
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer {
			snk.deliver(b)
		}
	}
	return snk
}

func (s *sink) deliver(b []byte) {
	if len(b) < 8 {
		return
	}
	id := binary.BigEndian.Uint64(b)
	s.seen[id]++
	if s.seen[id] > 1 {
		s.dups++
	}
	s.count++
}

func (h *harness) dumpEvents() string {
	s := ""
	for side := range 2 {
		for _, ev := range h.events[side] {
			s += fmt.Sprintf("side %d: %v path %d %s reset=%v\n", side, ev.Kind, ev.Path, ev.Reason, ev.Reset)
		}
	}
	return s
}

// dialWithSink dials n paths, waits until both ends have them open, and
// records what the server delivers in a sink.
func (h *harness) dialWithSink(n int) (*Conn, *sink) {
	h.t.Helper()
	snk := h.serverSink()
	c := h.dial(n)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n }) {
		h.t.Fatalf("not open\n%s", h.dumpEvents())
	}
	return c, snk
}
