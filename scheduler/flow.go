// SPDX-License-Identifier: MIT

package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("flow", func(Config) Scheduler { return &flowSched{} })
}

// flowSched places flows, not packets (the default scheduler).
//
//   - A flow is pinned to its cheapest path: the lowest one-way delay plus
//     the expected cost of repairing that path's losses. A ping, a DNS
//     query or a web page thus crosses the fastest path alone and is never
//     held back by a slower one (the receiver delivers a flow that stays on
//     one path without reordering holds).
//   - The pin moves only after the flow was idle for longer than the
//     paths' delay difference (flowlet switching), or when its path fails,
//     so a move never reorders the flow.
//   - A flow spreads onto a slower path only when that path delivers its
//     oldest waiting packet about as soon as waiting for the pinned path
//     would: when the packet's wait in the send queue reaches the slower
//     path's extra delay, less half the pinned path's round trip
//     (spreadRTT; earliest completion first, in datagram form). A flow
//     that one path can carry never builds that wait, so it never pays a
//     slower path's delay; a flow that needs more capacity queues up to
//     that point and then takes the slower path as overflow, its RTT
//     growing by at most half. The send queue's AQM gives such a flow
//     the delay difference as extra allowance, up to maxRTTSpread (all
//     of it for a flow that does not back off: unresponsiveSignals), and
//     waits for its RTT over the slowest of those paths (FlowDecision's
//     Extra and RTT).
//   - A flow that sends most of its packets on a slower path (the pinned
//     path is the smaller one: a slow DSL line beside a fast LTE one) is
//     pinned to that path instead, and the lower-delay path becomes its
//     overflow, taken whenever the pin has no room. Waiting for the small
//     path's queue to reach the delay difference before each overflow
//     would otherwise cap the flow far below what the big path alone
//     carries. The flow is already spread, so the move reorders nothing.
//     Only a path at least moveRatio times the pinned path's rate takes
//     the pin: the move lengthens the flow's RTT, which stalls inner BBR
//     until its minimum-RTT filter expires (10 s), and only a much
//     bigger path repays that; unless other flows use the pinned path
//     (sharedPath).
//   - A flow that fills its pinned path for a while (sends at least
//     fillShare of its rate over fillWindows windows) moves its pin to a
//     path that may carry it alone: one measured at least moveRatio times
//     bigger, or one whose capacity is still unknown (a path that carried
//     only overflow never got the demand that measures it; the flow tries
//     it once, and goes back when the tried path proves less than
//     moveRatio times the old one; until then its share on the tried path
//     does not send it back, see PickFlow; a flow of data that already
//     sends an eighth of its packets as overflow onto a path that shows
//     no queue is not tried, its overflow measures the path:
//     trialWindows). The old pin becomes its overflow. A flow of small
//     packets (a download's ACKs) fills its path by its wire bytes (its
//     own and the tunnel's headers: FlowPacket.Overhead), and only when
//     the path queues on the way out (Path.OutQueue): the ACKs of a
//     download over ADSL fill its 1 Mbit/s uplink, and on LTE's the
//     download got 26 Mbit/s against 18-21 (inner BBR, lab). The RTT
//     cannot tell: it holds the download's own queue on the downlink,
//     and moving the ACKs off an uplink far from full made every inner
//     RTT longer by the uplinks' delay difference. A bulk download over
//     a small low-delay line beside a big LTE link otherwise stays on the
//     small line: inner BBR keeps about two of the small line's round
//     trips in flight, which never builds the wait
//     that spreads it (10 Mbit/s 8 ms beside 20 Mbit/s 35 ms: 0.70 of the
//     big path alone in the matrix). A path more than moveDelay slower is
//     never tried.
//   - A flow that fills its pinned path with no path to move its pin to
//     overflows onto a path at most moveDelay slower as soon as the pin
//     has no room, without first queueing for the delay difference.
//     Inner BBR paces at the rate it measured and keeps about one RTT in
//     flight beyond it, so that wait never builds and its bandwidth
//     probes never reached the second path (20 + 10 Mbit/s at 8 + 35 ms:
//     17.4-17.7 Mbit/s in the lab, 0.93 of the fast path alone; 21-24
//     with this rule). A short flow never fills a path for fillWindows
//     windows and still waits, so it never pays the slower path's delay.
//     Nor does a flow of small packets (bulkPacket): the ACKs of a big
//     download fill an uplink whose estimate is what they gave it, and
//     overflowing them once moved them all to a second uplink (0.36 of
//     kernel MPTCP in an end-to-end run).
//   - Flows kept on one path go before spread ones (FlowPacket.FirstPass):
//     a bulk flow spread for capacity takes what the web objects,
//     requests and interactive flows beside it leave, and its backlog
//     overflows to the slower paths rather than delaying them.
type flowSched struct {
	counters
	flows []flowEntry // by flow bucket, grown on demand
}

