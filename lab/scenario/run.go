// SPDX-License-Identifier: MIT

package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/topo"
	"github.com/mptun/mptun/lab/traffic"
)

// Options adjust a run without editing the scenario.
type Options struct {
	Progress io.Writer     // progress and summary; default os.Stdout
	Peers    []string      // run only these peers
	Duration time.Duration // shorten the run; later events are dropped
	// Scale multiplies the duration and every event time (0.25 turns the
	// 60 s demo into 15 s with the same shape), for quick CI runs.
	Scale float64
	Seed  uint64 // override the scenario's seed if non-zero
	// OnPeer, if set, is called as each peer's run starts (progress
	// displays of programs that run many scenarios).
	OnPeer func(peer string)
}

const binWidth = 100 * time.Millisecond

// Run runs the scenario in file and writes its report into outDir.
func Run(ctx context.Context, file, outDir string) (*report.Results, error) {
	return RunWith(ctx, file, outDir, Options{})
}

// RunWith is Run with options. Everything it builds is torn down before it
// returns, also when ctx is cancelled.
func RunWith(ctx context.Context, file, outDir string, opt Options) (*report.Results, error) {
	out := opt.Progress
	if out == nil {
		out = os.Stdout
	}
	sc, err := Load(file)
	if err != nil {
		return nil, err
	}
	// Daemons run in other namespaces and take socket and log paths from
	// generated configs: those must not depend on the working directory.
	if outDir, err = filepath.Abs(outDir); err != nil {
		return nil, err
	}
	if opt.Scale > 0 && opt.Scale != 1 {
		sc.Duration = Duration(float64(sc.Duration) * opt.Scale)
		for i := range sc.Events {
			e := &sc.Events[i]
			e.At = Duration(float64(e.At) * opt.Scale)
			e.Every = Duration(float64(e.Every) * opt.Scale)
			e.Until = Duration(float64(e.Until) * opt.Scale)
		}
	}
	if opt.Duration > 0 && opt.Duration < sc.Duration.D() {
		sc.Duration = Duration(opt.Duration)
		var keep []EventConf
		for _, e := range sc.Events {
			if e.At.D() < opt.Duration {
				keep = append(keep, e)
			}
		}
		sc.Events = keep
	}
	sc.Events = expandEvents(sc.Events, sc.Duration)
	if len(opt.Peers) > 0 {
		sc.Peers = opt.Peers
	}
	if opt.Seed != 0 {
		sc.Seed = opt.Seed
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if removed, err := netns.CleanupStale(); len(removed) > 0 || err != nil {
		fmt.Fprintf(out, "removed %d namespaces left by crashed runs %v %v\n", len(removed), removed, errOrEmpty(err))
	}
	if r, err := startReaper(); err != nil {
		fmt.Fprintf(out, "lab: warning: no reaper (namespaces would outlive a killed run): %v\n", err)
	} else {
		defer r.stop()
	}
	res := &report.Results{
		Scenario: sc.Name, Description: sc.Description, File: file, Started: time.Now().UTC(),
		DurationS: sc.Duration.D().Seconds(), Seed: sc.Seed, Host: hostInfo(),
	}
	fmt.Fprintf(out, "lab: scenario %s: %d paths, %v, peers %s\n", sc.Name, len(sc.Paths), sc.Duration.D(), strings.Join(sc.Peers, ", "))
	res.Baseline, err = measureBaseline(ctx)
	if err != nil {
		return res, fmt.Errorf("lab: emulator baseline: %w", err)
	}
	fmt.Fprintf(out, "lab: emulator baseline RTT p50 %.3f ms p99 %.3f ms\n", res.Baseline.RTTP50ms, res.Baseline.RTTP99ms)
	for _, peer := range sc.Peers {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(out, "lab: [%s] running\n", peer)
		if opt.OnPeer != nil {
			opt.OnPeer(peer)
		}
		self0, child0, wall0 := cpuTimes(), childCPUTimes(), time.Now()
		run := runPeer(ctx, sc, peer, outDir, out)
		run.CPU = report.CPU{LabS: cpuTimes() - self0, ChildrenS: childCPUTimes() - child0, WallS: time.Since(wall0).Seconds()}
		res.Runs = append(res.Runs, run)
		if run.Error != "" {
			fmt.Fprintf(out, "lab: [%s] failed: %s\n", peer, run.Error)
		} else {
			fmt.Fprintf(out, "lab: [%s] goodput %.2f Mbit/s\n", peer, run.GoodputMbps)
		}
	}
	res.FillRatios()
	var errs []error
	errs = append(errs, res.WriteJSON(outDir))
	files, err := res.Plot(outDir)
	errs = append(errs, err)
	res.WriteSummary(out)
	if f, err := os.Create(filepath.Join(outDir, "summary.txt")); err == nil {
		res.WriteSummary(f)
		f.Close()
	}
	fmt.Fprintf(out, "\nreport: %s (results.json, summary.txt, %d plots)\n", outDir, len(files))
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("lab: interrupted: %w", ctx.Err()))
	}
	return res, errors.Join(errs...)
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func dirOfTraffic(d string) emu.Dir {
	if d == "up" {
		return emu.AB
	}
	return emu.BA
}

