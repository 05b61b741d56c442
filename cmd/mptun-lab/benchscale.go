// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mptun/mptun/bench"
	"github.com/mptun/mptun/internal/jsonout"
)

// benchScale runs `mptun bench scale`.
func benchScale(ctx context.Context, args []string, asJSON bool, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.ScaleOptions
	fs.IntVar(&o.Clients, "clients", 1000, "CPEs (in-process client engines, one UDP socket and address each)")
	fs.IntVar(&o.Active, "active", 2, "CPEs running a bulk flow in the throughput phase")
	fs.IntVar(&o.Rate, "rate", 0, "dials per second (0: all at once, as after a concentrator restart)")
	fs.DurationVar(&o.Idle, "idle", 10*time.Second, "idle phase over which the concentrator's CPU is measured")
	fs.IntVar(&o.Seconds, "seconds", 10, "throughput phase in seconds")
	fs.DurationVar(&o.Soak, "soak", 0, "idle soak sampling memory every 10 s (e.g. 10m)")
	fs.DurationVar(&o.ConnectTimeout, "connect-timeout", time.Minute, "connect phase limit")
	procs := fs.String("gomaxprocs", "", "concentrator GOMAXPROCS values to run one after another, e.g. 1,2 (default: the machine's)")
	out := fs.String("out", "", "directory for results.json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *procs != "" {
		var err error
		if o.GOMAXPROCS, err = bench.ParseGOMAXPROCS(*procs); err != nil {
			fmt.Fprintln(stderr, "mptun bench scale:", err)
			return 2
		}
	}
	tools, err := bench.FindTools()
	if err != nil {
		fmt.Fprintln(stderr, "mptun bench:", err)
		return 1
	}
	o.Log = stdout
	if asJSON {
		o.Log = stderr
	}
	start := time.Now()
	res, err := bench.Scale(ctx, tools, o)
	if *out != "" {
		if werr := writeScaleResult(*out, res); werr != nil {
			fmt.Fprintln(stderr, "mptun bench scale:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "mptun bench scale:", err)
		return 1
	}
	if asJSON {
		jsonout.Print(stdout, res)
		return 0
	}
	fmt.Fprintf(stdout, "\n%d CPEs, %d active, load average at start %s (%s)\n", res.Clients, res.Active, res.LoadAvg, time.Since(start).Round(time.Second))
	fmt.Fprint(stdout, bench.ScaleTable(res))
	return 0
}

func writeScaleResult(dir string, res bench.ScaleResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	defer f.Close()
	return jsonout.Print(f, res)
}