type flowEntry struct {
	primary  int       // path id the flow is pinned to, -1 for none
	last     mono.Time // when the flow last had a packet scheduled
	striping bool      // it used a slower path recently (hysteresis)
	// share is the moving share of the flow's packets that took its
	// pinned path (over about shareWindow packets).
	share float32
	// bulk: the pin moved for capacity (share); a pause of the flow
	// shorter than bulkIdle does not move it back to the cheapest path.
	bulk bool
	// The flow's packets (own) among all its pinned path carried (all)
	// since it took the pin, halved now and then (shared); primSeen is
	// the path's pick count after the flow's last packet there.
	own, all uint32
	primSeen uint64
	// unresponsive: the AQM kept signalling the flow without its queue
	// draining (unresponsiveSignals); it may queue onto a satellite path.
	unresponsive bool
	// The flow's bytes and packets since winStart (its sending rate),
	// and how many windows in a row it filled its pinned path
	// (fillShare); bigPackets: its packets in the last window averaged
	// at least bulkPacket bytes.
	winStart   mono.Time
	winBytes   uint32
	winWire    uint32 // winBytes with the tunnel's headers (FlowPacket.Overhead)
	winPkts    uint32
	winOver    uint32 // of winPkts, sent on another path than the pin
	fullWins   uint8
	bigPackets bool
	// spillWins: windows left in which the flow may still overflow
	// without queueing first (spillMemory), though it no longer fills
	// its path in every window.
	spillWins uint8
	// tried: the flow's pin moved once to a path of unknown capacity;
	// trialFrom is the path id it came from until that path's capacity
	// is known (-1: no trial pending). trialWait counts the full windows
	// the flow overflowed onto such a path before trying it (trialWindows).
	tried     bool
	trialFrom int
	trialWait uint8
}

// maxFlowBucket bounds the per-flow table.
const maxFlowBucket = 1 << 16

