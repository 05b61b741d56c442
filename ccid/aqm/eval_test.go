// SPDX-License-Identifier: MIT

package aqm_test

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

// An inner CUBIC flow (a small model of RFC 9438) through a tunnel whose
// outer controller is "none" with a 20 Mbit/s cap. Inner packets wait in the
// tunnel's send queue: with the AQM (CoDel, marking CE on the inner ECT(0)
// packets) or as a plain FIFO.

const innerSize = 1400

type cubic struct {
	cwnd, ssthresh float64
	wMax, k        float64
	epoch          mono.Time
	recoverSeq     uint64 // no second reduction for packets sent before this
	minRTT         time.Duration
}

const (
	cubicC    = 0.4
	cubicBeta = 0.7
)

func (c *cubic) onAck(now mono.Time, rtt time.Duration) {
	if c.minRTT == 0 || rtt < c.minRTT {
		c.minRTT = rtt
	}
	if c.cwnd < c.ssthresh {
		c.cwnd++
		return
	}
	if c.epoch == 0 {
		c.epoch = now
		c.wMax = max(c.wMax, c.cwnd)
		c.k = math.Cbrt(c.wMax * (1 - cubicBeta) / cubicC)
	}
	t := now.Sub(c.epoch).Seconds() + c.minRTT.Seconds()
	target := cubicC*math.Pow(t-c.k, 3) + c.wMax
	// Reno-friendly estimate (RFC 9438 §4.3).
	west := c.wMax*cubicBeta + 3*(1-cubicBeta)/(1+cubicBeta)*now.Sub(c.epoch).Seconds()/c.minRTT.Seconds()
	target = max(target, west)
	if target > c.cwnd {
		c.cwnd += min((target-c.cwnd)/c.cwnd, 0.5)
	} else {
		c.cwnd += 0.01 / c.cwnd
	}
}

func (c *cubic) onCongestion(now mono.Time, seq, nextSeq uint64) bool {
	if seq < c.recoverSeq {
		return false
	}
	c.recoverSeq = nextSeq
	c.wMax = c.cwnd
	c.cwnd = max(c.cwnd*cubicBeta, 2)
	c.ssthresh = c.cwnd
	c.epoch = 0
	return true
}

type aqmRun struct {
	p50, p99, max time.Duration
	goodput       float64
	marks, drops  uint64
	reductions    int
}

func runInnerCubic(useAQM, ect bool, dur time.Duration) aqmRun {
	sim := netsim.New(7)
	const rate = 20e6
	const oneWay = 20 * time.Millisecond
	var res aqmRun
	var sojourns []time.Duration
	measureFrom := mono.Time(5 * time.Second)

	tun, _ := ccid.New("none", ccid.Config{RateLimit: rate, MSS: innerSize})
	var tunSeq uint64
	enqTime := map[uint64]mono.Time{} // inner seq -> enqueue time, for sojourn
	var q *aqm.Queue
	var drops []uint64
	q = aqm.New(aqm.Config{Disabled: !useAQM, Limit: 1000, Drop: func(p []byte) {
		drops = append(drops, binary.BigEndian.Uint64(p[20:]))
	}})

	cc := &cubic{cwnd: 10, ssthresh: math.Inf(1)}
	var nextSeq, delivered uint64
	inflight := map[uint64]mono.Time{}

	var sendInner func()
	var pumpTunnel func()
	pumpScheduled := false

	// Reverse path: inner acks, straight back (the tunnel's reverse
	// direction is not the bottleneck).
	onAck := func(seq uint64, ce bool, sent mono.Time) {
		now := sim.Now()
		if _, ok := inflight[seq]; !ok {
			return
		}
		delete(inflight, seq)
		if ce {
			if cc.onCongestion(now, seq, nextSeq) {
				res.reductions++
			}
		} else {
			cc.onAck(now, now.Sub(sent))
		}
		sendInner()
	}
	// Tunnel egress: 20 Mbit/s of outer packets, then propagation.
	path := sim.NewLink(netsim.LinkConfig{Delay: oneWay}, func(p netsim.Packet) {
		seq := binary.BigEndian.Uint64(p.Data[20:])
		e, _ := aqm.ECN(p.Data)
		if p.SentAt >= measureFrom {
			delivered++
		}
		sent := mono.Time(binary.BigEndian.Uint64(p.Data[28:]))
		sim.After(oneWay, func() { onAck(seq, e == aqm.CE, sent) })
	})
	// Inner losses are noticed about one RTT later (fast retransmit).
	noticeDrops := func() {
		for _, s := range drops {
			delete(enqTime, s)
			sim.After(2*oneWay, func() {
				if _, ok := inflight[s]; ok {
					delete(inflight, s)
					if cc.onCongestion(sim.Now(), s, nextSeq) {
						res.reductions++
					}
					sendInner()
				}
			})
		}
		drops = drops[:0]
	}
	pumpTunnel = func() {
		pumpScheduled = false
		now := sim.Now()
		for q.Len() > 0 {
			if t := tun.SendTime(now); t > now {
				pumpScheduled = true
				sim.At(t, pumpTunnel)
				return
			}
			pkt, ok := q.Dequeue(now)
			if !ok {
				break
			}
			seq := binary.BigEndian.Uint64(pkt[20:])
			if now >= measureFrom {
				sojourns = append(sojourns, now.Sub(enqTime[seq]))
			}
			delete(enqTime, seq)
			tunSeq++
			tun.OnPacketSent(now, tunSeq, len(pkt)+40, true)
			path.Send(netsim.Packet{Size: len(pkt) + 40, Data: pkt})
		}
		noticeDrops()
	}
	sendInner = func() {
		now := sim.Now()
		for float64(len(inflight)) < cc.cwnd {
			e := aqm.NotECT
			if ect {
				e = aqm.ECT0
			}
			pkt := innerPacket(e, nextSeq, now)
			inflight[nextSeq] = now
			enqTime[nextSeq] = now
			nextSeq++
			q.Enqueue(now, pkt)
		}
		noticeDrops() // tail drops
		if !pumpScheduled {
			pumpTunnel()
		}
	}
	sim.At(0, sendInner)
	sim.RunUntil(mono.Time(dur))

	slices.Sort(sojourns)
	pct := func(p float64) time.Duration {
		if len(sojourns) == 0 {
			return 0
		}
		return sojourns[min(len(sojourns)-1, int(p*float64(len(sojourns))))]
	}
	res.p50, res.p99, res.max = pct(0.50), pct(0.99), pct(1)
	res.goodput = float64(delivered) * (innerSize + 40) * 8 / (time.Duration(dur) - time.Duration(measureFrom)).Seconds()
	st := q.Stats()
	res.marks, res.drops = st.Marked, st.Dropped+st.TailDropped
	return res
}

