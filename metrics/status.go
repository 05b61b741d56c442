// SPDX-License-Identifier: MIT

package metrics

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/reorder"
)

// WriteStatus writes the metrics derived from a daemon status snapshot
// (what `mptun status --json` shows) in the Prometheus text format: per
// path (labels conn and path), per connection (label conn) and for the
// daemon. Names follow Prometheus' conventions: base units (seconds,
// bytes), counters ending in _total, the unit before it (packets, bytes).
// Series exist while their connection or path does: nothing is kept
// between scrapes, so closed connections leave no stale label sets.
// docs/metrics.md lists them; contrib/grafana/mptun.json plots them.
func WriteStatus(w io.Writer, st control.Status) error {
	e := newTextWriter(w)
	paths := statusPaths(st)
	for _, f := range pathFamilies {
		e.header(f.name, f.help, f.typ)
		for _, p := range paths {
			e.sample(f.name, f.value(p.PathStatus), "conn", p.conn, "path", p.name)
		}
	}
	for _, f := range connFamilies {
		e.header(f.name, f.help, f.typ)
		for _, c := range st.Conns {
			e.sample(f.name, f.value(c), "conn", connLabel(st, c))
		}
	}
	writeHold(e, st)
	writeDrops(e, st)
	e.header("mptun_connections", "MP-DCCP connections by state.", gauge)
	states := map[string]int{"open": 0}
	for _, c := range st.Conns {
		states[c.State]++
	}
	for _, s := range slices.Sorted(maps.Keys(states)) {
		e.sample("mptun_connections", float64(states[s]), "state", s)
	}
	e.header("mptun_resets_sent_total", "DCCP Resets sent in answer to datagrams of no connection.", counter)
	e.sample("mptun_resets_sent_total", float64(st.ResetsSent))
	e.header("mptun_uptime_seconds", "Time since mptund started.", gauge)
	e.sample("mptun_uptime_seconds", st.UptimeS)
	dp := st.Datapath
	for _, q := range []struct {
		name string
		us   float64
	}{{"p50", dp.TimerLateP50us}, {"p99", dp.TimerLateP99us}, {"max", dp.TimerLateMaxus}} {
		name := "mptun_timer_lateness_" + q.name + "_seconds"
		e.header(name, "How late the data path's deadline timer fired ("+q.name+" of recent wake-ups).", gauge)
		e.sample(name, q.us/1e6)
	}
	return e.flush()
}

// namedPath is a path with its labels.
type namedPath struct {
	control.PathStatus
	conn, name string
}

func statusPaths(st control.Status) []namedPath {
	var out []namedPath
	for _, c := range st.Conns {
		for _, p := range c.Paths {
			name := p.Name
			if name == "" {
				name = strconv.Itoa(p.ID)
			}
			out = append(out, namedPath{p, connLabel(st, c), name})
		}
	}
	return out
}

// connLabel tells a concentrator's connections apart by the CPE's
// connection identity; a CPE has one connection, labelled "".
func connLabel(st control.Status, c control.ConnStatus) string {
	if st.Role == "server" {
		return fmt.Sprintf("%08x", c.PeerCI)
	}
	return ""
}

type family[T any] struct {
	name, help, typ string
	value           func(T) float64
}

func u(v uint64) float64 { return float64(v) }

