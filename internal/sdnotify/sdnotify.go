// SPDX-License-Identifier: MIT

// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) without
// a dependency: one datagram to the socket named by $NOTIFY_SOCKET.
package sdnotify

import (
	"net"
	"os"
	"strconv"
	"time"
)

// Notify sends state (e.g. "READY=1") to systemd. It reports false when the
// process was not started by systemd with Type=notify, or sending failed.
func Notify(state string) bool {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false
	}
	if path[0] == '@' { // abstract socket
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err == nil
}

// WatchdogInterval is the watchdog timeout systemd set for this process
// (WatchdogSec=), if any.
func WatchdogInterval() (time.Duration, bool) {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0, false
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	return time.Duration(usec) * time.Microsecond, true
}
