// SPDX-License-Identifier: MIT

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mptun/mptun/metrics"
)

// statusGatherer serves the metrics derived from a status snapshot taken
// at scrape time (metrics.WriteStatus), so the data path keeps no extra
// counters for Prometheus and closed connections leave no label sets.
type statusGatherer struct{ d *Daemon }

func (g statusGatherer) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := g.d.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var buf bytes.Buffer
	if err := metrics.WriteStatus(&buf, st); err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		return nil, fmt.Errorf("status metrics: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}

// Version is mptund's version in mptun_build_info; main sets it.
var Version = "dev"

// startMetrics serves /metrics when the config asks for it: the status
// metrics, the Go runtime's and the process's, and mptun_build_info.
func (d *Daemon) startMetrics() error {
	if d.cfg.Metrics.Listen == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mptun_build_info", Help: "Build information; the value is always 1.",
			ConstLabels: prometheus.Labels{"version": Version, "go": runtime.Version()}}, func() float64 { return 1 }))
	srv, err := metrics.ListenHTTP(d.cfg.Metrics.Listen, prometheus.Gatherers{statusGatherer{d}, reg}, d.log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	d.metricsSrv = srv
	return nil
}
