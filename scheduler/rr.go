// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("rr", func(Config) Scheduler { return &roundRobin{} })
}

// roundRobin is smooth weighted round robin (as in nginx): every eligible
// path with window room earns its weight in credit, the richest path is
// picked and pays the total. Paths without room earn nothing, so a
// window-limited path simply loses its turn.
type roundRobin struct {
	counters
	credit []int // by path id
}

func (*roundRobin) Name() string { return "rr" }

func (s *roundRobin) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	best, total := -1, 0
	for i := range paths {
		q := &paths[i]
		if !eligible(q, floor) || !ready(q, now) || q.ID < 0 || q.ID > maxPathID {
			continue
		}
		if q.ID >= len(s.credit) {
			s.credit = append(s.credit, make([]int, q.ID+1-len(s.credit))...)
		}
		w := max(q.Weight, 1)
		s.credit[q.ID] += w
		total += w
		if best < 0 || s.credit[q.ID] > s.credit[paths[best].ID] {
			best = i
		}
	}
	if best < 0 {
		return s.record(dst)
	}
	s.credit[paths[best].ID] -= total
	return s.record(append(dst, paths[best].ID))
}
