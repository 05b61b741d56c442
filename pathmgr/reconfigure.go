// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// Reconfigure replaces a client's paths (a config reload): new paths are
// opened and joined, removed ones dropped (the peer is told with
// MP_REMOVEADDR) and their sockets closed, a path whose address, device,
// mark, remote, weight or controller changed is bound and joined again,
// and a changed priority is sent with MP_PRIO. Paths keep their ids.
func (m *Manager) Reconfigure(now mono.Time, specs []PathSpec) error {
	if m.cfg.Role != Client {
		if len(specs) > 0 {
			return fmt.Errorf("pathmgr: a server has no paths")
		}
		return nil
	}
	next := m.cfg
	next.Paths = specs
	if err := next.validate(); err != nil {
		return fmt.Errorf("pathmgr: %w", err)
	}
	byName := map[string]*path{}
	for _, p := range m.paths {
		byName[p.spec.Name] = p
	}
	keep := map[string]bool{}
	used := map[int]bool{} // ids of the paths that stay
	for _, s := range specs {
		keep[s.Name] = true
		if p := byName[s.Name]; p != nil {
			used[p.id] = true
		}
	}
	var out []*path
	var changed []string
	for _, s := range specs {
		p := byName[s.Name]
		switch {
		case p == nil:
			id := 0
			for used[id] {
				id++
			}
			used[id] = true
			p = newPath(id, s, &m.cfg)
			changed = append(changed, "+"+s.Name)
		case p.spec == s:
		case samePath(p.spec, s):
			p.spec.Prio = s.Prio
			changed = append(changed, s.Name+" prio")
		default:
			m.closeSocket(now, p, "path reconfigured")
			p.spec, p.remote, p.fails = s, 0, 0
			p.link = s.Device
			changed = append(changed, s.Name)
		}
		out = append(out, p)
	}
	for _, p := range m.paths {
		if !keep[p.spec.Name] {
			m.closeSocket(now, p, "path removed")
			changed = append(changed, "-"+p.spec.Name)
		}
	}
	m.paths = out
	m.cfg.Paths = specs
	if len(changed) > 0 {
		m.emit(now, EventSettings, m.connID(), -1, netip.AddrPort{}, "paths: %s", strings.Join(changed, ", "))
	}
	for _, p := range m.paths {
		m.ensureSocket(now, p)
	}
	if m.conn == nil && !m.dial.on {
		m.redialAt = min(m.redialAt, now)
	}
	m.updatePrios(now)
	m.clientStep(now)
	return nil
}

// samePath reports whether a and b differ in nothing but priority.
func samePath(a, b PathSpec) bool {
	a.Prio = b.Prio
	return a == b
}

// SetAdvertise changes the addresses a server advertises to connections
// opened from now on.
func (m *Manager) SetAdvertise(addrs []netip.AddrPort) { m.cfg.Advertise = addrs }

// SetBackoffMax changes the longest wait between connection and join
// attempts.
func (m *Manager) SetBackoffMax(d time.Duration) error {
	if d < m.cfg.BackoffMin {
		return fmt.Errorf("pathmgr: backoff max %v below min %v", d, m.cfg.BackoffMin)
	}
	m.cfg.BackoffMax = d
	m.backoff.max, m.trial.back.max = d, d
	for _, p := range m.paths {
		p.joinBack.max, p.sockBack.max = d, d
	}
	return nil
}

// PathState is a client path as the manager sees it, for status.
type PathState struct {
	ID     int
	Name   string
	Local  netip.AddrPort // bound address, invalid without a socket
	Link   string
	LinkUp bool
	Remote netip.AddrPort // the remote of the path's last attempt
	Prio   uint8          // what the mode wants
	Active bool           // the active path of active-backup or switch mode
}

// Paths lists the client's paths.
func (m *Manager) Paths() []PathState {
	var out []PathState
	for _, p := range m.paths {
		out = append(out, PathState{ID: p.id, Name: p.spec.Name, Local: p.local, Link: p.link, LinkUp: !p.linkDown,
			Remote: p.lastRemote, Prio: m.desiredPrio(p), Active: m.set.Mode != ModeAggregate && m.mode.hasAct && m.mode.active == p.id})
	}
	return out
}
