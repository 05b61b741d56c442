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
	"syscall"
	"time"
)

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
