// SPDX-License-Identifier: MIT

package ccid

import (
	"testing"
	"time"
)

func TestDebugLoss(t *testing.T) {
	for _, th := range []float64{0, 0.005, 0.02} {
		bbrPureBetaThresh = th
		for _, loss := range []float64{0.001, 0.01, 0.02} {
			sp := pathSpec{RateBps: 50e6, RTT: 40 * time.Millisecond, Loss: loss}
			r := utilRun("bbr", Config{}, sp, 1)
			r2 := utilRun("ccid2", Config{}, sp, 1)
			t.Logf("th=%v loss=%v bbr util=%.3f ccid2=%.3f", th, loss, r.Util, r2.Util)
		}
	}
}
