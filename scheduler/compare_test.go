// SPDX-License-Identifier: MIT

package scheduler_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/scheduler/mpsim"
)

// aggregating schedulers (active-standby and priority use one path by
// design, redundant duplicates).
var compared = []string{"rr", "srtt", "otias", "otias" + noQueues, "ecf", "priority", "redundant", "active-standby"}

// noQueues marks a run whose engine has no per-path queues.
const noQueues = " (no path queues)"

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func compareRow(t testing.TB, sched string, load float64, bulk bool, dur time.Duration) (mpsim.Result, string) {
	label := sched
	cfg := mpsim.SchedulerConfig(strings.TrimSuffix(sched, noQueues), load, bulk, dur, 1)
	if strings.HasSuffix(sched, noQueues) {
		cfg.NoPathQueues = true
	}
	res, err := mpsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sched = label
	cbr := res.Flows[0]
	traffic := fmt.Sprintf("CBR %.0f%%", 100*load)
	if bulk {
		traffic += " + bulk"
	}
	lost := 0.0
	if cbr.Offered > 0 {
		lost = 100 * float64(cbr.Lost) / float64(cbr.Offered)
	}
	row := fmt.Sprintf("| %s | %s | %5.1f %% | %5.1f %% | %6.2f | %6.2f | %6.2f | %6.2f | %5.3f %% |",
		sched, traffic, 100*res.Throughput/res.Capacity, lost,
		ms(cbr.OWD50), ms(cbr.OWD99), ms(cbr.App50), ms(cbr.App99), 100*res.OOOFraction())
	return res, row
}

const compareHeader = "| scheduler | traffic | goodput / capacity | CBR lost | CBR one-way p50 ms | p99 ms | after reorder p50 ms | p99 ms | out of order |\n|---|---|---|---|---|---|---|---|---|"

// TestOTIASAndECFBeatRoundRobin: at equal throughput (a CBR load every
// scheduler carries in full) otias and ecf have a lower p99 one-way delay
// than rr, and with a bulk flow they fill the paths as well as rr does.
func TestOTIASAndECFBeatRoundRobin(t *testing.T) {
	dur := 2 * time.Second
	rr, row := compareRow(t, "rr", 0.3, false, dur)
	t.Log(row)
	for _, s := range []string{"otias", "ecf"} {
		res, row := compareRow(t, s, 0.3, false, dur)
		t.Log(row)
		if res.Flows[0].Lost != 0 || rr.Flows[0].Lost != 0 {
			t.Errorf("%s: CBR lost %d (rr %d): throughput not equal", s, res.Flows[0].Lost, rr.Flows[0].Lost)
		}
		if res.Flows[0].OWD99 >= rr.Flows[0].OWD99 {
			t.Errorf("%s: p99 one-way %v, not below rr's %v", s, res.Flows[0].OWD99, rr.Flows[0].OWD99)
		}
		if res.Flows[0].App99 >= rr.Flows[0].App99 {
			t.Errorf("%s: p99 after reordering %v, not below rr's %v", s, res.Flows[0].App99, rr.Flows[0].App99)
		}
	}
	rrb, row := compareRow(t, "rr", 0.8, true, dur)
	t.Log(row)
	if u := rrb.Throughput / rrb.Capacity; u < 0.9 {
		t.Errorf("rr with bulk: goodput %.1f %% of capacity", 100*u)
	}
	for _, s := range []string{"otias", "ecf"} {
		res, row := compareRow(t, s, 0.8, true, dur)
		t.Log(row)
		if res.Throughput < 0.97*rrb.Throughput {
			t.Errorf("%s with bulk: %.2f Mbit/s, rr %.2f", s, res.Throughput/1e6, rrb.Throughput/1e6)
		}
	}
}

// TestRedundantVoIPLosesNothing: a VoIP class sent redundant loses no
// packet when one path drops 5 %; spread by rr it does.
func TestRedundantVoIPLosesNothing(t *testing.T) {
	res, err := mpsim.Run(mpsim.VoIPConfig("redundant", "otias", "adaptive", 5*time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Flows[0]
	t.Logf("redundant: %+v", v)
	if v.Offered < 200 || v.Lost != 0 {
		t.Errorf("redundant VoIP: %d of %d lost", v.Lost, v.Offered)
	}
	if res.Reorder.Duplicates == 0 {
		t.Error("no duplicates dropped: VoIP was not sent redundantly")
	}
	base, err := mpsim.Run(mpsim.VoIPConfig("rr", "rr", "passive", 5*time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rr+passive: %+v", base.Flows[0])
	if base.Flows[0].Lost == 0 {
		t.Error("baseline rr lost nothing on a 5 % loss path: the test has no power")
	}
}

// TestSchedulerReport prints the full comparison (go test -run SchedulerReport -v).
func TestSchedulerReport(t *testing.T) {
	if testing.Short() {
		t.Skip("full scheduler table: run without -short")
	}
	var b strings.Builder
	b.WriteString(compareHeader + "\n")
	for _, tr := range []struct {
		load float64
		bulk bool
	}{{0.3, false}, {0.6, false}, {0.8, true}} {
		for _, s := range compared {
			_, row := compareRow(t, s, tr.load, tr.bulk, 10*time.Second)
			b.WriteString(row + "\n")
		}
	}
	b.WriteString("\n| VoIP scheduler | bulk scheduler | reorderer | VoIP offered | VoIP lost | VoIP one-way p99 ms | after reorder p99 ms |\n|---|---|---|---|---|---|---|\n")
	for _, c := range [][3]string{{"redundant", "otias", "adaptive"}, {"redundant" + noQueues, "otias", "adaptive"}, {"rr", "rr", "passive"}, {"rr", "rr", "adaptive"}} {
		cfg := mpsim.VoIPConfig(strings.TrimSuffix(c[0], noQueues), c[1], c[2], 10*time.Second, 1)
		cfg.NoPathQueues = strings.HasSuffix(c[0], noQueues)
		res, err := mpsim.Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		v := res.Flows[0]
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.2f | %.2f |\n", c[0], c[1], c[2], v.Offered, v.Lost, ms(v.OWD99), ms(v.App99))
	}
	t.Log("\n" + b.String())
}

func BenchmarkSchedulers(b *testing.B) {
	for _, s := range compared {
		b.Run(s, func(b *testing.B) {
			var res mpsim.Result
			for i := 0; i < b.N; i++ {
				res, _ = compareRow(b, s, 0.8, true, 5*time.Second)
			}
			b.ReportMetric(100*res.Throughput/res.Capacity, "%capacity")
			b.ReportMetric(ms(res.Flows[0].OWD99), "p99owd-ms")
		})
	}
}
