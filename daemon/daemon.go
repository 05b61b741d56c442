// SPDX-License-Identifier: MIT

// Package daemon assembles mptund from a validated config: the TUN device,
// one UDP socket per path (client) or listen address (server), the MP-DCCP
// endpoint, the data path and the control socket.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mptun/mptun/capture"
	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/metrics"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/pathmgr"
	"github.com/mptun/mptun/pathmgr/netmon"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
	"github.com/mptun/mptun/statuspage"
	"github.com/mptun/mptun/tun"
)

const (
	udpHeader  = 8
	ipv4Header = 20
	ipv6Header = 40
	// closeGrace bounds how long SIGTERM waits for MP_CLOSE to complete.
	closeGrace = 2 * time.Second
)

// Daemon is one running tunnel.
type Daemon struct {
	cfgp  atomic.Pointer[config.Config] // the running config (Reload swaps it)
	log   *slog.Logger
	start time.Time

	dev        tun.Device
	listen     []*netio.Conn // a server's sockets; a client's belong to the path manager
	shardSocks []*netio.Conn // the other owners' listen sockets (shards.go)
	ep         *mpdccp.Endpoint
	dp         *datapath.Datapath
	mgr        *pathmgr.Manager   // owner goroutine only; a sharded concentrator's first owner's
	mgrs       []*pathmgr.Manager // one per owner (shard), mgrs[0] == mgr
	hub        eventHub
	snapshot   []any // interfaces and addresses at start (nil: no netlink)
	watcher    *netmon.Watcher
	innerMTU   int
	ctl        *control.Server
	capFile    *capture.File
	metricsSrv *metrics.HTTPServer
	webSrv     *statuspage.Server
	routes     pathRouting
	reloadMu   sync.Mutex // one reload at a time
}

// config is the running config.
func (d *Daemon) config() *config.Config { return d.cfgp.Load() }

// Names returns the registered component names, for config validation.
func Names() config.Names {
	return config.Names{
		CCIDs:      ccid.Names(),
		Schedulers: scheduler.Names(),
		Reorderers: reorder.Names(),
	}
}

