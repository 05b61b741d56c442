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
	cfg   *config.Config
	log   *slog.Logger
	start time.Time

	dev          tun.Device
	sockets      []*netio.Conn
	shardSockets []*netio.Conn // the other owners' listen sockets (shards.go)
	ep           *mpdccp.Endpoint
	dp           *datapath.Datapath
	innerMTU     int
	ctl          *control.Server
	capFile      *capture.File
	metricsSrv   *metrics.HTTPServer
	webSrv       *statuspage.Server
	routes       pathRouting

	mu       sync.Mutex // guards reloadable settings
	pathName map[int]string
	// schedName and reoName are what the connections use (config, then
	// control-socket changes).
	schedName, reoName string
}

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
	d = &Daemon{cfg: cfg, log: log, start: time.Now(), pathName: map[int]string{},
		schedName: cfg.Connection.Scheduler, reoName: cfg.Connection.Reorderer}
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

	socks := make([]datapath.Socket, len(d.sockets))
	for i, s := range d.sockets {
		socks[i] = s
	}
	var inner []netip.Addr
	for _, p := range cfg.Tunnel.Addresses {
		inner = append(inner, p.Addr())
	}
	d.dp, err = datapath.New(datapath.Config{
		Endpoint: d.ep, Device: d.dev, Sockets: socks, InnerMTU: d.innerMTU,
		InnerAddrs: inner, Logger: log, Capture: capt, Sharding: sharding,
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openSockets opens the UDP sockets and returns the largest DCCP packet
// every path can carry without IP fragmentation.
func (d *Daemon) openSockets() (int, error) {
	cfg := d.cfg
	maxPacket := 65507
	open := func(sc netio.SocketConfig, mtu int, what string) error {
		s, err := netio.Open(sc)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		d.sockets = append(d.sockets, s)
		hdr := ipv4Header
		if s.LocalAddr().Addr().Is6() && !s.LocalAddr().Addr().Is4In6() {
			hdr = ipv6Header
		}
		if mtu <= 0 {
			mtu = config.DefaultPathMTU
		}
		maxPacket = min(maxPacket, mtu-hdr-udpHeader)
		return nil
	}
	off := netio.SocketConfig{DisableGSO: !cfg.Offload.UDPGSO, DisableGRO: !cfg.Offload.UDPGRO}
	if cfg.Connection.Role == config.RoleServer {
		if err := listenFree(cfg); err != nil {
			return 0, err
		}
		for _, l := range cfg.Listen {
			sc := off
			sc.Local, sc.Device, sc.Fwmark = l.Address, l.Device, l.Fwmark
			sc.ReusePort = shardCount(cfg) > 1
			if err := open(sc, config.DefaultPathMTU, "listen "+l.Address.String()); err != nil {
				return 0, err
			}
		}
		return maxPacket, nil
	}
	for _, p := range cfg.Paths {
		sc := off
		sc.Local, sc.Device, sc.Fwmark = p.Local, p.Device, p.Fwmark
		if !p.Local.Addr().IsValid() {
			sc.Network = "udp4"
			if p.Remote.Addr().Is6() && !p.Remote.Addr().Is4In6() {
				sc.Network = "udp6"
			}
		}
		if err := open(sc, p.MTU, "path "+p.Name); err != nil {
			return 0, err
		}
	}
	return maxPacket, nil
}

// Run dials (client), serves the control socket and moves packets until
// ctx is cancelled; then it closes connections gracefully.
func (d *Daemon) Run(ctx context.Context, ready func()) error {
	defer d.close()
	if err := d.routes.apply(d.cfg, d.log); err != nil {
		return err
	}
	if d.cfg.Connection.Role == config.RoleClient {
		var paths []mpdccp.PathConfig
		for i, p := range d.cfg.Paths {
			local := d.sockets[i].LocalAddr()
			if p.Local.Addr().IsValid() && !p.Local.Addr().IsUnspecified() {
				local = netip.AddrPortFrom(p.Local.Addr(), local.Port())
			}
			paths = append(paths, mpdccp.PathConfig{
				ID: i, Local: i, LocalAddr: local, Remote: p.Remote,
				Prio: p.Prio, Weight: p.Weight, CCID: p.CCID,
			})
			d.pathName[i] = p.Name
		}
		if _, err := d.ep.Dial(mono.Now(), paths); err != nil {
			return fmt.Errorf("dial: %w", err)
		}
	}
	if sock := d.cfg.Control.Socket; sock != "" {
		if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		srv, err := control.Listen(sock, d.handlers(), d.log)
		if err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		d.ctl = srv
		registerRestricted(srv, d)
		go srv.Serve()
	}
	if err := d.startMetrics(); err != nil {
		return err
	}
	if err := d.startWeb(d.cfg); err != nil {
		return err
	}
	name, _ := d.dev.Name()
	d.log.Info("mptund running", "role", d.cfg.Connection.Role, "tun", name, "inner_mtu", d.innerMTU,
		"sockets", len(d.sockets), "shards", d.dp.Shards(), "ccid", d.cfg.Connection.CCID, "scheduler", d.cfg.Connection.Scheduler,
		"reorderer", d.cfg.Connection.Reorderer, "security", d.cfg.Connection.Security, "public_key", d.ep.PublicKey())
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
	for _, s := range append(d.sockets, d.shardSockets...) {
		s.Close()
	}
	if d.dev != nil {
		d.dev.Close()
	}
	if d.capFile != nil {
		d.capFile.Close()
	}
}
