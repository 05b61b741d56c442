// SPDX-License-Identifier: MIT

package ccid

import (
	"testing"
	"time"
)

func TestDebugOne(t *testing.T) {
	for _, sp := range []pathSpec{{RateBps: 50e6, RTT: 40 * time.Millisecond}, {RateBps: 50e6, RTT: 40 * time.Millisecond, ReorderFrac: 0.3, ReorderMax: 20 * time.Millisecond}, {RateBps: 1000e6, RTT: 300 * time.Millisecond}} {
		for _, name := range []string{"ccid2", "bbr"} {
			hs := true
			start := time.Now()
			r := utilRun(name, Config{HyStart: hs}, sp, 1)
			st := r.Flow.cc.State()
			t.Logf("%v hs=%v util=%.3f p95q=%v ssEvents=%d ssLost=%d state=%+v wall=%v", sp, hs, r.Util, r.P95Queue, r.Flow.ssEvents, r.Flow.ssLost, st, time.Since(start))
		}
	}
}
