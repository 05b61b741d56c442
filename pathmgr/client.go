// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/wire"
)

// path is one configured client path: its socket, interface and the
// state of its subflow in the current connection. The engine's subflow
// is the truth about the subflow; path only keeps what the engine does
// not know (attempts, backoff, the address it is bound to).
type path struct {
	id   int // engine path id, stable for the path's life
	spec PathSpec
	prio *uint8 // runtime override (mptun set prio)

	sock     int // socket index, -1 none
	local    netip.AddrPort
	sockAt   mono.Time // next socket attempt (Never: wait for an event)
	sockBack backoff

	link     string // interface the path uses ("" unknown)
	linkDown bool

	join     attempt
	joinAt   mono.Time
	joinBack backoff
	fails    int // attempts in a row that failed
	remote   int // index into the candidate remotes: 0 the configured one

	failedSince mono.Time // the subflow was declared failed (0: not)
	lastRemote  netip.AddrPort
	oow         uint64 // the subflow's out-of-window count when the outage began
}

func newPath(id int, spec PathSpec, cfg *Config) *path {
	return &path{id: id, spec: spec, sock: -1, link: spec.Device, sockAt: 0, joinAt: 0,
		sockBack: backoff{min: cfg.BackoffMin, max: cfg.BackoffMax},
		joinBack: backoff{min: cfg.BackoffMin, max: cfg.BackoffMax}}
}

func (p *path) deadline() mono.Time {
	d := p.join.deadline()
	if p.sock < 0 {
		d = mono.Min(d, p.sockAt)
	}
	return d
}

// configuredPrio is the path's MP_PRIO before the mode adjusts it.
func (p *path) configuredPrio() uint8 {
	if p.prio != nil {
		return *p.prio
	}
	return p.spec.Prio
}

// remoteAddr is where the path's next subflow goes: its configured remote
// or, after failures, an address the peer advertised.
func (m *Manager) remoteAddr(p *path) netip.AddrPort {
	cands := m.remotes(p)
	return cands[p.remote%len(cands)]
}

// remotes lists the path's candidate remotes: the configured one, then
// the peer's advertised addresses of the same family in id order.
func (m *Manager) remotes(p *path) []netip.AddrPort {
	out := []netip.AddrPort{p.spec.Remote}
	for id := 0; id < 256; id++ {
		a, ok := m.peerAddr[uint8(id)]
		if !ok || a.Addr().Unmap().Is4() == p.spec.v6() || a == p.spec.Remote {
			continue
		}
		if a.Port() == 0 {
			a = netip.AddrPortFrom(a.Addr(), p.spec.Remote.Port())
		}
		out = append(out, a)
	}
	return out
}

func (m *Manager) pathConfig(p *path) mpdccp.PathConfig {
	local := p.local
	if a := p.spec.Local.Addr(); a.IsValid() && !a.IsUnspecified() {
		local = netip.AddrPortFrom(a, p.local.Port())
	}
	p.lastRemote = m.remoteAddr(p)
	return mpdccp.PathConfig{ID: p.id, Local: p.sock, LocalAddr: local, Remote: p.lastRemote,
		Prio: m.desiredPrio(p), Weight: p.spec.Weight, CCID: p.spec.CCID}
}

// ensureSocket opens the path's socket if it has none and can have one.
func (m *Manager) ensureSocket(now mono.Time, p *path) {
	if p.sock >= 0 || now < p.sockAt {
		return
	}
	spec := SocketSpec{Path: p.spec.Name, Network: "udp4", Local: p.spec.Local, Device: p.spec.Device, Fwmark: p.spec.Fwmark}
	if p.spec.v6() {
		spec.Network = "udp6"
	}
	if p.spec.follows() && m.cfg.OSEvents {
		a := m.linkAddr(p.spec.Device, p.spec.v6())
		if !a.IsValid() {
			p.sockAt = mono.Never // an address event brings it
			return
		}
		spec.Local = netip.AddrPortFrom(a, p.spec.Local.Port())
	}
	idx, local, err := m.socks.Open(spec)
	if err != nil {
		d := p.sockBack.next()
		p.sockAt = now.Add(d)
		m.emit(now, EventSocketError, 0, p.id, netip.AddrPort{}, "%v (again in %v)", err, d)
		return
	}
	p.sock, p.local = idx, local
	p.sockBack.reset()
	p.joinAt, p.fails = now, 0
	p.joinBack.reset()
	if m.cfg.OSEvents && p.link == "" {
		p.link = m.linkOf(local.Addr())
	}
}

