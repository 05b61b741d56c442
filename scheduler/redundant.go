// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("redundant", func(c Config) Scheduler {
		c = c.withDefaults()
		return &redundant{mss: c.MSS, queues: c.PathQueues}
	})
}

// redundant puts a copy of the packet on every eligible path with room;
// the copies share one MP_SEQ and the receiver keeps the first. With
// per-path queues (Config.PathQueues) a path whose window is full still
// gets its copy queued as long as less than a window is queued there, but
// when no path has room at all the packet is held, so that a redundant
// class cannot grow the path queues without bound.
type redundant struct {
	counters
	mss    int
	queues bool
}

func (*redundant) Name() string { return "redundant" }

func (s *redundant) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	room := false
	for i := range paths {
		if q := &paths[i]; eligible(q, floor) && q.CanSend {
			room = true
			break
		}
	}
	if !room {
		return s.record(dst)
	}
	for i := range paths {
		q := &paths[i]
		if eligible(q, floor) && (q.CanSend || (s.queues && q.Queued < max(q.Cwnd, 1)*s.mss)) {
			dst = append(dst, q.ID)
		}
	}
	return s.record(dst)
}
