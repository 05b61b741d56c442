// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/control"
)

// cmdMonitor prints the daemon's path and connection events as they
// happen, until interrupted: one line each, or one JSON object per line
// with --json. --status first prints the current state.
func cmdMonitor(g globals, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	status := fs.Bool("status", false, "print the current paths first")
	dur := fs.Duration("d", 0, "stop after this long (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{"monitor [--status] [-d DURATION] [--json]"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	return control.Stream(ctx, g.socket, control.MethodMonitor, control.MonitorRequest{Status: *status}, func(raw json.RawMessage) error {
		if g.json {
			_, err := fmt.Fprintf(g.out, "%s\n", raw)
			return err
		}
		var ev control.MonitorEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		_, err := fmt.Fprintln(g.out, formatEvent(ev))
		return err
	})
}

// formatEvent is one human-readable line: time, event, connection, path,
// remote, reason.
func formatEvent(ev control.MonitorEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-15s", ev.Time.Local().Format(time.TimeOnly+".000"), ev.Kind)
	if ev.Conn != "" {
		fmt.Fprintf(&b, " conn %s", ev.Conn)
	}
	switch {
	case ev.Path != "":
		fmt.Fprintf(&b, " path %s", ev.Path)
	case ev.PathID != nil:
		fmt.Fprintf(&b, " path %d", *ev.PathID)
	}
	if ev.Remote != "" {
		fmt.Fprintf(&b, " %s", ev.Remote)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, ": %s", ev.Reason)
	}
	return b.String()
}
