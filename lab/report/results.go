// SPDX-License-Identifier: MIT

// Package report turns a lab run's measurements into results.json, CSV
// files, a summary table and PNG plots.
package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/lab/traffic"
)

// Results is one scenario run: every peer on the same emulated paths.
type Results struct {
	Scenario    string    `json:"scenario"`
	Description string    `json:"description,omitempty"`
	File        string    `json:"file"`
	Started     time.Time `json:"started"`
	DurationS   float64   `json:"duration_s"`
	Seed        uint64    `json:"seed"`
	Host        Host      `json:"host"`
	Baseline    Baseline  `json:"emulator_baseline"`
	Runs        []*Run    `json:"runs"`
}

// Host records what the numbers were measured on.
type Host struct {
	Kernel    string            `json:"kernel"`
	GoVersion string            `json:"go"`
	CPUs      int               `json:"cpus"`
	CPUModel  string            `json:"cpu_model"`
	Sysctls   map[string]string `json:"sysctls"`
}

// Baseline is the emulator's own zero-impairment round trip (two emulator
// passes plus the kernel stacks) and timer error.
type Baseline struct {
	Samples    int     `json:"samples"`
	RTTP50ms   float64 `json:"rtt_p50_ms"`
	RTTP99ms   float64 `json:"rtt_p99_ms"`
	RTTMaxms   float64 `json:"rtt_max_ms"`
	TimerP50us float64 `json:"timer_late_p50_us"`
	TimerP99us float64 `json:"timer_late_p99_us"`
}

// Run is one peer's run.
type Run struct {
	Peer            string   `json:"peer"`
	Note            string   `json:"note,omitempty"`
	GoodputMbps     float64  `json:"goodput_mbps"`
	CapacitySumMbps float64  `json:"capacity_sum_mbps"`
	Aggregation     float64  `json:"aggregation"`
	VsMPTCP         *float64 `json:"vs_mptcp,omitempty"`

	Bulk  *BulkSummary         `json:"bulk,omitempty"`
	Probe *traffic.ProbeResult `json:"probe,omitempty"`
	VoIP  *traffic.ProbeResult `json:"voip,omitempty"`
	Web   *traffic.WebResult   `json:"web,omitempty"`
	// WebOWD is the per-packet one-way delay of the web flows' data.
	WebOWD    *traffic.OWDResult      `json:"web_owd,omitempty"`
	UDP       *traffic.CBRResult      `json:"udp,omitempty"`
	Transfers *traffic.TransferResult `json:"transfers,omitempty"` // during the timed traffic
	Idle      *Idle                   `json:"idle,omitempty"`      // before it
	MPTCP     *MPTCPCheck             `json:"mptcp_check,omitempty"`

	// CPU seconds used during the run by this process (emulator and
	// generators) and by its helper processes (tunnel daemons), next to
	// the run's length: on 2 shared cores a busy CPU is a bottleneck too.
	CPU CPU `json:"cpu"`

	PeerMetrics any `json:"peer_metrics,omitempty"`

	Paths  []PathRun `json:"paths"`
	Events []Event   `json:"events,omitempty"`
	Checks []Check   `json:"checks"`
	Error  string    `json:"error,omitempty"`

	// For plots and CSV, not JSON.
	Start       mono.Time     `json:"-"`
	GoodputBins []float64     `json:"-"` // Mbit/s per BinWidth
	BinWidth    time.Duration `json:"-"`
	Dir         string        `json:"-"`
}

// CPU is processor time in seconds.
type CPU struct {
	LabS      float64 `json:"lab_s"`
	ChildrenS float64 `json:"children_s"`
	WallS     float64 `json:"wall_s"`
}

// BulkSummary is the TCP bulk transfer.
type BulkSummary struct {
	CC          string  `json:"cc"`
	Direction   string  `json:"direction"`
	Bytes       uint64  `json:"bytes"`
	GoodputMbps float64 `json:"goodput_mbps"`
	Retrans     uint32  `json:"retrans"`
	// DSACKs: spurious retransmissions the receiver reported (nstat
	// TcpExtTCPDSACKRecv of the sender's namespace).
	DSACKs uint64 `json:"spurious_retrans_dsack"`
	// RTOs: retransmission timeouts of the inner flow (TcpExtTCPTimeouts).
	RTOs  uint64 `json:"rto_timeouts"`
	Error string `json:"error,omitempty"`
}

// PathRun is one path's emulator view in the bulk direction.
type PathRun struct {
	Name             string    `json:"name"`
	CapacityMbps     float64   `json:"capacity_mbps"`   // time-averaged emulated rate
	SerializedMbps   float64   `json:"serialized_mbps"` // layer-2 bytes the emulator carried
	Utilisation      float64   `json:"utilisation"`
	DroppedQueue     uint64    `json:"dropped_queue"`
	DroppedLoss      uint64    `json:"dropped_loss"`
	DroppedBlackhole uint64    `json:"dropped_blackhole"`
	MaxQueueBytes    int       `json:"max_queue_bytes"`
	MaxSojournMs     float64   `json:"max_sojourn_ms"`
	QueuedArrivals   uint64    `json:"queued_arrivals"` // arrivals that found a backlog
	SocketDrops      uint64    `json:"socket_drops"`    // kernel drops before the emulator read (must be 0)
	SendErrors       uint64    `json:"send_errors"`
	TimerP99us       float64   `json:"timer_late_p99_us"`
	Bins             []float64 `json:"-"` // Mbit/s per BinWidth since Run.Start
}

