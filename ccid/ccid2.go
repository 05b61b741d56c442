// SPDX-License-Identifier: MIT

package ccid

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("ccid2", func(cfg Config) Controller { return NewCCID2(cfg) })
}

const (
	defaultMSS = 1400
	maxCwnd    = 1 << 20 // packets; keeps the sequence window sane
	// minRTTVarTerm floors the variance term of the retransmission
	// timeout (SRTT + max(4·RTTVAR, this)), as Linux TCP floors it with
	// its minimum RTO: on a path whose delay never varies (a satellite
	// link fed in bursts, an emulated link) RTTVAR decays to zero, and an
	// RTO of SRTT + 1 ms fired before the ack of the first packet after a
	// quiet spell, which the peer delays (ackDelay): every packet in
	// flight declared lost, the window at one packet.
	minRTTVarTerm = 200 * time.Millisecond
	maxRTO        = 64 * time.Second
	// initRTO is RFC 6298's 1 s rather than DCCP's historical 3 s: RFC 4341
	// §5 defers to TCP's estimator, and a subflow that comes up on a dead
	// path should be noticed within a second.
	initRTO = time.Second

	// HyStart++ (RFC 9406 §4.3).
	hsMinRTTThresh  = 4 * time.Millisecond
	hsMaxRTTThresh  = 16 * time.Millisecond
	hsMinRTTDivisor = 8
	hsNRTTSample    = 8
	hsCSSGrowthDiv  = 4
	hsCSSRounds     = 5
)

// CCID2 is TCP-like congestion control (RFC 4341) with HyStart++ slow-start
// exit, RACK-style loss detection, spurious-loss undo, ECN with optional
// ABE, cwnd validation and pacing.
type CCID2 struct {
	cfg Config
	mss int
	t   *tracker
	p   Pacer

	cwnd, ssthresh int
	caAcked        int // packets acked toward the next +1 in congestion avoidance
	cssAcked       int // same, for HyStart++'s conservative slow start
	iw             int
	priorCwnd      int // cwnd before the first of a run of timeouts

	// Congestion episodes: at most one reduction per window of data.
	episode     uint32
	recoveryIdx uint64 // losses of packets below this index do not reduce again
	undo        struct {
		valid          bool
		cwnd, ssthresh int
		outstanding    int // packets of the episode declared lost, not yet seen
		episode        uint32
	}
	inTimeout bool

	// Retransmission timer.
	rtoStart mono.Time
	backoff  uint

	// HyStart++.
	hs struct {
		active                 bool // still in the initial slow start
		css                    bool
		windowEnd              uint64
		lastRoundMin, roundMin time.Duration
		samples                int
		cssBaseline            time.Duration
		cssRounds              int
	}

	// cwnd validation (RFC 7661 in spirit): grow only when the window was
	// at least half used in the current or previous round.
	pipeMax, prevPipeMax int
	roundEnd             uint64
	lastSend             mono.Time

	// Per-feedback scratch.
	newlyAcked int
	ecnIdx     uint64
	ecnSeen    bool

	events, timeouts uint64
}

// NewCCID2 returns a CCID2 controller.
func NewCCID2(cfg Config) *CCID2 {
	c := &CCID2{cfg: cfg, mss: cfg.MSS, t: newTracker(cfg.History)}
	if c.mss <= 0 {
		c.mss = defaultMSS
	}
	c.iw = cfg.InitialWindow
	if c.iw <= 0 {
		// RFC 3390's window in packets (RFC 4341 §5).
		switch {
		case c.mss <= 1095:
			c.iw = 4
		case c.mss <= 2190:
			c.iw = 3
		default:
			c.iw = 2
		}
	}
	c.cwnd = c.iw
	c.ssthresh = maxCwnd
	c.hs.active = cfg.HyStart
	c.hs.lastRoundMin = -1
	c.hs.roundMin = -1
	c.updatePacing(0)
	return c
}

