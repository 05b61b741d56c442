// SPDX-License-Identifier: MIT

package ptimer

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func TestFiresAfterDeadline(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	for _, d := range []time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		dl := mono.Now().Add(d)
		if err := tm.Reset(dl); err != nil {
			t.Fatal(err)
		}
		woke, err := tm.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if woke < dl {
			t.Fatalf("woke %v before deadline", dl.Sub(woke))
		}
		// Generous bound: a shared 2-core machine can delay a wake-up, but
		// not by 50 ms.
		if late := woke.Sub(dl); late > 50*time.Millisecond {
			t.Fatalf("woke %v late", late)
		}
	}
}

func TestPastDeadlineFiresAtOnce(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	if err := tm.Reset(mono.Now() - mono.Time(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestResetFromOtherGoroutineAndClose(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := tm.Wait(); done <- err }()
	time.Sleep(5 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("stopped timer fired")
	default:
	}
	if err := tm.ResetAfter(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { _, err := tm.Wait(); done <- err }()
	time.Sleep(2 * time.Millisecond)
	tm.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Fatalf("Wait after Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	if got := h.Quantile(0.5); got != 51*time.Microsecond {
		t.Errorf("p50 = %v, want 51µs", got)
	}
	if got := h.Quantile(0.99); got != 100*time.Microsecond {
		t.Errorf("p99 = %v, want 100µs", got)
	}
	h.Add(time.Second)
	if h.Max() != time.Second || h.Quantile(1) != time.Second {
		t.Errorf("max = %v / %v", h.Max(), h.Quantile(1))
	}
}

// BenchmarkLateness compares the wake-up lateness of ptimer with time.Timer
// for a 200 µs deadline; run with -bench Lateness -benchtime 2000x -v.
func BenchmarkLateness(b *testing.B) {
	const d = 200 * time.Microsecond
	b.Run("timerfd", func(b *testing.B) {
		tm, err := New()
		if err != nil {
			b.Fatal(err)
		}
		defer tm.Close()
		for i := 0; i < b.N; i++ {
			tm.ResetAfter(d)
			if _, err := tm.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(tm.Lateness.Quantile(0.5).Microseconds()), "p50-late-µs")
		b.ReportMetric(float64(tm.Lateness.Quantile(0.99).Microseconds()), "p99-late-µs")
	})
	b.Run("time.Timer", func(b *testing.B) {
		var h Histogram
		t := time.NewTimer(time.Hour)
		for i := 0; i < b.N; i++ {
			dl := mono.Now().Add(d)
			t.Reset(d)
			<-t.C
			h.Add(mono.Now().Sub(dl))
		}
		b.ReportMetric(float64(h.Quantile(0.5).Microseconds()), "p50-late-µs")
		b.ReportMetric(float64(h.Quantile(0.99).Microseconds()), "p99-late-µs")
	})
}
