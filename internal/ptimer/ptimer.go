// SPDX-License-Identifier: MIT

// Package ptimer is a precise one-shot timer for sub-millisecond deadlines.
//
// Go's runtime timers are woken by epoll_wait with millisecond resolution, so
// a 200 µs deadline fires about 1 ms late. A timerfd read through the Go
// netpoller wakes within tens of microseconds, needs no locked thread and
// does not spin. The emulator and the daemon's pacing/reorder deadlines use it.
package ptimer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/mono"
)

// Timer is a one-shot timer on CLOCK_MONOTONIC. Reset and Stop may be called
// from any goroutine; Wait must be called from one goroutine at a time.
type Timer struct {
	f        *os.File
	fd       int
	deadline atomic.Int64 // mono.Time of the armed deadline, mono.Never if stopped
	buf      [8]byte
	Lateness Histogram
}

// monoOffset converts mono.Time to CLOCK_MONOTONIC nanoseconds. mono.Now is
// derived from Go's monotonic clock, which is CLOCK_MONOTONIC on Linux, so the
// offset is a constant; it is measured once, taking the tightest sample.
var monoOffset = func() int64 {
	best := int64(-1)
	var off int64
	for i := 0; i < 16; i++ {
		var ts unix.Timespec
		a := mono.Now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		b := mono.Now()
		if w := int64(b - a); best < 0 || w < best {
			best = w
			off = ts.Nano() - int64(a+b)/2
		}
	}
	return off
}()

// ErrClosed is returned by Wait after Close.
var ErrClosed = errors.New("ptimer: closed")

// New creates a stopped timer.
func New() (*Timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ptimer: timerfd_create: %w", err)
	}
	// os.NewFile sees a non-blocking fd and registers it with the netpoller,
	// so a Read parks the goroutine instead of a thread.
	t := &Timer{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}
	t.deadline.Store(int64(mono.Never))
	return t, nil
}

// Reset arms the timer to fire at deadline (absolute); a deadline in the past
// fires at once; mono.Never stops the timer.
func (t *Timer) Reset(deadline mono.Time) error {
	if deadline == mono.Never {
		return t.Stop()
	}
	abs := int64(deadline) + monoOffset
	if abs < 1 {
		abs = 1 // zero would disarm
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(abs)}
	t.deadline.Store(int64(deadline))
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("ptimer: timerfd_settime: %w", err)
	}
	return nil
}

// ResetAfter arms the timer to fire d from now.
func (t *Timer) ResetAfter(d time.Duration) error { return t.Reset(mono.Now().Add(d)) }

// Stop disarms the timer. A Wait in progress keeps waiting for the next Reset.
func (t *Timer) Stop() error {
	t.deadline.Store(int64(mono.Never))
	var spec unix.ItimerSpec
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return fmt.Errorf("ptimer: timerfd_settime: %w", err)
	}
	return nil
}

// Deadline returns the armed deadline or mono.Never.
func (t *Timer) Deadline() mono.Time { return mono.Time(t.deadline.Load()) }

// Wait blocks until the timer fires and returns the wake-up time. Lateness
// (wake-up minus deadline) is recorded in t.Lateness.
func (t *Timer) Wait() (mono.Time, error) {
	for {
		_, err := t.f.Read(t.buf[:])
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return 0, ErrClosed
			}
			return 0, fmt.Errorf("ptimer: read: %w", err)
		}
		if binary.NativeEndian.Uint64(t.buf[:]) == 0 {
			continue
		}
		now := mono.Now()
		if d := mono.Time(t.deadline.Load()); d != mono.Never {
			t.Lateness.Add(now.Sub(d))
		}
		return now, nil
	}
}

// Close releases the timerfd and wakes a blocked Wait with ErrClosed.
func (t *Timer) Close() error { return t.f.Close() }
