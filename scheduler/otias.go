// SPDX-License-Identifier: MIT

package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("otias", func(c Config) Scheduler { return &otias{mss: c.withDefaults().MSS} })
}

// otias (out-of-order transmission for in-order arrival, Yang et al.)
// sends each packet on the path where it is estimated to arrive first,
// counting what is already queued and in flight there. It may pick a path
// whose window is full: the packet then waits in that path's queue, which
// is still sooner than going over the slow path.
type otias struct {
	counters
	mss int
}

func (*otias) Name() string { return "otias" }

func (s *otias) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	best, bestT := -1, time.Duration(0)
	for i := range paths {
		q := &paths[i]
		if !eligible(q, floor) {
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
