// SPDX-License-Identifier: MIT

package mpdccp

import (
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
)

// The one-way queueing delay of a subflow, per direction.
//
// A subflow's RTT holds the queues of both directions: its data's on the
// way out and its Acks' on the way back. A CPE that downloads over an
// ADSL line sees the download's queue on the downlink in the RTT of the
// ACKs it sends up, whether the 1 Mbit/s uplink is full or idle. To tell
// the two apart, each end puts a Timestamp (RFC 4340 §13.1) on some of
// its packets, and the other end follows the delay of those packets above
// its minimum: the queue on the way in. The RTT's excess less that is the
// queue on the way out (subflow.outQueue).
const (
	// tsEvery is how often a subflow puts a Timestamp on a packet that
	// has room for it: a Data packet (the room a DataAck's Ack Vector
	// would take) or an Ack. 8 bytes every 10 ms is 6.4 kbit/s, and the
	// estimate follows a queue within about 100 ms.
	tsEvery = 10 * time.Millisecond
	// tsTick is the Timestamp's unit (RFC 4340 §13.1).
	tsTick = 10 * time.Microsecond
	// owdWindow: the minimum delay is the least of this window's and the
	// last one's, so that clock drift and a route change age out.
	owdWindow = 10 * time.Second
	// owdStale: with no Timestamp for this long the inbound queue is
	// unknown again.
	owdStale = time.Second
)

// tsNow is the Timestamp value of now.
func tsNow(now mono.Time) uint32 { return uint32(int64(now) / int64(tsTick)) }

// owdTrack follows the queueing delay of the packets a subflow receives:
// their one-way delay above its minimum. The ends' clocks share no epoch
// (nor, exactly, a rate), so only differences between samples count.
type owdTrack struct {
	ref    uint32        // the first sample's offset, local ticks less the peer's
	set    bool          // ref is set
	min    [2]int32      // least delay of this window and the last, in ticks from ref
	winAt  mono.Time     // when this window began
	excess time.Duration // smoothed delay above the minimum
	lastAt mono.Time     // the last sample
}

// sample takes the Timestamp ts of a packet received now.
func (o *owdTrack) sample(now mono.Time, ts uint32) {
	d := tsNow(now) - ts
	if !o.set {
		o.ref, o.set, o.winAt = d, true, now // the minima start at 0, this sample
	}
	// Relative to the first sample, whatever the clocks' offset: what
	// changes is the queue and the clocks' drift, far inside int32's
	// ±6 hours of ticks.
	rel := int32(d - o.ref)
	if now.Sub(o.winAt) >= owdWindow {
		o.min[1], o.min[0], o.winAt = o.min[0], rel, now
	} else {
		o.min[0] = min(o.min[0], rel)
	}
	ex := time.Duration(rel-min(o.min[0], o.min[1])) * tsTick
	if now.Sub(o.lastAt) >= owdStale {
		o.excess = ex
	} else {
		o.excess += (ex - o.excess) / 8
	}
	o.lastAt = now
}

// queue is the smoothed queueing delay of the packets received, and
// whether it is known (recent Timestamps).
func (o *owdTrack) queue(now mono.Time) (time.Duration, bool) {
	if !o.set || now.Sub(o.lastAt) >= owdStale {
		return 0, false
	}
	return o.excess, true
}

// outQueue is the queueing delay of sf's packets on the way to the peer:
// the RTT above its minimum less the queue on the way back, 0 when the
// way back is not measured (a peer that sends no Timestamps).
func (sf *subflow) outQueue(now mono.Time, st *ccid.State) time.Duration {
	in, ok := sf.inDelay.queue(now)
	if !ok {
		return 0
	}
	return outOfRTT(st, in)
}

// oneWay is sf's one-way delay to the peer now: its base delay plus the
// queue on the way out when the peer's timestamps tell the two ways
// apart, else half the smoothed RTT. Half the RTT puts half of a queue
// on each way: on an asymmetric line (ADSL, 1 Mbit/s up) a full uplink
// looks half as long as it is from the sending end, and a queue on the
// downlink makes the empty uplink look slow from the other end.
func (sf *subflow) oneWay(now mono.Time, st *ccid.State) time.Duration {
	if in, ok := sf.inDelay.queue(now); ok && st.MinRTT > 0 {
		return sf.baseOWD(st) + outOfRTT(st, in)
	}
	return max(sf.baseOWD(st), st.SRTT/2)
}

// outOfRTT is the RTT's excess over its minimum less in, the queue on
// the way back.
func outOfRTT(st *ccid.State, in time.Duration) time.Duration {
	if st.MinRTT <= 0 {
		return 0
	}
	return max(st.SRTT-st.MinRTT-in, 0)
}
