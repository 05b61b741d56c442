// SPDX-License-Identifier: MIT

// Command mptun-lab runs mptun's built-in lab and benchmarks. It is a
// separate program so that the CLI and the daemon carry none of their
// dependencies (plots, wireguard-go); `mptun lab ...` and `mptun bench ...`
// execute it with the same arguments:
//
//	mptun-lab lab run FILE [--out DIR] ...   (see `mptun-lab lab help`)
//	mptun-lab bench throughput|aggregate|handover|voip|cc [--json] ...
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mptun/mptun/internal/jsonout"
	"github.com/mptun/mptun/lab"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage: mptun-lab lab run FILE [--out DIR] ...   run a lab scenario (root)
       mptun-lab bench throughput|aggregate|handover|voip|cc [--json] ...   benchmarks (root)
(usually started as mptun lab ... and mptun bench ...)
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "lab":
		// The lab also runs its helpers (the wireguard-go peer) as
		// `mptun-lab lab ...` from this executable. --json means nothing
		// to it; mptun has always ignored it there.
		rest, _ := jsonout.StripFlag(args[1:], false)
		return lab.MainIO(rest, stdout, stderr)
	case "bench":
		rest, asJSON := jsonout.StripFlag(args[1:], false)
		return benchMain(rest, asJSON, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "mptun-lab: unknown command %q\n%s", args[0], usage)
	return 2
}
