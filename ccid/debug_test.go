// SPDX-License-Identifier: MIT

package ccid

import (
	"testing"
	"time"
)

func fairRun(name string, spec pathSpec, start2, total time.Duration, window time.Duration) (float64, float64, float64) {
	n := newSimNet(3, spec)
	a := n.addFlow(name, Config{HyStart: true}, 0)
	b := n.addFlow(name, Config{HyStart: true}, start2)
	n.run(total)
	x, y := a.rcv.goodput(total-window, total), b.rcv.goodput(total-window, total)
	return jain(x, y), x, y
}

func TestDebugFair(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr"} {
		for _, sp := range []pathSpec{{RateBps: 20e6, RTT: 40 * time.Millisecond}, {RateBps: 100e6, RTT: 20 * time.Millisecond}, {RateBps: 10e6, RTT: 100 * time.Millisecond}} {
			total := 20 * time.Second
			if name == "bbr" {
				total = 10 * time.Second
			}
			j, x, y := fairRun(name, sp, time.Second, total, 2*time.Second)
			t.Logf("%s %v jain=%.3f %.2f %.2f", name, sp, j, x/1e6, y/1e6)
		}
	}
}

func TestDebugReorder(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr"} {
		for _, sp := range []pathSpec{{RateBps: 50e6, RTT: 40 * time.Millisecond}, {RateBps: 20e6, RTT: 10 * time.Millisecond}, {RateBps: 100e6, RTT: 100 * time.Millisecond}} {
			base := utilRun(name, Config{HyStart: true}, sp, 1)
			sp.ReorderFrac, sp.ReorderMax = 0.3, 20*time.Millisecond
			re := utilRun(name, Config{HyStart: true}, sp, 1)
			st := re.Flow.cc.State()
			t.Logf("%s %v base=%.3f reorder=%.3f ratio=%.3f spurious=%d events=%d lost=%d reo=%v", name, sp, base.Util, re.Util, re.Util/base.Util, st.SpuriousEvents, st.CongestionEvents, st.PacketsLost, re.Flow.cc.(interface{ tr() *tracker }).tr().reoWnd(true))
		}
	}
}
