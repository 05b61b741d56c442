// SPDX-License-Identifier: MIT

package daemon

import (
	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/policyroute"
)

// routingPaths are the client paths whose packets mptund routes out of
// their interface ([[path]] routing).
func routingPaths(cfg *config.Config) []policyroute.Path {
	if cfg.Connection.Role != config.RoleClient {
		return nil
	}
	var out []policyroute.Path
	for _, p := range cfg.Paths {
		mode := policyroute.BySource
		switch p.Routing {
		case config.RoutingNone:
			continue
		case config.RoutingFwmark:
			mode = policyroute.ByMark
		}
		out = append(out, policyroute.Path{Name: p.Name, Device: p.Device, Mode: mode, Fwmark: p.Fwmark, Table: p.Table,
			Gateway: p.Gateway, V6: p.Remote.Addr().Is6() && !p.Remote.Addr().Is4In6()})
	}
	return out
}

// startRouting installs the paths' rules and tables before the first
// packet leaves, and keeps them following the interfaces.
func (d *Daemon) startRouting() error {
	paths := routingPaths(d.cfg)
	if len(paths) == 0 {
		return nil
	}
	m, err := policyroute.Start(paths, policyroute.Options{Log: d.log})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.routes = m
	d.mu.Unlock()
	return nil
}

// reloadRouting applies a reloaded config's paths' routing.
func (d *Daemon) reloadRouting(cfg *config.Config) error {
	paths := routingPaths(cfg)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.routes != nil {
		return d.routes.SetPaths(paths)
	}
	if len(paths) == 0 {
		return nil
	}
	m, err := policyroute.Start(paths, policyroute.Options{Log: d.log})
	if err != nil {
		return err
	}
	d.routes = m
	return nil
}