// runPeer runs one peer on a freshly built copy of the scenario's links.
func runPeer(ctx context.Context, sc *Scenario, peer, outDir string, out io.Writer) *report.Run {
	run := &report.Run{Peer: peer, Dir: filepath.Join(outDir, peer), BinWidth: binWidth}
	fail := func(err error) *report.Run {
		run.Error = err.Error()
		return run
	}
	if err := os.MkdirAll(run.Dir, 0o755); err != nil {
		return fail(err)
	}
	var logs []*os.File
	defer func() {
		for _, f := range logs {
			f.Close()
		}
	}()
	tb, err := topo.Build(ctx, sc.PathSpecs(), testbedOptions(sc, run.Dir, &logs))
	if err != nil {
		return fail(err)
	}
	defer tb.Close()
	pr, err := newPeer(peer)
	if err != nil {
		return fail(err)
	}
	best := sc.Best()
	ep, err := pr.Setup(ctx, &PeerRun{Scenario: sc, Testbed: tb, Dir: run.Dir, Best: best})
	defer pr.Close()
	if err != nil {
		return fail(fmt.Errorf("setup: %w", err))
	}
	run.Note = ep.Note
	run.Idle = runIdle(ctx, sc, tb, ep)
	lr := newLiveRun(sc, tb, run, peer, out,
		traffic.Env{Cli: tb.Cli, Srv: tb.Srv, ServerAddr: ep.ServerAddr, ClientBind: ep.ClientBind, MPTCP: ep.MPTCP, Start: mono.Now()})
	run.Start = lr.env.Start
	lr.pr = pr

	rctx, cancel := context.WithTimeout(ctx, sc.Duration.D())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); lr.events(rctx) }()
	go func() { defer wg.Done(); lr.accountCapacity(rctx) }()
	lr.startTraffic(rctx, &wg, ep)
	wg.Wait()
	if pm, ok := pr.(PeerMetrics); ok {
		m, err := pm.Metrics(ctx)
		if err != nil {
			m = map[string]string{"error": err.Error()}
		}
		if tm, ok := m.(*report.TunnelMetrics); ok {
			tm.Align(run.Start)
		}
		run.PeerMetrics = m
	}
	finishLatency(run, lr.bulk, tb, ep)
	lr.summarise()
	if ctx.Err() != nil && run.Error == "" {
		run.Error = "interrupted"
	}
	return run
}

// testbedOptions are the emulator's options for sc; with packet logs on,
// the log files it opens are appended to logs for the caller to close.
func testbedOptions(sc *Scenario, dir string, logs *[]*os.File) topo.Options {
	topt := topo.Options{Seed: sc.Seed}
	if sc.PacketLog {
		topt.Log = func(i int, d emu.Dir) io.Writer {
			name := "up"
			if d == emu.BA {
				name = "down"
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("emu-%s-%s.log", sc.Paths[i].Name, name)))
			if err != nil {
				return nil
			}
			*logs = append(*logs, f)
			return f
		}
	}
	return topt
}

