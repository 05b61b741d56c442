// SPDX-License-Identifier: MIT

package daemon

import (
	"fmt"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/statuspage"
)

// startWeb serves the read-only status page when the config asks for it
// ([web] listen), from the same snapshots as the control socket's status.
func (d *Daemon) startWeb(cfg *config.Config) error {
	if cfg.Web.Listen == "" {
		return nil
	}
	srv, err := statuspage.Listen(cfg.Web.Listen, d.Status, d.log)
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	d.webSrv = srv
	d.log.Info("status page", "url", "http://"+srv.Addr().String()+"/")
	return nil
}
