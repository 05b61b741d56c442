// SPDX-License-Identifier: MIT

package daemon

import (
	"fmt"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/control"
)

// Reload applies what can change at runtime from a re-read config: the
// scheduler, the reorderer and path priorities. Everything else needs a
// restart; Reload says so rather than silently ignoring it.
func (d *Daemon) Reload(cfg *config.Config) error {
	old := d.cfg
	if cfg.Connection.Role != old.Connection.Role || cfg.Tunnel.Name != old.Tunnel.Name ||
		len(cfg.Paths) != len(old.Paths) || len(cfg.Listen) != len(old.Listen) {
		return fmt.Errorf("%s: role, tunnel name and the set of paths/listen sockets need a restart", cfg.File)
	}
	if !sameSecurity(old, cfg) {
		return fmt.Errorf("%s: security, keys and [[peer]] sections need a restart", cfg.File)
	}
	if cfg.Web != old.Web {
		return fmt.Errorf("%s: web.listen needs a restart", cfg.File)
	}
	req := control.SetRequest{}
	if cfg.Connection.Scheduler != old.Connection.Scheduler {
		req.Scheduler = cfg.Connection.Scheduler
	}
	if cfg.Connection.Reorderer != old.Connection.Reorderer || cfg.Connection.ReorderMaxHold != old.Connection.ReorderMaxHold {
		req.Reorderer = cfg.Connection.Reorderer
	}
	if err := d.apply(req); err != nil {
		return err
	}
	for i := range cfg.Paths {
		if cfg.Paths[i].Prio != old.Paths[i].Prio {
			id, prio := i, cfg.Paths[i].Prio
			if err := d.apply(control.SetRequest{Path: &id, Prio: &prio}); err != nil {
				return fmt.Errorf("path %s: %w", cfg.Paths[i].Name, err)
			}
		}
	}
	if err := d.routes.apply(cfg, d.log); err != nil {
		return err
	}
	d.mu.Lock()
	d.cfg = cfg
	d.mu.Unlock()
	return nil
}
