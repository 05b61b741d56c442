// SPDX-License-Identifier: MIT

// Package sdnotify is a minimal sd_notify(3) client: it sends state strings
// to the datagram socket systemd names in $NOTIFY_SOCKET. Outside systemd
// every call is a no-op.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// States understood by systemd.
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	Reloading = "RELOADING=1"
	Watchdog  = "WATCHDOG=1"
)

// Notify sends state (one or more "KEY=value" lines). It reports false
// when not running under systemd (Type=notify) or when sending failed.
func Notify(state string) bool {
	ok, _ := NotifyErr(state)
	return ok
}

// NotifyErr is Notify with the reason for a failure; (false, nil) means
// NOTIFY_SOCKET is not set.
func NotifyErr(state string) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	// A leading '@' is an abstract socket; Go maps it to the NUL prefix.
	if name[0] != '/' && name[0] != '@' {
		return false, fmt.Errorf("sdnotify: unsupported NOTIFY_SOCKET %q", name)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}

// Status is a free-form line shown by `systemctl status`.
func Status(s string) string { return "STATUS=" + s }

// ReloadingNow is RELOADING=1 with the MONOTONIC_USEC timestamp that
// Type=notify-reload services must send.
func ReloadingNow() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	usec := int64(ts.Sec)*1e6 + int64(ts.Nsec)/1e3 // Sec and Nsec are int32 on 32-bit targets
	return Reloading + "\nMONOTONIC_USEC=" + strconv.FormatInt(usec, 10)
}

// WatchdogInterval returns the watchdog timeout systemd set for this
// process (WatchdogSec=); ok is false when the watchdog is off, malformed
// or meant for another process. systemd's advice is to ping at half the
// interval.
func WatchdogInterval() (d time.Duration, ok bool) {
	n, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	return time.Duration(n) * time.Microsecond, true
}
