// SPDX-License-Identifier: MIT

package ccid

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// RTTSeeder is implemented by controllers that take a round trip measured
// before any data flowed, the subflow's handshake, so that their first
// pacing rate and timers fit the path. Without it BBR paces its first
// window as if the RTT were 1 ms (draft-ietf-ccwg-bbr's default when no
// RTT is known), and a path that carries little data, as a slower path
// used only for overflow does, keeps that rate through Startup and sends
// its packets in bursts that queue behind each other.
type RTTSeeder interface {
	SeedRTT(now mono.Time, rtt time.Duration)
}

// SeedRTT takes the handshake's round trip as the first RTT sample, and
// sizes a long path's first window by it (BBRParams.InitialRateFloor).
func (b *BBR) SeedRTT(now mono.Time, rtt time.Duration) {
	if rtt <= 0 || b.minRTT >= 0 {
		return
	}
	b.t.updateRTT(now, rtt)
	b.minRTT, b.minRTTStamp = rtt, now
	if b.delivered == 0 {
		b.cwnd = max(b.cwnd, b.par.InitialRateFloor*rtt.Seconds())
	}
	b.pacingRate = bbrStartupPacingGain * b.cwnd / rtt.Seconds()
	b.applyPacing(now)
}

// SeedRTT takes the handshake's round trip as the first RTT sample.
func (c *CCID2) SeedRTT(now mono.Time, rtt time.Duration) {
	if rtt <= 0 || c.t.hasRTT {
		return
	}
	c.t.updateRTT(now, rtt)
	c.updatePacing(now)
}
