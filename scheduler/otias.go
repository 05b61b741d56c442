// SPDX-License-Identifier: MIT

package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("otias", func(c Config) Scheduler {
		c = c.withDefaults()
		return &otias{mss: c.MSS, queues: c.PathQueues}
	})
}

// otias (out-of-order transmission for in-order arrival, Yang et al.)
// sends each packet on the path where it is estimated to arrive first,
// counting what is already queued and in flight there. With per-path
// queues (Config.PathQueues) it may pick a path whose window is full: the
// packet then waits in that path's queue, which is still sooner than going
// over the slow path. Without them it picks among paths with room.
type otias struct {
	counters
	mss    int
	queues bool
}

func (*otias) Name() string { return "otias" }

func (s *otias) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	best, bestT := -1, time.Duration(0)
	for i := range paths {
		q := &paths[i]
		if !eligible(q, floor) || (!s.queues && !q.CanSend) {
			continue
		}
		t := arrival(now, q, p.Size, s.mss)
		if best < 0 || t < bestT || (t == bestT && q.CanSend && !paths[best].CanSend) {
			best, bestT = i, t
		}
	}
	if best < 0 {
		return s.record(dst)
	}
	return s.record(append(dst, paths[best].ID))
}
