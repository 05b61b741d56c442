// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"
	"io"
)

// benchLab runs the lab scenario behind `bench aggregate` / `bench handover`.
func benchLab(ctx context.Context, which string, args []string, asJSON bool, stdout, stderr io.Writer) int {
	fmt.Fprintf(stderr, "mptun bench %s: use `mptun lab run configs/lab/demo.toml` for now\n", which)
	return 1
}
