// SPDX-License-Identifier: MIT

package pathmgr

import (
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
)

// A server's manager advertises the concentrator's other addresses to
// each new connection, drops the subflows of an address a CPE withdrew,
// forgets closed subflows and closes ones that stayed failed for
// StaleAfter (the CPE joins again when the path comes back).

var engineKinds = map[mpdccp.EventKind]EventKind{
	mpdccp.EventConnOpen: EventConnOpen, mpdccp.EventConnClosed: EventConnClosed,
	mpdccp.EventPathUp: EventPathUp, mpdccp.EventPathDown: EventPathDown, mpdccp.EventPathClosed: EventPathClosed,
	mpdccp.EventJoinFailed: EventJoinFailed, mpdccp.EventPeerAddr: EventPeerAddr,
	mpdccp.EventPeerRemoveAddr: EventPeerRemoveAddr, mpdccp.EventPathRebind: EventPeerRebind,
	mpdccp.EventPathSuspect: EventPathSuspect, mpdccp.EventPathRecover: EventPathRecover,
}

func (m *Manager) serverEvent(now mono.Time, ev mpdccp.Event) {
	c := ev.Conn
	var id uint32
	if c != nil {
		id = c.ID()
	}
	kind := engineKinds[ev.Kind]
	switch ev.Kind {
	case mpdccp.EventConnOpen:
		for i, a := range m.cfg.Advertise {
			if err := c.AdvertiseAddr(now, uint8(i+1), a); err != nil {
				m.emit(now, EventSocketError, id, -1, a, "advertise: %v", err)
			}
		}
	case mpdccp.EventPathClosed, mpdccp.EventJoinFailed:
		c.ForgetClosedPaths()
	case mpdccp.EventPeerRemoveAddr:
		m.infos = c.PathInfos(m.infos[:0])
		for _, in := range m.infos {
			if in.PeerAddrID == uint8(ev.Path) && !in.Closed {
				_ = c.DropPath(now, in.ID)
			}
		}
		m.emit(now, kind, id, -1, ev.Remote, "address id %d withdrawn", ev.Path)
		return
	case mpdccp.EventPeerAddr:
		m.emit(now, kind, id, -1, ev.Remote, "address id %d", ev.Path)
		return
	}
	if kind != 0 {
		m.emit(now, kind, id, ev.Path, ev.Remote, "%s", ev.Reason)
	}
}

// serverTidy closes subflows failed for StaleAfter and forgets closed ones.
func (m *Manager) serverTidy(now mono.Time) {
	for _, c := range m.ep.Conns() {
		m.infos = c.PathInfos(m.infos[:0])
		for _, in := range m.infos {
			if in.Open && in.Failed && now.Sub(in.LastHeard) >= m.cfg.StaleAfter {
				_ = c.DropPath(now, in.ID)
				m.emit(now, EventPathClosed, c.ID(), in.ID, in.Remote, "failed for %v", now.Sub(in.LastHeard))
			}
		}
	}
}
