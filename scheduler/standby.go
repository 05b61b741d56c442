// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("active-standby", func(Config) Scheduler { return &activeStandby{active: -1} })
}

// activeStandby carries everything on one path: the usable path with the
// highest MP_PRIO. It stays on the current path while that is usable and
// no path of strictly higher priority is (no flapping between equals),
// and it holds rather than spills when the active path's window is full.
type activeStandby struct {
	counters
	active   int // path id, -1 before the first pick
	switches uint64
}

func (*activeStandby) Name() string { return "active-standby" }

func (s *activeStandby) Stats() Stats {
	st := s.counters.Stats()
	st.Switches = s.switches
	return st
}

func (s *activeStandby) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	var cur, best *Path
	for i := range paths {
		q := &paths[i]
		if !q.Usable || q.Prio == 0 {
			continue
		}
		if q.ID == s.active {
			cur = q
		}
		if best == nil || q.Prio > best.Prio || (q.Prio == best.Prio && q.ID < best.ID) {
			best = q
		}
	}
	if best == nil {
		return s.record(dst)
	}
	if cur == nil || best.Prio > cur.Prio {
		if s.active >= 0 {
			s.switches++
		}
		cur, s.active = best, best.ID
	}
	if !cur.CanSend {
		return s.record(dst)
	}
	return s.record(append(dst, cur.ID))
}
