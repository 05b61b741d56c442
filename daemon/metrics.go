// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mptun/mptun/metrics"
)

// statusCollector refreshes the metrics set from a status snapshot at
// scrape time, so the data path keeps no extra counters for Prometheus.
type statusCollector struct {
	d   *Daemon
	set *metrics.Set
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) { c.set.Describe(ch) }

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.d.Status(ctx)
	if err == nil {
		seen := map[metrics.PathKey]bool{}
		for _, conn := range st.Conns {
			connName := ""
			if st.Role == "server" {
				connName = fmt.Sprintf("%08x", conn.PeerCI)
			}
			for _, p := range conn.Paths {
				name := p.Name
				if name == "" {
					name = fmt.Sprint(p.ID)
				}
				key := metrics.PathKey{Conn: connName, Path: name}
				seen[key] = true
				ps := c.set.Path(key)
				ps.TxPackets.Store(p.PacketsSent)
				ps.Lost.Store(p.PacketsLost)
				ps.ECNCE.Store(p.ECNMarks)
				ps.SetRTT(time.Duration(p.RTTms*1e6), time.Duration(p.MinRTTms*1e6))
				ps.Cwnd.Store(int64(p.Cwnd))
				ps.PacingRate.Store(uint64(p.PacingMbps * 1e6 / 8))
				ps.Up.Store(p.Up())
			}
			c.set.ReorderBuffered.Store(int64(conn.Reorder.Buffered))
			c.set.ReorderTimeouts.Store(conn.Reorder.GapsSkipped)
			c.set.ReorderLate.Store(conn.Reorder.GapsLateArrive)
		}
		// Closed connections and removed paths stop being exported.
		c.set.RetainPaths(seen)
		c.set.Drop(metrics.DirTx, "too_big").Store(st.Datapath.DroppedTooBig)
		c.set.Drop(metrics.DirTx, "queue_full").Store(st.Datapath.DroppedQueueFull)
		c.set.Drop(metrics.DirTx, "no_path").Store(st.Datapath.DroppedNoRoute)
		c.set.Drop(metrics.DirRx, "ecn_not_ect").Store(st.Datapath.DroppedECN)
		c.set.Drop(metrics.DirRx, "malformed").Store(st.Dropped["malformed"] + st.Dropped["checksum"])
		c.set.Drop(metrics.DirRx, "unknown_conn").Store(st.Dropped["no-conn"])
	}
	c.set.Collect(ch)
}

// startMetrics serves /metrics when the config asks for it.
func (d *Daemon) startMetrics() error {
	if d.config().Metrics.Listen == "" {
		return nil
	}
	set := metrics.NewSet()
	reg := prometheus.NewRegistry()
	if err := reg.Register(&statusCollector{d: d, set: set}); err != nil {
		return err
	}
	srv, err := metrics.ListenHTTP(d.config().Metrics.Listen, reg, d.log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	d.metricsSrv = srv
	return nil
}
