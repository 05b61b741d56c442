// SPDX-License-Identifier: MIT

package netsim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

const second = mono.Time(time.Second)

// offer sends packets of size bytes at rate bits/s for dur on l.
func offer(s *Sim, l *Link, size int, rate float64, dur time.Duration) {
	gap := time.Duration(float64(size*8) / rate * 1e9)
	var tick func()
	tick = func() {
		if s.Now() >= mono.Time(dur) {
			return
		}
		l.Send(Packet{Size: size})
		s.After(gap, tick)
	}
	s.At(0, tick)
}

func TestDeliveredRateMatchesConfig(t *testing.T) {
	for _, rate := range []float64{1e6, 20e6, 500e6} {
		s := New(1)
		var bytes int
		var last mono.Time
		l := s.NewLink(LinkConfig{Rate: rate, Queue: 100_000, Delay: 10 * time.Millisecond}, func(p Packet) {
			if s.Now() > second && s.Now() <= 3*second {
				bytes += p.Size
			}
			last = s.Now()
		})
		offer(s, l, 1500, rate*1.2, 4*time.Second)
		s.RunUntil(5 * second)
		got := float64(bytes*8) / 2
		if math.Abs(got-rate)/rate > 0.01 {
			t.Errorf("rate %v: delivered %v bit/s", rate, got)
		}
		if l.Stats().DroppedQueue == 0 {
			t.Errorf("rate %v: offered 1.2x but nothing tail-dropped", rate)
		}
		if last == 0 {
			t.Fatal("nothing delivered")
		}
	}
}

func TestDelayAndQueueBound(t *testing.T) {
	s := New(2)
	const rate, queue = 10e6, 30_000
	delay := 25 * time.Millisecond
	var minD, maxD time.Duration = time.Hour, 0
	l := s.NewLink(LinkConfig{Rate: rate, Queue: queue, Delay: delay}, func(p Packet) {
		d := s.Now().Sub(p.SentAt)
		minD, maxD = min(minD, d), max(maxD, d)
	})
	offer(s, l, 1000, 2*rate, time.Second)
	s.RunUntil(2 * second)
	ser := time.Duration(1000 * 8 / rate * 1e9)
	if minD != delay+ser {
		t.Errorf("min delay %v, want %v", minD, delay+ser)
	}
	bound := delay + time.Duration(float64(queue*8)/rate*1e9)
	if maxD > bound {
		t.Errorf("max delay %v above delay+queue/rate %v", maxD, bound)
	}
	if maxD < bound-2*ser {
		t.Errorf("max delay %v: queue never filled (bound %v)", maxD, bound)
	}
}

func TestBernoulliLossWithinBinomialInterval(t *testing.T) {
	s := New(3)
	const n, p = 100_000, 0.05
	l := s.NewLink(LinkConfig{Loss: p}, func(Packet) {})
	for i := 0; i < n; i++ {
		l.Send(Packet{Size: 100})
	}
	s.RunUntil(second)
	lost := float64(l.Stats().DroppedLoss)
	sd := math.Sqrt(n * p * (1 - p))
	if math.Abs(lost-n*p) > 1.96*sd {
		t.Errorf("lost %v of %d, want %v ± %v", lost, n, n*p, 1.96*sd)
	}
	if got := l.Stats().Delivered + l.Stats().DroppedLoss; got != n {
		t.Errorf("delivered+lost = %d, want %d", got, n)
	}
}

func TestGilbertElliottMeanAndBurstiness(t *testing.T) {
	s := New(4)
	ge := &GilbertElliott{PGoodBad: 0.01, PBadGood: 0.2, LossGood: 0, LossBad: 0.8}
	var seq []bool
	l := s.NewLink(LinkConfig{GE: ge}, func(Packet) {})
	const n = 200_000
	for i := 0; i < n; i++ {
		before := l.Stats().DroppedLoss
		l.Send(Packet{Size: 100})
		seq = append(seq, l.Stats().DroppedLoss > before)
	}
	lost := float64(l.Stats().DroppedLoss) / n
	if math.Abs(lost-ge.MeanLoss()) > 0.15*ge.MeanLoss() {
		t.Errorf("mean loss %.4f, want %.4f", lost, ge.MeanLoss())
	}
	// Bursty: P(loss | previous lost) far above the mean.
	var pairs, both float64
	for i := 1; i < n; i++ {
		if seq[i-1] {
			pairs++
			if seq[i] {
				both++
			}
		}
	}
	if both/pairs < 3*lost {
		t.Errorf("conditional loss %.3f not bursty vs mean %.3f", both/pairs, lost)
	}
}

