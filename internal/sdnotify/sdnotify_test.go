// SPDX-License-Identifier: MIT

package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestNotifySendsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if !Notify("READY=1") {
		t.Fatal("Notify reported failure")
	}
	buf := make([]byte, 64)
	l.SetReadDeadline(time.Now().Add(time.Second))
	n, err := l.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if Notify("READY=1") {
		t.Error("Notify succeeded without NOTIFY_SOCKET")
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "5000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if d, ok := WatchdogInterval(); !ok || d != 5*time.Second {
		t.Errorf("got %v %v", d, ok)
	}
	t.Setenv("WATCHDOG_PID", "1")
	if _, ok := WatchdogInterval(); ok {
		t.Error("watchdog meant for another pid accepted")
	}
}