// Scheduling constants.
const (
	// flowMargin is the jitter allowance on top of a delay difference.
	flowMargin = 2 * time.Millisecond
	// maxUsefulLoss: a path losing more than this is not used to spread a
	// flow (each loss costs a repair); it still carries flows pinned to it
	// when it is the only path.
	maxUsefulLoss = 0.25
	// spreadRTT is the share of the pinned path's base RTT by which a
	// packet sent on a slower path may arrive after the packets behind
	// it would have (the receiver holds those for it). Without it inner
	// BBR never spread: it keeps 2 × its bandwidth × minimum RTT in
	// flight, so its queue here stays near one RTT and never reaches the
	// delay difference (10 Mbit/s 8 ms beside 20 Mbit/s 35 ms: 0.47 of
	// the bigger path alone in the lab). Half an RTT leaves it room.
	spreadRTT = 0.5
	// moveRatio: the pin follows the capacity only to a path with at
	// least this multiple of the pinned path's rate estimate. Between a
	// comparable path (Wi-Fi 30 Mbit/s beside LTE 40: 1.33) and twice the
	// rate, where estimates scatter around the ratio (at 2, a 10 Mbit/s
	// 8 ms path beside a 20 Mbit/s 35 ms one kept the pin on the small
	// path in the lab, and inner CUBIC got 0.94 of the big path alone
	// instead of 1.27).
	moveRatio = 1.5
	// sharedPath: a pinned path carrying more than this share of other
	// flows' packets is shared; a flow spread over it for capacity moves
	// its pin to the slower path even when that is not moveRatio bigger.
	// The low-delay path then runs below its capacity, and the flows kept
	// there (web objects, requests, interactive traffic) do not pay the
	// queue a full path keeps: beside a bulk download on 20 Mbit/s 8 ms +
	// 10 Mbit/s 35 ms, web flows' one-way delay p50 17.6 ms with the move
	// against 21.8 without (lab; 15.7 with FirstPass as well).
	sharedPath = 0.25
	// shareDecay: the own/all counts are halved at this many packets.
	shareDecay = 512
	// stripeHysteresis: once spreading, a flow keeps using the slower path
	// until its wait drops below this fraction of the threshold.
	stripeHysteresis = 0.75
	// A flow whose share on its pinned path drops below minShare moves
	// its pin to the path carrying the rest; shareWindow packets is the
	// memory of that share. Short flows never move.
	minShare    = 0.4
	shareWindow = 64
	bulkIdle    = time.Second
	// maxRTTSpread: a path more than this slower (one way) counts neither
	// in a flow's RTT nor in its queue allowance (FlowDecision): its AQM
	// should not let the flow's queue grow onto a satellite path.
	maxRTTSpread = 150 * time.Millisecond
	// unresponsiveSignals: a flow the AQM has signalled this many times
	// in one dropping spell does not back off (CoDel's signal rate grows
	// with the count, and a flow that reacts ends the spell within a few).
	// For such a flow (a constant-rate UDP stream above the fast path's
	// rate) the satellite cap only turns the excess into drops: it gets
	// the whole delay difference as queue allowance and overflows onto
	// the long path instead. 20 + 10 Mbit/s at 8 + 300 ms, UDP at 80 % of
	// the sum: 0.84 of it delivered with the cap for every flow.
	unresponsiveSignals = 16
	// fillWindow is the window over which a flow's sending rate is
	// measured (at least two of its pinned path's round trips).
	fillWindow = 200 * time.Millisecond
	// fillShare: a flow sending this share of its pinned path's rate
	// estimate fills it (the estimate counts the tunnel's headers and the
	// flow may share the path).
	fillShare = 0.7
	// fillWindows: windows in a row a flow must fill its pinned path
	// before its pin moves for capacity.
	fillWindows = 3
	// trialWindows: full windows a flow overflows (PickFlow's filling
	// rule) before its pin moves on trial to a path of unknown capacity;
	// overflowMeasures: unless it sent at least this share of its packets
	// in the last window as overflow and the path shows no queue. That
	// overflow is demand that measures the other paths, and the share
	// rule moves the pin to one that proves bigger (moveRatio), whereas a
	// trial moves the flow's whole round trip onto the slower path at
	// once and the tried path's Startup takes all of an inner window
	// sized for the faster one (20 + 10 Mbit/s at 8 + 35 ms, inner CUBIC,
	// the 10 Mbit/s path tried about 0.9 s in: goodput down to 9-11
	// Mbit/s for 0.4 s in the simulator, the fast path down to 3-4 Mbit/s
	// in the lab). A path that queues the overflow is full, and only a
	// trial ends its Startup: fed overflow in bursts it stays there
	// (BBRParams' PlateauNeedsDemand), and beside a path ten times faster
	// its queue held most packets at the receiver for 20-100 ms (lab,
	// 10:1 cell: 16.5 Mbit/s in one run without the trial; 18.2 on
	// average with it). A path that overflow cannot measure (inner BBR
	// paces at the small path's rate, little overflows) is still tried,
	// one window later than the fill test.
	trialWindows     = 1
	overflowMeasures = 0.125
	// spillMemory: windows a flow that filled its path keeps overflowing
	// without queueing first after it stops filling it. Inner BBR's
	// ProbeRTT (four packets in flight for 200 ms every 10 s) costs one
	// or two windows below fillShare; reset, the flow had to fill the
	// pinned path for fillWindows windows again, queueing for the delay
	// difference before each overflow, and inner BBR, cwnd-limited
	// behind that queue, measured only the pinned path's rate (20 + 10
	// Mbit/s at 8 + 35 ms, 2 % loss on the slower: 18-20 Mbit/s for up to
	// 3 s after it, 26-27 before). Not after a trial: the flow's window
	// has just moved between paths, and a constant-rate stream that
	// overflowed at once after one queued more on the fast path (a ping
	// beside it: one-way p90 11.1-12.4 ms against 8.7-12.2 in the
	// simulator, TestSpreadFlowBesidePing's seeds 21-24).
	spillMemory = 3
	// bulkPacket: the mean packet size, in bytes, of a flow that carries
	// data (the IPv4 datagram every host must accept); pure ACKs and
	// small requests are well below it, full segments well above.
	bulkPacket = 576
	// moveDelay: a path more than this slower (one way) does not take the
	// pin of a flow that fills its path, nor its overflow before the wait
	// reaches the delay difference. The move lengthens the flow's
	// round trip at once, and inner BBR, whose window is sized on its
	// minimum RTT until that expires (10 s), stalls when the new round
	// trip is much longer than two of the old.
	moveDelay = 50 * time.Millisecond
)

