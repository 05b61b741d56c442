// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/pathmgr"
	"github.com/mptun/mptun/pathmgr/netmon"
	"github.com/mptun/mptun/reorder"
)

// The daemon's side of path management: it builds the path manager from
// the config, opens the sockets it asks for on the data path, drives it
// from the data path's owner goroutine (datapath.Hook) and from netlink,
// and logs and publishes what it reports.

// settingsOf is the path manager's view of the config's runtime settings.
func settingsOf(cfg *config.Config) pathmgr.Settings {
	c := cfg.Connection
	return pathmgr.Settings{
		Scheduler: c.Scheduler,
		Reorderer: c.Reorderer,
		Reorder: reorder.Config{MaxHold: c.ReorderMaxHold, BufferLimit: c.ReorderBuffer,
			DropLate: c.DropLate},
		Retransmit:  c.Retransmit,
		CCID:        c.CCID,
		KeepAlive:   c.Keepalive,
		PathTimeout: c.PathTimeout,
		Mode:        pathmgr.Mode(c.Mode),
		Switch: pathmgr.SwitchConfig{RTTHigh: c.Switch.RTTHigh, RTTLow: c.Switch.RTTLow,
			LossHigh: c.Switch.LossHigh, LossLow: c.Switch.LossLow, Hold: c.Switch.Hold},
	}
}

// pathSpecs are the config's client paths.
func pathSpecs(cfg *config.Config) []pathmgr.PathSpec {
	var out []pathmgr.PathSpec
	for _, p := range cfg.Paths {
		out = append(out, pathmgr.PathSpec{Name: p.Name, Local: p.Local, Device: p.Device, Fwmark: p.Fwmark,
			Remote: p.Remote, Prio: p.Prio, Weight: p.Weight, CCID: p.CCID})
	}
	return out
}

func managerConfig(cfg *config.Config, osEvents bool) pathmgr.Config {
	mc := pathmgr.Config{Settings: settingsOf(cfg), Advertise: cfg.Connection.Advertise, OSEvents: osEvents,
		BackoffMax: cfg.Connection.ReconnectMax}
	if cfg.Connection.Role == config.RoleServer {
		mc.Role = pathmgr.Server
	} else {
		mc.Role = pathmgr.Client
		mc.Paths = pathSpecs(cfg)
	}
	return mc
}

// pathSockets opens the sockets the path manager asks for and adds them
// to the data path (called in the owner goroutine).
type pathSockets struct {
	dp  *datapath.Datapath
	off netio.SocketConfig
}

func (s *pathSockets) Open(spec pathmgr.SocketSpec) (int, netip.AddrPort, error) {
	sc := s.off
	sc.Network, sc.Local, sc.Device, sc.Fwmark = spec.Network, spec.Local, spec.Device, spec.Fwmark
	c, err := netio.Open(sc)
	if err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("path %s: %w", spec.Path, err)
	}
	return s.dp.AddSocket(c), c.LocalAddr(), nil
}

func (s *pathSockets) Close(i int) { _ = s.dp.RemoveSocket(i) }

// managerHook drives the path manager from the data path's owner
// goroutine and reports what it did.
// managerHook drives owner shard's path manager (d.mgrs[shard]) from that
// owner's goroutine.
type managerHook struct {
	d     *Daemon
	shard int
}

func (h managerHook) m() *pathmgr.Manager { return h.d.mgrs[h.shard] }

func (h managerHook) HandleEngineEvent(now mono.Time, ev mpdccp.Event) {
	h.m().HandleEngineEvent(now, ev)
	h.d.drainEvents(h.m())
}

func (h managerHook) Deadline() mono.Time { return h.m().Deadline() }

func (h managerHook) Stop(now mono.Time) {
	h.m().Stop(now)
	h.d.drainEvents(h.m())
}

func (h managerHook) HandleTimer(now mono.Time) {
	h.m().HandleTimer(now)
	h.d.drainEvents(h.m())
}

// drainEvents logs the manager's events and hands them to the monitor
// subscribers. Owner goroutine only; events are rare, not per packet.
func (d *Daemon) drainEvents(m *pathmgr.Manager) {
	for {
		ev, ok := m.PollEvent()
		if !ok {
			return
		}
		me := monitorEvent(ev)
		level := slog.LevelInfo
		switch ev.Kind {
		case pathmgr.EventPathDown, pathmgr.EventConnClosed, pathmgr.EventJoinFailed, pathmgr.EventSocketError, pathmgr.EventLinkDown:
			level = slog.LevelWarn
		case pathmgr.EventJoin, pathmgr.EventDial, pathmgr.EventRouteChange, pathmgr.EventAddrAdded, pathmgr.EventAddrRemoved:
			level = slog.LevelDebug
		}
		attrs := []any{"event", me.Kind}
		if me.Conn != "" {
			attrs = append(attrs, "conn", me.Conn)
		}
		if me.Path != "" {
			attrs = append(attrs, "path", me.Path)
		} else if ev.PathID >= 0 {
			attrs = append(attrs, "path_id", ev.PathID)
		}
		if me.Remote != "" {
			attrs = append(attrs, "remote", me.Remote)
		}
		if me.Reason != "" {
			attrs = append(attrs, "reason", me.Reason)
		}
		d.log.Log(context.Background(), level, "path manager", attrs...)
		d.hub.publish(me)
	}
}

// withManager runs fn on the path manager in the owner goroutine and
// reports its events.
func (d *Daemon) withManager(ctx context.Context, fn func(now mono.Time, m *pathmgr.Manager) error) error {
	var err error
	derr := d.dp.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		// A sharded concentrator runs fn in each owner, on its manager.
		m := d.managerOf(ep)
		err = errors.Join(err, fn(now, m))
		d.drainEvents(m)
	})
	return errors.Join(derr, err)
}

// managerOf is the path manager of the owner running engine ep.
func (d *Daemon) managerOf(ep *mpdccp.Endpoint) *pathmgr.Manager {
	for _, m := range d.mgrs {
		if m.Endpoint() == ep {
			return m
		}
	}
	return d.mgr
}

// watchNetlink hands interface, address and route changes to the path
// manager. Without it (no permission, not Linux) the daemon runs on, but
// paths do not follow their devices' addresses.
func (d *Daemon) watchNetlink() {
	w, err := netmon.Watch(netmon.Options{OnError: func(err error) { d.log.Warn("netlink", "err", err) }}, func(ev any) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.withManager(ctx, func(now mono.Time, m *pathmgr.Manager) error {
			d.osEvent(now, ev)
			return nil
		})
	})
	if err != nil {
		d.log.Warn("no interface events (netlink): paths will not follow address changes", "err", err)
		return
	}
	d.watcher = w
}

func (d *Daemon) osEvent(now mono.Time, ev any) {
	switch e := ev.(type) {
	case pathmgr.LinkEvent:
		d.mgr.HandleLink(now, e)
	case pathmgr.AddrEvent:
		d.mgr.HandleAddr(now, e)
	case pathmgr.RouteEvent:
		d.mgr.HandleRoute(now, e)
	}
}

// Alive reports whether the data path's owner goroutine answers within
// ctx: the systemd watchdog is fed only while it does.
func (d *Daemon) Alive(ctx context.Context) error {
	return d.dp.Do(ctx, func(mono.Time, *mpdccp.Endpoint) {})
}
