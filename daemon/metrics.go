// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mptun/mptun/metrics"
)

// Version is mptund's version in mptun_build_info; main sets it.
var Version = "dev"

// startMetrics serves /metrics when the config asks for it: the metrics
// derived from a status snapshot taken at scrape time (metrics.WriteStatus,
// so the data path keeps no extra counters for Prometheus and closed
// connections leave no label sets), then the process's own.
func (d *Daemon) startMetrics() error {
	if d.cfg.Metrics.Listen == "" {
		return nil
	}
	write := func(w io.Writer) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := d.Status(ctx)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if err := metrics.WriteStatus(w, st); err != nil {
			return err
		}
		return metrics.WriteRuntime(w, Version)
	}
	srv, err := metrics.ListenHTTP(d.cfg.Metrics.Listen, write, d.log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	d.metricsSrv = srv
	return nil
}
