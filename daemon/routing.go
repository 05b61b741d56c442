// SPDX-License-Identifier: MIT

package daemon

import (
	"log/slog"
	"sync"

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

// pathRouting holds the policy routing manager: started before the first
// packet leaves, changed by reloads, removed on exit. Its own lock keeps
// it independent of how the rest of the daemon guards its settings.
type pathRouting struct {
	mu sync.Mutex
	m  *policyroute.Manager // nil while no path asks for routing
}

// apply installs (or changes to) cfg's paths' rules and tables and keeps
// them following the interfaces.
func (r *pathRouting) apply(cfg *config.Config, log *slog.Logger) error {
	paths := routingPaths(cfg)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m != nil {
		return r.m.SetPaths(paths)
	}
	if len(paths) == 0 {
		return nil
	}
	m, err := policyroute.Start(paths, policyroute.Options{Log: log})
	if err != nil {
		return err
	}
	r.m = m
	return nil
}

// close removes every rule and route mptund installed.
func (r *pathRouting) close(log *slog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		return
	}
	if err := r.m.Close(); err != nil {
		log.Warn("policy routing: cleanup", "err", err)
	}
	r.m = nil
}