func (*flowSched) Name() string { return "flow" }

// cost is the expected delivery delay of a packet sent on p now, without
// waiting for window or pacing: base one-way delay plus the chance of a
// loss times the time a repair takes (about the fastest round trip).
func cost(p *Path, repair time.Duration) time.Duration {
	return p.OWD + lossCost(p, repair)
}

// lossCost is the expected delay repairs add to a packet sent on p: a
// repair for the loss, another for the repair's loss, ...
func lossCost(p *Path, repair time.Duration) time.Duration {
	l := min(p.Loss, 0.99)
	return time.Duration(l / (1 - l) * float64(repair))
}

// delay is the path's one-way delay now: its base delay, or half its
// smoothed RTT when that is larger (a queue on the path), plus the
// expected cost of repairing its losses.
func delay(p *Path, repair time.Duration) time.Duration {
	return max(p.OWD, p.SRTT/2) + lossCost(p, repair)
}

// repairTime is about how long a loss repair takes: the receiver's
// report and the resent packet cross the fastest path.
func repairTime(paths []Path, floor uint8) time.Duration {
	r := time.Duration(-1)
	for i := range paths {
		p := &paths[i]
		if eligible(p, floor) && (r < 0 || 2*p.OWD < r) {
			r = 2 * p.OWD
		}
	}
	return max(r, 0) + flowMargin
}

// costSlack: paths whose costs differ by less are equally fast. Two links
// of the same kind (two DSL lines, two LTE modems) measure base delays a
// fraction of a millisecond apart; the bigger one must win that tie, or
// every short flow crosses the smaller one (a 100 KB transfer took 1.5 ×
// as long). Half a millisecond one way keeps a ping within 1 ms of the
// fastest path's round trip.
const costSlack = 500 * time.Microsecond

// bigger reports whether p is the bigger of two equally fast paths: by
// their capacities when both were measured, else by the configured order
// (the earlier path, b, stays). Between idle paths the rate estimates are
// noise (what pings and acks happened to measure): the 10 Mbit/s path of
// two at 5 ms won the tie on a fresh tunnel, and 100 KB took 104 ms (64
// with this rule; 68 on the 20 Mbit/s path alone). The first path
// configured is the user's primary, as a kernel MPTCP connection's first
// subflow.
func bigger(p, b *Path) bool {
	return p.RateMeasured && b.RateMeasured && rate(p) > rate(b)
}

