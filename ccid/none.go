// SPDX-License-Identifier: MIT

package ccid

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("none", func(cfg Config) Controller { return NewNone(cfg) })
}

// CCIDNone is the CCID number mptun negotiates for "none": 249, the second
// of RFC 4340's experimental CCIDs (248-255). It is not CCID 2, because
// announcing CCID 2 would claim RFC 4341's congestion control; the
// receiver's side is the same as CCID 2's (Ack Vectors), whose feedback
// still feeds the RTT and loss statistics the scheduler uses. A peer that
// does not know 249 leaves the CCID at its default, 2, and the subflow then
// runs ccid2 (see mpdccp's CCID negotiation).
const CCIDNone = 249

// None is no congestion control: only Config.RateLimit, paced. It is for
// tunnels whose inner traffic is all congestion-controlled end to end.
type None struct {
	cfg Config
	mss int
	t   *tracker
	p   Pacer
}

// NewNone returns the rate-capped "none" controller.
func NewNone(cfg Config) *None {
	n := &None{cfg: cfg, mss: cfg.MSS, t: newTracker(cfg.History)}
	if n.mss <= 0 {
		n.mss = defaultMSS
	}
	if r := cfg.RateLimit / 8; r > 0 {
		n.p.SetRate(0, r, max(2*n.mss, int(r*250e-6)))
	}
	return n
}

func (n *None) Name() string { return "none" }
func (n *None) CCID() uint8  { return CCIDNone }

func (n *None) OnPacketSent(now mono.Time, seq uint64, bytes int, inFlight bool) {
	if inFlight {
		n.p.OnSent(now, bytes)
	}
	n.t.onSent(now, seq, bytes, inFlight)
}

func (n *None) OnFeedback(now mono.Time, fb *Feedback) { n.t.onFeedback(now, fb, noEvents{}) }

// expiry is how long an unacknowledged packet is tracked: without a window
// nothing else bounds the record.
func (n *None) expiry() time.Duration {
	if !n.t.hasRTT {
		return 3 * time.Second
	}
	return max(4*n.t.srtt, time.Second)
}

func (n *None) OnTimer(now mono.Time) {
	if now >= n.t.lossDeadline() {
		n.t.onLossTimer(now, noEvents{})
	}
	if old, ok := n.t.oldestOutstanding(); ok && now.Sub(old) >= n.expiry() {
		n.t.declareAllLost(noEvents{})
		n.t.prune(now, false)
	}
}

func (n *None) Deadline() mono.Time {
	d := n.t.lossDeadline()
	if old, ok := n.t.oldestOutstanding(); ok {
		d = mono.Min(d, old.Add(n.expiry()))
	}
	return d
}

func (n *None) CanSend(now mono.Time) bool       { return true }
func (n *None) SendTime(now mono.Time) mono.Time { return n.p.SendTime(now, n.mss) }
func (n *None) AckRatio() int                    { return 2 }

func (n *None) State() State {
	ps := n.p.Stats()
	return State{
		InFlight:       n.t.inFlight,
		SRTT:           n.t.srtt,
		RTTVar:         n.t.rttvar,
		MinRTT:         n.t.minRTT,
		PacingRate:     n.p.Rate(),
		Phase:          "rate-limited",
		RateMeasured:   true, // the configured rate
		PacketsSent:    n.t.sent,
		PacketsAcked:   n.t.ackedPkts,
		PacketsLost:    n.t.lostPkts,
		ECNMarks:       n.t.ecnMarks,
		PacingLateMean: ps.MeanLate(),
		PacingLateMax:  ps.LateMax,
	}
}

type noEvents struct{}

func (noEvents) acked(*sentPacket, uint64, bool, bool) {}
func (noEvents) lost(*sentPacket, uint64)              {}
