// SPDX-License-Identifier: MIT

package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// counters keeps per-path choice counts in a slice indexed by path id, so
// that counting a pick never allocates once a path has been seen.
type counters struct {
	picks []uint64
	holds uint64
}

// maxPathID bounds per-path state; path ids are indexes in a small table.
const maxPathID = 1023

func (c *counters) pick(id int) {
	if id < 0 || id > maxPathID {
		return
	}
	if id >= len(c.picks) {
		c.picks = append(c.picks, make([]uint64, id+1-len(c.picks))...)
	}
	c.picks[id]++
}

// picked is how many packets path id has been given.
func (c *counters) picked(id int) uint64 {
	if id < 0 || id >= len(c.picks) {
		return 0
	}
	return c.picks[id]
}

// record counts the result of one Pick.
func (c *counters) record(dst []int) []int {
	if len(dst) == 0 {
		c.holds++
	}
	for _, id := range dst {
		c.pick(id)
	}
	return dst
}

func (c *counters) Stats() Stats {
	s := Stats{Picks: make(map[int]uint64, len(c.picks)), Holds: c.holds}
	for id, n := range c.picks {
		if n > 0 {
			s.Picks[id] = n
		}
	}
	return s
}

// minPrio is the lowest MP_PRIO that may carry data now: standby paths
// (prio 1) only count when no primary or secondary path is usable, and
// prio 0 never does.
func minPrio(paths []Path) uint8 {
	for i := range paths {
		if paths[i].Usable && paths[i].Prio >= 2 {
			return 2
		}
	}
	return 1
}

// eligible reports whether p may carry data given the tier floor.
func eligible(p *Path, floor uint8) bool {
	return p.Usable && p.Prio != 0 && p.Prio >= floor
}

// rtt is the path's best delay estimate: smoothed RTT, else the minimum.
func rtt(p *Path) time.Duration {
	if p.SRTT > 0 {
		return p.SRTT
	}
	return p.MinRTT
}

// arrival estimates how long from now a packet of size bytes handed to p
// would take to reach the peer: wait for pacing, for the bytes already
// queued on the path and, when the window is full, for enough of what is
// in flight to be acknowledged; then half an RTT.
func arrival(now mono.Time, p *Path, size, mss int) time.Duration {
	r := rtt(p)
	var wait time.Duration
	if p.SendTime > now {
		wait = p.SendTime.Sub(now)
	}
	rate := p.PacingRate
	if rate <= 0 && p.Cwnd > 0 && r > 0 {
		rate = float64(p.Cwnd*mss) / r.Seconds()
	}
	if rate > 0 {
		wait = max(wait, time.Duration(float64(p.Queued+size)/rate*1e9))
	}
	// Window: the packet leaves once the packets ahead of it (in flight
	// and queued) fit below cwnd; a window's worth is acknowledged per RTT.
	if p.Cwnd > 0 && r > 0 {
		ahead := p.InFlight + (p.Queued+mss-1)/mss
		if !p.CanSend && ahead < p.Cwnd {
			ahead = p.Cwnd
		}
		if over := ahead + 1 - p.Cwnd; over > 0 {
			wait = max(wait, time.Duration(int64(r)*int64(over)/int64(p.Cwnd)))
		}
	}
	return wait + r/2
}

// ready reports whether p can take a packet now: window room and a pacer
// that lets it leave. Schedulers that spread load skip paths that are only
// pacing-limited, so that a saturated path's pacer does not hold the whole
// connection back (the engine waits for the picked path's release time).
func ready(p *Path, now mono.Time) bool { return p.CanSend && p.SendTime <= now }
