// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

// The peer's clock has its own epoch: its Timestamps here start just
// below the 32-bit wrap, ours anywhere. Only the delay above its minimum
// counts: 0 on an idle path, the queue once one builds, and unknown
// when the Timestamps stop.
func TestInboundQueueIsTheDelayAboveItsMinimumWhateverTheClocks(t *testing.T) {
	const base = 20 * time.Millisecond
	var o owdTrack
	now := mono.Time(123456789 * time.Millisecond)
	peerEpoch := now.Add(-time.Duration(1<<32-5000) * tsTick) // the peer's counter wraps 50 ms in
	send := func(queue time.Duration) {
		sent := now.Add(-base - queue)
		o.sample(now, tsNow(mono.Time(sent-peerEpoch)))
	}
	for range 100 { // 1 s idle
		now = now.Add(tsEvery)
		send(0)
	}
	if q, ok := o.queue(now); !ok || q > time.Millisecond {
		t.Fatalf("idle path: queue %v (known %v), want about 0", q, ok)
	}
	for i := range 60 { // a queue of 30 ms builds over 300 ms and stays
		now = now.Add(tsEvery)
		send(min(time.Duration(i+1)*time.Millisecond, 30*time.Millisecond))
	}
	if q, _ := o.queue(now); q < 25*time.Millisecond || q > 31*time.Millisecond {
		t.Errorf("a standing queue of 30 ms reads %v", q)
	}
	if _, ok := o.queue(now.Add(owdStale)); ok {
		t.Error("a second without Timestamps still reads as known")
	}
}

// A route change that lengthens the path for good is not a queue for
// ever: the minimum ages out within two windows.
func TestInboundQueueForgetsAnOldMinimum(t *testing.T) {
	var o owdTrack
	now := mono.Time(time.Second)
	delay := 10 * time.Millisecond
	for i := range int(3 * owdWindow / tsEvery) {
		if i == 100 {
			delay = 40 * time.Millisecond
		}
		now = now.Add(tsEvery)
		o.sample(now, tsNow(now.Add(-delay)))
	}
	if q, _ := o.queue(now); q > time.Millisecond {
		t.Errorf("30 ms longer path for %v: queue %v, want about 0", 3*owdWindow, q)
	}
}

// The way out's queue is the RTT's excess less the way back's.
func TestOutboundQueueIsTheRTTExcessLessTheInbound(t *testing.T) {
	st := ccid.State{SRTT: 90 * time.Millisecond, MinRTT: 40 * time.Millisecond}
	for _, c := range []struct{ in, want time.Duration }{
		{0, 50 * time.Millisecond},
		{35 * time.Millisecond, 15 * time.Millisecond},
		{60 * time.Millisecond, 0}, // the two smoothings disagree: never negative
	} {
		if got := outOfRTT(&st, c.in); got != c.want {
			t.Errorf("inbound queue %v: outbound %v, want %v", c.in, got, c.want)
		}
	}
	var sf subflow
	if got := sf.outQueue(mono.Time(time.Second), &st); got != 0 {
		t.Errorf("no Timestamps from the peer: outbound queue %v, want 0 (unknown)", got)
	}
}

// The one-way delay to the peer holds the queue on the way out only: an
// RTT of 90 ms over a 40 ms minimum is 45 ms each way if nothing tells the
// ways apart, 20 ms when the 50 ms of queue is on the way back, 70 ms when
// it is on the way out (a full ADSL uplink seen from the CPE).
func TestOneWayDelayHoldsOnlyTheQueueOnTheWayOut(t *testing.T) {
	now := mono.Time(time.Minute)
	st := ccid.State{SRTT: 90 * time.Millisecond, MinRTT: 40 * time.Millisecond}
	var sf subflow
	if got, want := sf.oneWay(now, &st), 45*time.Millisecond; got != want {
		t.Errorf("no Timestamps from the peer: one way %v, want %v (half the RTT)", got, want)
	}
	for _, c := range []struct{ in, want time.Duration }{
		{50 * time.Millisecond, 20 * time.Millisecond},
		{0, 70 * time.Millisecond},
		{20 * time.Millisecond, 50 * time.Millisecond},
	} {
		sf.inDelay = owdTrack{set: true, lastAt: now, excess: c.in}
		if got := sf.oneWay(now, &st); got != c.want {
			t.Errorf("queue on the way back %v: one way %v, want %v", c.in, got, c.want)
		}
	}
}

// A download fills a 2 Mbit/s downlink's queue while the CPE sends a
// packet every 10 ms up an idle 10 Mbit/s uplink. Both ends' RTTs hold
// the queue; the Timestamps tell each end which way it is: the CPE's
// packets wait on the way back (their Acks queue behind the download),
// the concentrator's on the way out.
func TestEachEndTellsWhichWayItsPathQueues(t *testing.T) {
	cfg := Config{CCID: "ccid2"}
	h := newHarness(t, harnessConfig{seed: 5, cli: cfg, srv: cfg,
		links: []netsim.LinkConfig{{Rate: 10e6, Delay: 10 * time.Millisecond, Queue: 256 * 1024}},
		down:  []netsim.LinkConfig{{Rate: 2e6, Delay: 10 * time.Millisecond, Queue: 64 * 1024}}})
	c, _ := h.dialWithSink(1)
	srv := h.serverConn()
	download := &source{h: h, c: srv, side: sideServer, total: 1 << 30, size: 1200, period: time.Millisecond}
	ping := &source{h: h, c: c, side: sideClient, total: 1 << 30, size: 100, period: 10 * time.Millisecond, perTick: 1}
	download.start()
	ping.start()
	h.run(5 * time.Second)
	cpe, conc := c.Stats().Paths[0], srv.Stats().Paths[0]
	t.Logf("CPE: rtt %v min %v in %v out %v; concentrator: rtt %v min %v in %v out %v",
		cpe.CC.SRTT, cpe.CC.MinRTT, cpe.InQueue, cpe.OutQueue, conc.CC.SRTT, conc.CC.MinRTT, conc.InQueue, conc.OutQueue)
	if cpe.InQueue < 30*time.Millisecond || cpe.OutQueue > cpe.InQueue/4 {
		t.Errorf("CPE: queue in %v, out %v; want the downlink's queue in, little out", cpe.InQueue, cpe.OutQueue)
	}
	if conc.OutQueue < 30*time.Millisecond || conc.InQueue > conc.OutQueue/4 {
		t.Errorf("concentrator: queue in %v, out %v; want the downlink's queue out, little in", conc.InQueue, conc.OutQueue)
	}
}
