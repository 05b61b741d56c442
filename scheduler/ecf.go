// SPDX-License-Identifier: MIT

package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("ecf", func(c Config) Scheduler {
		c = c.withDefaults()
		return &ecf{mss: c.MSS, beta: c.ECFBeta}
	})
}

// ecf is Earliest Completion First (Lim et al., CoNEXT 2017) in the spirit
// of BLEST: the fastest path is used whenever it has room. When it is
// full, a slower path with room is used only if the data waiting at the
// connection would finish later by waiting for the fast path than by
// sending this packet on the slow one; otherwise the packet is held.
type ecf struct {
	counters
	mss     int
	beta    float64
	waiting bool // hysteresis state: last decision was to wait
}

func (*ecf) Name() string { return "ecf" }

func (s *ecf) Pick(now mono.Time, paths []Path, p Packet, dst []int) []int {
	floor := minPrio(paths)
	var fast, slow *Path // fastest eligible; fastest eligible with room
	for i := range paths {
		q := &paths[i]
		if !eligible(q, floor) {
			continue
		}
		if fast == nil || rtt(q) < rtt(fast) {
			fast = q
		}
		if q.CanSend && (slow == nil || rtt(q) < rtt(slow)) {
			slow = q
		}
	}
	switch {
	case slow == nil:
		return s.record(dst)
	case slow == fast:
		s.waiting = false
		return s.record(append(dst, fast.ID))
	}
	if p.Backlog == 0 {
		// Unknown backlog: never hold, or a busy connection would starve
		// the slow path.
		s.waiting = false
		return s.record(append(dst, slow.ID))
	}
	// When would the backlog have reached the peer if it all waited for
	// the fast path, versus this packet going over the slow path now?
	// ECF compares round trips because TCP completes on ACKs; a tunnel
	// packet is done when it arrives, so one-way terms (RTT/2) are used.
	backlog := max(p.Backlog, p.Size)
	rf, rs := rtt(fast), rtt(slow)
	cw := max(fast.Cwnd, 1)
	pkts := float64((backlog + s.mss - 1) / s.mss)
	drain := time.Duration(pkts / float64(cw) * float64(rf))
	if fast.PacingRate > 0 {
		drain = min(drain, time.Duration(float64(fast.Queued+backlog)/fast.PacingRate*1e9))
	}
	viaFast := drain + rf/2
	viaSlow := rs/2 + max(fast.RTTVar, slow.RTTVar)
	margin := 1.0
	if s.waiting {
		margin += s.beta
	}
	if float64(viaFast) < margin*float64(viaSlow) {
		s.waiting = true
		return s.record(dst)
	}
	s.waiting = false
	return s.record(append(dst, slow.ID))
}
