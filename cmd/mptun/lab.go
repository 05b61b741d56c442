// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"io"
)

// labMain and benchMain are wired to the lab package once it lands.
func labMain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mptun lab: not built into this binary yet")
	return 1
}

func benchMain(args []string, asJSON bool, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mptun bench: not built into this binary yet")
	return 1
}
