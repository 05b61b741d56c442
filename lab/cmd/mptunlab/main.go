// SPDX-License-Identifier: MIT

// Command mptunlab runs the lab on its own, for use before `mptun lab` is
// wired into cmd/mptun: mptunlab run FILE [--out DIR].
package main

import (
	"os"

	"github.com/mptun/mptun/lab"
)

func main() { os.Exit(lab.Main(os.Args[1:])) }
