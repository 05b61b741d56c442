// SPDX-License-Identifier: MIT

package pathmgr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/reorder"
)

// The simulated world: a CPE with interfaces (each one emulated link pair
// to the concentrator), a concentrator with one wildcard socket and any
// number of addresses, both running the real engine and the real manager
// in virtual time.

const srvPort = 6511

// iface is one CPE interface and the emulated path behind it.
type iface struct {
	name     string
	up       bool
	addrs    []netip.Addr
	upLink   *netsim.Link // CPE → concentrator
	downLink *netsim.Link
	// blackhole drops everything silently (the interface stays up).
	blackhole bool
}

// vsock is a CPE socket.
type vsock struct {
	open   bool
	local  netip.AddrPort // unspecified address: wildcard
	device string
}

type world struct {
	t   testing.TB
	sim *netsim.Sim
	rng *rand.Rand

	ifs     map[string]*iface
	socks   []*vsock
	srvAddr []netip.Addr
	// serverDown drops everything sent to the concentrator (it crashed).
	serverDown bool

	cli, srv       *mpdccp.Endpoint
	cliMgr, srvMgr *Manager
	cliCfg, srvCfg mpdccp.Config
	srvMgrCfg      Config
	wake           [2]mono.Time
	buf, dbuf      []byte
	events         [2][]Event
	delivered      [2]map[uint64]int // inner packets delivered by id
	deliveredAt    [2][]mono.Time
	sendErrors     int
	trace          bool
}

type worldConfig struct {
	seed  int64
	ifs   []string // interface names, each with address 10.0.I.1
	link  netsim.LinkConfig
	links map[string]netsim.LinkConfig
	srv   []netip.Addr // concentrator addresses; default 10.9.0.1
	cli   Config       // client manager config (Role, Paths, ...)
	srvM  Config
	eng   mpdccp.Config // engine config for both sides
	// secure runs both engines in secure mode (Noise keys, sealed
	// packets): a restarted concentrator's Resets are not believed.
	secure bool
}

func ifAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i), 1}) }

func newWorld(t testing.TB, wc worldConfig) *world {
	t.Helper()
	w := &world{t: t, sim: netsim.New(wc.seed), rng: rand.New(rand.NewPCG(uint64(wc.seed), 7)),
		ifs: map[string]*iface{}, buf: make([]byte, 2048), dbuf: make([]byte, 2048),
		wake: [2]mono.Time{mono.Never, mono.Never}}
	w.delivered = [2]map[uint64]int{{}, {}}
	w.srvAddr = wc.srv
	if len(w.srvAddr) == 0 {
		w.srvAddr = []netip.Addr{netip.MustParseAddr("10.9.0.1")}
	}
	if wc.link.Rate == 0 && wc.link.Delay == 0 {
		wc.link = netsim.LinkConfig{Rate: 20e6, Delay: 10 * time.Millisecond, Queue: 128 * 1024}
	}
	for i, name := range wc.ifs {
		lc := wc.link
		if l, ok := wc.links[name]; ok {
			lc = l
		}
		f := &iface{name: name, up: true, addrs: []netip.Addr{ifAddr(i)}}
		f.upLink = w.sim.NewLink(lc, func(p netsim.Packet) { w.toServer(p) })
		f.downLink = w.sim.NewLink(lc, func(p netsim.Packet) { w.toClient(f, p) })
		w.ifs[name] = f
	}
	eng := wc.eng
	eng.Rand = netsim.RandReader(w.rng)
	w.cliCfg, w.srvCfg = eng, eng
	w.cliCfg.Role, w.srvCfg.Role = mpdccp.Client, mpdccp.Server
	if wc.secure {
		w.cliCfg.Security, w.srvCfg.Security = simKeys(t, w.rng)
	}
	var err error
	if w.cli, err = mpdccp.NewEndpoint(w.cliCfg); err != nil {
		t.Fatal(err)
	}
	wc.cli.Role = Client
	if w.cliMgr, err = New(wc.cli, w.cli, w); err != nil {
		t.Fatal(err)
	}
	w.srvMgrCfg = wc.srvM
	w.srvMgrCfg.Role = Server
	w.startServer()
	return w
}

// startServer (re)creates the concentrator: a crash and restart loses
// every connection.
func (w *world) startServer() {
	var err error
	if w.srv, err = mpdccp.NewEndpoint(w.srvCfg); err != nil {
		w.t.Fatal(err)
	}
	if w.srvMgr, err = New(w.srvMgrCfg, w.srv, nil); err != nil {
		w.t.Fatal(err)
	}
	if err := w.srvMgr.Start(w.sim.Now()); err != nil {
		w.t.Fatal(err)
	}
	w.wake[1] = mono.Never
	w.service(1)
}