func TestOutageDropsSilently(t *testing.T) {
	s := New(5)
	var got []mono.Time
	l := s.NewLink(LinkConfig{Delay: 10 * time.Millisecond, Outages: []Outage{{Start: second, End: 2 * second}}},
		func(p Packet) { got = append(got, p.SentAt) })
	offer(s, l, 100, 800_000, 3*time.Second) // 1000 pps
	s.RunUntil(4 * second)
	for _, sent := range got {
		if arrive := sent.Add(10 * time.Millisecond); arrive >= second && arrive < 2*second {
			t.Fatalf("packet sent at %v delivered inside the outage", sent)
		}
	}
	if len(got) < 1900 || len(got) > 2000 {
		t.Errorf("delivered %d packets, want about 2000", len(got))
	}
	if l.Stats().DroppedOutage == 0 {
		t.Error("outage counted nothing")
	}
}

// TestStallQueuesUntilItsEnd: a stalled link loses nothing its queue can
// hold; what it queued leaves after the stall, back to back at its rate.
func TestStallQueuesUntilItsEnd(t *testing.T) {
	s := New(5)
	type arrival struct{ sent, at mono.Time }
	var got []arrival
	// 8 Mbit/s: a 1000-byte packet takes 1 ms; the queue holds 300.
	l := s.NewLink(LinkConfig{Rate: 8e6, Queue: 300_000, Delay: 10 * time.Millisecond,
		Stalls: []Outage{{Start: second, End: second + 200*mono.Time(time.Millisecond)}}},
		func(p Packet) { got = append(got, arrival{p.SentAt, s.Now()}) })
	offer(s, l, 1000, 4e6, 2*time.Second) // half the rate: 2 packets per 4 ms
	s.RunUntil(3 * second)
	if st := l.Stats(); st.DroppedQueue != 0 || st.DroppedOutage != 0 || len(got) != 1000 {
		t.Fatalf("delivered %d of 1000, dropped %+v", len(got), st)
	}
	end := second + 210*mono.Time(time.Millisecond) // the stall's end plus the delay
	var late, maxWait time.Duration
	for _, a := range got {
		if a.at > second+10*mono.Time(time.Millisecond) && a.at < end {
			t.Fatalf("packet sent at %v arrived at %v, inside the stall", a.sent, a.at)
		}
		if a.sent >= second && a.sent < second+200*mono.Time(time.Millisecond) {
			late = max(late, a.at.Sub(end))
			maxWait = max(maxWait, a.at.Sub(a.sent))
		}
	}
	// 100 packets queued in the stall leave in 100 ms at the link's rate.
	if late < 95*time.Millisecond || late > 105*time.Millisecond {
		t.Errorf("the stall's backlog took %v to leave after it, want about 100 ms", late)
	}
	if maxWait < 200*time.Millisecond {
		t.Errorf("longest wait %v: the stall held nothing", maxWait)
	}
}

func TestJitterKeepsFIFOUnlessReorder(t *testing.T) {
	for _, reorder := range []bool{false, true} {
		s := New(6)
		last, inversions := -1, 0
		l := s.NewLink(LinkConfig{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Reorder: reorder}, func(p Packet) {
			i := p.Meta.(int)
			if i < last {
				inversions++
			}
			last = max(last, i)
		})
		for i := 0; i < 1000; i++ {
			s.At(mono.Time(i)*mono.Time(time.Millisecond/10), func() { l.Send(Packet{Size: 100, Meta: i}) })
		}
		s.RunUntil(second)
		if !reorder && inversions != 0 {
			t.Errorf("FIFO link reordered %d packets", inversions)
		}
		if reorder && inversions == 0 {
			t.Error("reordering link never reordered")
		}
	}
}

