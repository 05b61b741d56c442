// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mptun/mptun/internal/jsonout"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/scenario"
	"github.com/mptun/mptun/lab/traffic"
)

// LatencyOptions parameterise `mptun bench latency`.
type LatencyOptions struct {
	Seconds  int // web workload per peer; default 30
	Reps     int // transfers per size, idle and under bulk; default 20
	Out      string
	Progress io.Writer
}

// The paths of issue 17: DSL-like and LTE-like, one-way delays.
const latencyPaths = `
[[path]]
name = "fast"
rate = "20mbit"
up_delay = "8ms"
down_delay = "8ms"
queue_time = "20ms"

[[path]]
name = "slow"
rate = "10mbit"
up_delay = "35ms"
down_delay = "35ms"
queue_time = "70ms"
`

// latencySizes are the transfer sizes of issue 17.
var latencySizes = []int{10000, 100000, 1000000}

// webLoad is the web workload's offered load as a fraction of the fast
// path's rate (20 Mbit/s), so the best single path could carry it alone.
const (
	webLoad     = 0.5
	webFastRate = 20e6
)

// WebRate is the flow arrival rate that offers webLoad of the fast path
// with bounded Pareto (α 0.9, 1 KB–1 MB) sizes.
func WebRate() float64 {
	return webLoad * webFastRate / 8 / traffic.BoundedParetoMean(0.9, 1000, 1e6)
}

// LatencyPeer is one peer's figures.
type LatencyPeer struct {
	Peer      string            `json:"peer"`
	IdleRTT   *traffic.RTTStats `json:"idle_rtt_ms,omitempty"` // ICMP through the peer (none for MPTCP)
	PathRTT   []report.PathPing `json:"path_rtt_ms"`           // each path alone
	Idle      []TransferFigure  `json:"transfers_idle"`
	UnderBulk []TransferFigure  `json:"transfers_under_bulk"`
	// Goodput of the bulk flow beside the transfers and beside the web
	// workload.
	BulkMbps    float64              `json:"bulk_beside_transfers_mbps"`
	WebBulkMbps float64              `json:"bulk_beside_web_mbps"`
	Web         *traffic.WebResult   `json:"web,omitempty"`
	WebOWD      *traffic.OWDResult   `json:"web_owd,omitempty"`
	MPTCP       []*report.MPTCPCheck `json:"mptcp_check,omitempty"`
	// FailedChecks are the lab's honesty checks that failed in the
	// peer's two runs (a busy machine shows as a late emulator timer).
	FailedChecks []report.Check `json:"failed_checks,omitempty"`
	Errors       []string       `json:"errors,omitempty"`
}

// TransferFigure is one size's completion times without the samples.
type TransferFigure struct {
	Bytes  int     `json:"bytes"`
	Done   int     `json:"done"`
	Failed int     `json:"failed"`
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
}

// LatencyResults is results.json of `mptun bench latency`.
type LatencyResults struct {
	Benchmark string          `json:"benchmark"`
	Started   time.Time       `json:"started"`
	WallS     float64         `json:"wall_s"`
	Paths     string          `json:"paths"`
	Method    []string        `json:"method"`
	Host      report.Host     `json:"host"`
	Baseline  report.Baseline `json:"emulator_baseline"`
	LoadStart string          `json:"load_average_start"`
	LoadEnd   string          `json:"load_average_end"`
	// FastPathRTTms is the fast path's idle ICMP RTT p50 (the lowest of
	// the peers' measurements of the path alone).
	FastPathRTTms float64        `json:"fast_path_rtt_ms"`
	WebRate       float64        `json:"web_flows_per_s"`
	Peers         []LatencyPeer  `json:"peers"`
	Targets       []TargetResult `json:"targets"`
	ReportDirs    []string       `json:"report_dirs"`
}

// Peer returns the named peer, or nil.
func (r *LatencyResults) Peer(name string) *LatencyPeer {
	for i := range r.Peers {
		if r.Peers[i].Peer == name {
			return &r.Peers[i]
		}
	}
	return nil
}