// Event is a scenario event as it happened.
type Event struct {
	AtS    float64 `json:"at_s"`
	Path   string  `json:"path"`
	Action string  `json:"action"`
	Error  string  `json:"error,omitempty"`
}

// Check is an honesty check printed with the numbers.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// FillRatios sets aggregation and vs_mptcp.
func (r *Results) FillRatios() {
	var mptcp *Run
	for _, run := range r.Runs {
		if run.CapacitySumMbps > 0 {
			run.Aggregation = run.GoodputMbps / run.CapacitySumMbps
		}
		if run.Peer == "mptcp" && run.Error == "" {
			mptcp = run
		}
	}
	if mptcp == nil || mptcp.GoodputMbps == 0 {
		return
	}
	for _, run := range r.Runs {
		if run.Peer == "mptun" {
			v := run.GoodputMbps / mptcp.GoodputMbps
			run.VsMPTCP = &v
		}
	}
}

// WriteJSON writes dir/results.json.
func (r *Results) WriteJSON(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

// WriteProbeCSV writes one line per probe packet: seq, send and receive
// time (s since the run's start; empty if lost) and one-way delay in ms.
func WriteProbeCSV(path string, start mono.Time, pkts []traffic.ProbePacket) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("csv: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"seq", "sent_s", "recv_s", "owd_ms"})
	for _, p := range pkts {
		if p.Sent == 0 {
			continue
		}
		rec := []string{strconv.Itoa(int(p.Seq)), strconv.FormatFloat(p.Sent.Sub(start).Seconds(), 'f', 6, 64), "", ""}
		if p.Recv != 0 {
			rec[2] = strconv.FormatFloat(p.Recv.Sub(start).Seconds(), 'f', 6, 64)
			rec[3] = strconv.FormatFloat(float64(p.Recv-p.Sent)/1e6, 'f', 3, 64)
		}
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("csv %s: %w", path, err)
	}
	return f.Close()
}

// WriteSummary prints the table people read first.
func (r *Results) WriteSummary(out io.Writer) {
	fmt.Fprintf(out, "\nscenario %s (%.0f s, seed %d) on %s, %d CPUs\n", r.Scenario, r.DurationS, r.Seed, r.Host.Kernel, r.Host.CPUs)
	fmt.Fprintf(out, "emulator zero-impairment baseline: RTT p50 %.3f ms, p99 %.3f ms (n=%d); timer lateness p50 %.0f µs, p99 %.0f µs\n\n",
		r.Baseline.RTTP50ms, r.Baseline.RTTP99ms, r.Baseline.Samples, r.Baseline.TimerP50us, r.Baseline.TimerP99us)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peer\tgoodput Mbit/s\tcapacity Mbit/s\taggregation\tvs mptcp\tprobe lost\tmax gap ms\tooo\towd p50 ms\towd p99 ms\tretrans\t")
	for _, run := range r.Runs {
		vs := "-"
		if run.VsMPTCP != nil {
			vs = fmt.Sprintf("%.2f", *run.VsMPTCP)
		}
		lost, gap, ooo, p50, p99 := "-", "-", "-", "-", "-"
		if p := run.Probe; p != nil {
			lost, gap, ooo = strconv.Itoa(p.Lost), fmt.Sprintf("%.1f", p.MaxGapMs), fmt.Sprintf("%.4f", p.OOOFraction)
			p50, p99 = fmt.Sprintf("%.2f", p.OWDms.P50), fmt.Sprintf("%.2f", p.OWDms.P99)
		}
		retr := "-"
		if run.Bulk != nil {
			retr = strconv.Itoa(int(run.Bulk.Retrans))
		}
		name := run.Peer
		if run.Error != "" {
			name += " (FAILED)"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, run.GoodputMbps, run.CapacitySumMbps,
			run.Aggregation, vs, lost, gap, ooo, p50, p99, retr)
	}
	tw.Flush()
	for _, run := range r.Runs {
		if run.Error != "" {
			fmt.Fprintf(out, "%s: error: %s\n", run.Peer, run.Error)
		}
		if run.Web != nil {
			fmt.Fprintf(out, "%s web: %d flows (%d failed, %d unfinished at the end):", run.Peer, run.Web.Flows, run.Web.Failed, run.Web.Unfinished)
			for _, b := range run.Web.Buckets {
				fmt.Fprintf(out, " %s n=%d p50 %.1f ms p99 %.1f ms;", b.Label, b.Flows, b.P50ms, b.P99ms)
			}
			fmt.Fprintln(out)
		}
		if run.VoIP != nil {
			fmt.Fprintf(out, "%s voip: lost %d/%d, jitter %.2f ms, owd p99 %.2f ms\n", run.Peer, run.VoIP.Lost, run.VoIP.Sent, run.VoIP.JitterMs, run.VoIP.OWDms.P99)
		}
		writeLatency(out, run)
		fmt.Fprintf(out, "%s cpu: lab process %.1f s, helpers %.1f s over %.1f s\n", run.Peer, run.CPU.LabS, run.CPU.ChildrenS, run.CPU.WallS)
		for _, c := range run.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(out, "%s check %s %s: %s\n", run.Peer, mark, c.Name, c.Detail)
		}
	}
}
