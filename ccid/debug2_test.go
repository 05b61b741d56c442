// SPDX-License-Identifier: MIT

package ccid

import (
	"testing"
	"time"
)

func TestDebugHS(t *testing.T) {
	sp := pathSpec{RateBps: 10e6, RTT: 50 * time.Millisecond}
	n := newSimNet(1, sp)
	f := n.addFlow("ccid2", Config{HyStart: true}, 0)
	c := f.cc.(*CCID2)
	last := ""
	for i := 0; i < 200; i++ {
		n.run(time.Duration(i) * 5 * time.Millisecond)
		s := c.State()
		line := s.Phase
		if line != last || i%10 == 0 {
			t.Logf("t=%dms phase=%s cwnd=%d inflight=%d lost=%d hs=%+v q=%d", i*5, s.Phase, s.Cwnd, s.InFlight, s.PacketsLost, c.hs, n.fwd.QueueBytes()/1400)
		}
		last = line
	}
}
