// SPDX-License-Identifier: MIT

// Package lab is mptun's built-in lab: `mptun lab run FILE` builds emulated
// paths between network namespaces, runs the scenario's peers and traffic on
// them, and writes a report. See configs/lab/README.md.
package lab

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

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/scenario"
	"github.com/mptun/mptun/lab/wgpeer"
)

const usage = `usage:
  mptun lab run FILE [--out DIR] [--duration D] [--scale F] [--peers p1,p2] [--seed N]
      run a scenario (needs root); the report goes to DIR
      (default: lab-out/<scenario>-<time>)
  mptun lab cleanup
      remove namespaces left behind by crashed lab runs
  mptun lab peers
      list the peers a scenario can use
  (hidden, started by the runner: lab wgpeer)
`

// Main implements `mptun lab ...`; args excludes "lab". It returns the exit
// status. The program must dispatch `lab` to Main (or set
// scenario.SelfCommand), because the lab runs helpers as subcommands of
// its own executable.
func Main(args []string) int {
	return MainIO(args, os.Stdout, os.Stderr)
}

// MainIO is Main with explicit output streams.
func MainIO(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "cleanup":
		removed, err := netns.CleanupStale()
		for _, n := range removed {
			fmt.Fprintln(stdout, "removed", n)
		}
		if err != nil {
			fmt.Fprintln(stderr, "lab cleanup:", err)
			return 1
		}
		return 0
	case "wgpeer": // hidden: the wireguard-go peer, started by the runner
		return wgpeer.Main(args[1:], os.Stdin, stderr)
	case "peers":
		fmt.Fprintln(stdout, strings.Join(scenario.Peers(), "\n"))
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "lab: unknown command %q\n%s", args[0], usage)
	return 2
}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lab run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "report directory")
	dur := fs.Duration("duration", 0, "shorten the scenario to this duration")
	peers := fs.String("peers", "", "comma-separated peers to run instead of the scenario's")
	seed := fs.Uint64("seed", 0, "override the scenario's seed")
	scale := fs.Float64("scale", 0, "multiply the duration and event times (e.g. 0.25 for a quick run)")
	// Accept flags before or after the file.
	var file string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		rest = fs.Args()
		if len(rest) > 0 {
			if file != "" {
				fmt.Fprintf(stderr, "lab run: more than one scenario file\n")
				return 2
			}
			file, rest = rest[0], rest[1:]
		}
	}
	if file == "" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "lab run: needs root (network namespaces, veths, AF_PACKET)")
		return 1
	}
	if *out == "" {
		base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		*out = filepath.Join("lab-out", base+"-"+time.Now().UTC().Format("20060102-150405"))
	}
	opt := scenario.Options{Progress: stdout, Duration: *dur, Seed: *seed, Scale: *scale}
	if *peers != "" {
		opt.Peers = strings.Split(*peers, ",")
	}
	// Ctrl-C cancels the run; the runner tears everything down before
	// returning. A second Ctrl-C kills the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	_, err := scenario.RunWith(ctx, file, *out, opt)
	if err != nil {
		fmt.Fprintln(stderr, "lab run:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	return 0
}
