// SPDX-License-Identifier: MIT

package scheduler

import "github.com/mptun/mptun/internal/mono"

func init() {
	Register("srtt", func(Config) Scheduler { return &lowestRTT{} })
}

// lowestRTT sends on the path with the smallest smoothed RTT that has
// window room (the Linux MPTCP default). A path without an RTT sample yet
// counts as fastest so that it gets one.
type lowestRTT struct{ counters }

func (*lowestRTT) Name() string { return "srtt" }

func (s *lowestRTT) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	var best *Path
	for i := range paths {
		q := &paths[i]
		if !eligible(q, floor) || !ready(q, now) {
			continue
		}
		if best == nil || rtt(q) < rtt(best) {
			best = q
		}
	}
	if best == nil {
		return s.record(dst)
	}
	return s.record(append(dst, best.ID))
}