// liveRun is one peer's run while it goes: the timed events, the capacity
// accounting and the traffic share it.
type liveRun struct {
	sc      *Scenario
	tb      *topo.Testbed
	run     *report.Run
	peer    string
	out     io.Writer
	env     traffic.Env
	bulkDir emu.Dir
	pr      PeerRunner // for the events that act on the tunnel peer

	mu      sync.Mutex // guards carrier, capBits and run.Events
	carrier []bool     // per path: up (not blackholed or down)
	capBits []float64  // per path: capacity offered so far, in bits

	bulk    *traffic.BulkResult
	bulkErr error
}

func newLiveRun(sc *Scenario, tb *topo.Testbed, run *report.Run, peer string, out io.Writer, env traffic.Env) *liveRun {
	lr := &liveRun{sc: sc, tb: tb, run: run, peer: peer, out: out, env: env, bulkDir: measuredDir(sc),
		carrier: make([]bool, len(tb.Paths)), capBits: make([]float64, len(tb.Paths))}
	for i := range lr.carrier {
		lr.carrier[i] = true
	}
	return lr
}

// events applies the scenario's timed events until ctx is done.
func (lr *liveRun) events(ctx context.Context) {
	evs := append([]EventConf(nil), lr.sc.Events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	for _, e := range evs {
		select {
		case <-ctx.Done():
			return
		case <-time.After(lr.env.Start.Add(e.At.D()).Sub(mono.Now())):
		}
		err := applyEvent(ctx, lr.tb, lr.sc, lr.pr, e, func(i int, up bool) { lr.mu.Lock(); lr.carrier[i] = up; lr.mu.Unlock() })
		ev := report.Event{AtS: mono.Now().Sub(lr.env.Start).Seconds(), Path: e.Path, Action: e.Action}
		if err != nil {
			ev.Error = err.Error()
		}
		fmt.Fprintf(lr.out, "lab: [%s] t=%.1fs %s %s %s\n", lr.peer, ev.AtS, e.Path, e.Action, ev.Error)
		lr.mu.Lock()
		lr.run.Events = append(lr.run.Events, ev)
		lr.mu.Unlock()
	}
}

// accountCapacity adds up each path's capacity in the bulk direction and
// prints progress every 5 s until ctx is done.
func (lr *liveRun) accountCapacity(ctx context.Context) {
	const tick = 50 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	last := mono.Now()
	lastBytes := make([]uint64, len(lr.tb.Paths))
	nextPrint := lr.env.Start.Add(5 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := mono.Now()
		dt := now.Sub(last).Seconds()
		last = now
		lr.mu.Lock()
		for i, p := range lr.tb.Paths {
			lr.capBits[i] += capacity(p.Link.Config(lr.bulkDir), lr.carrier[i]) * dt
		}
		lr.mu.Unlock()
		if now >= nextPrint {
			var b strings.Builder
			for i, p := range lr.tb.Paths {
				s := p.Link.Stats(lr.bulkDir).SerializedBytes
				fmt.Fprintf(&b, " %s %.1f", p.Spec.Name, float64(s-lastBytes[i])*8/5/1e6)
				lastBytes[i] = s
			}
			fmt.Fprintf(lr.out, "lab: [%s] %3.0f/%.0f s  Mbit/s:%s\n", lr.peer, now.Sub(lr.env.Start).Seconds(), lr.sc.Duration.D().Seconds(), b.String())
			nextPrint = nextPrint.Add(5 * time.Second)
		}
	}
}

// startTraffic starts the scenario's traffic generators, each in a
// goroutine counted in wg; they record their results in the run.
func (lr *liveRun) startTraffic(ctx context.Context, wg *sync.WaitGroup, ep Endpoint) {
	sc, env, run := lr.sc, lr.env, lr.run
	if b := sc.Traffic.Bulk; b != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := traffic.RunBulk(ctx, env, traffic.BulkConfig{CC: defaultCC(b.CC), Down: b.Direction != "up", Streams: b.Streams})
			lr.bulk, lr.bulkErr = &r, err
		}()
	}
	if p := sc.Traffic.Probe; p != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := traffic.RunProbe(ctx, env, traffic.ProbeConfig{PPS: p.PPS, Size: p.Size, Down: p.Direction != "up", Stream: ep.StreamProbe})
			if err != nil && r.Err == "" {
				r.Err = err.Error()
			}
			run.Probe = &r
		}()
	}
	if v := sc.Traffic.VoIP; v != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := traffic.RunProbe(ctx, env, traffic.ProbeConfig{PPS: 50, Size: 160, Port: 5310, Down: v.Direction != "up", Stream: ep.StreamProbe})
			run.VoIP = &r
		}()
	}
	startLatencyTraffic(ctx, wg, sc, lr.tb, env, ep, run)
	if w := sc.Traffic.Web; w != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := traffic.RunWeb(ctx, env, traffic.WebConfig{Rate: w.Rate, CC: defaultCC(w.CC), Seed: sc.Seed})
			run.Web = &r
		}()
	}
}

