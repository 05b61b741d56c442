// SPDX-License-Identifier: MIT

package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return c
}

func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@mptun-sdnotify-test-%d", os.Getpid()),
	} {
		c := listen(t, name)
		t.Setenv("NOTIFY_SOCKET", name)
		for _, state := range []string{Ready, Status("2 paths up"), Watchdog, Stopping} {
			ok, err := NotifyErr(state)
			if !ok || err != nil {
				t.Fatalf("%s: Notify(%q) = %v, %v", name, state, ok, err)
			}
			buf := make([]byte, 256)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:n]) != state {
				t.Errorf("%s: got %q, want %q", name, buf[:n], state)
			}
		}
	}
}

func TestNotifyOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if ok, err := NotifyErr(Ready); ok || err != nil || Notify(Ready) {
		t.Errorf("Notify without socket = %v, %v; want false, nil", ok, err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "missing"))
	if ok, err := NotifyErr(Ready); ok || err == nil || Notify(Ready) {
		t.Errorf("Notify to a missing socket = %v, %v; want an error", ok, err)
	}
}

func TestReloadingNow(t *testing.T) {
	s := ReloadingNow()
	v, ok := strings.CutPrefix(s, Reloading+"\nMONOTONIC_USEC=")
	if n, err := strconv.ParseInt(v, 10, 64); !ok || err != nil || n <= 0 {
		t.Errorf("ReloadingNow() = %q", s)
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, tt := range []struct {
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"", "", 0, false},
		{"20000000", "", 20 * time.Second, true},
		{"20000000", strconv.Itoa(os.Getpid()), 20 * time.Second, true},
		{"20000000", "1", 0, false},
		{"soon", "", 0, false},
		{"-5", "", 0, false},
	} {
		t.Setenv("WATCHDOG_USEC", tt.usec)
		t.Setenv("WATCHDOG_PID", tt.pid)
		got, ok := WatchdogInterval()
		if got != tt.want || ok != tt.ok {
			t.Errorf("usec=%q pid=%q: %v, %v", tt.usec, tt.pid, got, ok)
		}
	}
}
