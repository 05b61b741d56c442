// SPDX-License-Identifier: MIT

// Command mptunlab runs the lab on its own, for use before `mptun lab` is
// wired into cmd/mptun: mptunlab run FILE [--out DIR].
package main

import (
	"os"

	"github.com/mptun/mptun/lab"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "lab" { // how the runner calls its helpers
		args = args[1:]
	}
	os.Exit(lab.Main(args))
}
