// SPDX-License-Identifier: MIT

// Package mono is the monotonic time used by mptun's sans-I/O packages.
//
// Protocol logic never reads the wall clock: the caller passes the current
// Time in, and components return deadlines as Times. In the daemon a Time is
// nanoseconds since the process started; in simulations it is virtual time.
package mono

import (
	"math"
	"time"
)

// Time is a point on a monotonic clock, in nanoseconds since an arbitrary epoch.
type Time int64

// Never is a deadline that does not fire.
const Never Time = math.MaxInt64

// Add returns t+d, saturating at Never.
func (t Time) Add(d time.Duration) Time {
	if t == Never || (d > 0 && int64(t) > math.MaxInt64-int64(d)) {
		return Never
	}
	return t + Time(d)
}

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t > u }

// Min returns the earlier of t and u.
func Min(t, u Time) Time {
	if t < u {
		return t
	}
	return u
}

// Max returns the later of t and u.
func Max(t, u Time) Time {
	if t > u {
		return t
	}
	return u
}

// Seconds returns t as seconds since the epoch, for reports.
func (t Time) Seconds() float64 { return float64(t) / 1e9 }

var start = time.Now()

// Now reads the process's monotonic clock. Only I/O shells (datapath, lab)
// call it; protocol packages take the time as an argument.
func Now() Time { return Time(time.Since(start)) }
