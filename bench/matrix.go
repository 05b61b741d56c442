// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/internal/jsonout"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/scenario"
)

// MatrixOptions parameterise `mptun bench matrix`.
type MatrixOptions struct {
	Quick    bool
	Cells    string // comma-separated glob patterns of cell names
	Seconds  int    // timed traffic per peer and cell; default 20, 12 with Quick
	Out      string // output directory (created)
	Progress io.Writer
}

// Seconds returns the effective timed-traffic length.
func (o MatrixOptions) duration() time.Duration {
	switch {
	case o.Seconds > 0:
		return time.Duration(o.Seconds) * time.Second
	case o.Quick:
		return 12 * time.Second
	}
	return 20 * time.Second
}

// RunMatrix runs the selected cells one after another and writes the
// output files after every cell, so an interrupted or killed run leaves
// the finished cells behind. Cancelling ctx stops at once; the lab tears
// down what it built.
func RunMatrix(ctx context.Context, o MatrixOptions) (*MatrixResults, error) {
	cells, err := SelectCells(o.Cells, o.Quick)
	if err != nil {
		return nil, err
	}
	if o.Out == "" {
		return nil, errors.New("matrix: no output directory")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	d := o.duration()
	res := &MatrixResults{Benchmark: "matrix", Started: time.Now().UTC(), Quick: o.Quick, Seconds: d.Seconds(), Method: matrixMethod,
		LoadStart: loadAverage()}
	var est time.Duration
	for _, c := range cells {
		est += EstimateCell(c, d)
	}
	fmt.Fprintf(o.Progress, "mptun bench matrix: %d cells, %v of traffic per peer, estimated %s (load average %s); output in %s\n",
		len(cells), d, fmtDur(est), res.LoadStart, o.Out)
	prog := newProgress(o.Progress, len(cells), est)
	defer prog.close()
	for k, c := range cells {
		if ctx.Err() != nil {
			break
		}
		prog.startStep(k+1, c.Name, EstimateCell(c, d))
		start := time.Now()
		lr, cr := runCell(ctx, c, d, o.Out, prog)
		cr.WallS = time.Since(start).Seconds()
		if lr != nil && res.Host.Kernel == "" {
			res.Host, res.Baseline = lr.Host, lr.Baseline
		}
		res.Cells = append(res.Cells, cr)
		res.Summary = Summarise(res.Cells)
		res.WallS = time.Since(res.Started).Seconds()
		res.LoadEnd = loadAverage()
		if _, err := WriteMatrixFiles(o.Out, res); err != nil {
			return res, err
		}
		prog.endStep(cellLine(cr))
	}
	res.Interrupted = ctx.Err() != nil
	res.WallS = time.Since(res.Started).Seconds()
	if _, err := WriteMatrixFiles(o.Out, res); err != nil {
		return res, err
	}
	if res.Interrupted {
		return res, fmt.Errorf("matrix: interrupted: %w", ctx.Err())
	}
	return res, nil
}

// runCell runs the cell's scenario into out/cells/NAME and evaluates it.
func runCell(ctx context.Context, c Cell, d time.Duration, out string, prog *progress) (*report.Results, CellResult) {
	dir := filepath.Join(out, "cells", c.Name)
	fail := func(err error) (*report.Results, CellResult) {
		cr := evaluate(c, nil)
		cr.ReportDir, cr.Error = dir, err.Error()
		return nil, cr
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	file := filepath.Join(dir, "scenario.toml")
	if err := os.WriteFile(file, []byte(c.Scenario(d)), 0o644); err != nil {
		return fail(err)
	}
	log, err := os.Create(filepath.Join(dir, "lab.log"))
	if err != nil {
		return fail(err)
	}
	defer log.Close()
	lr, err := scenario.RunWith(ctx, file, dir, scenario.Options{Progress: log, OnPeer: prog.startPeer})
	cr := evaluate(c, lr)
	cr.ReportDir = dir
	if err != nil {
		cr.Error = err.Error()
	}
	return lr, cr
}

// cellLine is the one-line result printed as a cell finishes.
func cellLine(c CellResult) string {
	var b strings.Builder
	for _, p := range c.Peers {
		name := map[string]string{"none": "best"}[p.Peer]
		if name == "" {
			name = p.Peer
		}
		if p.Error != "" {
			fmt.Fprintf(&b, "%s FAILED (%s), ", name, p.Error)
			continue
		}
		fmt.Fprintf(&b, "%s %.2f", name, p.GoodputMbps)
		if p.MPTCP != nil {
			fmt.Fprintf(&b, " [%s]", mptcpCell(&p))
		}
		b.WriteString(", ")
	}
	fmt.Fprintf(&b, "mptun/best %s, mptun/mptcp %s; targets %s", dash(c.MptunVsBest, "%.2f"), dash(c.MptunVsMPTCP, "%.2f"), targetsCell(c))
	if c.Error != "" {
		fmt.Fprintf(&b, "; error: %s", c.Error)
	}
	return b.String()
}

const matrixUsage = `usage: mptun bench matrix [--quick] [--cells PATTERNS] [--seconds S] [--out DIR] [--json]
       mptun bench matrix --list [--quick] [--cells PATTERNS]

Runs the scenario matrix of issue 10 (goodput) and 17 (idle RTT, short
transfers): best single path, kernel MPTCP (verified) and mptun with its
shipped defaults on identical emulated links per cell. Writes results.json,
results.csv and heatmaps into DIR (default lab-out/matrix-TIME) and prints
a table with the targets. --quick runs a representative subset (about 10
minutes on 2 cores); the full set about 1 h 20 min (--list prints the
cells and the estimate). --cells takes comma-separated globs of cell names.
`

// MatrixMain implements `mptun bench matrix`; args exclude "matrix".
func MatrixMain(args []string, asJSON bool, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, matrixUsage) }
	var o MatrixOptions
	fs.BoolVar(&o.Quick, "quick", false, "the representative subset (about 10 minutes)")
	fs.StringVar(&o.Cells, "cells", "", "comma-separated glob patterns of cell names")
	fs.IntVar(&o.Seconds, "seconds", 0, "timed traffic per peer and cell (default 20, 12 with --quick)")
	fs.StringVar(&o.Out, "out", "", "output directory (default lab-out/matrix-TIME)")
	list := fs.Bool("list", false, "print the selected cells and the time estimate, run nothing")
	if !parseFlags(fs, args, matrixUsage, stderr) {
		return 2
	}
	if *list {
		cells, err := SelectCells(o.Cells, o.Quick)
		if err != nil {
			fmt.Fprintln(stderr, "bench matrix:", err)
			return 2
		}
		var est time.Duration
		for _, c := range cells {
			est += EstimateCell(c, o.duration())
			fmt.Fprintf(stdout, "%-36s %-7s %s\n", c.Name, c.Block, c.Describe())
		}
		fmt.Fprintf(stdout, "%d cells, %v of traffic per peer, estimated %s\n", len(cells), o.duration(), fmtDur(est))
		return 0
	}
	ctx, stop, ok := startRun("bench matrix", "matrix", &o.Out, stderr)
	if !ok {
		return 1
	}
	defer stop()
	o.Progress = stderr
	res, err := RunMatrix(ctx, o)
	if res == nil {
		fmt.Fprintln(stderr, "bench matrix:", err)
		return 2
	}
	if asJSON {
		jsonout.Print(stdout, res)
	} else {
		WriteMatrixTable(stdout, res)
		fmt.Fprintf(stdout, "\nreport: %s (results.json, results.csv, heatmap_mptun_vs_best.png, heatmap_mptun_vs_mptcp.png; cells/NAME has each cell's lab report)\n", o.Out)
	}
	if err != nil {
		return failStatus("bench matrix", err, stderr)
	}
	return 0
}

// The pieces `mptun bench matrix` and `mptun bench latency` share: flags,
// the root check, the default output directory, Ctrl-C and exit codes.

// parseFlags parses args with fs (named after the command) and refuses
// positional arguments; false means the command should exit with 2.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected %q\n%s", fs.Name(), fs.Args(), usage)
		return false
	}
	return true
}

// startRun checks that the process is root (false, said on stderr, when
// it is not), sets *out to lab-out/KIND-TIME when empty, and returns a
// context the first Ctrl-C or SIGTERM cancels (the lab then tears
// everything down); a second one kills the process the default way.
func startRun(cmd, kind string, out *string, stderr io.Writer) (context.Context, context.CancelFunc, bool) {
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "%s: needs root (network namespaces, TUN devices)\n", cmd)
		return nil, nil, false
	}
	if *out == "" {
		*out = filepath.Join("lab-out", kind+"-"+time.Now().UTC().Format("20060102-150405"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop, true
}

// failStatus says err on stderr and returns the exit code: 130 when the
// run was interrupted, else 1.
func failStatus(cmd string, err error, stderr io.Writer) int {
	fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	if errors.Is(err, context.Canceled) {
		return 130
	}
	return 1
}