// rate is the path's bandwidth estimate, or its pacing rate when it has
// none. A BBR path's pacing rate swings with its phase (2.77 × in Startup,
// 0.9 × while draining), so an idle path in Startup would outbid a
// bigger one that is cruising.
func rate(p *Path) float64 {
	if p.Rate > 0 {
		return p.Rate
	}
	return p.PacingRate
}

// cheapest returns the index of the eligible path with the lowest cost
// (within costSlack: the higher bandwidth), or -1. A path losing more than
// maxUsefulLoss is taken only when no other is eligible.
func cheapest(paths []Path, floor uint8, repair time.Duration, readyOnly bool, now mono.Time) int {
	best := -1
	for i := range paths {
		p := &paths[i]
		if !eligible(p, floor) || readyOnly && !ready(p, now) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &paths[best]
		if lossy, bLossy := p.Loss > maxUsefulLoss, b.Loss > maxUsefulLoss; lossy != bLossy {
			if bLossy {
				best = i
			}
			continue
		}
		c, bc := cost(p, repair), cost(b, repair)
		if c < bc-costSlack || c <= bc+costSlack && bigger(p, b) {
			best = i
		}
	}
	return best
}

// Pick serves packets that are not scheduled by flow (traffic classes
// using `flow`): the cheapest path with room, else hold.
func (s *flowSched) Pick(now mono.Time, paths []Path, _ Packet, dst []int) []int {
	floor := minPrio(paths)
	if i := cheapest(paths, floor, repairTime(paths, floor), true, now); i >= 0 {
		dst = append(dst, paths[i].ID)
	}
	return s.record(dst)
}

func (s *flowSched) entry(f int) *flowEntry {
	f = max(0, min(f, maxFlowBucket-1))
	for len(s.flows) <= f {
		s.flows = append(s.flows, flowEntry{primary: -1, trialFrom: -1})
	}
	return &s.flows[f]
}

// Shrink forgets every flow: after an idle spell longer than any flowlet
// gap each would be placed afresh.
func (s *flowSched) Shrink() { s.flows = nil }

// margin is the jitter allowance between two paths.
func margin(a, b *Path) time.Duration { return flowMargin + (a.RTTVar+b.RTTVar)/2 }

