// SPDX-License-Identifier: MIT

package mpsim

import (
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
)

// Warmup is how long every scenario runs before measuring: the bulk flow
// opens the windows in slow start, the CBR flows start at Warmup/2.
const Warmup = 2 * time.Second

// AblationConfig is the reordering ablation of issue 6: two 20 Mbit/s
// paths whose one-way delays differ by diff (10 ms and 10 ms + diff, 1 ms
// jitter, 0.1 % random loss), spread by round robin, carrying UDP CBR at
// 80 % of the sum plus a bulk flow. dur is the measured time.
func AblationConfig(reorderer string, diff, dur time.Duration, seed int64) Config {
	link := func(d time.Duration) netsim.LinkConfig {
		return netsim.LinkConfig{Rate: 20e6, Delay: d, Jitter: time.Millisecond, Loss: 0.001}
	}
	return Config{
		Seed:       seed,
		Paths:      []PathConfig{{Link: link(10 * time.Millisecond)}, {Link: link(10*time.Millisecond + diff)}},
		Schedulers: []string{"rr"},
		Reorderer:  reorderer,
		Reorder:    reorder.Config{MaxHold: 150 * time.Millisecond, BufferLimit: 4096},
		Flows: []Flow{
			{Name: "cbr", Rate: 0.8 * 40e6, Size: 1200, Start: Warmup / 2},
			{Name: "bulk", Bulk: true},
		},
		Duration: Warmup + dur,
		Warmup:   Warmup,
	}
}

// HeteroPaths are the heterogeneous paths of issue 6: 16 Mbit/s at 10 ms
// RTT and 30 Mbit/s at 40 ms RTT.
func HeteroPaths() []PathConfig {
	return []PathConfig{
		{Link: netsim.LinkConfig{Rate: 16e6, Delay: 5 * time.Millisecond, Jitter: 500 * time.Microsecond}},
		{Link: netsim.LinkConfig{Rate: 30e6, Delay: 20 * time.Millisecond, Jitter: 500 * time.Microsecond}},
	}
}

// SchedulerConfig runs sched on HeteroPaths with the adaptive reorderer,
// offering CBR at load × the capacity sum and, if bulk, a backlogged flow.
func SchedulerConfig(sched string, load float64, bulk bool, dur time.Duration, seed int64) Config {
	flows := []Flow{{Name: "cbr", Rate: load * 46e6, Size: 1200, Start: Warmup / 2}}
	if bulk {
		flows = append(flows, Flow{Name: "bulk", Bulk: true})
	}
	return Config{
		Seed:       seed,
		Paths:      HeteroPaths(),
		Schedulers: []string{sched},
		Reorderer:  "adaptive",
		Reorder:    reorder.Config{MaxHold: 150 * time.Millisecond},
		Flows:      flows,
		Duration:   Warmup + dur,
		Warmup:     Warmup,
	}
}

// VoIPConfig sends a 64 kbit/s VoIP flow (160-byte packets every 20 ms)
// as class 1 with voipSched next to a bulk flow (class 0, bulkSched) over
// HeteroPaths, the first path dropping 5 % of its packets.
func VoIPConfig(voipSched, bulkSched, reorderer string, dur time.Duration, seed int64) Config {
	paths := HeteroPaths()
	paths[0].Link.Loss = 0.05
	return Config{
		Seed:       seed,
		Paths:      paths,
		Schedulers: []string{bulkSched, voipSched},
		Reorderer:  reorderer,
		Reorder:    reorder.Config{MaxHold: 150 * time.Millisecond},
		Flows: []Flow{
			{Name: "voip", Class: 1, Rate: 64e3, Size: 160, Start: Warmup / 2},
			{Name: "bulk", Bulk: true},
		},
		Duration: Warmup + dur,
		Warmup:   Warmup,
	}
}