// closeSocket drops the path's subflow, tells the peer its address is
// gone and closes the socket.
func (m *Manager) closeSocket(now mono.Time, p *path, reason string) {
	if p.sock < 0 {
		return
	}
	m.dropSubflow(now, p, true)
	m.socks.Close(p.sock)
	p.sock, p.local = -1, netip.AddrPort{}
	p.sockAt = now
	if m.dial.on && m.dial.path == p.id {
		m.abortDial(now, reason)
	}
}

// dropSubflow ends the path's subflow in the current connection; withdraw
// also tells the peer (MP_REMOVEADDR) so it drops its side at once.
func (m *Manager) dropSubflow(now mono.Time, p *path, withdraw bool) {
	p.join.on = false
	p.failedSince = 0
	c := m.conn
	if c == nil {
		return
	}
	info, ok := m.info(p.id)
	if !ok {
		return
	}
	if withdraw && c.State() == mpdccp.Open && info.Join {
		_ = c.WithdrawAddr(now, info.AddrID)
	}
	if m.dial.on && m.dial.path == p.id {
		return // the attempt's own subflow: abortDial ends it
	}
	_ = c.DropPath(now, p.id)
}

// info finds path id in the current connection.
func (m *Manager) info(id int) (mpdccp.PathInfo, bool) {
	if m.conn == nil {
		return mpdccp.PathInfo{}, false
	}
	m.infos = m.conn.PathInfos(m.infos[:0])
	for _, in := range m.infos {
		if in.ID == id {
			return in, true
		}
	}
	return mpdccp.PathInfo{}, false
}

// clientStep does whatever is due: sockets, the connection attempt,
// joins, and replacing long-failed subflows.
func (m *Manager) clientStep(now mono.Time) {
	if !m.started || m.stopped {
		return // OS events fed before Start only teach the links
	}
	for _, p := range m.paths {
		m.ensureSocket(now, p)
	}
	if m.conn == nil {
		if !m.dial.on && now >= m.redialAt {
			m.startDial(now)
		}
		return
	}
	if m.dial.on {
		if now >= m.dial.until {
			m.abortDial(now, "no answer in time")
		}
		return
	}
	if m.conn.State() != mpdccp.Open {
		return
	}
	m.infos = m.conn.PathInfos(m.infos[:0])
	live := false
	for _, in := range m.infos {
		live = live || in.Open
	}
	if !live {
		// Joins need a connection the peer knows; with no subflow left
		// open there may be none (the peer restarted): start afresh.
		m.connLost(now, "no subflow left open")
		return
	}
	m.checkPeer(now)
	for _, p := range m.paths {
		m.stepPath(now, p)
	}
}

// pathDeadline is when a path of the current connection needs looking
// at: a join attempt's end or its next join.
func (m *Manager) joinDeadline(p *path) mono.Time {
	if m.conn == nil || m.dial.on || p.join.on || p.sock < 0 || p.linkDown {
		return mono.Never
	}
	if _, ok := m.infoIn(p.id); ok {
		return mono.Never
	}
	return p.joinAt
}

// connLost gives up the current connection at once and redials.
func (m *Manager) connLost(now mono.Time, reason string) {
	c := m.conn
	c.Abort(now)
	m.connClosed(now, mpdccp.Event{Kind: mpdccp.EventConnClosed, Conn: c, Path: -1, Reason: reason})
}

// stepPath joins, times out or replaces the path's subflow.
func (m *Manager) stepPath(now mono.Time, p *path) {
	var info mpdccp.PathInfo
	have := false
	for _, in := range m.infos {
		if in.ID == p.id && !in.Closed {
			info, have = in, true
		}
	}
	switch {
	case p.join.on && have && info.Open:
		p.join.on = false // PathUp is on its way
	case p.join.on && now >= p.join.until:
		m.joinFailed(now, p, "no answer in time")
		_ = m.conn.DropPath(now, p.id)
	case have && info.Open && (info.Failed || info.Suspect) && !p.linkDown:
		if p.failedSince == 0 {
			// Out-of-window packets count from here: one the path saw
			// while healthy says nothing about this outage.
			p.failedSince, p.oow = now, info.OutOfWindow
		}
		alt := len(m.remotes(p)) > 1
		after := m.cfg.RejoinAfter
		if alt {
			after = min(after, 2*time.Second) // the peer has other addresses: try them soon
		}
		switch {
		case info.OutOfWindow > p.oow:
			// The peer is heard again but the two ends lost sequence
			// sync during the outage: only a new join brings it back.
			m.rejoin(now, p, info, "peer heard out of window")
		case now.Sub(p.failedSince) >= after:
			if alt {
				p.remote++
			}
			m.rejoin(now, p, info, fmt.Sprintf("unanswered for %v", now.Sub(p.failedSince).Round(100*time.Millisecond)))
		}
	case have:
		if !info.Failed && !info.Suspect {
			p.failedSince = 0
		}
	case p.sock >= 0 && !p.linkDown && now >= p.joinAt && !p.join.on:
		m.startJoin(now, p)
	}
}

