// SPDX-License-Identifier: MIT

package emu

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// drive offers size-byte frames at offered bit/s for dur and returns every
// delivered frame's (arrival, delivery) times.
func drive(p *Pipe, size int, offered float64, dur time.Duration) (deliveries [][2]mono.Time) {
	gap := time.Duration(float64(size) * 8 * 1e9 / offered)
	arrive := map[*Frame]mono.Time{}
	_ = arrive
	now := mono.Time(0)
	next := mono.Time(0)
	end := mono.Time(dur)
	for {
		dl := p.NextDeadline()
		if next <= end && next <= dl {
			now = next
			f := p.GetFrame()
			f.Buf = f.Buf[:size]
			p.Enqueue(now, f)
			next = next.Add(gap)
			continue
		}
		if dl == mono.Never {
			return deliveries
		}
		now = dl
		p.Advance(now)
		for f := p.Pop(now); f != nil; f = p.Pop(now) {
			deliveries = append(deliveries, [2]mono.Time{f.arrive, f.deliverAt})
			p.PutFrame(f)
		}
	}
}

func TestRateAndQueueBound(t *testing.T) {
	const rate = 20e6
	cfg := Config{Rate: rate, QueueBytes: 60000, Delay: 10 * time.Millisecond}
	p := NewPipe(cfg, 0, 1)
	d := drive(p, 1500, 1.2*rate, 5*time.Second)
	// Goodput over the saturated part: (frames * size) / time.
	first, last := d[0][1], d[len(d)-1][1]
	got := float64(len(d)-1) * 1500 * 8 / last.Sub(first).Seconds()
	if math.Abs(got/rate-1) > 0.005 {
		t.Fatalf("delivered %.3f Mbit/s, want %.3f", got/1e6, rate/1e6)
	}
	if p.Stats.DroppedQueue == 0 {
		t.Fatal("no drops at 1.2x the rate")
	}
	bound := serialization(cfg.QueueBytes, rate)
	if p.Stats.MaxSojourn > bound {
		t.Fatalf("max sojourn %v above buffer/rate %v", p.Stats.MaxSojourn, bound)
	}
	for _, x := range d {
		if owd := x[1].Sub(x[0]); owd > cfg.Delay+bound+serialization(1500, rate) {
			t.Fatalf("one-way delay %v above delay+buffer/rate", owd)
		}
	}
}

func TestJitterKeepsOrderUnlessReorder(t *testing.T) {
	cfg := Config{Delay: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}
	p := NewPipe(cfg, 0, 7)
	d := drive(p, 200, 8e6, time.Second)
	for i := 1; i < len(d); i++ {
		if d[i][0] < d[i-1][0] {
			t.Fatalf("frame %d overtook its predecessor with jitter and no reordering", i)
		}
	}
	cfg.Reorder = 0.1
	p = NewPipe(cfg, 0, 7)
	d = drive(p, 200, 8e6, time.Second)
	ooo := 0
	for i := 1; i < len(d); i++ {
		if d[i][0] < d[i-1][0] {
			ooo++
		}
	}
	if ooo == 0 {
		t.Fatal("no reordering with Reorder=0.1")
	}
}

func TestBernoulliLossWithinInterval(t *testing.T) {
	const n, pl = 20000, 0.05
	p := NewPipe(Config{Loss: pl}, 0, 1)
	drive(p, 100, 100*8*1000, time.Duration(n-1)*time.Millisecond)
	lost := float64(p.Stats.DroppedLoss)
	half := 1.96 * math.Sqrt(n*pl*(1-pl))
	if math.Abs(lost-n*pl) > half {
		t.Fatalf("lost %v of %d, want %v ± %.0f", lost, n, n*pl, half)
	}
}