func (c *CCID2) Name() string { return "ccid2" }
func (c *CCID2) CCID() uint8  { return 2 }

func (c *CCID2) OnPacketSent(now mono.Time, seq uint64, bytes int, inFlight bool) {
	if inFlight {
		if c.t.inFlight == 0 {
			c.restartAfterIdle(now)
			c.rtoStart = now
		}
		c.p.OnSent(now, bytes)
		c.lastSend = now
	}
	c.t.onSent(now, seq, bytes, inFlight)
	if c.t.inFlight > c.pipeMax {
		c.pipeMax = c.t.inFlight
	}
}

// restartAfterIdle decays a window unused for more than an RTO (RFC 2861,
// as Linux's CCID2 does): halve per RTO idle, not below the initial window,
// and remember the old window in ssthresh so slow start regains it quickly.
func (c *CCID2) restartAfterIdle(now mono.Time) {
	if c.lastSend == 0 || !c.t.hasRTT {
		return
	}
	idle := now.Sub(c.lastSend)
	rto := c.t.rto(c.backoff)
	if idle <= rto {
		return
	}
	c.ssthresh = max(c.ssthresh, 3*c.cwnd/4)
	for ; idle > rto && c.cwnd > c.iw; idle -= rto {
		c.cwnd = max(c.cwnd/2, c.iw)
	}
}

func (c *CCID2) OnFeedback(now mono.Time, fb *Feedback) {
	c.newlyAcked, c.ecnSeen = 0, false
	if !c.t.onFeedback(now, fb, c) {
		c.afterFeedback(now)
		return
	}
	c.backoff = 0
	c.rtoStart = now
	c.inTimeout = false

	if c.ecnSeen && c.ecnIdx >= c.recoveryIdx {
		c.reduce(true)
	}
	c.hystart(now)
	c.grow()
	c.afterFeedback(now)
}

func (c *CCID2) afterFeedback(now mono.Time) {
	if c.t.highAcked > c.roundEnd {
		c.prevPipeMax, c.pipeMax = c.pipeMax, c.t.inFlight
		c.roundEnd = c.t.next
	}
	c.updatePacing(now)
}

// acked implements lossEvents.
func (c *CCID2) acked(p *sentPacket, idx uint64, ecn, late bool) {
	if late {
		if c.undo.valid && p.episode == c.undo.episode {
			c.undo.outstanding--
			if c.undo.outstanding <= 0 {
				c.undoReduction()
			}
		}
		return
	}
	c.newlyAcked++
	if ecn {
		c.ecnSeen = true
		c.ecnIdx = idx
	}
}

// lost implements lossEvents.
func (c *CCID2) lost(p *sentPacket, idx uint64) {
	if c.inTimeout {
		p.episode = 0
		return
	}
	if idx >= c.recoveryIdx {
		c.reduce(false)
	}
	p.episode = c.episode
	if c.undo.valid && c.undo.episode == c.episode {
		c.undo.outstanding++
	}
}

// reduce is one congestion event: halve the window (or ×0.8 for ECN with
// ABE, RFC 8511) and ignore further signals for packets sent before now.
func (c *CCID2) reduce(ecn bool) {
	c.events++
	c.episode++
	c.undo.valid = !ecn // an ECN mark is never spurious
	c.undo.cwnd, c.undo.ssthresh = c.cwnd, c.ssthresh
	c.undo.outstanding = 0
	c.undo.episode = c.episode
	if ecn && c.cfg.ABE {
		c.cwnd = max(c.cwnd*4/5, 1)
	} else {
		c.cwnd = max(c.cwnd/2, 1)
	}
	c.ssthresh = max(c.cwnd, 2)
	c.caAcked = 0
	c.recoveryIdx = c.t.next
	c.hs.active, c.hs.css = false, false
}