// summarise fills the run's results once the traffic has ended: bulk
// goodput, each path's capacity and use, the checks and the CSV files.
func (lr *liveRun) summarise() {
	sc, run, env := lr.sc, lr.run, lr.env
	elapsed := mono.Now().Sub(env.Start)
	if elapsed > sc.Duration.D() {
		elapsed = sc.Duration.D() // the probe's grace period is not capacity time
	}
	if bulk := lr.bulk; bulk != nil {
		b := sc.Traffic.Bulk
		run.Bulk = &report.BulkSummary{CC: defaultCC(b.CC), Direction: dirName(b.Direction), Bytes: bulk.Bytes, GoodputMbps: bulk.GoodputMbps, Retrans: bulk.Retrans, DSACKs: bulk.DSACKs, RTOs: bulk.Timeouts}
		if lr.bulkErr != nil {
			run.Bulk.Error = lr.bulkErr.Error()
			run.Error = "bulk: " + lr.bulkErr.Error()
		}
		run.GoodputMbps = bulk.GoodputMbps
		run.GoodputBins = padBins(bulk.Bins.Mbps(), elapsed)
	}
	for i, p := range lr.tb.Paths {
		pr := lr.pathRun(i, p, elapsed)
		run.CapacitySumMbps += pr.CapacityMbps
		run.Paths = append(run.Paths, pr)
	}
	run.Checks = checks(run)
	if run.Probe != nil {
		if err := report.WriteProbeCSV(filepath.Join(run.Dir, "probe.csv"), env.Start, run.Probe.Packets); err != nil {
			run.Checks = append(run.Checks, report.Check{Name: "csv", Detail: err.Error()})
		}
	}
	if run.VoIP != nil {
		_ = report.WriteProbeCSV(filepath.Join(run.Dir, "voip.csv"), env.Start, run.VoIP.Packets)
	}
}

// pathRun is path i's part of the report over elapsed.
func (lr *liveRun) pathRun(i int, p *topo.Path, elapsed time.Duration) report.PathRun {
	st := p.Link.Stats(lr.bulkDir)
	pr := report.PathRun{
		Name:             p.Spec.Name,
		CapacityMbps:     lr.capBits[i] / elapsed.Seconds() / 1e6,
		SerializedMbps:   float64(st.SerializedBytes) * 8 / elapsed.Seconds() / 1e6,
		DroppedQueue:     st.DroppedQueue,
		DroppedLoss:      st.DroppedLoss,
		DroppedBlackhole: st.DroppedBlackhole,
		MaxQueueBytes:    st.MaxQueueBytes,
		MaxSojournMs:     float64(st.MaxSojourn) / 1e6,
		QueuedArrivals:   st.NonEmptyQueue,
		SocketDrops:      st.SocketDrops,
		SendErrors:       st.SendErrors,
		TimerP99us:       float64(p.Link.TimerLateness(lr.bulkDir).Quantile(0.99)) / 1e3,
		Bins:             padBins(binsSince(p.Link.Bins(lr.bulkDir), lr.env.Start), elapsed),
	}
	if pr.CapacityMbps > 0 {
		pr.Utilisation = pr.SerializedMbps / pr.CapacityMbps
	}
	return pr
}

func dirName(d string) string {
	if d == "up" {
		return "up"
	}
	return "down"
}

func defaultCC(cc string) string {
	if cc == "" {
		return "cubic" // the machine default may be bbr: always explicit
	}
	return cc
}

// capacity is what a direction can carry now, in bit/s (0 if unlimited,
// blackholed or without carrier).
func capacity(c emu.Config, carrier bool) float64 {
	if c.Blackhole || !carrier {
		return 0
	}
	if c.Trace != nil {
		return c.Trace.MeanRate() * traceScale(c.TraceScale)
	}
	return c.Rate
}

