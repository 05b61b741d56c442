// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
)

// A concentrator that restarted knows nothing of the connection. In plain
// mode it says so (a Reset "no connection"), and the connection is given
// up at once; in secure mode that Reset is not authenticated and the
// engine drops it, as it must: anyone could send one. So while every path
// of the connection is failed (nothing heard for the path timeout), the
// client also tries a fresh connection beside it. If the old connection
// answers again first the trial is abandoned; if the trial opens, the peer
// has accepted a new connection (and, in secure mode, dropped the old one
// for it), so it replaces the old one. A peer that is only unreachable
// sees a few handshake attempts, with the connection backoff between them.

// trialState is the fresh connection tried beside a silent one.
type trialState struct {
	conn   *mpdccp.Conn
	path   int
	remote netip.AddrPort
	until  mono.Time // the attempt's end
	nextAt mono.Time // the next attempt; 0: not silent (none due)
	since  mono.Time // every path failed since
	back   backoff
}

// deadline is when the trial needs looking at.
func (t *trialState) deadline() mono.Time {
	switch {
	case t.conn != nil:
		return t.until
	case t.nextAt != 0:
		return t.nextAt
	}
	return mono.Never
}

// silent reports whether the connection has open subflows and every one
// of them failed (m.infos is current).
func (m *Manager) silent() bool {
	n := 0
	for _, in := range m.infos {
		if !in.Open || in.Closed {
			continue
		}
		if !in.Failed {
			return false
		}
		n++
	}
	return n > 0
}

// checkPeer starts, times out or abandons the trial connection.
func (m *Manager) checkPeer(now mono.Time) {
	t := &m.trial
	if !m.silent() {
		if t.conn != nil {
			m.abortTrial(now, "the connection answers again")
		}
		t.nextAt, t.since = 0, 0
		t.back.reset()
		return
	}
	if t.since == 0 {
		t.since, t.nextAt = now, now
	}
	switch {
	case t.conn != nil && now >= t.until:
		m.abortTrial(now, "no answer in time")
	case t.conn == nil && now >= t.nextAt:
		m.startTrial(now)
	}
}

// startTrial dials the fresh connection over the next path that can.
func (m *Manager) startTrial(now mono.Time) {
	t := &m.trial
	c, p, remote := m.dialOnce(now)
	if c == nil {
		t.nextAt = now.Add(t.back.next())
		return
	}
	t.conn, t.path, t.remote, t.until = c, p.id, remote, now.Add(m.cfg.AttemptTimeout)
	m.emit(now, EventDial, c.ID(), p.id, remote, "every path silent for %v: trying a fresh connection beside %08x (the peer may have lost it)",
		now.Sub(t.since).Round(100*time.Millisecond), m.conn.ID())
}

// abortTrial gives the trial up; the next one follows the backoff while
// the connection stays silent.
func (m *Manager) abortTrial(now mono.Time, reason string) {
	t := &m.trial
	c := t.conn
	t.conn = nil
	c.Abort(now)
	d := t.back.next()
	if t.nextAt != 0 {
		t.nextAt = now.Add(d)
	}
	m.emit(now, EventConnClosed, c.ID(), t.path, t.remote, "fresh connection: %s", reason)
}

// trialEvent handles an engine event of the trial connection; it reports
// whether the event was the trial's.
func (m *Manager) trialEvent(now mono.Time, ev mpdccp.Event) bool {
	t := &m.trial
	if t.conn == nil {
		return false
	}
	if t.conn.State() == mpdccp.Open {
		// Whatever the event, the trial opened: from here the old
		// connection's events are not the current one's.
		m.promoteTrial(now)
		return false
	}
	if ev.Conn != t.conn {
		return false
	}
	if ev.Kind == mpdccp.EventConnClosed {
		t.conn = nil
		t.nextAt = now.Add(t.back.next())
		m.emit(now, EventConnClosed, ev.Conn.ID(), t.path, ev.Remote, "fresh connection: %s", ev.Reason)
	}
	return true
}

// promoteTrial makes the opened trial the connection: the peer took it,
// so the old one is gone there (or will be) and is given up here.
func (m *Manager) promoteTrial(now mono.Time) {
	t := &m.trial
	old, c, path := m.conn, t.conn, t.path
	*t = trialState{back: t.back}
	t.back.reset()
	old.Abort(now) // the engine may have done so already (secure mode)
	for _, p := range m.paths {
		p.join.on, p.failedSince, p.oow = false, 0, 0
		p.joinAt = now
	}
	m.conn = c
	m.dial = attempt{on: true, until: now.Add(m.cfg.AttemptTimeout), path: path} // its ConnOpen completes it
	m.emit(now, EventConnClosed, old.ID(), -1, netip.AddrPort{}, "%s",
		fmt.Sprintf("replaced by %08x: the peer took a fresh connection while every path was silent", c.ID()))
}

// adoptTrial makes a trial still opening the connection attempt when the
// old connection closes.
func (m *Manager) adoptTrial() bool {
	t := &m.trial
	if t.conn == nil {
		return false
	}
	m.conn, m.dial = t.conn, attempt{on: true, until: t.until, path: t.path}
	*t = trialState{back: t.back}
	return true
}