// PickFlow chooses the path for flow f's oldest packet (see flowSched).
func (s *flowSched) PickFlow(now mono.Time, paths []Path, f FlowPacket) FlowDecision {
	floor := minPrio(paths)
	repair := repairTime(paths, floor)
	best := cheapest(paths, floor, repair, false, now)
	if best < 0 {
		s.holds++
		return FlowDecision{}
	}
	fe := s.entry(f.Flow)
	pi := -1
	for i := range paths {
		if paths[i].ID == fe.primary && eligible(&paths[i], floor) {
			pi = i
		}
	}
	// A new flow, or one whose path failed, takes the cheapest path; an
	// idle flow (a new flowlet) may move to it.
	gap := flowletGap(paths, floor, repair)
	if pi < 0 || pi != best && now.Sub(fe.last) > gap && (!fe.bulk || now.Sub(fe.last) > bulkIdle) {
		pi, fe.primary, fe.striping, fe.share, fe.bulk = best, paths[best].ID, false, 1, false
		fe.repin(s.picked(fe.primary))
		fe.winStart, fe.winBytes, fe.winWire, fe.winPkts, fe.winOver, fe.fullWins, fe.tried, fe.trialFrom, fe.trialWait = now, 0, 0, 0, 0, 0, false, -1, 0
		fe.spillWins = 0
	}
	if q := fe.outgrown(now, paths, pi, floor, repair); q >= 0 {
		// The flow fills its pinned path: a bigger one carries it alone,
		// the old pin is its overflow.
		pi, fe.primary, fe.share, fe.striping, fe.bulk = q, paths[q].ID, 1, false, true
		fe.repin(s.picked(fe.primary))
	}
	// A new flowlet is judged afresh.
	fe.unresponsive = f.Signals >= unresponsiveSignals || fe.unresponsive && now.Sub(fe.last) <= gap
	fe.last = now
	prim := &paths[pi]
	pd := delay(prim, repair)
	// The wait worth building before the slowest useful path helps: its
	// base delay difference (a queue on that path is no reason to queue
	// more here; the flow backs off instead). The flow's RTT is that of
	// the slowest path it may use, satellites aside (maxRTTSpread).
	var extra time.Duration
	rtt := prim.MinRTT
	for i := range paths {
		q := &paths[i]
		if i == pi || !eligible(q, floor) || q.Loss > maxUsefulLoss {
			continue
		}
		d := cost(q, repair) - cost(prim, repair)
		extra = max(extra, d+margin(prim, q))
		if d <= maxRTTSpread {
			rtt = max(rtt, q.MinRTT)
		}
	}
	// The queue the AQM lets the flow build for that: a flow that backs
	// off on drops (CUBIC) does not get to a satellite path's delay
	// difference, where each packet it sent there would stall it for the
	// satellite's delay; one that keeps its queue regardless (BBR) still
	// spreads, and one that does not back off at all (unresponsive) gets
	// the whole difference.
	allow := min(extra, maxRTTSpread)
	if fe.unresponsive {
		allow = extra
	}
	if f.FirstPass && fe.striping {
		return FlowDecision{Extra: allow, RTT: rtt, Yielded: true}
	}
	onPin := func() FlowDecision {
		others := s.picked(prim.ID) - fe.primSeen
		s.pick(prim.ID)
		fe.countOnPin(others, s.picked(prim.ID))
		fe.share += (1 - fe.share) / shareWindow
		fe.countSent(f.Size, f.Overhead)
		return FlowDecision{OK: true, Path: prim.ID, Extra: allow, RTT: rtt}
	}
	// A pinned path with a standing queue has lost capacity under the
	// flow (an LTE cell's rate falls tenfold, and its buffer, sized for
	// the old rate, holds hundreds of ms while the controller's estimate
	// catches up): a ready path that delivers sooner takes the packet, as
	// overflow. Waiting for the pin to have no room left a 16 Mbit/s path
	// mostly idle beside a 40 Mbit/s one fallen to 4: 5.5 Mbit/s in the
	// simulator, 7.6 with this (TestSimPinnedPathLosesCapacity); about 4
	// and 8 in the lab. The pin stays: a path the flow
	// left carries nothing that would measure it again, and when its
	// capacity came back the flow stayed off it for 4 s (lab). Only a
	// queue of packets in flight counts (an idle path's smoothed RTT is
	// that of its last burst), and not during a trial: the flow moved
	// there to fill the path and measure it, and its Startup queues.
	primReady := ready(prim, now)
	if primReady && (!queuedBeyondJitter(prim) || prim.InFlight == 0 || fe.trialFrom >= 0) {
		return onPin()
	}
	// The pinned path cannot send now: a ready slower path takes the
	// packet if it arrives sooner than waiting would (the wait so far
	// stands for the wait to come: the flow's queue drains at the pinned
	// path's rate).
	retry := time.Duration(-1)
	// Only a flow of data packets: the ACKs of a download fill a path
	// whose estimate is no more than what those ACKs gave it (an uplink
	// beside a bigger one, its controller still in Startup), and moved
	// off it they would only be late.
	filling := fe.spillWins > 0 && fe.bigPackets
	for i := range paths {
		q := &paths[i]
		if i == pi || !eligible(q, floor) || !ready(q, now) || q.Loss > maxUsefulLoss ||
			primReady && delay(q, repair)+flowMargin+q.RTTVar >= pd {
			continue
		}
		need := spreadWait(delay(q, repair)-pd, prim) + margin(prim, q)
		if filling && cost(q, repair)-cost(prim, repair) <= moveDelay {
			// Not the paths' RTT variation: an overflow path's is stale
			// from its last burst when it has carried nothing since.
			need = min(need, flowMargin)
		}
		if fe.striping {
			need = time.Duration(float64(need) * stripeHysteresis)
		}
		if f.Sojourn >= need {
			fe.striping = true
			fe.countSent(f.Size, f.Overhead)
			fe.winOver++
			s.pick(q.ID)
			// Not back to the path a trial came from while the tried path's
			// capacity is unknown: its estimate is only what the flow gave
			// it so far (a Startup that began at ten packets), and the
			// trial ends when it is measured (outgrown).
			if fe.share -= fe.share / shareWindow; fe.share < minShare && q.ID != fe.trialFrom &&
				(rate(q) >= moveRatio*rate(prim) || fe.shared()) {
				// Most of the flow goes to q: pin it there.
				fe.primary, fe.share, fe.striping, fe.bulk = q.ID, 1-fe.share, false, true
				fe.repin(s.picked(q.ID))
			}
			return FlowDecision{OK: true, Path: q.ID, Extra: allow, RTT: rtt}
		}
		if retry < 0 || need-f.Sojourn < retry {
			retry = need - f.Sojourn
		}
	}
	if primReady {
		return onPin()
	}
	if f.Sojourn < extra/2 && !filling {
		fe.striping = false
	}
	s.holds++
	return FlowDecision{Extra: allow, RTT: rtt, RetryIn: max(retry, 0)}
}