// start feeds the CPE's interfaces and addresses (as netlink's first dump
// would) and starts its manager.
func (w *world) start() {
	now := w.sim.Now()
	if w.cliMgr.cfg.OSEvents {
		for _, name := range w.ifNames() {
			f := w.ifs[name]
			w.cliMgr.HandleLink(now, LinkEvent{Name: name, Up: f.up})
			for _, a := range f.addrs {
				w.cliMgr.HandleAddr(now, AddrEvent{Link: name, Addr: a, Added: true})
			}
		}
	}
	if err := w.cliMgr.Start(now); err != nil {
		w.t.Fatal(err)
	}
	w.service(0)
}

func (w *world) ifNames() []string {
	var names []string
	for n := range w.ifs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Sockets, for the client manager.
func (w *world) Open(spec SocketSpec) (int, netip.AddrPort, error) {
	a := spec.Local.Addr()
	if a.IsValid() && !a.IsUnspecified() {
		if w.ifOf(a) == nil {
			return -1, netip.AddrPort{}, errors.New("cannot assign requested address")
		}
	} else {
		a = netip.IPv4Unspecified()
	}
	s := &vsock{open: true, device: spec.Device, local: netip.AddrPortFrom(a, uint16(40000+len(w.socks)))}
	w.socks = append(w.socks, s)
	return len(w.socks) - 1, s.local, nil
}

func (w *world) Close(i int) { w.socks[i].open = false }

func (w *world) ifOf(a netip.Addr) *iface {
	for _, f := range w.ifs {
		if slices.Contains(f.addrs, a) {
			return f
		}
	}
	return nil
}

// route picks the interface and source address a CPE socket sends from.
func (w *world) route(s *vsock) (*iface, netip.Addr) {
	if !s.local.Addr().IsUnspecified() {
		return w.ifOf(s.local.Addr()), s.local.Addr()
	}
	f := w.ifs[s.device]
	if f == nil || len(f.addrs) == 0 {
		return nil, netip.Addr{}
	}
	return f, f.addrs[0]
}

type meta struct {
	from, to netip.AddrPort
}

func (w *world) transmit(side int, t mpdccp.Transmit, b []byte) {
	data := append([]byte(nil), b...)
	if side == 0 {
		if t.Local < 0 || t.Local >= len(w.socks) || !w.socks[t.Local].open {
			w.sendErrors++
			return
		}
		s := w.socks[t.Local]
		f, src := w.route(s)
		if f == nil || !f.up {
			w.sendErrors++
			return
		}
		f.upLink.Send(netsim.Packet{Size: len(data) + 28, Data: data, Meta: meta{netip.AddrPortFrom(src, s.local.Port()), t.Remote}})
		return
	}
	if w.serverDown {
		return // a crashed concentrator sends nothing
	}
	// The concentrator answers from the address the datagram came to.
	src := t.Src
	if !src.IsValid() || src.IsUnspecified() {
		src = w.srvAddr[0]
	}
	f := w.ifOf(t.Remote.Addr())
	if f == nil {
		return
	}
	f.downLink.Send(netsim.Packet{Size: len(data) + 28, Data: data, Meta: meta{netip.AddrPortFrom(src, srvPort), t.Remote}})
}

func (w *world) toServer(p netsim.Packet) {
	m := p.Meta.(meta)
	f := w.ifOf(m.from.Addr())
	if w.serverDown || f != nil && f.blackhole || !slices.Contains(w.srvAddr, m.to.Addr()) {
		return
	}
	w.srv.HandleDatagram(w.sim.Now(), 0, m.from, m.to.Addr(), p.Data, 0)
	w.service(1)
}

func (w *world) toClient(f *iface, p netsim.Packet) {
	m := p.Meta.(meta)
	if f.blackhole || !f.up || !slices.Contains(f.addrs, m.to.Addr()) {
		return
	}
	for i, s := range w.socks {
		if !s.open || s.local.Port() != m.to.Port() {
			continue
		}
		if s.local.Addr() == m.to.Addr() || s.local.Addr().IsUnspecified() && s.device == f.name {
			w.cli.HandleDatagram(w.sim.Now(), i, m.from, m.to.Addr(), p.Data, 0)
			w.service(0)
			return
		}
	}
}

func (w *world) ep(side int) (*mpdccp.Endpoint, *Manager) {
	if side == 0 {
		return w.cli, w.cliMgr
	}
	return w.srv, w.srvMgr
}

// service runs one side as the daemon's owner goroutine does.
func (w *world) service(side int) {
	e, m := w.ep(side)
	now := w.sim.Now()
	if e.Deadline() <= now {
		e.HandleTimer(now)
	}
	if m.Deadline() <= now {
		m.HandleTimer(now)
	}
	for range 100 {
		progress := false
		for {
			t, ok := e.PollTransmit(now, w.buf)
			if !ok {
				break
			}
			w.transmit(side, t, w.buf[:t.N])
		}
		for {
			n, _, ok := e.PollDeliver(now, w.dbuf)
			if !ok {
				break
			}
			if n >= innerHdr+8 {
				id := binary.BigEndian.Uint64(w.dbuf[innerHdr:])
				w.delivered[side][id]++
				w.deliveredAt[side] = append(w.deliveredAt[side], now)
			}
		}
		for {
			ev, ok := e.PollEvent()
			if !ok {
				break
			}
			m.HandleEngineEvent(now, ev)
			progress = true
		}
		for {
			ev, ok := m.PollEvent()
			if !ok {
				break
			}
			if w.trace {
				w.t.Logf("%v side %d: %s %s (%d) %v %s", time.Duration(ev.At), side, ev.Kind, ev.Path, ev.PathID, ev.Remote, ev.Reason)
			}
			w.events[side] = append(w.events[side], ev)
		}
		if !progress {
			break
		}
	}
	d := mono.Min(e.Deadline(), m.Deadline())
	if d <= now {
		d = now.Add(time.Microsecond)
	}
	if d < w.wake[side] || w.wake[side] <= now {
		w.wake[side] = d
		if d != mono.Never {
			srv := w.srv
			w.sim.At(d, func() {
				if side == 1 && w.srv != srv {
					return // the server restarted meanwhile
				}
				if w.sim.Now() >= w.wake[side] {
					w.wake[side] = mono.Never
					w.service(side)
				}
			})
		}
	}
}

func (w *world) run(d time.Duration) { w.sim.RunUntil(w.sim.Now().Add(d)) }

// until runs until cond holds (returning the time) or limit passes (0).
func (w *world) until(limit time.Duration, cond func() bool) mono.Time {
	end := w.sim.Now().Add(limit)
	for w.sim.Now() < end {
		if cond() {
			return w.sim.Now()
		}
		next := w.sim.NextEvent()
		if next == mono.Never || next > end {
			w.sim.RunUntil(end)
			break
		}
		w.sim.Step()
	}
	if cond() {
		return w.sim.Now()
	}
	return 0
}

// openPaths counts the open, healthy paths of the client's connection and
// of the concentrator's connection.
func (w *world) openPaths() (cli, srv int) {
	count := func(c *mpdccp.Conn) int {
		n := 0
		for _, in := range c.PathInfos(nil) {
			if in.Open && !in.Failed && !in.Suspect {
				n++
			}
		}
		return n
	}
	if c := w.cliMgr.Conn(); c != nil && c.State() == mpdccp.Open {
		cli = count(c)
	}
	for _, c := range w.srv.Conns() {
		if c.State() == mpdccp.Open {
			srv += count(c)
		}
	}
	return cli, srv
}

func (w *world) allOpen(n int) func() bool {
	return func() bool { c, s := w.openPaths(); return c == n && s == n }
}

func (w *world) eventLog(side int) string {
	var b strings.Builder
	for _, ev := range w.events[side] {
		fmt.Fprintf(&b, "%8.3fs %-14s %-5s %v %s\n", time.Duration(ev.At).Seconds(), ev.Kind, ev.Path, ev.Remote, ev.Reason)
	}
	return b.String()
}

func (w *world) count(side int, k EventKind) int {
	n := 0
	for _, ev := range w.events[side] {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

// traffic sends numbered inner packets from side at pps until stop.
type traffic struct {
	w      *world
	side   int
	next   uint64
	period time.Duration
	stop   mono.Time
	pkt    []byte
	sent   []mono.Time
}

// lost counts the packets sent so far that the other side never delivered.
func (tr *traffic) lost() int {
	lost := 0
	for i := range tr.next {
		if tr.w.delivered[1-tr.side][i] == 0 {
			lost++
		}
	}
	return lost
}

func (w *world) sendTraffic(side, pps int, d time.Duration) *traffic {
	tr := &traffic{w: w, side: side, period: time.Second / time.Duration(pps), stop: w.sim.Now().Add(d), pkt: make([]byte, 200)}
	src, dst := innerCPE, innerConcentrator
	if side == 1 {
		src, dst = dst, src
	}
	tr.pkt[0] = 0x45 // IPv4, as secure mode routes by inner address
	binary.BigEndian.PutUint16(tr.pkt[2:], uint16(len(tr.pkt)))
	copy(tr.pkt[12:16], src.AsSlice())
	copy(tr.pkt[16:20], dst.AsSlice())
	tr.tick()
	return tr
}

func (tr *traffic) conn() *mpdccp.Conn {
	if tr.side == 0 {
		return tr.w.cliMgr.Conn()
	}
	if cs := tr.w.srv.Conns(); len(cs) > 0 {
		return cs[0]
	}
	return nil
}

func (tr *traffic) tick() {
	now := tr.w.sim.Now()
	if now >= tr.stop {
		return
	}
	binary.BigEndian.PutUint64(tr.pkt[innerHdr:], tr.next)
	tr.next++
	tr.sent = append(tr.sent, now)
	if c := tr.conn(); c != nil && c.State() == mpdccp.Open {
		c.Send(now, tr.pkt)
		tr.w.service(tr.side)
	}
	tr.w.sim.After(tr.period, tr.tick)
}

// gaps returns the largest delivery gap at the receiving side within
// [from, to] and the first delivery after at.
func (w *world) gap(rx int, from, to mono.Time) time.Duration {
	var last mono.Time = from
	var g time.Duration
	for _, at := range w.deliveredAt[rx] {
		if at < from || at > to {
			continue
		}
		g = max(g, at.Sub(last))
		last = at
	}
	return max(g, to.Sub(last))
}

func (w *world) firstDeliveryAfter(rx int, t mono.Time) mono.Time {
	for _, at := range w.deliveredAt[rx] {
		if at >= t {
			return at
		}
	}
	return 0
}

// engine configuration with loss repair, as the daemon runs it.
func repairEngine() mpdccp.Config {
	ro := reorder.Config{MaxHold: 100 * time.Millisecond}
	return mpdccp.Config{Retransmit: true, Reorderer: "equalize", Reorder: ro, KeepAlive: time.Second, PathTimeout: 3 * time.Second}
}

func repairSettings() Settings {
	return Settings{Scheduler: "rr", Reorderer: "equalize", Reorder: reorder.Config{MaxHold: 100 * time.Millisecond},
		Retransmit: true, CCID: "bbr", KeepAlive: time.Second, PathTimeout: 3 * time.Second}
}

func twoPaths() []PathSpec {
	remote := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.1"), srvPort)
	return []PathSpec{
		{Name: "dsl", Local: netip.AddrPortFrom(ifAddr(0), 0), Device: "dsl0", Remote: remote, Prio: 3, Weight: 1},
		{Name: "lte", Local: netip.AddrPortFrom(ifAddr(1), 0), Device: "lte0", Remote: remote, Prio: 3, Weight: 1},
	}
}

// Inner traffic: an IPv4 header between the tunnel addresses, then the
// packet's id.
const innerHdr = 20

var (
	innerCPE          = netip.MustParseAddr("10.99.0.2")
	innerConcentrator = netip.MustParseAddr("10.99.0.1")
)

// simKeys makes a key pair per side: the client accepts the concentrator
// for every destination, the concentrator the client for its address.
func simKeys(t testing.TB, rng *rand.Rand) (cli, srv *mpdccp.Security) {
	t.Helper()
	var priv, pub [2]noise.Key
	for i := range priv {
		var err error
		if priv[i], err = noise.GeneratePrivateKey(netsim.RandReader(rng)); err != nil {
			t.Fatal(err)
		}
		if pub[i], err = noise.PublicKey(priv[i]); err != nil {
			t.Fatal(err)
		}
	}
	cli = &mpdccp.Security{PrivateKey: priv[0], Peers: []mpdccp.Peer{{PublicKey: pub[1],
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}}
	srv = &mpdccp.Security{PrivateKey: priv[1], Peers: []mpdccp.Peer{{PublicKey: pub[0],
		AllowedIPs: []netip.Prefix{netip.PrefixFrom(innerCPE, 32)}}}}
	return cli, srv
}