// rejoin replaces the path's subflow by a new join.
func (m *Manager) rejoin(now mono.Time, p *path, info mpdccp.PathInfo, why string) {
	m.emit(now, EventJoin, m.conn.ID(), p.id, info.Remote, "%s: joining again", why)
	m.dropSubflow(now, p, true)
	p.oow = 0
	p.joinAt = now
	m.startJoin(now, p)
}

func (m *Manager) startJoin(now mono.Time, p *path) {
	pc := m.pathConfig(p)
	if err := m.conn.JoinPath(now, pc); err != nil {
		p.joinAt = now.Add(p.joinBack.next())
		m.emit(now, EventJoinFailed, m.conn.ID(), p.id, pc.Remote, "%v", err)
		return
	}
	p.join = attempt{on: true, until: now.Add(m.cfg.AttemptTimeout), path: p.id}
	m.emit(now, EventJoin, m.conn.ID(), p.id, pc.Remote, "from %v", pc.LocalAddr)
}

// joinFailed schedules the path's next join with backoff.
func (m *Manager) joinFailed(now mono.Time, p *path, reason string) {
	p.join.on = false
	m.attemptFailed(p)
	d := p.joinBack.next()
	p.joinAt = now.Add(d)
	var conn uint32
	if m.conn != nil {
		conn = m.conn.ID()
	}
	m.emit(now, EventJoinFailed, conn, p.id, p.lastRemote, "%s (again in %v)", reason, d)
}

// attemptFailed counts a failed attempt; when the peer advertised other
// addresses the next attempt goes to the next candidate remote.
func (m *Manager) attemptFailed(p *path) {
	p.fails++
	if len(m.remotes(p)) > 1 {
		p.remote++
		p.fails = 0
	}
}

// startDial opens a connection over the next path that can carry one.
func (m *Manager) startDial(now mono.Time) {
	c, p, remote := m.dialOnce(now)
	if c == nil {
		m.redialAt = mono.Never // no path can dial: a socket or link event brings one
		return
	}
	m.conn = c
	m.dial = attempt{on: true, until: now.Add(m.cfg.AttemptTimeout), path: p.id}
	m.emit(now, EventDial, c.ID(), p.id, remote, "from %v", m.pathConfig(p).LocalAddr)
}

// dialOnce starts a connection over the next path that can carry one
// (nil: none can).
func (m *Manager) dialOnce(now mono.Time) (*mpdccp.Conn, *path, netip.AddrPort) {
	n := len(m.paths)
	for k := 0; k < n; k++ {
		p := m.paths[(m.dialNext+k)%n]
		if p.sock < 0 || p.linkDown || m.desiredPrio(p) == 0 && m.anyOtherDialable(p) {
			continue
		}
		m.dialNext = (m.dialNext + k + 1) % n
		pc := m.pathConfig(p)
		c, err := m.ep.Dial(now, []mpdccp.PathConfig{pc})
		if err != nil {
			m.emit(now, EventSocketError, 0, p.id, pc.Remote, "dial: %v", err)
			continue
		}
		return c, p, pc.Remote
	}
	return nil, nil, netip.AddrPort{}
}

func (m *Manager) anyOtherDialable(p *path) bool {
	for _, q := range m.paths {
		if q != p && q.sock >= 0 && !q.linkDown && m.desiredPrio(q) > 0 {
			return true
		}
	}
	return false
}

// abortDial gives up the connection attempt and schedules the next one on
// the next path.
func (m *Manager) abortDial(now mono.Time, reason string) {
	c := m.conn
	p := m.pathByID(m.dial.path)
	m.dial.on = false
	m.conn = nil
	if c != nil {
		c.Abort(now)
	}
	var remote netip.AddrPort
	if p != nil {
		remote = p.lastRemote
		m.attemptFailed(p)
	}
	d := m.backoff.next()
	m.redialAt = now.Add(d)
	var id uint32
	if c != nil {
		id = c.ID()
	}
	m.emit(now, EventConnClosed, id, m.dial.path, remote, "connection attempt: %s (again in %v)", reason, d)
}

// clientEvent follows the engine's events for the current connection.
func (m *Manager) clientEvent(now mono.Time, ev mpdccp.Event) {
	var connID uint32
	if ev.Conn != nil {
		connID = ev.Conn.ID()
	}
	if m.trialEvent(now, ev) {
		return
	}
	current := ev.Conn != nil && ev.Conn == m.conn
	p := m.pathByID(ev.Path)
	switch ev.Kind {
	case mpdccp.EventConnOpen:
		if !current {
			return
		}
		if m.stopped {
			return
		}
		m.dial.on = false
		m.openedAt = now
		if p != nil {
			p.fails = 0
			p.joinBack.reset()
		}
		m.emit(now, EventConnOpen, connID, ev.Path, ev.Remote, "%s", "")
		m.clientStep(now)
		return
	case mpdccp.EventConnClosed:
		if !current {
			return
		}
		m.connClosed(now, ev)
		return
	}
	if !current {
		return
	}
	m.pathEvent(now, p, connID, ev)
}

