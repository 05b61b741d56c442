// SPDX-License-Identifier: MIT

package reorder_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler/mpsim"
)

var diffs = []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond}

// variant is one row kind of the ablation table.
type variant struct {
	label, name string
	tweak       func(*mpsim.Config)
}

var variants = []variant{
	{"passive", "passive", nil},
	{"fixed 50ms", "fixed", func(c *mpsim.Config) { c.Reorder.MaxHold = 50 * time.Millisecond }},
	{"fixed 150ms", "fixed", nil},
	{"fixed 150ms, no early loss", "fixed", func(c *mpsim.Config) { c.Reorder.NoEarlyLoss = true }},
	{"adaptive", "adaptive", nil},
	{"adaptive, no early loss", "adaptive", func(c *mpsim.Config) { c.Reorder.NoEarlyLoss = true }},
	{"adaptive, arrival timing only", "adaptive", func(c *mpsim.Config) { c.NoRTTInfo = true }},
	{"adaptive, arrival timing only, no early loss", "adaptive", func(c *mpsim.Config) {
		c.NoRTTInfo, c.Reorder.NoEarlyLoss = true, true
	}},
	{"equalize", "equalize", nil},
}

func byLabel(label string) variant {
	for _, v := range variants {
		if v.label == label {
			return v
		}
	}
	panic("no variant " + label)
}

// reorderingPaths makes both paths reorder by themselves: 5 ms jitter
// without FIFO.
func reorderingPaths(c *mpsim.Config) {
	for i := range c.Paths {
		c.Paths[i].Link.Jitter, c.Paths[i].Link.Reorder = 5*time.Millisecond, true
	}
}

