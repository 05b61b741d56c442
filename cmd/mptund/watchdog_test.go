// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDaemon answers Alive or blocks, as its data path would when stuck.
type fakeDaemon struct{ stuck atomic.Bool }

func (f *fakeDaemon) Alive(ctx context.Context) error {
	if f.stuck.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// The watchdog is fed while the data path answers and not while it is
// stuck, so systemd restarts a daemon that no longer moves packets.
func TestWatchdogFedOnlyWhileAlive(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "40000") // 40 ms: pings every 20 ms
	t.Setenv("WATCHDOG_PID", "")
	d := &fakeDaemon{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watchdog(ctx, d, slog.New(slog.DiscardHandler))
	pings := func(window time.Duration) int {
		n := 0
		buf := make([]byte, 64)
		for end := time.Now().Add(window); time.Now().Before(end); {
			pc.SetReadDeadline(end)
			k, err := pc.Read(buf)
			if err != nil {
				break
			}
			if strings.Contains(string(buf[:k]), "WATCHDOG=1") {
				n++
			}
		}
		return n
	}
	// About 50 pings a second; a loaded machine delays some.
	if n := pings(time.Second); n < 5 {
		t.Fatalf("%d pings in 1 s while alive", n)
	}
	d.stuck.Store(true)
	pings(50 * time.Millisecond) // a ping may be under way
	if n := pings(time.Second); n != 0 {
		t.Fatalf("%d pings while the data path is stuck", n)
	}
	d.stuck.Store(false)
	if n := pings(time.Second); n < 5 {
		t.Fatalf("%d pings in 1 s after it answers again", n)
	}
}
