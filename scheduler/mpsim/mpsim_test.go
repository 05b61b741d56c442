// SPDX-License-Identifier: MIT

package mpsim

import (
	"math"
	"testing"
	"time"
)

func TestSinglePathCarriesCapacity(t *testing.T) {
	cfg := SchedulerConfig("srtt", 0.1, true, 3*time.Second, 1)
	cfg.Paths = cfg.Paths[1:]
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Payload share of the wire: 1400/(1400+60).
	want := 30e6 * 1400 / 1460
	if math.Abs(res.Throughput-want)/want > 0.03 {
		t.Errorf("throughput %.2f Mbit/s, want about %.2f", res.Throughput/1e6, want/1e6)
	}
	if res.OutOfOrder != 0 || res.Reorder.GapsSkipped != 0 {
		t.Errorf("single lossless path reordered: %+v", res.Reorder)
	}
	if owd := res.Flows[0].OWD50; owd < 20*time.Millisecond || owd > 30*time.Millisecond {
		t.Errorf("CBR one-way delay p50 %v, want 20-30 ms", owd)
	}
}

func TestDeterministic(t *testing.T) {
	a, _ := Run(AblationConfig("adaptive", 40*time.Millisecond, time.Second, 7))
	b, _ := Run(AblationConfig("adaptive", 40*time.Millisecond, time.Second, 7))
	if a.Throughput != b.Throughput || a.Hold99 != b.Hold99 || a.Reorder != b.Reorder {
		t.Error("same seed, different results")
	}
}