// undoReduction restores the window a spurious congestion event took
// (RFC 9438 §4.9 applied to CCID2).
func (c *CCID2) undoReduction() {
	c.cwnd = max(c.cwnd, c.undo.cwnd)
	c.ssthresh = max(c.ssthresh, c.undo.ssthresh)
	c.undo.valid = false
	c.t.onSpurious()
}

func (c *CCID2) inRecovery() bool { return c.t.highAcked <= c.recoveryIdx && c.recoveryIdx > 0 }

func (c *CCID2) cwndLimited() bool {
	return 2*max(c.pipeMax, c.prevPipeMax)+2 >= c.cwnd
}

func (c *CCID2) grow() {
	n := c.newlyAcked
	if n == 0 || c.inRecovery() || !c.cwndLimited() {
		return
	}
	if c.cwnd < c.ssthresh {
		if c.hs.css {
			c.cssAcked += n
			c.cwnd += c.cssAcked / hsCSSGrowthDiv
			c.cssAcked %= hsCSSGrowthDiv
		} else {
			c.cwnd += n
		}
		if c.cwnd > c.ssthresh && !c.hs.active {
			c.cwnd = c.ssthresh
		}
	} else {
		c.caAcked += n
		for c.caAcked >= c.cwnd {
			c.caAcked -= c.cwnd
			c.cwnd++
		}
	}
	c.cwnd = min(c.cwnd, maxCwnd)
}

// hystart runs HyStart++ (RFC 9406) on this feedback's RTT sample.
func (c *CCID2) hystart(now mono.Time) {
	h := &c.hs
	if !h.active || c.cwnd >= c.ssthresh {
		return
	}
	if c.t.highAcked > h.windowEnd {
		// A round ended.
		h.lastRoundMin = h.roundMin
		h.roundMin, h.samples = -1, 0
		h.windowEnd = c.t.next
		if h.css {
			h.cssRounds++
			if h.cssRounds >= hsCSSRounds {
				c.ssthresh = c.cwnd
				h.active, h.css = false, false
				return
			}
		}
	}
	if !c.t.sampled {
		return
	}
	rtt := c.t.latestRTT
	if h.roundMin < 0 || rtt < h.roundMin {
		h.roundMin = rtt
	}
	h.samples++
	if h.samples < hsNRTTSample || h.lastRoundMin < 0 {
		return
	}
	if !h.css {
		thresh := min(max(h.lastRoundMin/hsMinRTTDivisor, hsMinRTTThresh), hsMaxRTTThresh)
		if h.roundMin >= h.lastRoundMin+thresh {
			h.css = true
			h.cssBaseline = h.roundMin
			h.cssRounds = 0
		}
	} else if h.roundMin < h.cssBaseline {
		h.css = false // the delay increase was spurious
	}
}

func (c *CCID2) OnTimer(now mono.Time) {
	if now >= c.t.lossDeadline() {
		c.newlyAcked = 0
		c.t.onLossTimer(now, c)
	}
	if c.t.inFlight > 0 && now >= c.rtoDeadline() {
		c.timeouts++
		c.events++
		c.episode++
		if c.backoff == 0 {
			c.priorCwnd = c.cwnd
		}
		c.ssthresh = max(c.cwnd/2, 2)
		c.cwnd = 1
		c.caAcked = 0
		c.undo.valid = false
		c.hs.active, c.hs.css = false, false
		c.inTimeout = true
		c.t.declareAllLost(c)
		c.recoveryIdx = c.t.next
		c.backoff++
		c.rtoStart = now
	}
	c.updatePacing(now)
}

func (c *CCID2) rtoDeadline() mono.Time {
	if c.t.inFlight == 0 {
		return mono.Never
	}
	return c.rtoStart.Add(c.t.rto(c.backoff))
}

func (c *CCID2) Deadline() mono.Time {
	return mono.Min(c.rtoDeadline(), c.t.lossDeadline())
}

// ReseedRTT implements RTTReseeder.
func (c *CCID2) ReseedRTT(rtt time.Duration) { c.t.reseedRTT(rtt) }