func TestDeterministicForSeed(t *testing.T) {
	run := func() LinkStats {
		s := New(42)
		l := s.NewLink(LinkConfig{Rate: 1e6, Queue: 5000, Loss: 0.1, Jitter: time.Millisecond}, func(Packet) {})
		offer(s, l, 500, 2e6, time.Second)
		s.RunUntil(2 * second)
		return l.Stats()
	}
	if a, b := run(), run(); a != b {
		t.Errorf("same seed, different runs: %+v vs %+v", a, b)
	}
}

func TestRandReaderRepeatsForSeed(t *testing.T) {
	read := func(seed uint64) []byte {
		b := make([]byte, 64)
		if n, err := RandReader(rand.New(rand.NewPCG(seed, 1))).Read(b); n != len(b) || err != nil {
			t.Fatalf("read %d, %v", n, err)
		}
		return b
	}
	a, b, c := read(1), read(1), read(2)
	if !bytes.Equal(a, b) {
		t.Error("the same seed gave different bytes")
	}
	if bytes.Equal(a, c) || bytes.Equal(a, make([]byte, len(a))) {
		t.Error("another seed gave the same bytes, or the bytes are all zero")
	}
}

// A token-bucket link passes a burst of up to Bucket bytes at once after
// an idle spell, and holds the configured rate under a steady overload.
func TestTokenBucketBurstsThenHoldsRate(t *testing.T) {
	const rate, bucket = 30e6, 32_000
	s := New(3)
	var arrivals []mono.Time
	l := s.NewLink(LinkConfig{Rate: rate, Bucket: bucket, Queue: 100_000, Delay: time.Millisecond}, func(p Packet) {
		arrivals = append(arrivals, s.Now())
	})
	// 20 packets of 1500 B (30 kB, within the bucket) at once: all arrive
	// after the delay alone, with no serialization between them.
	s.At(0, func() {
		for range 20 {
			l.Send(Packet{Size: 1500})
		}
	})
	s.RunUntil(second / 2)
	if len(arrivals) != 20 || arrivals[19] != mono.Time(time.Millisecond) {
		t.Fatalf("burst within the bucket: %d arrivals, last at %v; want 20 at 1ms", len(arrivals), arrivals[len(arrivals)-1])
	}
	// Twice as many: the packets beyond the bucket leave at the rate.
	arrivals = arrivals[:0]
	s.At(second/2, func() {
		for range 40 {
			l.Send(Packet{Size: 1500})
		}
	})
	s.RunUntil(second)
	r := rate // not a constant: the wait is a fraction of a nanosecond off an integer
	wantLast := second/2 + mono.Time(time.Millisecond) + mono.Time(float64(40*1500-bucket)*8/r*1e9)
	if got := arrivals[len(arrivals)-1]; got < wantLast-mono.Time(time.Millisecond/2) || got > wantLast+mono.Time(time.Millisecond/2) {
		t.Errorf("burst twice the bucket: last arrival %v, want about %v", got, wantLast)
	}

	// A steady overload delivers the rate and tail-drops the excess.
	s2 := New(4)
	var bytes int
	l2 := s2.NewLink(LinkConfig{Rate: rate, Bucket: bucket, Queue: 100_000, Delay: time.Millisecond}, func(p Packet) {
		if s2.Now() > second && s2.Now() <= 3*second {
			bytes += p.Size
		}
	})
	offer(s2, l2, 1500, 1.5*rate, 4*time.Second)
	s2.RunUntil(5 * second)
	if got := float64(bytes*8) / 2; math.Abs(got-rate)/rate > 0.01 {
		t.Errorf("steady overload: delivered %.1f Mbit/s, want %.1f", got/1e6, rate/1e6)
	}
	if l2.Stats().DroppedQueue == 0 {
		t.Error("offered 1.5x the rate but nothing tail-dropped")
	}
}
