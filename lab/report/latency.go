// SPDX-License-Identifier: MIT

package report

import (
	"fmt"
	"io"

	"github.com/mptun/mptun/lab/traffic"
)

// Idle is what a peer measured before the timed traffic, with the network
// idle: round-trip time through the peer and over each path alone, and
// short transfers.
type Idle struct {
	// Ping is ICMP echo through the peer (absent for kernel MPTCP, which
	// does not carry ICMP; PingNote says why).
	Ping     *traffic.RTTStats       `json:"ping,omitempty"`
	PingNote string                  `json:"ping_note,omitempty"`
	PathPing []PathPing              `json:"path_ping"`
	Transfer *traffic.TransferResult `json:"transfers,omitempty"`
	Errors   []string                `json:"errors,omitempty"`
}

// PathPing is ICMP echo over one path alone, outside any tunnel.
type PathPing struct {
	Path string           `json:"path"`
	RTT  traffic.RTTStats `json:"rtt"`
}

// FastestPathRTT returns the lowest median path RTT, or 0.
func (i *Idle) FastestPathRTT() float64 {
	best := 0.0
	for _, p := range i.PathPing {
		if p.RTT.Received > 0 && (best == 0 || p.RTT.P50 < best) {
			best = p.RTT.P50
		}
	}
	return best
}

// MPTCPCheck says whether kernel MPTCP really ran as MPTCP: the bulk
// sockets negotiated it (no fallback to TCP) and have one subflow per path.
type MPTCPCheck struct {
	Verified bool   `json:"verified"`
	Expected int    `json:"expected_subflows"`
	Subflows int    `json:"subflows"` // fewest over the bulk connections
	Fallback bool   `json:"fallback"`
	Detail   string `json:"detail"`
	// Share is each subflow's fraction of the bytes the bulk senders had
	// acknowledged, in subflow order.
	Share []float64               `json:"subflow_share"`
	Conns []traffic.MPTCPConnInfo `json:"conns"`
	// Counters are the client namespace's non-zero MPTcpExt counters
	// (nstat) at the end of the run.
	Counters map[string]uint64 `json:"mptcpext_client,omitempty"`
}

// writeLatency prints a run's idle, transfer, UDP, web delay and MPTCP
// figures, if any.
func writeLatency(out io.Writer, run *Run) {
	if i := run.Idle; i != nil {
		fmt.Fprintf(out, "%s idle:", run.Peer)
		if i.Ping != nil {
			fmt.Fprintf(out, " ping through the peer p50 %.2f ms (%.2f-%.2f, %d/%d);", i.Ping.P50, i.Ping.Min, i.Ping.Max, i.Ping.Received, i.Ping.Sent)
		}
		for _, p := range i.PathPing {
			fmt.Fprintf(out, " path %s p50 %.2f ms;", p.Path, p.RTT.P50)
		}
		writeTransfers(out, i.Transfer)
		fmt.Fprintln(out)
		for _, e := range i.Errors {
			fmt.Fprintf(out, "%s idle: error: %s\n", run.Peer, e)
		}
	}
	if run.Transfers != nil {
		fmt.Fprintf(out, "%s transfers during the traffic:", run.Peer)
		writeTransfers(out, run.Transfers)
		fmt.Fprintln(out)
	}
	if u := run.UDP; u != nil {
		fmt.Fprintf(out, "%s udp: offered %.2f Mbit/s, delivered %.4f, out of order %.4f, owd p50 %.1f ms p99 %.1f ms %s\n",
			run.Peer, u.OfferedMbps, u.Delivered, u.OOOFraction, u.OWDms.P50, u.OWDms.P99, u.Err)
	}
	if w := run.WebOWD; w != nil {
		fmt.Fprintf(out, "%s web one-way delay: %d samples, p50 %.1f ms, p99 %.1f ms, p99.99 %.1f ms (%d unmatched, %d capture drops) %s\n",
			run.Peer, w.Samples, w.OWDms.P50, w.OWDms.P99, w.OWDms.P9999, w.Unmatched, w.KernelDrops, w.Err)
	}
	if m := run.MPTCP; m != nil {
		mark := "ok  "
		if !m.Verified {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "%s check %s mptcp-negotiated: %s, subflow shares %.2f\n", run.Peer, mark, m.Detail, m.Share)
	}
}

func writeTransfers(out io.Writer, t *traffic.TransferResult) {
	if t == nil {
		return
	}
	for _, s := range t.Sizes {
		fmt.Fprintf(out, " %d B p50 %.1f ms p90 %.1f ms (n=%d, %d failed);", s.Bytes, s.P50ms, s.P90ms, s.Done, s.Failed)
	}
}