func binsSince(bins []emu.Bin, start mono.Time) []float64 {
	var out []float64
	for _, b := range bins {
		i := int(b.Start.Sub(start) / binWidth)
		if i < 0 {
			continue
		}
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i] += float64(b.Bytes) * 8 / binWidth.Seconds() / 1e6
	}
	return out
}

// padBins extends bins with zeros to cover d (a dead path stops producing
// bins) and cuts bins beyond it.
func padBins(b []float64, d time.Duration) []float64 {
	n := int(d / binWidth)
	if len(b) > n {
		return b[:n]
	}
	for len(b) < n {
		b = append(b, 0)
	}
	return b
}

func checks(run *report.Run) []report.Check {
	var cs []report.Check
	var queued, drops uint64
	worst := 0.0
	for _, p := range run.Paths {
		queued += p.QueuedArrivals
		drops += p.SocketDrops
		worst = max(worst, p.TimerP99us)
	}
	cs = append(cs, report.Check{Name: "no-socket-drops", OK: drops == 0,
		Detail: fmt.Sprintf("%d frames dropped by the kernel before the emulator read them", drops)})
	if run.Bulk != nil {
		cs = append(cs, report.Check{Name: "bottleneck-in-emulator", OK: queued > 0,
			Detail: fmt.Sprintf("%d arrivals found a queue in the emulator (0 means the bottleneck was elsewhere)", queued)})
	}
	cs = append(cs, report.Check{Name: "emulator-timer", OK: worst < 500,
		Detail: fmt.Sprintf("worst path timer lateness p99 %.0f µs (limit 500)", worst)})
	return cs
}

// applyEvent changes a path as the event says.
func applyEvent(ctx context.Context, tb *topo.Testbed, sc *Scenario, pr PeerRunner, e EventConf, setCarrier func(int, bool)) error {
	switch e.Action {
	case "restart_server":
		return restartServer(ctx, pr, e)
	case "tunnel_set", "tunnel_reload", "restart_client":
		return tunnelEvent(ctx, pr, e)
	}
	i := sc.PathIndex(e.Path)
	l := tb.Paths[i].Link
	dirs := []emu.Dir{emu.AB, emu.BA}
	switch e.Dir {
	case "up":
		dirs = dirs[:1]
	case "down":
		dirs = dirs[1:]
	}
	update := func(fn func(*emu.Config)) error {
		var errs []error
		for _, d := range dirs {
			errs = append(errs, l.Update(d, fn))
		}
		return errors.Join(errs...)
	}
	switch e.Action {
	case "blackhole":
		return update(func(c *emu.Config) { c.Blackhole = true })
	case "restore":
		return update(func(c *emu.Config) { c.Blackhole = false })
	case "link_down", "link_up":
		up := e.Action == "link_up"
		setCarrier(i, up)
		return tb.SetCarrier(ctx, i, up)
	case "readdress":
		return readdress(ctx, tb, i, e)
	case "set":
		return update(func(c *emu.Config) {
			if e.Rate > 0 {
				c.Rate = float64(e.Rate)
				c.Trace = nil
			}
			if e.RTT > 0 {
				c.Delay = e.RTT.D() / 2
			}
			if e.Delay > 0 {
				c.Delay = e.Delay.D()
			}
			if e.Loss != nil {
				c.Loss = *e.Loss
			}
			if e.Queue > 0 {
				c.QueueBytes = int(e.Queue)
			}
		})
	}
	return fmt.Errorf("unknown action %q", e.Action)
}

func hostInfo() report.Host {
	h := report.Host{GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Sysctls: map[string]string{}}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	for _, k := range []string{"net.ipv4.tcp_congestion_control", "net.core.default_qdisc", "net.mptcp.enabled",
		"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.rmem_max", "net.core.wmem_max"} {
		if b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(k, ".", "/")); err == nil {
			h.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	return h
}

func rusage(who int) float64 {
	var ru unix.Rusage
	if unix.Getrusage(who, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func cpuTimes() float64      { return rusage(unix.RUSAGE_SELF) }
func childCPUTimes() float64 { return rusage(unix.RUSAGE_CHILDREN) }
