// SPDX-License-Identifier: MIT

package pathmgr

import (
	"net/netip"
	"slices"

	"github.com/mptun/mptun/internal/mono"
)

// Operating-system events, as plain values: the daemon's netlink watcher
// (pathmgr/netmon) produces them, tests write them by hand.

// LinkEvent says an interface went up or down (operational state: carrier).
type LinkEvent struct {
	Name string
	Up   bool
}

// AddrEvent says an address was added to or removed from an interface.
type AddrEvent struct {
	Link  string
	Addr  netip.Addr
	Added bool
}

// RouteEvent says a route through an interface was added or removed.
type RouteEvent struct {
	Link  string
	Dst   netip.Prefix
	Added bool
}

// link is what the manager knows about an interface.
type link struct {
	up    bool
	addrs []netip.Addr // in the order they appeared
}

func (m *Manager) linkState(name string) *link {
	l := m.links[name]
	if l == nil {
		l = &link{up: true}
		m.links[name] = l
	}
	return l
}

// linkAddr is the address a path following device name binds: the first
// usable one of the family that appeared on it.
func (m *Manager) linkAddr(name string, v6 bool) netip.Addr {
	l := m.links[name]
	if l == nil {
		return netip.Addr{}
	}
	for _, a := range l.addrs {
		if a.Is6() == v6 && !a.IsLinkLocalUnicast() && !a.IsMulticast() {
			return a
		}
	}
	return netip.Addr{}
}

// linkOf is the interface an address lives on ("" unknown).
func (m *Manager) linkOf(a netip.Addr) string {
	for name, l := range m.links {
		if slices.Contains(l.addrs, a) {
			return name
		}
	}
	return ""
}

// pathsOn lists the paths that use interface name.
func (m *Manager) pathsOn(name string) []*path {
	var out []*path
	for _, p := range m.paths {
		if p.link == name || p.spec.Device == name {
			out = append(out, p)
		}
	}
	return out
}

// HandleLink reacts to an interface going down (its paths are suspected
// at once: their data goes on the other paths without waiting for a
// timeout) or up (its paths are probed or joined at once).
func (m *Manager) HandleLink(now mono.Time, ev LinkEvent) {
	l := m.linkState(ev.Name)
	if l.up == ev.Up {
		return
	}
	l.up = ev.Up
	if !ev.Up {
		m.emit(now, EventLinkDown, 0, -1, netip.AddrPort{}, "%s", ev.Name)
	} else {
		m.emit(now, EventLinkUp, 0, -1, netip.AddrPort{}, "%s", ev.Name)
	}
	if m.cfg.Role != Client || !m.started {
		return // before Start the state is only learnt
	}
	for _, p := range m.pathsOn(ev.Name) {
		p.linkDown = !ev.Up
		if !ev.Up {
			if in, ok := m.info(p.id); ok && in.Open {
				_ = m.conn.SuspectPath(now, p.id, "link "+ev.Name+" down")
			}
			continue
		}
		m.kick(now, p)
	}
	m.clientStep(now)
}

// kick makes a path try again now: a probe if it has a subflow, a join
// (or connection) attempt if not.
func (m *Manager) kick(now mono.Time, p *path) {
	if in, ok := m.info(p.id); ok && !in.Closed {
		if in.Open && (in.Failed || in.Suspect) {
			_ = m.conn.ProbePath(now, p.id)
		}
		return
	}
	p.joinAt = now
	p.joinBack.reset()
	if p.sock < 0 {
		p.sockAt = now
		p.sockBack.reset()
	}
	if m.conn == nil && !m.dial.on {
		m.redialAt = min(m.redialAt, now)
	}
}

// HandleAddr reacts to address changes: a path bound to an address that
// went away drops its subflow and closes its socket; one following a
// device binds the device's new address and joins again.
func (m *Manager) HandleAddr(now mono.Time, ev AddrEvent) {
	l := m.linkState(ev.Link)
	has := slices.Contains(l.addrs, ev.Addr)
	switch {
	case ev.Added && !has:
		l.addrs = append(l.addrs, ev.Addr)
	case !ev.Added && has:
		l.addrs = slices.DeleteFunc(l.addrs, func(a netip.Addr) bool { return a == ev.Addr })
	default:
		return
	}
	kind := EventAddrRemoved
	if ev.Added {
		kind = EventAddrAdded
	}
	m.emit(now, kind, 0, -1, netip.AddrPortFrom(ev.Addr, 0), "%s on %s", ev.Addr, ev.Link)
	if m.cfg.Role != Client || !m.started {
		return // before Start the state is only learnt
	}
	for _, p := range m.paths {
		bound := p.sock >= 0 && p.local.Addr() == ev.Addr
		mine := p.spec.follows() && p.spec.Device == ev.Link || p.spec.Local.Addr() == ev.Addr
		switch {
		case !ev.Added && bound:
			old := p.local
			m.closeSocket(now, p, "address "+ev.Addr.String()+" removed")
			m.ensureSocket(now, p)
			if p.sock >= 0 {
				m.emit(now, EventRebind, m.connID(), p.id, netip.AddrPort{}, "%v → %v", old, p.local)
			}
		case ev.Added && mine && p.sock < 0:
			p.sockAt = now
			p.sockBack.reset()
			m.ensureSocket(now, p)
			if p.sock >= 0 {
				p.link = ev.Link
				m.emit(now, EventRebind, m.connID(), p.id, netip.AddrPort{}, "bound %v", p.local)
				m.kick(now, p)
			}
		}
	}
	m.clientStep(now)
}

// HandleRoute reacts to a route change on an interface: its paths that
// are failed, suspected or without a subflow try again at once.
func (m *Manager) HandleRoute(now mono.Time, ev RouteEvent) {
	if m.cfg.Role != Client || !m.started {
		return // before Start the state is only learnt
	}
	ps := m.pathsOn(ev.Link)
	if len(ps) == 0 {
		return
	}
	verb := "removed"
	if ev.Added {
		verb = "added"
	}
	m.emit(now, EventRouteChange, 0, -1, netip.AddrPort{}, "route %v %s on %s", ev.Dst, verb, ev.Link)
	for _, p := range ps {
		if !p.linkDown {
			m.kick(now, p)
		}
	}
	m.clientStep(now)
}

func (m *Manager) connID() uint32 {
	if m.conn == nil {
		return 0
	}
	return m.conn.ID()
}
