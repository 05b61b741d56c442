// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mptun/mptun/bench"
	"github.com/mptun/mptun/internal/jsonout"
)

// benchLab runs `bench aggregate|handover|voip|cc` on the built-in lab.
func benchLab(ctx context.Context, which string, args []string, asJSON bool, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench "+which, flag.ContinueOnError)
	fs.SetOutput(stderr)
	secs := fs.Int("seconds", 0, "length of each peer's run (default 20 aggregate, 60 handover, 30 voip)")
	ccs := fs.String("cc", "cubic,bbr", "inner TCP congestion controls (aggregate)")
	out := fs.String("out", "", "keep the lab reports in this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := bench.LabOptions{Seconds: *secs, CCs: strings.Split(*ccs, ","), Out: *out, Log: stderr}
	if !asJSON {
		o.Log = stdout
	}
	if which == "cc" {
		rows, err := bench.CCMatrix(ctx, o)
		if err != nil {
			fmt.Fprintf(stderr, "mptun bench cc: %v\n", err)
			return 1
		}
		if asJSON {
			jsonout.Print(stdout, rows)
			return 0
		}
		fmt.Fprintf(stdout, "\ninner TCP through mptun, one path 20 Mbit/s 40 ms RTT (50 ms buffer); probe one-way delay (base 20 ms)\n")
		fmt.Fprintf(stdout, "  %-6s %-6s %-5s %9s %6s %6s %10s %10s\n", "inner", "outer", "aqm", "Mbit/s", "util", "retr", "owd p50", "owd p99")
		for _, r := range rows {
			fmt.Fprintf(stdout, "  %-6s %-6s %-5v %9.2f %6.3f %6d %8.1fms %8.1fms\n", r.Inner, r.Outer, r.AQM, r.GoodputMbps, r.Aggregation, r.Retrans, r.OWDp50ms, r.OWDp99ms)
		}
		return 0
	}
	run := bench.Aggregate
	switch which {
	case "handover":
		run = bench.Handover
	case "voip":
		run = bench.VoIP
	}
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "mptun bench %s: %v\n", which, err)
		return 1
	}
	if asJSON {
		jsonout.Print(stdout, res)
		return 0
	}
	fmt.Fprintf(stdout, "\n%s: %s\n", res.Benchmark, res.Scenario)
	if which == "voip" {
		fmt.Fprintf(stdout, "  %-28s %10s %7s %12s %12s %12s\n", "peer", "bulk Mbit/s", "retr", "voip lost", "jitter", "voip owd p99")
		for _, r := range res.Runs {
			fmt.Fprintf(stdout, "  %-28s %10.2f %7d %7d/%-4d %10.2fms %10.1fms\n", r.Peer, r.GoodputMbps, r.Retrans,
				r.VoIPLost, r.VoIPSent, r.VoIPJitterMs, r.VoIPOWDp99ms)
		}
		return 0
	}
	fmt.Fprintf(stdout, "  %-28s %-6s %10s %10s %7s %7s %8s %10s %8s %8s\n", "peer", "cc", "goodput", "capacity", "aggr", "retr", "spurious", "max gap", "lost", "owd p99")
	for _, r := range res.Runs {
		fmt.Fprintf(stdout, "  %-28s %-6s %10.2f %10.2f %7.3f %7d %8d %8.0fms %8d %6.1fms\n", r.Peer, r.InnerCC, r.GoodputMbps,
			r.CapacityMbs, r.Aggregation, r.Retrans, r.DSACKs, r.MaxGapMs, r.ProbeLost, r.OWDp99ms)
	}
	for cc, v := range res.VsMPTCP {
		fmt.Fprintf(stdout, "  mptun / kernel MPTCP goodput (%s): %.3f\n", cc, v)
	}
	return 0
}
