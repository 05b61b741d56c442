// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/pathmgr"
)

// MonitorEvent is a line of `mptun monitor`.
type MonitorEvent = control.MonitorEvent

// monitorEvent converts a manager event.
func monitorEvent(ev pathmgr.Event) MonitorEvent {
	me := MonitorEvent{Time: time.Now(), Kind: ev.Kind.String(), Path: ev.Path, Reason: ev.Reason}
	if ev.At != 0 {
		me.Time = wallTime(ev.At)
	}
	if ev.Conn != 0 {
		me.Conn = fmt.Sprintf("%08x", ev.Conn)
	}
	if ev.PathID >= 0 {
		id := ev.PathID
		me.PathID = &id
	}
	if ev.Remote.IsValid() {
		me.Remote = ev.Remote.String()
		if ev.Remote.Port() == 0 {
			me.Remote = ev.Remote.Addr().String()
		}
	}
	return me
}

// wallTime maps a monotonic time to the wall clock.
func wallTime(t mono.Time) time.Time {
	return time.Now().Add(t.Sub(mono.Now()))
}

// eventHub hands monitor events to subscribers without ever blocking the
// owner goroutine: a subscriber that does not keep up loses events (and
// is told how many).
type eventHub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	dropped atomic.Uint64
}

type subscriber struct {
	ch   chan MonitorEvent
	lost atomic.Uint64
}

const subscriberQueue = 256

func (h *eventHub) subscribe() *subscriber {
	s := &subscriber{ch: make(chan MonitorEvent, subscriberQueue)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *eventHub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

func (h *eventHub) publish(ev MonitorEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			s.lost.Add(1)
			h.dropped.Add(1)
		}
	}
}

// monitor streams the path manager's events until the client hangs up.
func (d *Daemon) monitor(ctx context.Context, raw json.RawMessage, send func(any) error) error {
	var req control.MonitorRequest
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &req); err != nil {
			return fmt.Errorf("bad params: %w", err)
		}
	}
	s := d.hub.subscribe()
	defer d.hub.unsubscribe(s)
	if req.Status {
		for _, ev := range d.currentState(ctx) {
			if err := send(ev); err != nil {
				return err
			}
		}
	}
	var reported uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-s.ch:
			if lost := s.lost.Load(); lost > reported {
				reported = lost
				if err := send(MonitorEvent{Time: time.Now(), Kind: "events-lost", Reason: fmt.Sprintf("%d events lost: the monitor did not keep up", lost)}); err != nil {
					return err
				}
			}
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}
