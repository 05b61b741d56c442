// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("redundant", func(Config) Scheduler { return &redundant{} })
}

// redundant puts a copy of the packet on every eligible path with window
// room; the copies share one MP_SEQ and the receiver keeps the first.
type redundant struct{ counters }

func (*redundant) Name() string { return "redundant" }

func (s *redundant) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	for i := range paths {
		if q := &paths[i]; eligible(q, floor) && q.CanSend {
			dst = append(dst, q.ID)
		}
	}
	return s.record(dst)
}
