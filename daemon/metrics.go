// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mptun/mptun/metrics"
)

// refreshMetrics copies a status snapshot into the metrics set at scrape
// time, so the data path keeps no extra counters for Prometheus.
func (d *Daemon) refreshMetrics(set *metrics.Set) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := d.Status(ctx)
	if err != nil {
		return
	}
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
			ps := set.Path(key)
			ps.TxPackets.Store(p.PacketsSent)
			ps.Lost.Store(p.PacketsLost)
			ps.ECNCE.Store(p.ECNMarks)
			ps.SetRTT(time.Duration(p.RTTms*1e6), time.Duration(p.MinRTTms*1e6))
			ps.Cwnd.Store(int64(p.Cwnd))
			ps.PacingRate.Store(uint64(p.PacingMbps * 1e6 / 8))
			ps.Up.Store(p.Up())
		}
		set.ReorderBuffered.Store(int64(conn.Reorder.Buffered))
		set.ReorderTimeouts.Store(conn.Reorder.GapsSkipped)
		set.ReorderLate.Store(conn.Reorder.GapsLateArrive)
	}
	// Closed connections and removed paths stop being exported.
	set.RetainPaths(seen)
	set.Drop(metrics.DirTx, "too_big").Store(st.Datapath.DroppedTooBig)
	set.Drop(metrics.DirTx, "queue_full").Store(st.Datapath.DroppedQueueFull)
	set.Drop(metrics.DirTx, "no_path").Store(st.Datapath.DroppedNoRoute)
	set.Drop(metrics.DirRx, "ecn_not_ect").Store(st.Datapath.DroppedECN)
	set.Drop(metrics.DirRx, "malformed").Store(st.Dropped["malformed"] + st.Dropped["checksum"])
	set.Drop(metrics.DirRx, "unknown_conn").Store(st.Dropped["no-conn"])
	for reason, label := range securityDrops {
		set.Drop(metrics.DirRx, label).Store(st.Dropped[reason])
	}
}

// Version is mptund's version in mptun_build_info; main sets it.
var Version = "dev"

// startMetrics serves /metrics when the config asks for it.
func (d *Daemon) startMetrics() error {
	if d.config().Metrics.Listen == "" {
		return nil
	}
	set := metrics.NewSet()
	write := func(w io.Writer) error {
		d.refreshMetrics(set)
		if err := set.WriteText(w); err != nil {
			return err
		}
		return metrics.WriteRuntime(w, Version)
	}
	srv, err := metrics.ListenHTTP(d.config().Metrics.Listen, write, d.log)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	d.metricsSrv = srv
	return nil
}
