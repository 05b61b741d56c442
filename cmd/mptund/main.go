// SPDX-License-Identifier: MIT

// Command mptund is the mptun daemon: it runs one multipath tunnel as a
// client (CPE) or a server (concentrator) from a TOML config.
//
//	mptund -c /etc/mptun/cpe.toml          run
//	mptund -check -c /etc/mptun/cpe.toml   validate the config and exit
//
// Exit codes: 0 success, 1 runtime failure, 2 bad command line or config.
// Signals: SIGHUP reloads what can change at runtime; SIGTERM/SIGINT close
// the connection gracefully (MP_CLOSE on every subflow) and exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/daemon"
	"github.com/mptun/mptun/internal/sdnotify"
)

var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mptund", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "/etc/mptun/mptun0.toml", "config `file`")
	check := fs.Bool("check", false, "validate the config and exit (0 valid, 2 invalid)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mptund: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "mptund", version)
		return 0
	}
	daemon.Version = version
	cfg, err := config.LoadWith(*cfgPath, daemon.Names())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if cfg.Connection.Security == config.SecurityNone {
		fmt.Fprintf(stderr, "%s: warning: security = \"none\": no authentication, no encryption (plain RFC 9897)\n", *cfgPath)
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok\n", *cfgPath)
		return 0
	}
	if cfg.Connection.Role != config.RoleServer && os.Getenv("GOMAXPROCS") == "" {
		// A CPE has one engine, driven by one goroutine at a time
		// (datapath.Run): a second P only adds thread hand-offs between
		// its readers (measured on the veth benchmark: about a fifth
		// less CPU per GB with one). GOMAXPROCS in the environment wins.
		runtime.GOMAXPROCS(1)
	}
	log := newLogger(cfg.Log, stderr)
	d, err := daemon.New(cfg, log)
	if err != nil {
		log.Error("start failed", "err", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range sigs {
			if sig != syscall.SIGHUP {
				log.Info("shutting down", "signal", sig.String())
				sdnotify.Notify("STOPPING=1")
				cancel()
				return
			}
			sdnotify.Notify("RELOADING=1\nMONOTONIC_USEC=" + fmt.Sprint(monotonicUsec()))
			newCfg, err := config.LoadWith(*cfgPath, daemon.Names())
			if err == nil {
				err = d.Reload(newCfg)
			}
			if err != nil {
				log.Error("reload failed, keeping the running config", "err", err)
			} else {
				log.Info("config reloaded", "file", *cfgPath)
			}
			sdnotify.Notify("READY=1")
		}
	}()
	go watchdog(ctx, d, log)

	err = d.Run(ctx, func() { sdnotify.Notify("READY=1") })
	if err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(c.Level))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// aliver is what the watchdog asks (*daemon.Daemon).
type aliver interface {
	Alive(ctx context.Context) error
}

// watchdog pings systemd at half the interval it asked for (WATCHDOG_USEC),
// but only while the data path's owner goroutine answers: a daemon whose
// data path is stuck is restarted instead of reported healthy.
func watchdog(ctx context.Context, d aliver, log *slog.Logger) {
	interval, ok := sdnotify.WatchdogInterval()
	if !ok {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	stuck := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(ctx, interval/4)
		err := d.Alive(actx)
		cancel()
		switch {
		case err == nil:
			if stuck {
				log.Info("data path answers again")
			}
			stuck = false
			sdnotify.Notify("WATCHDOG=1")
		case ctx.Err() == nil && !stuck:
			stuck = true
			log.Error("data path does not answer: not feeding the watchdog", "err", err)
		}
	}
}

func monotonicUsec() int64 {
	var ts syscall.Timespec
	if err := clockGettime(&ts); err != nil {
		return 0
	}
	return ts.Nano() / 1e3
}
