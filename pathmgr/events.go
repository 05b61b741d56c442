// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"

	"github.com/mptun/mptun/internal/mono"
)

// EventKind names what happened.
type EventKind uint8

const (
	EventConnOpen EventKind = iota + 1
	EventConnClosed
	EventDial     // a connection attempt started
	EventPathUp   // a subflow opened, or was heard from again
	EventPathDown // nothing heard for the path timeout
	EventPathSuspect
	EventPathRecover
	EventPathClosed
	EventJoin // a join attempt started
	EventJoinFailed
	EventRebind     // the path's socket was bound again (its address changed)
	EventPeerRebind // the peer's address changed (NAT rebinding)
	EventLinkDown
	EventLinkUp
	EventAddrAdded
	EventAddrRemoved
	EventRouteChange
	EventPeerAddr // the peer advertised an address
	EventPeerRemoveAddr
	EventModeSwitch // the active path of active-backup or switch mode changed
	EventPrio       // a path's MP_PRIO changed
	EventSettings   // runtime settings changed
	EventSocketError
)

var eventNames = [...]string{"", "conn-open", "conn-closed", "dial", "path-up", "path-down", "path-suspect",
	"path-recover", "path-closed", "join", "join-failed", "rebind", "peer-rebind", "link-down", "link-up",
	"addr-added", "addr-removed", "route-change", "peer-addaddr", "peer-removeaddr", "mode-switch", "prio",
	"settings", "socket-error"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// MarshalText makes the kind a string in JSON.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Event is one thing the manager or the engine did, for the log and
// `mptun monitor`.
type Event struct {
	At     mono.Time
	Kind   EventKind
	Conn   uint32 // local connection id (0: none)
	PathID int    // -1: none
	Path   string // the path's name on a client, "" if unknown
	Remote netip.AddrPort
	Reason string
}

const maxEvents = 1024

// eventQueue is a bounded FIFO; when full the oldest event is dropped.
type eventQueue struct {
	buf     []Event
	head, n int
	lost    uint64
}

func (q *eventQueue) push(ev Event) {
	if q.buf == nil {
		q.buf = make([]Event, maxEvents)
	}
	if q.n == len(q.buf) {
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		q.lost++
	}
	q.buf[(q.head+q.n)%len(q.buf)] = ev
	q.n++
}

func (q *eventQueue) pop() (Event, bool) {
	if q.n == 0 {
		return Event{}, false
	}
	ev := q.buf[q.head]
	q.buf[q.head] = Event{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return ev, true
}

// PollEvent returns the next event.
func (m *Manager) PollEvent() (Event, bool) { return m.events.pop() }

// EventsLost counts events dropped because nobody polled them in time.
func (m *Manager) EventsLost() uint64 { return m.events.lost }

func (m *Manager) emit(now mono.Time, kind EventKind, conn uint32, pathID int, remote netip.AddrPort, format string, args ...any) {
	ev := Event{At: now, Kind: kind, Conn: conn, PathID: pathID, Remote: remote, Path: m.PathName(pathID)}
	if len(args) > 0 {
		ev.Reason = fmt.Sprintf(format, args...)
	} else {
		ev.Reason = format
	}
	if m.cfg.Role == Server {
		ev.Path = ""
	}
	m.events.push(ev)
}