// outgrown measures the flow's sending rate against its pinned path
// paths[pi] and returns the index of the path its pin should move to
// because the flow fills the pinned one, or -1 (see flowSched).
func (fe *flowEntry) outgrown(now mono.Time, paths []Path, pi int, floor uint8, repair time.Duration) int {
	prim := &paths[pi]
	if fe.trialFrom >= 0 && prim.RateMeasured {
		// The tried path's capacity is known: the flow stays only if it
		// is moveRatio times the path it came from.
		from := fe.trialFrom
		fe.trialFrom = -1
		for i := range paths {
			if o := &paths[i]; o.ID == from && i != pi && eligible(o, floor) && rate(prim) < moveRatio*rate(o) {
				fe.fullWins, fe.spillWins = 0, 0
				return i
			}
		}
	}
	win := max(fillWindow, 2*prim.SRTT)
	el := now.Sub(fe.winStart)
	if el < win {
		return -1
	}
	fe.bigPackets = fe.winBytes >= bulkPacket*fe.winPkts
	full := prim.RateMeasured && float64(fe.winBytes) >= fillShare*rate(prim)*el.Seconds()
	if !fe.bigPackets {
		// A flow of small packets (a download's ACKs) loads its path with
		// the tunnel's headers as much as with its own bytes: 52-byte
		// ACKs fill an ADSL uplink of 1 Mbit/s that their own bytes
		// would fill only at twice the rate. Their wire bytes count, but
		// only against a pin with a standing queue on the way out: a
		// path whose estimate is only what the ACKs gave it (its
		// controller left Startup on them) is not full.
		full = prim.RateMeasured && outQueueing(prim) && float64(fe.winWire) >= fillShare*rate(prim)*el.Seconds()
	}
	overflowing := float64(fe.winOver) >= overflowMeasures*float64(fe.winPkts)
	fe.winStart, fe.winBytes, fe.winWire, fe.winPkts, fe.winOver = now, 0, 0, 0, 0
	if !full || el > 2*win {
		// An idle spell in the window is no proof of a full path.
		fe.fullWins, fe.trialWait = 0, 0
		if el > 2*win {
			fe.spillWins = 0
		} else if fe.spillWins > 0 {
			fe.spillWins--
		}
		return -1
	}
	fe.fullWins = min(fe.fullWins+1, fillWindows)
	if fe.fullWins < fillWindows {
		return -1
	}
	fe.spillWins = spillMemory
	best := -1
	for i := range paths {
		q := &paths[i]
		// Only towards a path at least as slow: a flow moves back to a
		// faster one by its share (it overflows there), and one that left
		// a shared low-delay path (sharedPath) is not brought back.
		if d := cost(q, repair) - cost(prim, repair); i == pi || !eligible(q, floor) || q.Loss > maxUsefulLoss ||
			d > moveDelay || d < -costSlack {
			continue
		}
		if q.RateMeasured && rate(q) < moveRatio*rate(prim) || !q.RateMeasured && fe.tried {
			continue
		}
		if best < 0 || rate(q) > rate(&paths[best]) {
			best = i
		}
	}
	if best >= 0 && !paths[best].RateMeasured {
		// Overflow of small packets never fills a path, so it does not
		// measure one either: such a flow is tried.
		if fe.trialWait < trialWindows || overflowing && fe.bigPackets && !queueing(&paths[best]) {
			fe.trialWait = min(fe.trialWait+1, trialWindows)
			return -1
		}
		fe.tried, fe.trialFrom = true, prim.ID
	}
	if best >= 0 {
		fe.fullWins, fe.trialWait, fe.spillWins = 0, 0, 0
	}
	return best
}

