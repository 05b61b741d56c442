// SPDX-License-Identifier: MIT

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func clockGettime(ts *syscall.Timespec) error {
	var u unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &u); err != nil {
		return err
	}
	ts.Sec, ts.Nsec = u.Sec, u.Nsec
	return nil
}