func b(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

var pathFamilies = []family[control.PathStatus]{
	{"mptun_path_up", "1 if the path is open and neither failed nor suspected.", gauge, func(p control.PathStatus) float64 { return b(p.Up()) }},
	{"mptun_path_tx_packets_total", "Datagrams sent on the path (every DCCP packet type).", counter, func(p control.PathStatus) float64 { return u(p.DatagramsSent) }},
	{"mptun_path_tx_bytes_total", "Bytes sent on the path (UDP payload).", counter, func(p control.PathStatus) float64 { return u(p.BytesSent) }},
	{"mptun_path_rx_packets_total", "Datagrams received on the path.", counter, func(p control.PathStatus) float64 { return u(p.DatagramsReceived) }},
	{"mptun_path_rx_bytes_total", "Bytes received on the path (UDP payload).", counter, func(p control.PathStatus) float64 { return u(p.BytesReceived) }},
	{"mptun_path_sent_data_packets_total", "Data packets the path's congestion controller sent (the base of its loss rate).", counter, func(p control.PathStatus) float64 { return u(p.PacketsSent) }},
	{"mptun_path_lost_packets_total", "Data packets the path's congestion controller declared lost.", counter, func(p control.PathStatus) float64 { return u(p.PacketsLost) }},
	{"mptun_path_ecn_ce_packets_total", "Packets acknowledged with an ECN CE mark on the path.", counter, func(p control.PathStatus) float64 { return u(p.ECNMarks) }},
	{"mptun_path_spurious_congestion_events_total", "Congestion responses undone because the packet taken for lost arrived.", counter, func(p control.PathStatus) float64 { return u(p.Spurious) }},
	{"mptun_path_timeouts_total", "Retransmission timeouts of the path's congestion controller.", counter, func(p control.PathStatus) float64 { return u(p.Timeouts) }},
	{"mptun_path_srtt_seconds", "Smoothed round-trip time.", gauge, func(p control.PathStatus) float64 { return p.RTTms / 1e3 }},
	{"mptun_path_min_rtt_seconds", "Minimum round-trip time.", gauge, func(p control.PathStatus) float64 { return p.MinRTTms / 1e3 }},
	{"mptun_path_cwnd_packets", "Congestion window.", gauge, func(p control.PathStatus) float64 { return float64(p.Cwnd) }},
	{"mptun_path_in_flight_packets", "Packets sent and neither acknowledged nor declared lost.", gauge, func(p control.PathStatus) float64 { return float64(p.InFlight) }},
	{"mptun_path_delivery_rate_bytes_per_second", "The congestion controller's recent delivery rate estimate.", gauge, func(p control.PathStatus) float64 { return p.RateMbps * 1e6 / 8 }},
	{"mptun_path_pacing_rate_bytes_per_second", "Pacing rate.", gauge, func(p control.PathStatus) float64 { return p.PacingMbps * 1e6 / 8 }},
	{"mptun_path_last_heard_seconds", "Time since a datagram was last received on the path.", gauge, func(p control.PathStatus) float64 { return p.LastHeardMs / 1e3 }},
}

var connFamilies = []family[control.ConnStatus]{
	{"mptun_inner_sent_packets_total", "Inner packets sent into the tunnel.", counter, func(c control.ConnStatus) float64 { return u(c.SentPackets) }},
	{"mptun_inner_sent_bytes_total", "Bytes of inner packets sent into the tunnel.", counter, func(c control.ConnStatus) float64 { return u(c.SentBytes) }},
	{"mptun_inner_delivered_packets_total", "Inner packets delivered out of the tunnel.", counter, func(c control.ConnStatus) float64 { return u(c.DeliveredPackets) }},
	{"mptun_inner_delivered_bytes_total", "Bytes of inner packets delivered out of the tunnel.", counter, func(c control.ConnStatus) float64 { return u(c.DeliveredBytes) }},
	{"mptun_repaired_packets_total", "Data packets a path reported lost, sent once more (loss repair).", counter, func(c control.ConnStatus) float64 { return u(c.Repaired) }},
	{"mptun_send_queue_packets", "Inner packets waiting in the send queue.", gauge, func(c control.ConnStatus) float64 { return float64(c.Queued) }},
	{"mptun_send_queue_dropped_packets_total", "Inner packets the send queue refused or its AQM dropped.", counter, func(c control.ConnStatus) float64 { return u(c.QueueDrops) }},
	{"mptun_aqm_marked_packets_total", "Inner packets the send queue's CoDel marked CE.", counter, func(c control.ConnStatus) float64 { return u(c.AQM.Marked) }},
	{"mptun_aqm_dropped_packets_total", "Inner packets the send queue's CoDel dropped.", counter, func(c control.ConnStatus) float64 { return u(c.AQM.Dropped) }},
	{"mptun_aqm_superseded_acks_total", "Queued inner TCP ACKs the send queue replaced by a later ACK of their connection.", counter, func(c control.ConnStatus) float64 { return u(c.AQM.Superseded) }},
	{"mptun_reorder_buffered_packets", "Packets waiting in the reorder buffer.", gauge, func(c control.ConnStatus) float64 { return float64(c.Reorder.Buffered) }},
	{"mptun_reorder_held_packets_total", "Packets delivered after waiting in the reorder buffer.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.Held) }},
	{"mptun_reorder_out_of_order_packets_total", "Packets delivered with a lower MP_SEQ than one delivered before.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.OutOfOrder) }},
	{"mptun_reorder_skipped_gaps_total", "Sequence numbers given up on after the hold time.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.GapsSkipped) }},
	{"mptun_reorder_late_packets_total", "Packets that arrived after their gap was skipped.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.GapsLateArrive) }},
	{"mptun_nacks_sent_total", "Repair requests (NACKs) sent for packets missing in a path's sequence.", counter, func(c control.ConnStatus) float64 { return u(c.NACKsSent) }},
	{"mptun_nacks_received_total", "Repair requests (NACKs) received from the peer.", counter, func(c control.ConnStatus) float64 { return u(c.NACKsReceived) }},
	{"mptun_reorder_path_ordered_packets_total", "Packets delivered at once in their path's order (flows kept on one path).", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.PathOrdered) }},
	{"mptun_reorder_holes_total", "Losses found in a path's own sequence.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.Holes) }},
	{"mptun_reorder_repaired_holes_total", "Holes filled by a repair.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.Repaired) }},
	{"mptun_reorder_unrepaired_holes_total", "Holes skipped: no repair came in time.", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.RepairGivenUp) }},
	{"mptun_reorder_duplicate_packets_total", "Duplicate packets dropped by the reorderer (repairs and redundant copies).", counter, func(c control.ConnStatus) float64 { return u(c.Reorder.Duplicates) }},
}

// writeHold writes the reorder hold-time histogram of each connection
// (its buckets are reorder.HoldBuckets; the reorderer keeps no sum).
func writeHold(e *textWriter, st control.Status) {
	const name = "mptun_reorder_hold_seconds"
	e.header(name, "How long delivered packets waited in the reorder buffer (no _sum: the reorderer keeps none).", histogram)
	for _, c := range st.Conns {
		conn := connLabel(st, c)
		var cum uint64
		for i := range len(reorder.HoldBuckets) + 1 {
			if i < len(c.Reorder.HoldHist) {
				cum += c.Reorder.HoldHist[i]
			}
			le := "+Inf"
			if i < len(reorder.HoldBuckets) {
				le = strconv.FormatFloat(reorder.HoldBuckets[i].Seconds(), 'g', -1, 64)
			}
			e.sample(name+"_bucket", float64(cum), "conn", conn, "le", le)
		}
		e.sample(name+"_count", float64(cum), "conn", conn)
	}
}

// engineReasons maps the engine's drop reasons (mptun status's
// dropped_datagrams) to the reason label; others become snake_case.
var engineReasons = map[string]string{"no-conn": "unknown_conn", "checksum": "malformed", "bad-handshake": "handshake"}

// writeDrops writes mptun_dropped_packets_total{direction,reason}: the
// known reasons always (bounded labels), more when the engine has them.
func writeDrops(e *textWriter, st control.Status) {
	const name = "mptun_dropped_packets_total"
	drops := map[[2]string]uint64{}
	for _, dir := range []string{DirTx, DirRx} {
		for _, r := range DropReasons {
			drops[[2]string{dir, r}] = 0
		}
	}
	dp := st.Datapath
	drops[[2]string{DirTx, "too_big"}] += dp.DroppedTooBig
	drops[[2]string{DirTx, "queue_full"}] += dp.DroppedQueueFull
	drops[[2]string{DirTx, "no_path"}] += dp.DroppedNoRoute
	drops[[2]string{DirRx, "ecn_not_ect"}] += dp.DroppedECN
	for reason, n := range st.Dropped {
		label, ok := engineReasons[reason]
		if !ok {
			label = strings.ReplaceAll(reason, "-", "_")
		}
		drops[[2]string{DirRx, label}] += n
	}
	e.header(name, "Packets dropped, by direction (tx: towards the paths, rx: from them) and reason.", counter)
	keys := slices.SortedFunc(maps.Keys(drops), func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	for _, k := range keys {
		e.sample(name, float64(drops[k]), "direction", k[0], "reason", k[1])
	}
}