func ablationRow(t testing.TB, v variant, diff, dur time.Duration, tweaks ...func(*mpsim.Config)) (mpsim.Result, string) {
	cfg := mpsim.AblationConfig(v.name, diff, dur, 1)
	for _, f := range tweaks {
		f(&cfg)
	}
	if v.tweak != nil {
		v.tweak(&cfg)
	}
	res, err := mpsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := v.label
	row := fmt.Sprintf("| %s | %3d ms | %6.3f %% | %7.2f | %7.2f | %7.2f | %5d | %5d | %5.1f %% |",
		name, diff.Milliseconds(), 100*res.OOOFraction(),
		ms(res.Hold50), ms(res.Hold99), ms(res.Hold999),
		res.Reorder.GapsSkipped, res.Reorder.GapsLateArrive, 100*res.Throughput/res.Capacity)
	return res, row
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

const ablationHeader = "| reorderer | Δ one-way | out of order | hold p50 ms | p99 ms | p99.9 ms | gaps skipped | skipped, arrived later | goodput / capacity |\n|---|---|---|---|---|---|---|---|---|"

// TestAblationAdaptive is the reduced ablation: adaptive must deliver at
// most 0.1 % out of order with p99 hold within the delay difference + 10 ms.
func TestAblationAdaptive(t *testing.T) {
	dur := 3 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	for _, d := range diffs {
		for _, v := range []variant{byLabel("adaptive"), byLabel("adaptive, arrival timing only")} {
			res, row := ablationRow(t, v, d, dur)
			t.Log(row)
			if f := res.OOOFraction(); f > 0.001 {
				t.Errorf("%s, Δ %v: %.3f %% out of order, want <= 0.1 %%", v.label, d, 100*f)
			}
			if lim := d + 10*time.Millisecond; res.Hold99 > lim {
				t.Errorf("%s, Δ %v: p99 hold %v, want <= %v", v.label, d, res.Hold99, lim)
			}
			if res.Delivered < 1000 {
				t.Errorf("Δ %v: only %d packets delivered", d, res.Delivered)
			}
		}
	}
}

// TestAblationInPathReordering: paths that reorder by themselves (5 ms
// jitter, no FIFO) must not fool early loss detection.
func TestAblationInPathReordering(t *testing.T) {
	for _, d := range []time.Duration{0, 40 * time.Millisecond} {
		res, row := ablationRow(t, byLabel("adaptive"), d, 2*time.Second, reorderingPaths)
		t.Log(row)
		if f := res.OOOFraction(); f > 0.001 {
			t.Errorf("Δ %v: %.3f %% out of order, want <= 0.1 %%", d, 100*f)
		}
		if lim := d + 10*time.Millisecond; res.Hold99 > lim {
			t.Errorf("Δ %v: p99 hold %v, want <= %v", d, res.Hold99, lim)
		}
	}
}

// TestAblationBaselines checks that the comparison means something: passive
// lets reordering through once delays differ, a short fixed timer lets
// late packets through on a long difference.
func TestAblationBaselines(t *testing.T) {
	res, _ := ablationRow(t, byLabel("passive"), 40*time.Millisecond, time.Second)
	if res.OOOFraction() < 0.05 {
		t.Errorf("passive at Δ 40 ms: only %.3f %% out of order", 100*res.OOOFraction())
	}
	if res.Hold99 != 0 {
		t.Errorf("passive held packets: p99 %v", res.Hold99)
	}
}

// TestAblationReport prints the full table (go test -run AblationReport -v).
func TestAblationReport(t *testing.T) {
	if testing.Short() {
		t.Skip("full ablation table: run without -short")
	}
	dur := 10 * time.Second
	var b strings.Builder
	b.WriteString(ablationHeader + "\n")
	for _, v := range variants {
		for _, d := range diffs {
			_, row := ablationRow(t, v, d, dur)
			b.WriteString(row + "\n")
		}
	}
	b.WriteString("\nBoth paths reordering by themselves (5 ms jitter, not FIFO):\n\n" + ablationHeader + "\n")
	for _, v := range []variant{byLabel("passive"), byLabel("fixed 150ms"), byLabel("adaptive"), byLabel("equalize")} {
		for _, d := range diffs {
			_, row := ablationRow(t, v, d, dur, reorderingPaths)
			b.WriteString(row + "\n")
		}
	}
	t.Log("\n" + b.String())
}

func BenchmarkAblation(b *testing.B) {
	for _, name := range reorder.Names() {
		for _, d := range diffs {
			b.Run(fmt.Sprintf("%s/%dms", name, d.Milliseconds()), func(b *testing.B) {
				var res mpsim.Result
				for i := 0; i < b.N; i++ {
					res, _ = ablationRow(b, variant{name, name, nil}, d, 5*time.Second)
				}
				b.ReportMetric(100*res.OOOFraction(), "%ooo")
				b.ReportMetric(ms(res.Hold99), "p99hold-ms")
				b.ReportMetric(ms(res.Hold999), "p99.9hold-ms")
			})
		}
	}
}

// TestOutageBoundsHold: the slow path blackholes for a second while the
// engine still calls it active. Gaps of its lost packets must not hold the
// stream longer than MaxHold, and delivery continues over the other path.
func TestOutageBoundsHold(t *testing.T) {
	cfg := mpsim.AblationConfig("adaptive", 40*time.Millisecond, 3*time.Second, 1)
	start := mono.Time(mpsim.Warmup + time.Second)
	cfg.Paths[1].Link.Outages = []netsim.Outage{{Start: start, End: start.Add(time.Second)}}
	res, err := mpsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("out of order %.3f %%, hold p99 %v p99.9 %v, skipped %d, goodput %.1f %%",
		100*res.OOOFraction(), res.Hold99, res.Hold999, res.Reorder.GapsSkipped, 100*res.Throughput/res.Capacity)
	if res.Hold999 > cfg.Reorder.MaxHold+time.Millisecond {
		t.Errorf("p99.9 hold %v above MaxHold %v", res.Hold999, cfg.Reorder.MaxHold)
	}
	if res.Reorder.GapsSkipped < 100 {
		t.Errorf("only %d gaps skipped across a 1 s outage", res.Reorder.GapsSkipped)
	}
	if res.OOOFraction() > 0.001 {
		t.Errorf("%.3f %% out of order", 100*res.OOOFraction())
	}
}