// pathEvent handles a path event of the current connection.
func (m *Manager) pathEvent(now mono.Time, p *path, connID uint32, ev mpdccp.Event) {
	switch ev.Kind {
	case mpdccp.EventPathUp:
		if p != nil {
			p.join.on, p.fails, p.failedSince = false, 0, 0
			p.joinBack.reset()
			if prio := m.desiredPrio(p); prio != mpdccp.DefaultPrio {
				// MP_JOIN carries no priority: tell the peer now.
				_ = m.conn.SetPrio(now, p.id, prio)
			}
		}
		m.emit(now, EventPathUp, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	case mpdccp.EventPathDown:
		if p != nil && p.failedSince == 0 {
			p.failedSince = now
		}
		m.emit(now, EventPathDown, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	case mpdccp.EventPathSuspect:
		m.emit(now, EventPathSuspect, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	case mpdccp.EventPathRecover:
		m.emit(now, EventPathRecover, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	case mpdccp.EventPathClosed:
		m.conn.ForgetClosedPaths()
		if p != nil {
			p.join.on = false
			p.joinAt = now.Add(p.joinBack.next())
		}
		m.emit(now, EventPathClosed, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	case mpdccp.EventJoinFailed:
		if ev.Reset == wire.ResetNoConnection {
			m.connLost(now, "the peer does not know the connection ("+ev.Reason+")")
			return
		}
		m.conn.ForgetClosedPaths()
		if p != nil && p.join.on {
			m.joinFailed(now, p, ev.Reason)
		} else {
			m.emit(now, EventJoinFailed, connID, ev.Path, ev.Remote, "%s", ev.Reason)
		}
	case mpdccp.EventPeerAddr:
		m.peerAddr[uint8(ev.Path)] = ev.Remote
		m.emit(now, EventPeerAddr, connID, -1, ev.Remote, "address id %d", ev.Path)
	case mpdccp.EventPeerRemoveAddr:
		m.peerRemoveAddr(now, connID, uint8(ev.Path))
	case mpdccp.EventPathRebind:
		m.emit(now, EventPeerRebind, connID, ev.Path, ev.Remote, "%s", ev.Reason)
	}
}

// peerRemoveAddr forgets an advertised address; paths using it go back
// to their configured remote.
func (m *Manager) peerRemoveAddr(now mono.Time, connID uint32, id uint8) {
	a, ok := m.peerAddr[id]
	delete(m.peerAddr, id)
	m.emit(now, EventPeerRemoveAddr, connID, -1, a, "address id %d", id)
	if !ok {
		return
	}
	for _, p := range m.paths {
		if p.lastRemote == a {
			p.remote = 0
			if in, have := m.info(p.id); have && !in.Closed && in.Remote == a {
				m.dropSubflow(now, p, false)
				p.joinAt = now
			}
		}
	}
}

// connClosed forgets the connection and schedules the next one.
func (m *Manager) connClosed(now mono.Time, ev mpdccp.Event) {
	c := m.conn
	m.conn = nil
	wasDial := m.dial.on
	m.dial.on = false
	for _, p := range m.paths {
		p.join.on, p.failedSince = false, 0
	}
	stable := m.openedAt != 0 && now.Sub(m.openedAt) >= 5*time.Second && !wasDial
	m.openedAt = 0
	if !wasDial && !m.stopped && m.adoptTrial() {
		m.emit(now, EventConnClosed, c.ID(), -1, netip.AddrPort{}, "%s (the fresh connection %08x is opening)", ev.Reason, m.conn.ID())
		return
	}
	if stable {
		m.backoff.reset()
	}
	if wasDial {
		if p := m.pathByID(ev.Path); p != nil {
			m.attemptFailed(p)
		}
	}
	if m.stopped {
		m.redialAt = mono.Never
		m.emit(now, EventConnClosed, c.ID(), -1, netip.AddrPort{}, "%s", ev.Reason)
		return
	}
	d := m.backoff.next()
	m.redialAt = now.Add(d)
	m.emit(now, EventConnClosed, c.ID(), -1, netip.AddrPort{}, "%s (reconnecting in %v)", ev.Reason, d)
}

func (m *Manager) pathByID(id int) *path {
	for _, p := range m.paths {
		if p.id == id {
			return p
		}
	}
	return nil
}
