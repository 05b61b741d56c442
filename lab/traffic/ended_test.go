// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"testing"
	"time"
)

// deadlineOnly is a context past its deadline whose timer has not fired
// yet: Err is still nil, as it is for a moment after a dial fails on the
// deadline.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.at, true }
func (c deadlineOnly) Err() error                  { return nil }

func TestEndedCountsAPassedDeadline(t *testing.T) {
	bg := context.Background()
	if ended(bg) {
		t.Error("a context without deadline, not done: ended")
	}
	if ended(deadlineOnly{bg, time.Now().Add(time.Hour)}) {
		t.Error("deadline an hour ahead: ended")
	}
	if !ended(deadlineOnly{bg, time.Now().Add(-time.Millisecond)}) {
		t.Error("deadline passed, Err not yet set: not ended (a flow cut by the run's end would count as failed)")
	}
	done, cancel := context.WithCancel(bg)
	cancel()
	if !ended(done) {
		t.Error("cancelled context: not ended")
	}
}