// New creates the device, sockets and engine described by cfg. Nothing
// moves until Run.
func New(cfg *config.Config, log *slog.Logger) (d *Daemon, err error) {
	d = &Daemon{log: log, start: time.Now()}
	d.cfgp.Store(cfg)
	defer func() {
		if err != nil {
			d.close()
		}
	}()

	maxPacket, err := d.openSockets()
	if err != nil {
		return nil, err
	}
	epCfg, err := engineConfig(cfg, maxPacket)
	if err != nil {
		return nil, err
	}
	epCfg.Security = engineSecurity(cfg, log)
	layout := ciLayout(cfg)
	steer := newSteer(cfg, layout)
	if d.ep, err = mpdccp.NewEndpoint(shardEngine(epCfg, layout, steer, 0)); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	sharding, err := d.openShards(epCfg, steer)
	if err != nil {
		return nil, err
	}

	d.innerMTU = d.ep.MaxPayload()
	if cfg.Tunnel.MTU > 0 {
		if cfg.Tunnel.MTU > d.innerMTU {
			return nil, fmt.Errorf("%s: tunnel.mtu %d is larger than the paths carry (%d)", cfg.File, cfg.Tunnel.MTU, d.innerMTU)
		}
		d.innerMTU = cfg.Tunnel.MTU
	}

	if d.dev, err = tun.Open(tun.Config{Name: cfg.Tunnel.Name, Driver: cfg.Tunnel.Driver, MTU: d.innerMTU, Offload: cfg.Offload.TUN}); err != nil {
		return nil, fmt.Errorf("tun %s: %w", cfg.Tunnel.Name, err)
	}
	name, _ := d.dev.Name()
	if err = tun.Configure(name, d.innerMTU, cfg.Tunnel.Addresses, cfg.Tunnel.Routes); err != nil {
		return nil, fmt.Errorf("tun %s: configure: %w", name, err)
	}

	var capt datapath.Capture
	if cfg.Capture.File != "" {
		if d.capFile, err = capture.Create(cfg.Capture.File, pcapdccp.FormUDP, cfg.Capture.MaxSize); err != nil {
			return nil, fmt.Errorf("%s: capture.file: %w", cfg.File, err)
		}
		capt = d.capFile
	}

	socks := make([]datapath.Socket, len(d.listen))
	for i, s := range d.listen {
		socks[i] = s
	}
	var inner []netip.Addr
	for _, p := range cfg.Tunnel.Addresses {
		inner = append(inner, p.Addr())
	}
	d.dp, err = datapath.New(datapath.Config{
		Endpoint: d.ep, Device: d.dev, Sockets: socks, InnerMTU: d.innerMTU,
		InnerAddrs: inner, Logger: log, Capture: capt, Hook: managerHook{d, 0}, Sharding: sharding,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Connection.Role == config.RoleClient {
		snap, err := netmon.Snapshot(netmon.Options{})
		if err != nil {
			log.Warn("no interface events (netlink): paths will not follow their devices' addresses", "err", err)
		} else {
			d.snapshot = snap
		}
	}
	ps := &pathSockets{dp: d.dp, off: netio.SocketConfig{DisableGSO: !cfg.Offload.UDPGSO, DisableGRO: !cfg.Offload.UDPGRO}}
	if d.mgr, err = pathmgr.New(managerConfig(cfg, d.snapshot != nil), d.ep, ps); err != nil {
		return nil, err
	}
	d.mgrs = append(d.mgrs, d.mgr)
	if sharding != nil {
		// Each owner's connections have their own (server) manager, driven
		// by that owner's goroutine.
		for _, sh := range sharding.Shards {
			m, err := pathmgr.New(managerConfig(cfg, false), sh.Endpoint, ps)
			if err != nil {
				return nil, err
			}
			d.mgrs = append(d.mgrs, m)
		}
	}
	return d, nil
}

// openSockets opens a server's listen sockets and returns the largest
// DCCP packet every path can carry without IP fragmentation. A client's
// sockets are opened by the path manager; its packet size follows from
// the configured paths' MTUs and address families.
func (d *Daemon) openSockets() (int, error) {
	cfg := d.config()
	maxPacket := 65507
	fit := func(mtu int, v6 bool) {
		hdr := ipv4Header
		if v6 {
			hdr = ipv6Header
		}
		if mtu <= 0 {
			mtu = config.DefaultPathMTU
		}
		maxPacket = min(maxPacket, mtu-hdr-udpHeader)
	}
	if cfg.Connection.Role == config.RoleClient {
		for _, p := range cfg.Paths {
			a := p.Remote.Addr()
			fit(p.MTU, a.Is6() && !a.Is4In6())
		}
		return maxPacket, nil
	}
	if err := listenFree(cfg); err != nil {
		return 0, err
	}
	off := netio.SocketConfig{DisableGSO: !cfg.Offload.UDPGSO, DisableGRO: !cfg.Offload.UDPGRO}
	for _, l := range cfg.Listen {
		sc := off
		sc.Local, sc.Device, sc.Fwmark = l.Address, l.Device, l.Fwmark
		sc.ReusePort = shardCount(cfg) > 1
		s, err := netio.Open(sc)
		if err != nil {
			return 0, fmt.Errorf("listen %s: %w", l.Address, err)
		}
		d.listen = append(d.listen, s)
		a := s.LocalAddr().Addr()
		fit(config.DefaultPathMTU, a.Is6() && !a.Is4In6())
	}
	return maxPacket, nil
}

// Run starts the path manager (a client dials), serves the control
// socket and moves packets until ctx is cancelled; then it closes
// connections gracefully.
func (d *Daemon) Run(ctx context.Context, ready func()) error {
	defer d.close()
	cfg := d.config()
	if err := d.routes.apply(cfg, d.log); err != nil {
		return err
	}
	// The data path's owner goroutine does not run yet: the manager may
	// be fed and started here.
	now := mono.Now()
	for _, ev := range d.snapshot {
		d.osEvent(now, ev)
	}
	for _, m := range d.mgrs {
		if err := m.Start(now); err != nil {
			return fmt.Errorf("path manager: %w", err)
		}
		d.drainEvents(m)
	}
	if d.snapshot != nil {
		d.watchNetlink()
	}
	if sock := cfg.Control.Socket; sock != "" {
		if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		srv, err := control.Listen(sock, d.handlers(), d.log)
		if err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		srv.SetStreams(control.Streams{control.MethodMonitor: d.monitor})
		d.ctl = srv
		registerRestricted(srv, d)
		go srv.Serve()
	}
	if err := d.startMetrics(); err != nil {
		return err
	}
	if err := d.startWeb(cfg); err != nil {
		return err
	}
	name, _ := d.dev.Name()
	d.log.Info("mptund running", "role", cfg.Connection.Role, "tun", name, "inner_mtu", d.innerMTU,
		"paths", len(cfg.Paths), "listen", len(d.listen), "shards", d.dp.Shards(), "ccid", cfg.Connection.CCID, "scheduler", cfg.Connection.Scheduler,
		"reorderer", cfg.Connection.Reorderer, "mode", cfg.Connection.Mode,
		"security", cfg.Connection.Security, "public_key", d.ep.PublicKey())
	d.dropPrivileges()
	if ready != nil {
		ready()
	}
	err := d.dp.Run(ctx, closeGrace)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (d *Daemon) close() {
	if d.watcher != nil {
		d.watcher.Close()
	}
	if d.ctl != nil {
		d.ctl.Close()
	}
	if d.metricsSrv != nil {
		d.metricsSrv.Close()
	}
	if d.webSrv != nil {
		d.webSrv.Close()
	}
	d.routes.close(d.log)
	for _, s := range append(d.listen, d.shardSocks...) {
		s.Close()
	}
	if d.dp != nil {
		// The path manager's sockets (Run has returned: nothing else
		// touches the data path).
		d.dp.CloseSockets()
	}
	if d.dev != nil {
		d.dev.Close()
	}
	if d.capFile != nil {
		d.capFile.Close()
	}
}
