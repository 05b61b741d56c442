// SPDX-License-Identifier: MIT

package pathmgr

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// backoff is a capped exponential delay: min, 2·min, 4·min, … max, max, …
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// next returns the delay before the next attempt and doubles it.
func (b *backoff) next() time.Duration {
	if b.cur < b.min {
		b.cur = b.min
	}
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d
}

func (b *backoff) reset() { b.cur = 0 }

// attempt is a connection or join attempt with a time limit.
type attempt struct {
	on    bool
	until mono.Time
	path  int
}

func (a *attempt) deadline() mono.Time {
	if !a.on {
		return mono.Never
	}
	return a.until
}