func TestGilbertElliottIsBursty(t *testing.T) {
	p := NewPipe(Config{GE: &GilbertElliott{PGoodBad: 0.01, PBadGood: 0.3, LossBad: 1}}, 0, 5)
	d := drive(p, 100, 800e3, 20*time.Second)
	if p.Stats.DroppedLoss == 0 || len(d) == 0 {
		t.Fatal("no loss")
	}
	// Mean burst 1/0.3 ≈ 3.3: consecutive losses must occur.
	gaps := 0
	for i := 1; i < len(d); i++ {
		if d[i][0].Sub(d[i-1][0]) > 2*time.Millisecond+500*time.Microsecond {
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatal("no burst of two or more losses")
	}
}

func TestTraceRate(t *testing.T) {
	// "1" = one 1500-byte opportunity per ms = 12 Mbit/s; two per ms = 24.
	tr, err := ParseTrace(strings.NewReader("1\n1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := tr.MeanRate(); r != 24e6 {
		t.Fatalf("MeanRate %v", r)
	}
	p := NewPipe(Config{Trace: tr, QueueBytes: 100000}, 0, 1)
	d := drive(p, 1500, 30e6, 3*time.Second)
	got := float64(len(d)-1) * 1500 * 8 / d[len(d)-1][1].Sub(d[0][1]).Seconds()
	if math.Abs(got/24e6-1) > 0.01 {
		t.Fatalf("trace delivered %.2f Mbit/s, want 24", got/1e6)
	}
	// Small frames share an opportunity.
	p = NewPipe(Config{Trace: tr, QueueBytes: 100000}, 0, 1)
	d = drive(p, 500, 60e6, time.Second)
	got = float64(len(d)-1) * 500 * 8 / d[len(d)-1][1].Sub(d[0][1]).Seconds()
	if math.Abs(got/24e6-1) > 0.02 {
		t.Fatalf("trace with 500-byte frames delivered %.2f Mbit/s, want 24", got/1e6)
	}
}

func TestParseTraceErrors(t *testing.T) {
	for _, s := range []string{"", "5\n3\n", "x\n", "-1\n"} {
		if _, err := ParseTrace(strings.NewReader(s)); err == nil {
			t.Errorf("ParseTrace(%q) succeeded", s)
		}
	}
}

func TestBlackholeDropsInFlight(t *testing.T) {
	p := NewPipe(Config{Delay: 50 * time.Millisecond}, 0, 1)
	for i := 0; i < 10; i++ {
		f := p.GetFrame()
		f.Buf = f.Buf[:100]
		p.Enqueue(mono.Time(i)*mono.Time(time.Millisecond), f)
	}
	cfg := p.Config()
	cfg.Blackhole = true
	p.SetConfig(cfg, mono.Time(20*time.Millisecond))
	now := mono.Time(time.Second)
	p.Advance(now)
	if f := p.Pop(now); f != nil {
		t.Fatal("frame delivered through a blackhole")
	}
	if p.Stats.DroppedBlackhole != 10 {
		t.Fatalf("blackhole drops %d, want 10", p.Stats.DroppedBlackhole)
	}
}

func TestDuplicate(t *testing.T) {
	p := NewPipe(Config{Duplicate: 0.5}, 0, 9)
	d := drive(p, 100, 800e3, time.Second)
	if p.Stats.Duplicated == 0 || len(d) != int(p.Stats.InFrames+p.Stats.Duplicated) {
		t.Fatalf("delivered %d with %d duplicates", len(d), p.Stats.Duplicated)
	}
}

func TestCoDelKeepsSojournNearTarget(t *testing.T) {
	const rate = 10e6
	p := NewPipe(Config{Rate: rate, QueueBytes: 1 << 20, CoDel: &CoDel{}}, 0, 1)
	d := drive(p, 1500, 1.1*rate, 10*time.Second)
	if p.Stats.DroppedCoDel == 0 {
		t.Fatal("CoDel never dropped")
	}
	// Queueing delay late in the run stays well below the 0.8 s a full
	// 1 MB drop-tail buffer would add (an unresponsive 10 % overload).
	var worst time.Duration
	for _, x := range d[len(d)*9/10:] {
		worst = max(worst, x[1].Sub(x[0]))
	}
	if worst > 100*time.Millisecond {
		t.Fatalf("CoDel late-run delay %v", worst)
	}
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	p := NewPipe(Config{Rate: 100e6, Delay: time.Millisecond, QueueBytes: 100000}, 0, 1)
	p.BinWidth = 0
	drive(p, 1000, 50e6, 100*time.Millisecond) // warm the free list and heap
	now := mono.Time(time.Second)
	allocs := testing.AllocsPerRun(1000, func() {
		f := p.GetFrame()
		f.Buf = f.Buf[:1000]
		p.Enqueue(now, f)
		now = now.Add(200 * time.Microsecond)
		p.Advance(now)
		for f := p.Pop(now); f != nil; f = p.Pop(now) {
			p.PutFrame(f)
		}
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per frame", allocs)
	}
}

// BenchmarkPipe measures the emulator model's cost per frame (enqueue,
// serialization, delay line, pop) at a steady 50 % load.
func BenchmarkPipe(b *testing.B) {
	p := NewPipe(Config{Rate: 1e9, Delay: time.Millisecond, Jitter: 100 * time.Microsecond, QueueBytes: 1 << 20}, 0, 1)
	p.BinWidth = 0
	gap := serialization(1500, 1e9) * 2
	now := mono.Time(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f := p.GetFrame()
		f.Buf = f.Buf[:1500]
		p.Enqueue(now, f)
		now = now.Add(gap)
		p.Advance(now)
		for f := p.Pop(now); f != nil; f = p.Pop(now) {
			p.PutFrame(f)
		}
	}
}

func TestShippedSyntheticTraceMeanRate(t *testing.T) {
	tr, err := LoadTrace("../../configs/lab/traces/synthetic-lte-a.down")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPipe(Config{Trace: tr, TraceScale: 3, QueuePackets: 200}, 0, 1)
	// Offer more than the trace can carry for one period (60 s, outages
	// included) and check the carried rate against the trace's mean.
	d := drive(p, 1500, 60e6, tr.Period)
	got := float64(p.Stats.SerializedBytes) * 8 / tr.Period.Seconds()
	want := tr.MeanRate() * 3
	t.Logf("trace mean %.2f Mbit/s x3 = %.2f; carried %.2f Mbit/s, %d frames", tr.MeanRate()/1e6, want/1e6, got/1e6, len(d))
	if math.Abs(got/want-1) > 0.02 {
		t.Fatalf("carried %.2f Mbit/s, want %.2f", got/1e6, want/1e6)
	}
}

func TestOversizeFrameDropped(t *testing.T) {
	p := NewPipe(Config{}, 0, 1)
	f := p.GetFrame()
	f.Buf = f.Buf[:MaxFrame]
	p.Enqueue(0, f)
	p.Advance(1)
	if p.Pop(1) != nil || p.Stats.DroppedOversize != 1 {
		t.Fatalf("oversize frame forwarded: %+v", p.Stats)
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add("1\n")
	f.Add("0\n0\n5\n5\n5\n10\n")
	f.Add("3\n2\n")
	f.Add("# c\n\n7\n")
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		if len(tr.Opps) == 0 || tr.Period < time.Millisecond {
			t.Fatalf("accepted trace %+v", tr)
		}
		for i := 1; i < len(tr.Opps); i++ {
			if tr.Opps[i] < tr.Opps[i-1] {
				t.Fatal("not monotonic")
			}
		}
		// The opportunity search must land on an opportunity at or after d.
		for _, d := range []time.Duration{0, tr.Period / 2, tr.Period, 3*tr.Period + 1} {
			i := tr.firstAtOrAfter(d)
			if tr.opp(i) < d || (i > 0 && tr.opp(i-1) >= d) {
				t.Fatalf("firstAtOrAfter(%v) = %d (%v)", d, i, tr.opp(i))
			}
		}
	})
}

func TestSwitchTraceToRate(t *testing.T) {
	tr, _ := ParseTrace(strings.NewReader("1000\n")) // one opportunity per second
	p := NewPipe(Config{Trace: tr}, 0, 1)
	for i := 0; i < 3; i++ {
		f := p.GetFrame()
		f.Buf = f.Buf[:1500]
		p.Enqueue(0, f)
	}
	now := mono.Time(100 * time.Millisecond)
	p.Advance(now)
	p.SetConfig(Config{Rate: 12e6}, now) // 1 ms per frame
	var got []mono.Time
	for now < mono.Time(2*time.Second) && len(got) < 3 {
		now = p.NextDeadline()
		p.Advance(now)
		for f := p.Pop(now); f != nil; f = p.Pop(now) {
			got = append(got, f.deliverAt)
			p.PutFrame(f)
		}
	}
	want := []mono.Time{mono.Time(101 * time.Millisecond), mono.Time(102 * time.Millisecond), mono.Time(103 * time.Millisecond)}
	if len(got) != 3 || got[0] != want[0] || got[2] != want[2] {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
}