// OnPathRestored implements PathRestorer: what was in flight is lost
// without a further reduction, and the window restarts from the initial
// one in slow start up to what it was before the outage's timeouts.
func (c *CCID2) OnPathRestored(now mono.Time) {
	prev := c.cwnd
	if c.backoff > 0 {
		prev = max(prev, c.priorCwnd)
	}
	c.inTimeout = true // lost() ignores the packets while in timeout
	c.t.declareAllLost(c)
	c.inTimeout = false
	c.recoveryIdx = c.t.next
	c.backoff = 0
	c.rtoStart = now
	c.cwnd = c.iw
	c.ssthresh = max(prev, c.iw)
	c.caAcked = 0
	c.undo.valid = false
	c.updatePacing(now)
}

func (c *CCID2) CanSend(now mono.Time) bool { return c.t.inFlight < c.cwnd }

func (c *CCID2) SendTime(now mono.Time) mono.Time { return c.p.SendTime(now, c.mss) }

// updatePacing paces at 2×cwnd/srtt in slow start and 1.25×cwnd/srtt after
// (as quic-go does), so that Ack Ratio's stretch acks do not turn into
// line-rate bursts; RateLimit caps it.
func (c *CCID2) updatePacing(now mono.Time) {
	var rate float64
	if c.t.hasRTT && c.t.srtt > 0 {
		gain := 1.25
		if c.cwnd < c.ssthresh {
			gain = 2
		}
		rate = gain * float64(c.cwnd*c.mss) / c.t.srtt.Seconds()
	}
	if lim := c.cfg.RateLimit / 8; lim > 0 && (rate == 0 || rate > lim) {
		rate = lim
	}
	c.p.SetRate(now, rate, max(2*c.mss, int(rate*100e-6)))
}

// AckRatio keeps about 32 acks per window (fewer acks at high rates, where
// the pacer smooths the stretch), a power of two so that it changes rarely,
// and at most ceil(cwnd/2) as RFC 4341 §6.1.2 requires.
func (c *CCID2) AckRatio() int {
	if c.inTimeout || c.cwnd <= 2 {
		return 1
	}
	r := 2
	for r < 64 && 2*r*32 <= c.cwnd {
		r *= 2
	}
	return min(r, (c.cwnd+1)/2)
}

func (c *CCID2) phase() string {
	switch {
	case c.inTimeout:
		return "timeout"
	case c.inRecovery():
		return "recovery"
	case c.hs.css:
		return "conservative-slow-start"
	case c.cwnd < c.ssthresh:
		return "slow-start"
	}
	return "congestion-avoidance"
}

func (c *CCID2) State() State {
	ss := c.ssthresh
	if ss >= maxCwnd {
		ss = 0
	}
	ps := c.p.Stats()
	return State{
		Cwnd:             c.cwnd,
		InFlight:         c.t.inFlight,
		Ssthresh:         ss,
		SRTT:             c.t.srtt,
		RTTVar:           c.t.rttvar,
		MinRTT:           c.t.minRTT,
		PacingRate:       c.p.Rate(),
		DeliveryRate:     c.deliveryRate(),
		RateMeasured:     c.ssthresh < maxCwnd, // slow start ended on a full path
		Phase:            c.phase(),
		PacketsSent:      c.t.sent,
		PacketsAcked:     c.t.ackedPkts,
		PacketsLost:      c.t.lostPkts,
		ECNMarks:         c.t.ecnMarks,
		CongestionEvents: c.events,
		SpuriousEvents:   c.t.spuriousEvents,
		Timeouts:         c.timeouts,
		PacingLateMean:   ps.MeanLate(),
		PacingLateMax:    ps.LateMax,
	}
}

func (c *CCID2) deliveryRate() float64 {
	if !c.t.hasRTT || c.t.srtt <= 0 {
		return 0
	}
	return float64(c.cwnd*c.mss) / c.t.srtt.Seconds()
}
