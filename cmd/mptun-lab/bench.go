// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mptun/mptun/bench"
	"github.com/mptun/mptun/internal/jsonout"
)

func benchUsage(w io.Writer) {
	fmt.Fprint(w, `usage: mptun bench throughput [--runs N] [--seconds S] [--unencrypted] [--json]
       mptun bench aggregate|handover [--seconds S] [--out DIR] [--json]   (lab: mptun vs kernel MPTCP)
       mptun bench voip [--seconds S] [--out DIR] [--json]   (lab: VoIP class redundant vs rr+passive, 5 % loss)
       mptun bench cc [--seconds S] [--json]   (lab: inner cubic/bbr x outer ccid2/bbr/none x AQM on/off)
       mptun bench matrix [--quick] [--cells P] [--seconds S] [--out DIR] [--list] [--json]   (lab: scenario matrix, issues 10 and 17)
       mptun bench latency [--seconds S] [--reps N] [--out DIR] [--json]   (lab: idle RTT, short transfers, web delay)
       mptun bench scale --clients N [--active M] [--gomaxprocs 1,2] [--soak 10m] [--out DIR] [--json]   (one concentrator, N in-process CPEs)
`)
}

func benchMain(args []string, asJSON bool, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		benchUsage(stderr)
		return 2
	}
	switch args[0] { // these check for root themselves (--list needs none)
	case "matrix":
		return bench.MatrixMain(args[1:], asJSON, stdout, stderr)
	case "latency":
		return bench.LatencyMain(args[1:], asJSON, stdout, stderr)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "mptun bench: needs root (network namespaces, TUN devices)")
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	switch args[0] {
	case "throughput":
		fs := flag.NewFlagSet("bench throughput", flag.ContinueOnError)
		fs.SetOutput(stderr)
		runs := fs.Int("runs", 5, "runs per peer, alternating")
		secs := fs.Int("seconds", 10, "iperf3 seconds per run")
		plain := fs.Bool("unencrypted", false, "run mptun with security = \"none\" (plain RFC 9897) instead of encrypted")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		tools, err := bench.FindTools()
		if err != nil {
			fmt.Fprintln(stderr, "mptun bench:", err)
			return 1
		}
		log := stderr
		if !asJSON {
			log = stdout
		}
		start := time.Now()
		res, err := bench.Throughput(ctx, tools, bench.ThroughputOptions{Runs: *runs, Seconds: *secs, Log: log, Unencrypted: *plain})
		if err != nil {
			fmt.Fprintln(stderr, "mptun bench throughput:", err)
			return 1
		}
		if asJSON {
			jsonout.Print(stdout, res)
			return 0
		}
		fmt.Fprintf(stdout, "\none path, no impairment, iperf3 TCP cubic %d s x %d runs each (%s)\n", res.Seconds, res.RunsPerPeer, time.Since(start).Round(time.Second))
		fmt.Fprintf(stdout, "  mptun (%s)  %6.3f Gbit/s  %5.2f CPU s/GB\n", res.MptunMode(), res.MptunGbps, res.MptunCPUSecPerGB)
		fmt.Fprintf(stdout, "  wireguard-go  %6.3f Gbit/s  %5.2f CPU s/GB\n", res.WireguardGoGbps, res.WireguardGoCPUSecPerGB)
		fmt.Fprintf(stdout, "  ratio mptun/wireguard-go: throughput %.3f, CPU per GB %.3f\n", res.Ratio, res.CPURatio)
		return 0
	case "aggregate", "handover", "voip", "cc":
		return benchLab(ctx, args[0], args[1:], asJSON, stdout, stderr)
	case "scale":
		return benchScale(ctx, args[1:], asJSON, stdout, stderr)
	}
	benchUsage(stderr)
	return 2
}