func innerPacket(ecn uint8, seq uint64, now mono.Time) []byte {
	p := make([]byte, innerSize)
	p[0] = 0x45
	p[1] = ecn
	binary.BigEndian.PutUint16(p[2:], innerSize)
	p[8], p[9] = 64, 6
	binary.BigEndian.PutUint64(p[20:], seq)
	binary.BigEndian.PutUint64(p[28:], uint64(now))
	return p
}

// TestEvalAQM: with the AQM the tunnel queue's p99 sojourn stays within
// 2 × target (5 ms); without it the inner CUBIC flow fills the queue.
func TestEvalAQM(t *testing.T) {
	dur := 30 * time.Second
	if testing.Short() {
		dur = 15 * time.Second
	}
	with := runInnerCubic(true, true, dur)
	without := runInnerCubic(false, true, dur)
	notECT := runInnerCubic(true, false, dur)
	t.Logf("inner CUBIC via 20 Mbit/s tunnel, 40 ms base RTT, %v, steady state from 5 s:", dur)
	t.Logf("| queue | sojourn p50 | p99 | max | goodput Mbit/s | CE marks | drops | inner reductions |")
	for _, r := range []struct {
		name string
		r    aqmRun
	}{{"CoDel, inner ECT(0)", with}, {"CoDel, inner Not-ECT", notECT}, {"FIFO 1000 pkts, no AQM", without}} {
		t.Logf("| %s | %v | %v | %v | %.2f | %d | %d | %d |", r.name, r.r.p50.Round(10*time.Microsecond),
			r.r.p99.Round(10*time.Microsecond), r.r.max.Round(10*time.Microsecond), r.r.goodput/1e6, r.r.marks, r.r.drops, r.r.reductions)
	}
	if with.p99 > 10*time.Millisecond {
		t.Errorf("with AQM p99 sojourn %v > 2 × 5 ms", with.p99)
	}
	if with.marks == 0 || with.drops != 0 {
		t.Errorf("with AQM on ECT traffic: %d marks, %d drops; want marks only", with.marks, with.drops)
	}
	if without.p99 < 10*with.p99 {
		t.Errorf("without AQM p99 %v not far above with AQM %v", without.p99, with.p99)
	}
	if with.goodput < 0.9*20e6 {
		t.Errorf("with AQM goodput %.1f Mbit/s < 90%% of 20", with.goodput/1e6)
	}
}
