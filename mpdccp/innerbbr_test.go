// SPDX-License-Identifier: MIT

package mpdccp

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// innerBBR is a small model of Linux's BBR (v1, the machine default here)
// for the innerTCP flow: the bottleneck bandwidth is the highest delivery
// rate of the last 10 rounds, the propagation delay the lowest RTT of the
// last 10 s; it paces at gain × bandwidth and keeps at most 2 × BDP in
// flight; Startup (gain 2.89) until the bandwidth stops growing by 25 %
// for three rounds, Drain, then ProbeBW's eight-phase gain cycle, and
// ProbeRTT (4 packets for 200 ms) when the minimum RTT is 10 s old. Loss
// does not cut the window. What matters for a tunnel: a flow whose RTT
// rises beyond twice the minimum it once saw is window-limited, and its
// bandwidth estimate falls with its deliveries.
type innerBBR struct {
	mss          float64
	bwRounds     [10]float64 // max delivery rate per round, ring
	round        uint64
	nextRound    uint64 // delivered bytes that end the round
	delivered    uint64
	deliveredAt  mono.Time
	rtProp       time.Duration
	rtPropAt     mono.Time
	mode         int // 0 startup, 1 drain, 2 probe-bw, 3 probe-rtt
	fullBw       float64
	fullBwRounds int
	cycle        int
	cycleAt      mono.Time
	probeRTTEnd  mono.Time
	nextSend     mono.Time
}

var bbrCycle = [8]float64{1.25, 0.75, 1, 1, 1, 1, 1, 1}

func newInnerBBR(mss int) *innerBBR { return &innerBBR{mss: float64(mss)} }

func (b *innerBBR) bw() float64 {
	m := 0.0
	for _, v := range b.bwRounds {
		m = max(m, v)
	}
	return m
}

func (b *innerBBR) bdp() float64 {
	if b.rtProp == 0 || b.bw() == 0 {
		return 10 * b.mss
	}
	return b.bw() * b.rtProp.Seconds()
}

// cwnd in packets.
func (b *innerBBR) cwnd() float64 {
	if b.mode == 3 {
		return 4
	}
	gain := 2.0
	if b.mode == 0 {
		gain = 2.89
	}
	return max(gain*b.bdp()/b.mss, 4)
}

func (b *innerBBR) pacingGain() float64 {
	switch b.mode {
	case 0:
		return 2.89
	case 1:
		return 1 / 2.89
	case 2:
		return bbrCycle[b.cycle]
	}
	return 1
}

func (b *innerBBR) pacingRate() float64 {
	if bw := b.bw(); bw > 0 {
		return b.pacingGain() * bw
	}
	return 2.89 * 10 * b.mss / 0.001 // no sample yet
}

// onSend paces: the packet leaves at nextSend at the earliest.
func (b *innerBBR) onSend(now mono.Time, size float64) {
	b.nextSend = mono.Max(b.nextSend, now).Add(time.Duration(size / b.pacingRate() * 1e9))
}

// onAck takes the delivery of a packet sent when delivered was
// sentDelivered at sentAt, with its RTT.
func (b *innerBBR) onAck(now mono.Time, size float64, sentDelivered uint64, sentAt mono.Time, rtt time.Duration, inflight float64) {
	b.delivered += uint64(size)
	b.deliveredAt = now
	if iv := now.Sub(sentAt); iv > 0 {
		rate := float64(b.delivered-sentDelivered) / iv.Seconds()
		i := b.round % uint64(len(b.bwRounds))
		b.bwRounds[i] = max(b.bwRounds[i], rate)
	}
	if rtt > 0 && (b.rtProp == 0 || rtt <= b.rtProp || now.Sub(b.rtPropAt) > 10*time.Second && b.mode != 3) {
		if rtt <= b.rtProp || b.rtProp == 0 {
			b.rtProp, b.rtPropAt = rtt, now
		} else if b.mode != 3 {
			b.mode, b.probeRTTEnd = 3, now.Add(200*time.Millisecond+b.rtProp)
		}
	}
	if sentDelivered >= b.nextRound {
		b.round++
		b.nextRound = b.delivered
		b.bwRounds[b.round%uint64(len(b.bwRounds))] = 0
		b.checkFullBw()
	}
	switch b.mode {
	case 1:
		if inflight*b.mss <= b.bdp() {
			b.mode, b.cycle, b.cycleAt = 2, 2, now
		}
	case 2:
		if now.Sub(b.cycleAt) > b.rtProp {
			b.cycle, b.cycleAt = (b.cycle+1)%len(bbrCycle), now
		}
	case 3:
		if now >= b.probeRTTEnd {
			b.rtProp, b.rtPropAt = rtt, now
			b.mode, b.cycleAt = 2, now
		}
	}
}

func (b *innerBBR) checkFullBw() {
	if b.mode != 0 {
		return
	}
	bw := b.bw()
	if bw >= 1.25*b.fullBw {
		b.fullBw, b.fullBwRounds = bw, 0
		return
	}
	if b.fullBwRounds++; b.fullBwRounds >= 3 {
		b.mode = 1
	}
}
