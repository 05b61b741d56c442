// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("priority", func(Config) Scheduler { return &priority{} })
}

// priority is cheapest pipe first with MP_PRIO meaning (RFC 9897): the
// highest-priority usable path with window room wins, lower priorities
// only get traffic when every higher one is window-limited. Prio 2
// (secondary) thus only carries the primaries' overflow, prio 1 (standby)
// is used only when no primary or secondary path is usable at all, and
// prio 0 never. Among equal priorities the lowest RTT wins.
type priority struct{ counters }

func (*priority) Name() string { return "priority" }

func better(a, b *Path) bool {
	if a.Prio != b.Prio {
		return a.Prio > b.Prio
	}
	if ra, rb := rtt(a), rtt(b); ra != rb {
		return ra < rb
	}
	return a.ID < b.ID
}

func (s *priority) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	var best *Path
	for i := range paths {
		q := &paths[i]
		if eligible(q, floor) && ready(q, now) && (best == nil || better(q, best)) {
			best = q
		}
	}
	if best == nil {
		return s.record(dst)
	}
	return s.record(append(dst, best.ID))
}