// queueing reports whether p's smoothed RTT shows a standing queue.
func queueing(p *Path) bool { return standing(p, p.SRTT-p.MinRTT) }

// queuedBeyondJitter reports whether p's smoothed RTT shows a standing
// queue that its RTT variation does not explain: a radio path's jitter
// lifts the smoothed RTT by about half its spread, and its variation
// with it.
func queuedBeyondJitter(p *Path) bool { return standing(p, p.SRTT-p.MinRTT-2*p.RTTVar) }

// outQueueing reports whether p has a standing queue on the way out.
func outQueueing(p *Path) bool { return standing(p, p.OutQueue) }

// standing reports whether a queueing delay q on p is a standing queue:
// a quarter of p's minimum RTT, at least 5 ms.
func standing(p *Path, q time.Duration) bool {
	return p.MinRTT > 0 && q > max(p.MinRTT/4, 5*time.Millisecond)
}

// countSent adds one of the flow's packets, size bytes, to its window.
func (fe *flowEntry) countSent(size, overhead int) {
	fe.winBytes += uint32(max(size, 0))
	fe.winWire += uint32(max(size, 0) + max(overhead, 0))
	fe.winPkts++
}

// repin starts the own/all counts for a new pinned path that has
// carried picked packets so far.
func (fe *flowEntry) repin(picked uint64) { fe.own, fe.all, fe.primSeen = 0, 0, picked }

// countOnPin counts one of the flow's packets on its pinned path, after
// others of other flows; picked is the path's count now.
func (fe *flowEntry) countOnPin(others, picked uint64) {
	fe.own++
	fe.all += uint32(min(others, shareDecay)) + 1
	fe.primSeen = picked
	if fe.all >= shareDecay {
		fe.own, fe.all = fe.own/2, fe.all/2
	}
}

// shared reports whether the flow's pinned path carries a sizeable share
// of other flows' packets (sharedPath).
func (fe *flowEntry) shared() bool {
	return fe.all >= shareWindow && float32(fe.all-fe.own) > sharedPath*float32(fe.all)
}

// spreadWait is how long a flow's oldest packet must have waited for its
// pinned path before a path slower by diff takes it (see spreadRTT).
func spreadWait(diff time.Duration, prim *Path) time.Duration {
	if diff <= 0 {
		return diff
	}
	return diff - time.Duration(spreadRTT*float64(prim.MinRTT))
}

// flowletGap is how long a flow must have been idle before it may move to
// another path without reordering: the largest delay difference between
// eligible paths, plus the margin.
func flowletGap(paths []Path, floor uint8, repair time.Duration) time.Duration {
	lo, hi := time.Duration(-1), time.Duration(0)
	var jitter time.Duration
	for i := range paths {
		p := &paths[i]
		if !eligible(p, floor) {
			continue
		}
		c := cost(p, repair)
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
		jitter = max(jitter, p.RTTVar)
	}
	return hi - max(lo, 0) + flowMargin + jitter
}