func latencyMethod(reps int) []string {
	return []string{
		"Paths fast 20 Mbit/s 8 ms and slow 10 Mbit/s 35 ms one way, both directions, drop-tail buffers max(RTT, 20 ms) at the rate; peers none (fast path alone), mptcp (kernel MPTCP), mptun (shipped defaults), one after another on fresh identical links.",
		"Idle RTT: 50 ICMP echoes 20 ms apart through the peer and over each path alone, user-space send to receive.",
		fmt.Sprintf("Transfers: %d x (10 KB, 100 KB, 1 MB) downloads, each on a fresh TCP (cubic) connection, timed from connect() to the end of the response; first with the network idle, then beside a bulk cubic download that started 3 s earlier.", reps),
		fmt.Sprintf("Web: Poisson arrivals of downloads with bounded Pareto sizes (alpha 0.9, 1 KB-1 MB) offering %.0f %% of the fast path's rate (%.0f flows/s) beside a bulk cubic download; completion by size bucket.", webLoad*100, WebRate()),
		"Web one-way delay: " + traffic.OWDMethod,
	}
}

// RunLatency runs the two scenarios (idle + transfers beside bulk; web
// beside bulk) with the three peers and evaluates issue 17's targets.
func RunLatency(ctx context.Context, o LatencyOptions) (*LatencyResults, error) {
	if o.Seconds <= 0 {
		o.Seconds = 30
	}
	if o.Reps <= 0 {
		o.Reps = 20
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	res := &LatencyResults{Benchmark: "latency", Started: time.Now().UTC(), Method: latencyMethod(o.Reps), WebRate: WebRate(),
		Paths: "fast 20 Mbit/s 8 ms + slow 10 Mbit/s 35 ms one way", LoadStart: loadAverage()}
	peers := []string{"none", "mptcp", "mptun"}
	transfersDur := 3*time.Second + time.Duration(o.Reps)*2500*time.Millisecond
	steps := []struct {
		name, text string
		est        time.Duration
	}{
		{"latency-transfers", transfersScenario(transfersDur, o.Reps), 3 * (transfersDur + time.Duration(o.Reps)*time.Second + 8*time.Second)},
		{"latency-web", webScenario(time.Duration(o.Seconds) * time.Second), 3 * (time.Duration(o.Seconds)*time.Second + 4*time.Second)},
	}
	var est time.Duration
	for _, s := range steps {
		est += s.est
	}
	fmt.Fprintf(o.Progress, "mptun bench latency: 2 scenarios x 3 peers, estimated %s (load average %s); output in %s\n", fmtDur(est), res.LoadStart, o.Out)
	prog := newProgress(o.Progress, len(steps), est)
	defer prog.close()
	var runs [2]*report.Results
	for i, s := range steps {
		prog.startStep(i+1, s.name, s.est)
		dir := filepath.Join(o.Out, s.name)
		lr, err := runLabFile(ctx, dir, s.text, prog.startPeer)
		res.ReportDirs = append(res.ReportDirs, dir)
		if lr == nil {
			return res, err
		}
		runs[i] = lr
		if res.Host.Kernel == "" {
			res.Host, res.Baseline = lr.Host, lr.Baseline
		}
		prog.endStep(fmt.Sprintf("done (%s)", dir))
		if err != nil {
			return res, err
		}
	}
	for _, p := range peers {
		res.Peers = append(res.Peers, latencyPeer(p, runs[0], runs[1]))
	}
	res.FastPathRTTms = pathRTT(res.Peers, "fast")
	res.Targets = LatencyTargets(res)
	res.LoadEnd = loadAverage()
	res.WallS = time.Since(res.Started).Seconds()
	return res, writeLatencyFiles(o.Out, res, runs[1])
}

func transfersScenario(d time.Duration, reps int) string {
	return latencyHead("latency-transfers", "idle RTT and transfers alone, then transfers beside a bulk download", d) + fmt.Sprintf(`
[traffic.idle]
pings = 50
ping_interval = "20ms"
transfers = ["10KB", "100KB", "1MB"]
repeat = %d
cc = "cubic"

[traffic.bulk]
cc = "cubic"
direction = "down"

[traffic.transfers]
sizes = ["10KB", "100KB", "1MB"]
repeat = %d
start = "3s"
gap = "100ms"
cc = "cubic"
`, reps, reps)
}

func webScenario(d time.Duration) string {
	desc := fmt.Sprintf("web workload (bounded Pareto sizes, Poisson arrivals, %.0f %% of the fast path) beside a bulk download", webLoad*100)
	return latencyHead("latency-web", desc, d) + fmt.Sprintf(`
[traffic.bulk]
cc = "cubic"
direction = "down"

[traffic.web]
rate = %.3f
cc = "cubic"
capture = true
`, WebRate())
}

// latencyHead is the start of both generated scenarios: the name, the
// description, the duration, the three peers and latencyPaths.
func latencyHead(name, desc string, d time.Duration) string {
	return fmt.Sprintf(`# generated by mptun bench latency
name = "%s"
description = "%s"
duration = "%s"
seed = 1
peers = ["none", "mptcp", "mptun"]
best_path = "fast"
%s`, name, desc, d, latencyPaths)
}

// runLabFile writes text as dir/scenario.toml and runs it with the lab's
// log in dir/lab.log.
func runLabFile(ctx context.Context, dir, text string, onPeer func(string)) (*report.Results, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "scenario.toml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "lab.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	return scenario.RunWith(ctx, file, dir, scenario.Options{Progress: log, OnPeer: onPeer})
}

func transferFigures(t *traffic.TransferResult) []TransferFigure {
	if t == nil {
		return nil
	}
	var out []TransferFigure
	for _, s := range t.Sizes {
		out = append(out, TransferFigure{Bytes: s.Bytes, Done: s.Done, Failed: s.Failed, P50ms: s.P50ms, P90ms: s.P90ms, P99ms: s.P99ms})
	}
	return out
}

func findRun(r *report.Results, peer string) *report.Run {
	if r == nil {
		return nil
	}
	for _, run := range r.Runs {
		if run.Peer == peer {
			return run
		}
	}
	return nil
}

// latencyPeer gathers a peer's figures from the two scenarios.
func latencyPeer(peer string, transfers, web *report.Results) LatencyPeer {
	p := LatencyPeer{Peer: peer}
	if run := findRun(transfers, peer); run != nil {
		if run.Error != "" {
			p.Errors = append(p.Errors, "transfers scenario: "+run.Error)
		}
		if i := run.Idle; i != nil {
			if i.Ping != nil {
				s := *i.Ping
				s.Samples = nil
				p.IdleRTT = &s
			}
			for _, pp := range i.PathPing {
				pp.RTT.Samples = nil
				p.PathRTT = append(p.PathRTT, pp)
			}
			p.Idle = transferFigures(i.Transfer)
			p.Errors = append(p.Errors, i.Errors...)
		}
		p.UnderBulk = transferFigures(run.Transfers)
		p.FailedChecks = append(p.FailedChecks, failedChecks(run)...)
		p.BulkMbps = run.GoodputMbps
		if run.MPTCP != nil {
			p.MPTCP = append(p.MPTCP, run.MPTCP)
		}
	} else {
		p.Errors = append(p.Errors, "transfers scenario: no run")
	}
	if run := findRun(web, peer); run != nil {
		if run.Error != "" {
			p.Errors = append(p.Errors, "web scenario: "+run.Error)
		}
		p.Web, p.WebOWD, p.WebBulkMbps = run.Web, run.WebOWD, run.GoodputMbps
		p.FailedChecks = append(p.FailedChecks, failedChecks(run)...)
		if run.MPTCP != nil {
			p.MPTCP = append(p.MPTCP, run.MPTCP)
		}
	} else {
		p.Errors = append(p.Errors, "web scenario: no run")
	}
	return p
}

// pathRTT is the path's idle RTT: each peer pings the paths alone on
// identical links and a busy machine only adds delay, so the lowest of the
// peers' medians; 0 if none was measured.
func pathRTT(peers []LatencyPeer, path string) float64 {
	best := 0.0
	for _, p := range peers {
		for _, pp := range p.PathRTT {
			if pp.Path == path && pp.RTT.Received > 0 && (best == 0 || pp.RTT.P50 < best) {
				best = pp.RTT.P50
			}
		}
	}
	return best
}

func failedChecks(run *report.Run) []report.Check {
	var out []report.Check
	for _, c := range run.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

func transferP50(figs []TransferFigure, bytes int) *float64 {
	for _, f := range figs {
		if f.Bytes == bytes && f.Done > 0 {
			return ptr(f.P50ms)
		}
	}
	return nil
}

func webQuantile(w *traffic.WebResult, label string, p99 bool) *float64 {
	if w == nil {
		return nil
	}
	for _, b := range w.Buckets {
		if b.Label == label && b.Flows > 0 {
			if p99 {
				return ptr(b.P99ms)
			}
			return ptr(b.P50ms)
		}
	}
	return nil
}

// LatencyTargets judges issue 17's targets for mptun.
func LatencyTargets(r *LatencyResults) []TargetResult {
	var ts []TargetResult
	none, mptcp, mptun := r.Peer("none"), r.Peer("mptcp"), r.Peer("mptun")
	judge := func(id, text string, value *float64, limit *float64, op, detail string) {
		t := TargetResult{ID: id, Issue: 17, Text: text, Op: op, Detail: detail}
		if value == nil || limit == nil {
			t.Detail = strings.TrimPrefix(t.Detail+"; not measured", "; ")
			ts = append(ts, t)
			return
		}
		t.Value, t.Limit = value, *limit
		if op == "<=" {
			t.Pass = *value <= *limit
		}
		ts = append(ts, t)
	}
	scaled := func(v *float64, k float64) *float64 {
		if v == nil {
			return nil
		}
		return ptr(*v * k)
	}
	if mptun == nil || none == nil {
		return ts
	}
	var rtt *float64
	if mptun.IdleRTT != nil {
		rtt = &mptun.IdleRTT.P50
	}
	var fast *float64
	if r.FastPathRTTms > 0 {
		fast = ptr(r.FastPathRTTms + 2)
	}
	judge("idle_rtt", "idle RTT through mptun <= fast path alone + 2 ms", rtt, fast, "<=", "ms, ICMP p50")
	for _, phase := range []struct {
		id   string
		get  func(*LatencyPeer) []TransferFigure
		text string
	}{{"idle", func(p *LatencyPeer) []TransferFigure { return p.Idle }, "idle"},
		{"bulk", func(p *LatencyPeer) []TransferFigure { return p.UnderBulk }, "under bulk"}} {
		for _, s := range []struct {
			bytes int
			label string
			k     float64
		}{{10000, "10kb", 1.1}, {100000, "100kb", 1.1}, {1000000, "1mb", 1.0}} {
			judge(fmt.Sprintf("transfer_%s_%s", s.label, phase.id),
				fmt.Sprintf("%s transfer p50 %s <= %.1f x fast path alone", strings.ToUpper(s.label), phase.text, s.k),
				transferP50(phase.get(mptun), s.bytes), scaled(transferP50(phase.get(none), s.bytes), s.k), "<=", "ms")
		}
	}
	for _, b := range []string{"<=10KB", "10-100KB", ">100KB"} {
		for _, p99 := range []bool{false, true} {
			q := "p50"
			if p99 {
				q = "p99"
			}
			v := webQuantile(mptun.Web, b, p99)
			judge(fmt.Sprintf("web_%s_%s_vs_best", b, q), fmt.Sprintf("web flows %s completion %s <= 1.1 x best path", b, q),
				v, scaled(webQuantile(none.Web, b, p99), 1.1), "<=", "ms, beside bulk")
			if mptcp != nil {
				judge(fmt.Sprintf("web_%s_%s_vs_mptcp", b, q), fmt.Sprintf("web flows %s completion %s <= kernel MPTCP", b, q),
					v, webQuantile(mptcp.Web, b, p99), "<=", "ms, beside bulk")
			}
		}
	}
	return ts
}

func writeLatencyFiles(dir string, r *LatencyResults, web *report.Results) error {
	f, err := os.Create(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	err = jsonout.Print(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	var series []report.CCDFSeries
	for _, p := range r.Peers {
		if p.WebOWD != nil {
			series = append(series, report.CCDFSeries{Name: p.Peer, Sorted: p.WebOWD.OWD})
		}
	}
	_, err = report.PlotCCDF(filepath.Join(dir, "web_owd_ccdf.png"),
		"web flows beside bulk: per-packet one-way delay (fast 20 Mbit/s 8 ms + slow 10 Mbit/s 35 ms)", "one-way delay (ms)", series)
	return err
}

// WriteLatencyTable prints the figures side by side and the targets.
func WriteLatencyTable(out io.Writer, r *LatencyResults) {
	fmt.Fprintf(out, "\nmptun bench latency: %s, on %s (%d CPUs), %s; load average %s -> %s\n", r.Paths, r.Host.Kernel, r.Host.CPUs,
		fmtDur(time.Duration(r.WallS*float64(time.Second))), r.LoadStart, r.LoadEnd)
	fmt.Fprintf(out, "emulator baseline RTT p50 %.3f ms p99 %.3f ms\n\n", r.Baseline.RTTP50ms, r.Baseline.RTTP99ms)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	names := []string{"none", "mptcp", "mptun"}
	fmt.Fprintln(tw, "measure\tbest path (fast alone)\tkernel MPTCP\tmptun\t")
	row := func(label string, cell func(*LatencyPeer) string) {
		fmt.Fprint(tw, label)
		for _, n := range names {
			p := r.Peer(n)
			v := "-"
			if p != nil {
				v = cell(p)
			}
			fmt.Fprintf(tw, "\t%s", v)
		}
		fmt.Fprintln(tw, "\t")
	}
	row("idle RTT through the peer p50 (min-max) ms", func(p *LatencyPeer) string {
		if p.IdleRTT == nil {
			return "- (no ICMP)"
		}
		return fmt.Sprintf("%.1f (%.1f-%.1f)", p.IdleRTT.P50, p.IdleRTT.Min, p.IdleRTT.Max)
	})
	row("idle RTT of each path alone p50 ms", func(p *LatencyPeer) string {
		var s []string
		for _, pp := range p.PathRTT {
			s = append(s, fmt.Sprintf("%s %.1f", pp.Path, pp.RTT.P50))
		}
		return strings.Join(s, ", ")
	})
	for _, phase := range []struct {
		label string
		get   func(*LatencyPeer) []TransferFigure
	}{{"idle", func(p *LatencyPeer) []TransferFigure { return p.Idle }}, {"under bulk", func(p *LatencyPeer) []TransferFigure { return p.UnderBulk }}} {
		for _, size := range latencySizes {
			row(fmt.Sprintf("%s transfer %s p50/p90/p99 ms (n)", humanBytes(size), phase.label), func(p *LatencyPeer) string {
				for _, f := range phase.get(p) {
					if f.Bytes == size {
						return fmt.Sprintf("%.0f/%.0f/%.0f (%d)", f.P50ms, f.P90ms, f.P99ms, f.Done)
					}
				}
				return "-"
			})
		}
	}
	row("bulk goodput beside transfers / web Mbit/s", func(p *LatencyPeer) string {
		return fmt.Sprintf("%.1f / %.1f", p.BulkMbps, p.WebBulkMbps)
	})
	for _, b := range []string{"<=10KB", "10-100KB", ">100KB"} {
		row("web "+b+" completion p50/p99 ms (n)", func(p *LatencyPeer) string {
			if p.Web == nil {
				return "-"
			}
			for _, bk := range p.Web.Buckets {
				if bk.Label == b {
					return fmt.Sprintf("%.0f/%.0f (%d)", bk.P50ms, bk.P99ms, bk.Flows)
				}
			}
			return "-"
		})
	}
	row("web one-way delay p50/p99/p99.9/p99.99 ms", func(p *LatencyPeer) string {
		if p.WebOWD == nil || p.WebOWD.Samples == 0 {
			return "-"
		}
		q := p.WebOWD.OWDms
		return fmt.Sprintf("%.1f/%.1f/%.1f/%.1f (n=%d)", q.P50, q.P99, q.P999, q.P9999, p.WebOWD.Samples)
	})
	row("MPTCP check", func(p *LatencyPeer) string {
		if len(p.MPTCP) == 0 {
			return ""
		}
		var s []string
		for _, m := range p.MPTCP {
			s = append(s, m.Detail)
		}
		return strings.Join(s, " | ")
	})
	tw.Flush()
	fmt.Fprintln(out, "\ntargets (issue 17), for mptun:")
	pass := 0
	for _, t := range r.Targets {
		mark := "FAIL"
		if t.Pass {
			mark = "PASS"
			pass++
		}
		fmt.Fprintf(out, "  %s %-32s %s: %s %s %.1f (%s)\n", mark, t.ID, t.Text, dash(t.Value, "%.1f"), t.Op, t.Limit, t.Detail)
	}
	fmt.Fprintf(out, "  %d of %d targets met\n", pass, len(r.Targets))
	for _, p := range r.Peers {
		for _, e := range p.Errors {
			fmt.Fprintf(out, "error (%s): %s\n", p.Peer, e)
		}
		for _, c := range p.FailedChecks {
			fmt.Fprintf(out, "check failed (%s): %s: %s — figures suspect (a busy machine shows as a late emulator timer)\n", p.Peer, c.Name, c.Detail)
		}
	}
}

func humanBytes(n int) string {
	switch {
	case n >= 1000000:
		return fmt.Sprintf("%g MB", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%g KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

const latencyUsage = `usage: mptun bench latency [--seconds S] [--reps N] [--out DIR] [--json]

Issue 17's latency benchmark on two emulated paths (20 Mbit/s 8 ms + 10
Mbit/s 35 ms one way): best single path, kernel MPTCP and mptun (shipped
defaults) side by side: idle RTT, 10 KB / 100 KB / 1 MB transfer completion
alone and beside a bulk flow, a web workload beside bulk with its per-packet
one-way delay CCDF. Writes results.json and web_owd_ccdf.png into DIR
(default lab-out/latency-TIME). About 7 minutes with the defaults.
`

// LatencyMain implements `mptun bench latency`; args exclude "latency".
func LatencyMain(args []string, asJSON bool, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, latencyUsage) }
	var o LatencyOptions
	fs.IntVar(&o.Seconds, "seconds", 30, "web workload per peer")
	fs.IntVar(&o.Reps, "reps", 20, "transfers per size, idle and under bulk")
	fs.StringVar(&o.Out, "out", "", "output directory (default lab-out/latency-TIME)")
	if !parseFlags(fs, args, latencyUsage, stderr) {
		return 2
	}
	ctx, stop, ok := startRun("bench latency", "latency", &o.Out, stderr)
	if !ok {
		return 1
	}
	defer stop()
	o.Progress = stderr
	res, err := RunLatency(ctx, o)
	if err != nil {
		return failStatus("bench latency", err, stderr)
	}
	if asJSON {
		jsonout.Print(stdout, res)
		return 0
	}
	WriteLatencyTable(stdout, res)
	fmt.Fprintf(stdout, "\nreport: %s (results.json, web_owd_ccdf.png; one lab report per scenario)\n", o.Out)
	return 0
}
