// SPDX-License-Identifier: MIT

package ccid

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("bbr", func(cfg Config) Controller { return NewBBR(cfg) })
}

// CCIDBBR is the CCID number mptun negotiates for BBR: 248 is the first of
// RFC 4340's experimental CCIDs (248–255).
const CCIDBBR = 248

// BBRParams are where mptun departs from draft-ietf-ccwg-bbr, and why.
// DefaultBBRParams gives mptun's choices; tests build controllers with
// other values (Config.BBR) to measure the draft's behaviour side by side
// (see README.md). They are not configuration.
type BBRParams struct {
	// MaxBwCycles is the max-bw filter length in ProbeBW cycles (draft: 2).
	MaxBwCycles int
	// ProbeWaitBase and ProbeMaxRounds time bandwidth probes (draft:
	// 2–3 s, at most 63 rounds).
	ProbeWaitBase  time.Duration
	ProbeMaxRounds uint64
	// ProbeMinRounds: at least this many rounds between bandwidth probes
	// once a loss has set inflight_hi. The draft probes after as many
	// rounds as the BDP has packets (Reno's pace), so a path of a few
	// packets' BDP (a 1 Mbit/s ADSL uplink, about 3) probes every few
	// rounds, and each probe overflows its small buffer: 4.5 % loss in the
	// simulator. A tunnel repairs each loss, but the receiver holds the
	// flow until the repair is in. A path that has not lost (an overflow
	// path still ramping up) keeps the draft's pace. 0: the draft's rule.
	ProbeMinRounds uint64
	// UpQueueExit also ends ProbeBW_UP when the probe has added about ¼
	// min RTT of queueing delay (upQueueBuilt), not only on the draft's bandwidth
	// plateau. Without it UP keeps probing until the plateau, which fills a
	// BDP buffer every cycle: p95 queueing delay was 0.7–0.95 × min RTT in
	// our grid instead of ≤ 0.25.
	UpQueueExit bool
	// AvgLatest takes bw_latest as the loss round's average delivery rate
	// rather than its maximum sample. Off: it made the draft's lower bound
	// ratchet down under 2% random loss (utilisation 0.35 instead of 0.65)
	// and did not help fairness once PureBeta was on.
	AvgLatest bool
	// DownGain is ProbeBW_DOWN's pacing gain (draft: 0.9).
	DownGain float64
	// PureBeta makes a loss (or CE) round outside bandwidth probing cut
	// bw_lo and inflight_lo by Beta, at most once per two rounds, instead of
	// to max(latest, Beta × bound). The draft's floor at the latest sample
	// leaves the larger of two flows almost untouched, and two flows took
	// far longer than 10 s to converge (Jain 0.76–0.95 at 10 s); with the
	// multiplicative cut they do (README.md).
	PureBeta bool
	// PureBetaThresh is the loss fraction of a round above which the
	// multiplicative cut applies (0: any loss).
	PureBetaThresh float64
	// QueuedLossOnly limits that cut to loss rounds whose RTT showed a
	// queue of over ¼ min RTT: random loss on an idle path is not
	// competition (with the cut alone, 0.1% random loss cost half the rate).
	QueuedLossOnly bool
	// CapBySent caps a delivery-rate sample's bytes at those sent in its
	// send interval (draft-cheng-iccrg-delivery-rate-estimation does not):
	// under reordering, late packets from before the interval otherwise
	// inflate max_bw by 4–7% and build a standing queue.
	CapBySent bool
	// QueueSignal treats a round in ProbeBW_DOWN or CRUISE whose
	// *smallest* RTT sample is above min RTT + ¼ min RTT as a congestion
	// round, like one with CE (adaptLowerBounds), once two rounds have
	// passed since our last probe, Startup or ProbeRTT (so the queue is not
	// our own: DOWN drains ours). The round minimum ignores jitter and
	// single late packets; a queue that survives a whole round while we
	// pace at ≤ 1 × bw is another flow's, or our max_bw is above our share.
	// Without it two flows whose max_bw add up to more than the link sat
	// on a standing queue of 0.3–0.7 BDP for seconds with no loss (and so
	// no v3 response), keeping the split their Startups left (Jain 0.84 at
	// 10 s for a late-comer at 10 Mbit/s × 100 ms). This is a delay
	// response and makes BBR yield more to loss-based flows that keep a
	// standing queue (between probes: bw_lo is reset at every REFILL).
	QueueSignal bool
	// QueueBeta is the cut for such a round (0.8, as ABE's ECN
	// response in RFC 8511: a standing queue is an earlier and milder
	// signal than loss). 0.7 converged slightly more often (95 vs 93 of 96
	// runs, seeds 1–12) but left two flows at 0.956 utilisation on average.
	QueueBeta float64
	// QueueCutToDelivery lets such a cut go at once down to the round's
	// delivery rate over beta, not only by beta. Every RTT sample of the
	// round waited in the queue, so the bottleneck was busy throughout
	// and the round delivered what the path now gives. An LTE path whose
	// rate fell from 40 to 4 Mbit/s under a deep buffer kept its old
	// max_bw (the scheduler sends it little, so the filter does not
	// advance) and took the 0.8 cuts for seconds, its buffer holding the
	// flow 100-400 ms: 7.6 Mbit/s over both paths while it was low, 14.1
	// with this (mpdccp.TestSimPinnedPathLosesCapacity). In a round with
	// losses only if the queue exceeded the path's min RTT: applied to
	// every lossy round it cost 1.7 % in the lab's Gilbert-Elliott cell.
	QueueCutToDelivery bool
	// StartupQueueExit also ends Startup after two rounds with a
	// standing queue (checkStartupQueue).
	StartupQueueExit bool
	// PlateauNeedsDemand counts a Startup round towards the full-bandwidth
	// plateau only if the window limited it. A subflow the scheduler
	// feeds only what overflows from a faster path is not
	// application-limited (the connection has packets queued) but carries
	// what it is given: three such rounds ended Startup at a fraction of
	// the path's rate, and ProbeBW then grew it by a quarter every 2-3 s
	// (an LTE path of 50 Mbit/s beside DSL at 4: 5.5 Mbit/s after 20 s).
	PlateauNeedsDemand bool
	// QueuedRoundsCount counts a Startup round towards the plateau, also
	// when application-limited, if it kept a standing queue
	// (startupRoundQueued).
	QueuedRoundsCount bool
	// QueueMinDelay floors the queue that QueueSignal reacts to
	// (queueThreshold).
	QueueMinDelay time.Duration
	// LoAddPackets is the additive increase of the lower bounds: in a
	// CRUISE round with neither loss, CE nor a queue above ¼ min RTT,
	// inflight_lo grows by this many packets and bw_lo by as many packets
	// per min RTT, until bw_lo reaches max_bw (draft: the bounds stay until
	// the next REFILL). Equal absolute increases with multiplicative cuts
	// is AIMD: two flows converge (Chiu–Jain) instead of keeping their
	// ratio, and the link is not left under-used for the rest of a 2–3 s
	// cycle after a cut.
	LoAddPackets float64
	// NoCutWhileDraining skips a lower-bound cut while the round's
	// minimum RTT is still falling from the previous round's (by more than
	// min RTT/16): the previous cut is working. The 2-round spacing alone
	// cut twice during the drain of a one-BDP queue at 100 ms (10 → 7 →
	// 4.4 Mbit/s for a flow whose share was 7).
	NoCutWhileDraining bool
	// NoiseAware counts, for QueueSignal and LoAddPackets, only the
	// delay above the path's own noise (rttNoise): a radio path's jitter
	// keeps every round's smallest RTT above min RTT with no queue at
	// all, and a lone flow on 40 Mbit/s with 10 ms of jitter was cut to
	// 0.8 every few rounds (inner BBR through the tunnel: 23.8-31.4
	// Mbit/s, 33.1-33.6 with this, 35.1 with QueueSignal off; lab, 20 s).
	// The Startup exits keep the plain threshold: with the noise there
	// too, two-path cells with jitter lost 1-2 %, and twice 10 %.
	NoiseAware bool
	// DrainedSkipsProbeRTT restarts the 5-s ProbeRTT timer on an RTT
	// sample within an eighth of the window's minimum, not only on a new
	// minimum: the queue drained then, which is all ProbeRTT is for. A
	// tunnel's subflows are often application-limited and drain on their
	// own; each ProbeRTT costs them about 2 % of the path (10 Mbit/s ×
	// 10 ms in the simulator: 0.948 of the offered 0.97 with it).
	DrainedSkipsProbeRTT bool
	// Margin is the pacing margin (draft: 1%).
	Margin float64
	// RandomLossMax: losses while the path shows no standing queue (the
	// round's smallest RTT within queueThreshold of min RTT, plus the
	// path's noise: noStandingQueue) are taken as random, not congestion, up
	// to this fraction of a round's packets: they cut neither inflight_hi,
	// the lower bounds, the window nor Startup. A tunnel repairs them, and
	// a lossy radio or satellite link that loses 2-5 % at any load must
	// still be used at its rate (the draft's 2 % threshold left 0.2-4
	// Mbit/s of a 10 Mbit/s path losing 5 %). Loss with a queue, or more
	// than this, is congestion as in the draft. 0 turns it off.
	RandomLossMax float64
	// InitialRateFloor (bytes per second) sizes the first window of a
	// long path from its handshake round trip: at least this rate × RTT.
	// Ten packets per 600 ms round (a GEO satellite) is 0.2 Mbit/s, and
	// Startup took about 4 s to carry the 4 Mbit/s a constant-rate stream
	// overflowed onto such a path; what the fast path could not carry
	// meanwhile was dropped (simulator: 96.8 % of the stream delivered,
	// 99.0 % with 2 Mbit/s). Paths under about 60 ms keep the ten packets
	// of RFC 6928. 0 turns it off.
	InitialRateFloor float64
}

// DefaultBBRParams are the parameters mptun runs with.
func DefaultBBRParams() BBRParams {
	return BBRParams{
		MaxBwCycles:          2,
		ProbeWaitBase:        2 * time.Second,
		ProbeMaxRounds:       63,
		ProbeMinRounds:       16,
		UpQueueExit:          true,
		AvgLatest:            false,
		DownGain:             0.9,
		PureBeta:             true,
		PureBetaThresh:       0.0,
		QueuedLossOnly:       true,
		CapBySent:            true,
		QueueSignal:          true,
		QueueBeta:            0.8,
		QueueCutToDelivery:   true,
		StartupQueueExit:     true,
		PlateauNeedsDemand:   true,
		QueuedRoundsCount:    true,
		QueueMinDelay:        5 * time.Millisecond,
		LoAddPackets:         2.0,
		NoCutWhileDraining:   true,
		Margin:               bbrPacingMargin,
		RandomLossMax:        0.15,
		NoiseAware:           true,
		DrainedSkipsProbeRTT: true,
		InitialRateFloor:     2e6 / 8,
	}
}

// randomLossRound is randomLoss for a whole round, at its end: the
// round's smallest RTT showed no standing queue.
func (b *BBR) randomLossRound() bool {
	return b.par.RandomLossMax > 0 && b.noStandingQueue(b.minRTTInRound) && b.littleLossInRound()
}

// randomLossInStartup is randomLossRound for Startup's loss exit: no RTT
// sample of the round showed a queue, noise or not. Startup doubles its
// flight every round and overfills a buffer within one, while the
// round's smallest RTT is still near the minimum; judged by that, a
// second flow's Startup on a jittery 100 ms path ran on through its
// losses (two BBR flows' Jain index, mean of ten seeds: 0.86 -> 0.77).
func (b *BBR) randomLossInStartup() bool {
	return b.par.RandomLossMax > 0 && b.minRTT > 0 && b.maxRTTInRound > 0 && !b.roundQueued() &&
		b.littleLossInRound()
}

// roundQueued reports whether some RTT sample of the round so far showed
// a queue above queueThreshold, noise or not.
func (b *BBR) roundQueued() bool {
	return b.minRTT > 0 && b.maxRTTInRound > b.minRTT+b.queueThreshold()
}

// randomLoss reports whether the losses just seen look random rather
// than congestive (RandomLossMax): the latest RTT shows no standing queue
// and the round so far lost little. The latest, not the round's smallest:
// a bandwidth probe that fills the buffer mid-round must still set
// inflight_hi (Gilbert-Elliott loss on a 10 Mbit/s path: 158-218 drops
// in the lab when judged by the round's smallest, 135-147 so).
func (b *BBR) randomLoss() bool {
	return b.par.RandomLossMax > 0 && b.noStandingQueue(b.rs.rtt) && b.littleLossInRound()
}

// littleLossInRound reports whether the round so far lost at most
// RandomLossMax of its packets, the most that can pass for random loss.
func (b *BBR) littleLossInRound() bool {
	return b.lostInRoundBytes <= b.par.RandomLossMax*(b.lostInRoundBytes+b.deliveredInRound)
}

// noStandingQueue reports whether an RTT sample shows no standing queue:
// it is within queueThreshold of the min RTT, plus the path's own noise.
// A queue that holds until the buffer drops raises every sample of a
// round; a radio path's jitter raises only some, and judged by a round's
// largest sample, every loss of a lossy radio path looked congestive
// (80 Mbit/s, 50 ms, 1 % loss, 20 ms of jitter: 0.13 of the path in the
// simulator; 0.65-0.77 judged by the smallest).
func (b *BBR) noStandingQueue(rtt time.Duration) bool {
	return b.minRTT > 0 && rtt > 0 && rtt <= b.minRTT+b.queueThreshold()+b.rttNoise
}

// BBR constants (draft-ietf-ccwg-bbr, "BBRv3").
const (
	bbrStartupPacingGain  = 2.77 // 4·ln 2
	bbrStartupCwndGain    = 2.0
	bbrDrainPacingGain    = 0.35
	bbrDefaultCwndGain    = 2.0
	bbrUpCwndGain         = 2.25
	bbrPacingMargin       = 0.01
	bbrLossThresh         = 0.02
	bbrECNThresh          = 0.5
	bbrBeta               = 0.7
	bbrHeadroom           = 0.15
	bbrMinPipePackets     = 4
	bbrInitialCwndPackets = 10
	bbrStartupFullLoss    = 6 // lost packets in a round that end Startup
	bbrProbeRTTCwndGain   = 0.5
	bbrProbeRTTDuration   = 200 * time.Millisecond
	bbrProbeRTTInterval   = 5 * time.Second
	bbrMinRTTFilterLen    = 10 * time.Second
	bbrExtraAckedRounds   = 10
)

type bbrState uint8

const (
	bbrStartup bbrState = iota
	bbrDrain
	bbrDown
	bbrCruise
	bbrRefill
	bbrUp
	bbrProbeRTT
)

var bbrStateNames = [...]string{"startup", "drain", "probe-bw-down", "probe-bw-cruise", "probe-bw-refill", "probe-bw-up", "probe-rtt"}

type ackPhase uint8

const (
	acksInit ackPhase = iota
	acksRefilling
	acksProbeStarting
	acksProbeFeedback
	acksProbeStopping
)

// BBR is a model-based controller after draft-ietf-ccwg-bbr (BBRv3):
// delivery-rate samples, a max-bandwidth filter over two ProbeBW cycles,
// min RTT with ProbeRTT, the Startup/Drain/ProbeBW/ProbeRTT state machine,
// inflight_hi/inflight_lo/bw_lo responses to loss and ECN, and pacing.
// Quantities are in bytes and bytes per second.
type BBR struct {
	cfg Config
	par BBRParams
	mss int
	t   *tracker
	p   Pacer
	rng *rand.Rand

	state       bbrState
	pacingGain  float64
	cwndGain    float64
	cwnd        float64
	priorCwnd   float64
	pacingRate  float64
	sendQuantum float64

	// Delivery-rate estimation (connection state).
	delivered     uint64
	deliveredTime mono.Time
	firstSentTime mono.Time
	sentCum       uint64 // bytes sent so far
	firstSentCum  uint64 // sentCum at firstSentTime
	appLimited    uint64 // delivered mark until which samples are app-limited; 0 = not

	// Current rate sample.
	rs struct {
		has            bool
		priorDelivered uint64
		priorTime      mono.Time
		sendElapsed    time.Duration
		sentInInterval uint64 // bytes sent in the sample's send interval
		txInFlight     int
		lostAtSend     uint64
		appLimited     bool
		delivered      float64
		rate           float64 // bytes/s, 0 if invalid
		lost           float64 // bytes lost since the sampled packet was sent
		newlyAcked     float64
		newlyLost      float64
		ecn            float64 // bytes newly acked with CE
		rtt            time.Duration
	}

	// Model.
	maxBw          float64
	bwHi           [2]float64
	cycleCount     uint64
	bwLo           float64
	bw             float64
	inflightHi     float64
	inflightLo     float64
	bwLatest       float64
	inflightLatest float64
	minRTT         time.Duration
	minRTTStamp    mono.Time
	probeMin       time.Duration
	probeMinStamp  mono.Time
	// probeMinExpired is set by updateMinRTT before it restarts the
	// window with the current sample, for checkProbeRTT to act on.
	probeMinExpired bool
	extraAcked      [2]float64
	extraIdx        int
	extraRounds     int
	extraStart      mono.Time
	extraDelivered  float64

	// Rounds and congestion signals.
	roundCount         uint64
	nextRoundDelivered uint64
	roundStart         bool
	lossRoundDelivered uint64
	lossRoundStart     bool
	lossInRound        bool
	cruiseLossInRound  bool // a loss of a packet not sent while probing
	ecnInRound         bool
	lossPktsInRound    int
	lostInRoundBytes   float64
	lossRoundStamp     mono.Time
	deliveredInRound   float64
	savedLo            struct{ bw, inflight float64 }
	savedLoRound       uint64
	hiUndo             struct {
		round       uint64 // 0 = nothing to undo
		inflightHi  float64
		startupExit bool
	}
	loCutRound uint64

	// Startup.
	fullBwReached bool
	fullBwNow     bool
	fullBw        float64
	fullBwCount   int

	// ProbeBW.
	cycleStamp         mono.Time
	bwProbeWait        time.Duration
	roundsSinceProbe   uint64
	ackPhase           ackPhase
	bwProbeSamples     bool
	bwProbeUpRounds    uint
	bwProbeUpAcks      float64
	bwProbeUpCnt       float64
	probeRTTDoneStamp  mono.Time
	probeRTTRoundDone  bool
	idleRestart        bool
	cwndLimitedInRound bool
	upStartRTT         time.Duration
	maxRTTInRound      time.Duration
	minRTTInRound      time.Duration
	prevMinRTTInRound  time.Duration
	// prevDeliveredInRound is what the last round delivered, bytes.
	prevDeliveredInRound float64
	quietRounds          int  // rounds in DOWN/CRUISE since the last probe, Startup or ProbeRTT
	queueInRound         bool // QueueSignal: the round's min RTT showed a standing queue
	// The path's own delay noise (endRTTNoiseRound): the current round's
	// RTT rises and falls and its last sample, the last three rounds'
	// swings (newest first), and the estimate.
	rttRise, rttFall time.Duration
	lastRTTSample    time.Duration
	swings           [3]time.Duration
	rttNoise         time.Duration

	// Retransmission timeout.
	rtoStart    mono.Time
	backoff     uint
	inRTO       bool
	rtoRecovery uint64 // index of the first packet sent after the timeout

	now       mono.Time // time of the call being processed
	lateBytes uint64    // bytes declared lost that arrived after all

	events, timeouts, spurious uint64
	lastSpuriousRound          uint64
}

// NewBBR returns a BBR controller.
func NewBBR(cfg Config) *BBR {
	b := &BBR{cfg: cfg, par: DefaultBBRParams(), mss: cfg.MSS, t: newTracker(cfg.History), rng: rand.New(rand.NewPCG(0xbb, 0x72))}
	if cfg.BBR != nil {
		b.par = *cfg.BBR
	}
	if b.mss <= 0 {
		b.mss = defaultMSS
	}
	iw := cfg.InitialWindow
	if iw <= 0 {
		iw = bbrInitialCwndPackets // RFC 6928, as BBR's draft assumes
	}
	b.cwnd = float64(iw * b.mss)
	b.minRTT = -1
	b.probeMin = -1
	b.bwLo, b.inflightLo, b.inflightHi = math.Inf(1), math.Inf(1), math.Inf(1)
	b.sendQuantum = float64(2 * b.mss)
	b.enterStartup()
	b.pacingRate = bbrStartupPacingGain * b.cwnd / 0.001 // no RTT yet: assume 1 ms
	b.applyPacing(0)
	return b
}

func (b *BBR) Name() string { return "bbr" }
func (b *BBR) CCID() uint8  { return CCIDBBR }

// netLost is the bytes declared lost minus those that arrived later.
func (b *BBR) netLost() uint64 { return b.t.lostBytes - b.lateBytes }

func (b *BBR) minPipe() float64 { return float64(bbrMinPipePackets * b.mss) }

func (b *BBR) OnPacketSent(now mono.Time, seq uint64, bytes int, inFlight bool) {
	if !inFlight {
		b.t.onSent(now, seq, bytes, false)
		return
	}
	if b.t.sent == 0 {
		// Desynchronise flows' probing: the engine's initial sequence
		// number is random.
		b.rng = rand.New(rand.NewPCG(seq, 0x6262_72))
	}
	if b.t.inFlight == 0 {
		b.firstSentTime, b.deliveredTime = now, now
		b.firstSentCum = b.sentCum
		b.rtoStart = now
		if b.appLimited != 0 {
			b.idleRestart = true
		}
	}
	tx := b.t.inFlightBytes + bytes
	p, _ := b.t.onSent(now, seq, bytes, true)
	p.delivered = b.delivered
	p.deliveredTime = b.deliveredTime
	p.firstSentTime = b.firstSentTime
	p.sentCum = b.sentCum
	p.firstSentCum = b.firstSentCum
	b.sentCum += uint64(bytes)
	p.appLimited = b.appLimited != 0
	p.probing = b.isProbingBW()
	p.txInFlight = int32(tx)
	p.lostAtSend = b.netLost()
	b.p.OnSent(now, bytes)
	if float64(b.t.inFlightBytes+b.mss) > b.cwnd {
		b.cwndLimitedInRound = true
	}
}

// OnAppLimited marks the samples taken until what is in flight now is
// delivered as application-limited.
func (b *BBR) OnAppLimited(now mono.Time) {
	b.appLimited = max(b.delivered+uint64(b.t.inFlightBytes), 1)
}

// acked implements lossEvents: delivery-rate bookkeeping per packet.
func (b *BBR) acked(p *sentPacket, idx uint64, ecn, late bool) {
	b.delivered += uint64(p.bytes)
	if ecn {
		b.rs.ecn += float64(p.bytes)
	}
	if late {
		// A packet declared lost arrived after all: the loss was reordering.
		// Take it out of the loss accounting.
		b.lateBytes += uint64(p.bytes)
		b.lossPktsInRound = max(b.lossPktsInRound-1, 0)
		b.lostInRoundBytes = max(b.lostInRoundBytes-float64(p.bytes), 0)
		if b.lastSpuriousRound != b.roundCount {
			b.lastSpuriousRound = b.roundCount
			b.spurious++
			b.t.onSpurious()
			// Undo a lower-bound cut the loss caused (RFC 9438 §4.9 in
			// spirit): it was reordering, not congestion.
			if b.savedLoRound != 0 && b.roundCount <= b.savedLoRound+2 {
				b.bwLo, b.inflightLo = b.savedLo.bw, b.savedLo.inflight
				b.savedLoRound = 0
			}
			if u := &b.hiUndo; u.round != 0 && b.roundCount <= u.round+2 {
				b.inflightHi = u.inflightHi
				if u.startupExit && b.state != bbrProbeRTT {
					// Startup ended on losses that were reordering.
					b.fullBwReached, b.fullBwNow = false, false
					b.enterStartup()
				}
				u.round = 0
			}
		}
		return
	}
	b.rs.newlyAcked += float64(p.bytes)
	if !b.rs.has || p.delivered >= b.rs.priorDelivered {
		b.rs.has = true
		b.rs.priorDelivered = p.delivered
		b.rs.priorTime = p.deliveredTime
		b.rs.appLimited = p.appLimited
		b.rs.sendElapsed = p.sent.Sub(p.firstSentTime)
		b.rs.sentInInterval = p.sentCum + uint64(p.bytes) - p.firstSentCum
		b.rs.txInFlight = int(p.txInFlight)
		b.rs.lostAtSend = p.lostAtSend
		b.firstSentTime = p.sent
		b.firstSentCum = p.sentCum
	}
}

// lost implements lossEvents.
func (b *BBR) lost(p *sentPacket, idx uint64) {
	b.rs.newlyLost += float64(p.bytes)
	if b.inRTO {
		return
	}
	b.lossPktsInRound++
	if !p.probing {
		b.cruiseLossInRound = true
	}
	// BBRHandleLostPacket: judge the loss rate as of this packet's flight.
	if !b.bwProbeSamples {
		return
	}
	tx := float64(p.txInFlight)
	lost := float64(b.netLost() - p.lostAtSend)
	if lost > bbrLossThresh*tx && !b.randomLoss() {
		size := float64(p.bytes)
		prevIn, prevLost := tx-size, lost-size
		prefix := (bbrLossThresh*prevIn - prevLost) / (1 - bbrLossThresh)
		b.handleInflightTooHigh(b.now, p.appLimited, prevIn+max(prefix, 0))
	}
}

func (b *BBR) OnFeedback(now mono.Time, fb *Feedback) {
	b.now = now
	b.rs.has = false
	b.rs.newlyAcked, b.rs.newlyLost, b.rs.ecn, b.rs.rate = 0, 0, 0, 0
	if !b.t.onFeedback(now, fb, b) {
		if b.rs.newlyLost > 0 {
			b.afterLoss(now)
		}
		return
	}
	b.backoff = 0
	b.rtoStart = now
	if b.inRTO && b.t.highAcked > b.rtoRecovery {
		b.inRTO = false
		b.cwnd = max(b.cwnd, b.priorCwnd)
	}
	b.deliveredTime = now
	if b.appLimited != 0 && b.delivered > b.appLimited {
		b.appLimited = 0
	}
	if b.rs.has {
		b.rs.delivered = float64(b.delivered - b.rs.priorDelivered)
		ackElapsed := now.Sub(b.rs.priorTime)
		interval := max(b.rs.sendElapsed, ackElapsed)
		if interval > 0 && (b.minRTT < 0 || interval >= b.minRTT) {
			// Reordered packets sent before the interval but delivered in
			// it inflate the sample beyond what was sent; no path delivers
			// faster than we sent.
			d := b.rs.delivered
			if b.par.CapBySent && b.rs.sendElapsed > 0 {
				d = min(d, float64(b.rs.sentInInterval))
			}
			b.rs.rate = d / interval.Seconds()
		}
		b.rs.lost = float64(b.netLost() - b.rs.lostAtSend)
	}
	b.rs.rtt = -1
	if b.t.sampled {
		b.rs.rtt = b.t.latestRTT
	}
	b.updateModelAndState(now)
	b.updateControl(now)
}

func (b *BBR) afterLoss(now mono.Time) {
	b.lossInRound = true
	if !b.randomLoss() {
		b.cwnd = max(b.cwnd-b.rs.newlyLost, float64(b.mss))
	}
	b.updateControl(now)
}

func (b *BBR) updateModelAndState(now mono.Time) {
	b.updateLatestDeliverySignals()
	b.updateCongestionSignals(now)
	b.updateAckAggregation(now)
	b.checkFullBwReached()
	b.checkStartupDone(now)
	b.checkDrainDone(now)
	b.updateProbeBWCyclePhase(now)
	b.updateMinRTT(now)
	b.checkProbeRTT(now)
	b.advanceLatestDeliverySignals()
	b.bw = min(b.maxBw, b.bwLo)
}

func (b *BBR) updateRound() {
	b.roundStart = false
	if b.rs.has && b.rs.priorDelivered >= b.nextRoundDelivered {
		b.startRound()
		b.roundCount++
		b.roundsSinceProbe++
		b.roundStart = true
	}
}

func (b *BBR) startRound() { b.nextRoundDelivered = b.delivered }

func (b *BBR) updateLatestDeliverySignals() {
	b.lossRoundStart = false
	b.bwLatest = max(b.bwLatest, b.rs.rate)
	b.inflightLatest = max(b.inflightLatest, b.rs.delivered)
	if b.rs.has && b.rs.priorDelivered >= b.lossRoundDelivered {
		b.lossRoundDelivered = b.delivered
		b.lossRoundStart = true
	}
}

func (b *BBR) advanceLatestDeliverySignals() {
	if b.lossRoundStart {
		b.bwLatest = b.rs.rate
		b.inflightLatest = b.rs.delivered
	}
}

func (b *BBR) updateCongestionSignals(now mono.Time) {
	b.updateRound()
	if b.rs.rate > 0 && (b.rs.rate >= b.maxBw || !b.rs.appLimited) {
		b.bwHi[1] = max(b.bwHi[1], b.rs.rate)
		b.maxBw = max(b.bwHi[0], b.bwHi[1])
	}
	b.deliveredInRound += b.rs.newlyAcked
	b.lostInRoundBytes += b.rs.newlyLost
	if b.rs.newlyLost > 0 && !b.inRTO {
		b.lossInRound = true
		if !b.randomLoss() {
			b.cwnd = max(b.cwnd-b.rs.newlyLost, float64(b.mss))
		}
	}
	if b.rs.ecn > 0 {
		b.ecnInRound = true
	}
	b.maxRTTInRound = max(b.maxRTTInRound, b.rs.rtt)
	if b.rs.rtt > 0 && (b.minRTTInRound == 0 || b.rs.rtt < b.minRTTInRound) {
		b.minRTTInRound = b.rs.rtt
	}
	b.noteRTTSwing(b.rs.rtt)
	if !b.lossRoundStart {
		return
	}
	if b.par.AvgLatest && b.lossRoundStamp != 0 && now > b.lossRoundStamp {
		// The round's average delivery rate: the per-ack maximum overstates
		// a flow's share, and flows whose estimates add up to more than the
		// bottleneck keep a standing queue.
		b.bwLatest = b.deliveredInRound / now.Sub(b.lossRoundStamp).Seconds()
	}
	b.lossRoundStamp = now
	if b.state == bbrDown || b.state == bbrCruise {
		b.quietRounds++
	} else {
		b.quietRounds = 0
	}
	b.endRTTNoiseRound()
	b.queueInRound = b.par.QueueSignal && b.quietRounds >= 2 && b.minRTT > 0 &&
		b.minRTTInRound > b.minRTT+b.queueThreshold()+b.rttNoise
	b.adaptLowerBounds()
	b.checkStartupHighLoss()
	b.checkStartupQueue()
	b.lossInRound, b.ecnInRound, b.cruiseLossInRound = false, false, false
	b.prevMinRTTInRound, b.prevDeliveredInRound = b.minRTTInRound, b.deliveredInRound
	b.maxRTTInRound, b.minRTTInRound = 0, 0
	b.lossPktsInRound = 0
	b.lostInRoundBytes, b.deliveredInRound = 0, 0
}

// noteRTTSwing adds an RTT sample's change from the previous one to the
// round's rises or falls (see endRTTNoiseRound).
func (b *BBR) noteRTTSwing(rtt time.Duration) {
	if rtt <= 0 || !b.par.NoiseAware {
		return
	}
	if b.lastRTTSample > 0 {
		if d := rtt - b.lastRTTSample; d > 0 {
			b.rttRise += d
		} else {
			b.rttFall -= d
		}
	}
	b.lastRTTSample = rtt
}

// endRTTNoiseRound updates rttNoise at a round's end. A round's swing is
// how far its RTT went up and came back down (the smaller of its rises
// and falls, at most its spread): a queue that grows or drains moves the
// RTT one way and counts little; jitter (a radio link's scheduling,
// packets held in FIFO behind a late one) moves it both ways, all the
// time. The noise is the smallest swing of the last three rounds: another
// flow's bandwidth probe swings our RTT for a round or two, and taken as
// noise (the largest swing, held) it hid the queue that makes a
// late-comer's competitor yield (Jain 0.82).
func (b *BBR) endRTTNoiseRound() {
	if !b.par.NoiseAware {
		return
	}
	swing := min(b.rttRise, b.rttFall, b.maxRTTInRound-b.minRTTInRound)
	b.rttRise, b.rttFall = 0, 0
	b.swings[2], b.swings[1], b.swings[0] = b.swings[1], b.swings[0], swing
	b.rttNoise = min(b.swings[0], b.swings[1], b.swings[2])
}

// queueThreshold is the queueing delay above which QueueSignal calls a
// round congested: ¼ min RTT, but at least QueueMinDelay. On a short
// path ¼ min RTT is a couple of packets, which pacing quanta and ack
// aggregation alone produce: at 16 Mbit/s × 10 ms (2.5 ms) the signal cut
// a lone flow to 80 % every few rounds.
func (b *BBR) queueThreshold() time.Duration {
	return max(b.minRTT/4, b.par.QueueMinDelay)
}

func (b *BBR) isProbingBW() bool {
	return b.state == bbrStartup || b.state == bbrRefill || b.state == bbrUp
}

// adaptLowerBounds is v3's response to loss (and, here, classic ECN and a
// standing queue) outside bandwidth probing: cut bw_lo and inflight_lo by
// Beta once per round; and, here, raise them additively in quiet rounds.
func (b *BBR) adaptLowerBounds() {
	lossy := b.lossInRound && !b.randomLossRound()
	congested := lossy || b.ecnInRound || b.queueInRound
	if b.par.LoAddPackets > 0 && b.state == bbrCruise && !congested && b.minRTT > 0 &&
		b.maxRTTInRound > 0 && b.maxRTTInRound <= b.minRTT+b.queueThreshold()+b.rttNoise {
		add := b.par.LoAddPackets * float64(b.mss)
		if !math.IsInf(b.bwLo, 1) {
			b.bwLo += add / b.minRTT.Seconds()
			if b.bwLo >= b.maxBw {
				b.bwLo = math.Inf(1)
			}
		}
		if !math.IsInf(b.inflightLo, 1) {
			b.inflightLo += add
		}
		return
	}
	if b.isProbingBW() || !congested {
		return
	}
	if b.par.PureBeta && !(b.cruiseLossInRound && lossy) && !b.ecnInRound && !b.queueInRound {
		return // losses from our own bandwidth probe were answered by inflight_hi
	}
	if math.IsInf(b.bwLo, 1) {
		b.bwLo = b.maxBw
	}
	if math.IsInf(b.inflightLo, 1) {
		b.inflightLo = b.cwnd
	}
	b.savedLo.bw, b.savedLo.inflight, b.savedLoRound = b.bwLo, b.inflightLo, b.roundCount
	heavy := b.lostInRoundBytes > b.par.PureBetaThresh*(b.lostInRoundBytes+b.deliveredInRound)
	// Only losses that come with a standing queue are competition; random
	// loss on an uncongested path must not cut (BBR's point).
	queued := b.roundQueued()
	if b.par.PureBeta && (heavy && (queued || !b.par.QueuedLossOnly) || b.queueInRound) {
		if b.roundCount < b.loCutRound+2 {
			return // the previous cut has not had a round trip to show yet
		}
		if b.par.NoCutWhileDraining && b.minRTTInRound > 0 && b.minRTTInRound < b.prevMinRTTInRound-b.minRTT/16 {
			return // the queue is draining: the previous cut is working
		}
		b.loCutRound = b.roundCount
		beta := bbrBeta
		if !heavy {
			beta = b.par.QueueBeta // a standing queue without loss
		}
		b.bwLo = beta * min(b.bwLo, max(b.bwLatest, b.bw))
		if b.par.QueueCutToDelivery && b.queueInRound && b.bwLatest > 0 && (!heavy || b.minRTTInRound > 2*b.minRTT) {
			// The round queued throughout, so it delivered at the path's
			// rate, unless its losses held that back: bursts of random
			// loss on a lightly queued path do, the overflow of a queue
			// longer than the path's own RTT does not.
			b.bwLo = min(b.bwLo, b.bwLatest/beta)
		}
		b.inflightLo = beta * b.inflightLo
	} else {
		b.bwLo = max(b.bwLatest, bbrBeta*b.bwLo)
		b.inflightLo = max(b.inflightLatest, bbrBeta*b.inflightLo)
	}
	b.events++
}

func (b *BBR) resetLowerBounds() { b.bwLo, b.inflightLo = math.Inf(1), math.Inf(1) }

func (b *BBR) checkStartupHighLoss() {
	if b.state != bbrStartup || b.fullBwReached {
		return
	}
	tooHigh := b.lossPktsInRound >= bbrStartupFullLoss &&
		b.lostInRoundBytes > bbrLossThresh*(b.lostInRoundBytes+b.deliveredInRound) && !b.randomLossInStartup()
	tooHigh = tooHigh || b.ecnInRound && b.rs.ecn > bbrECNThresh*b.rs.newlyAcked
	if tooHigh {
		b.hiUndo.round, b.hiUndo.inflightHi, b.hiUndo.startupExit = max(b.roundCount, 1), b.inflightHi, true
		b.fullBwReached = true
		b.events++
		b.inflightHi = max(b.bdpMultiple(b.maxBw, 1), b.inflightLatest)
	}
}

// checkStartupQueue ends Startup when a whole round kept a standing queue
// (its smallest RTT above min RTT + queueThreshold): the pipe is full.
// The draft's exit needs three rounds without 25 % growth in samples that
// are not application-limited, and a subflow of a tunnel is often
// application-limited (the flows inside set the pace): it then stayed in
// Startup for seconds at 2.77 × pacing and 2 × BDP in flight, holding a
// BDP of queue that every inner packet waited behind.
func (b *BBR) checkStartupQueue() {
	if !b.par.StartupQueueExit || b.state != bbrStartup || b.fullBwReached || b.minRTT <= 0 ||
		b.prevMinRTTInRound <= 0 || b.maxBw <= 0 {
		return
	}
	th := b.minRTT + b.queueThreshold()
	if b.minRTTInRound > th && b.prevMinRTTInRound > th {
		b.fullBwReached = true
		b.events++
	}
}

func (b *BBR) updateAckAggregation(now mono.Time) {
	if b.roundStart {
		b.extraRounds++
		if b.extraRounds >= bbrExtraAckedRounds/2 {
			b.extraRounds = 0
			b.extraIdx ^= 1
			b.extraAcked[b.extraIdx] = 0
		}
	}
	interval := now.Sub(b.extraStart)
	expected := b.bw * interval.Seconds()
	if b.extraStart == 0 || b.extraDelivered <= expected {
		b.extraDelivered = 0
		b.extraStart = now
		expected = 0
	}
	b.extraDelivered += b.rs.newlyAcked
	extra := min(b.extraDelivered-expected, b.cwnd)
	b.extraAcked[b.extraIdx] = max(b.extraAcked[b.extraIdx], extra)
}

func (b *BBR) extra() float64 {
	if !b.fullBwReached {
		return 0
	}
	return max(b.extraAcked[0], b.extraAcked[1])
}

func (b *BBR) checkFullBwReached() {
	if b.fullBwNow || !b.roundStart || b.rs.rate == 0 {
		return
	}
	queued := b.startupRoundQueued()
	if b.rs.appLimited && !queued {
		return
	}
	if b.par.PlateauNeedsDemand && b.state == bbrStartup && !b.cwndLimitedInRound && !queued {
		return
	}
	if b.rs.rate >= b.fullBw*1.25 {
		b.fullBw = b.rs.rate
		b.fullBwCount = 0
		return
	}
	b.fullBwCount++
	b.fullBwNow = b.fullBwCount >= 3
	if b.fullBwNow {
		b.fullBwReached = true
	}
}

// startupRoundQueued reports whether every packet of the Startup round
// that just ended queued at the bottleneck (its smallest RTT above the
// minimum by an eighth, at least 2 ms): the bottleneck was busy all round,
// so the round's delivery rate is the path's, however little the sender
// offered. A tunnel path carrying a flow that paces itself at the path's
// rate (inner BBR) is application-limited in every round and never
// window-limited, and stayed in Startup for up to 1.8 s (lab, inner BBR
// over 20 Mbit/s 8 ms beside 10 Mbit/s 35 ms; 0.2-0.4 s with this rule):
// the scheduler cannot tell such a path is full, and the flow does not
// spread until it is measured. A round of a few packets (pings, a short
// request) proves nothing: delay noise alone lifts its few RTT samples,
// and Startup would end at their rate, so the round must have delivered
// an initial window.
func (b *BBR) startupRoundQueued() bool {
	return b.par.QueuedRoundsCount && b.state == bbrStartup && b.minRTT > 0 && b.prevMinRTTInRound > 0 &&
		b.prevMinRTTInRound > b.minRTT+max(b.minRTT/8, 2*time.Millisecond) &&
		b.prevDeliveredInRound >= float64(bbrInitialCwndPackets*b.mss)
}

func (b *BBR) resetFullBw() { b.fullBw, b.fullBwCount, b.fullBwNow = 0, 0, false }

func (b *BBR) checkStartupDone(now mono.Time) {
	if b.state == bbrStartup && b.fullBwReached {
		b.state = bbrDrain
		b.pacingGain, b.cwndGain = bbrDrainPacingGain, bbrStartupCwndGain
	}
}

func (b *BBR) checkDrainDone(now mono.Time) {
	if b.state == bbrDrain && float64(b.t.inFlightBytes) <= b.inflight(b.bw, 1) {
		b.startDown(now)
	}
}

func (b *BBR) enterStartup() {
	b.state = bbrStartup
	b.pacingGain, b.cwndGain = bbrStartupPacingGain, bbrStartupCwndGain
}

// bdpMultiple is gain × bw × min RTT, or the initial window before an RTT.
func (b *BBR) bdpMultiple(bw, gain float64) float64 {
	if b.minRTT < 0 {
		return bbrInitialCwndPackets * float64(b.mss)
	}
	return gain * bw * b.minRTT.Seconds()
}

func (b *BBR) inflight(bw, gain float64) float64 {
	return b.bdpMultiple(bw, gain) + 3*b.sendQuantum
}

func (b *BBR) targetInflight() float64 { return min(b.bdpMultiple(b.bw, 1), b.cwnd) }

func (b *BBR) inflightWithHeadroom() float64 {
	if math.IsInf(b.inflightHi, 1) {
		return b.inflightHi
	}
	head := max(float64(b.mss), bbrHeadroom*b.inflightHi)
	return max(b.inflightHi-head, b.minPipe())
}

// ProbeBW.

func (b *BBR) startDown(now mono.Time) {
	b.lossInRound, b.ecnInRound = false, false
	b.bwLatest, b.inflightLatest = 0, 0
	b.bwProbeUpCnt = math.Inf(1)
	b.roundsSinceProbe = uint64(b.rng.IntN(2))
	b.bwProbeWait = b.par.ProbeWaitBase + time.Duration(b.rng.Int64N(int64(b.par.ProbeWaitBase/2)))
	b.cycleStamp = now
	b.ackPhase = acksProbeStopping
	b.startRound()
	b.state = bbrDown
	b.pacingGain, b.cwndGain = b.par.DownGain, bbrDefaultCwndGain
}

func (b *BBR) startCruise() {
	b.state = bbrCruise
	b.pacingGain, b.cwndGain = 1, bbrDefaultCwndGain
}

func (b *BBR) startRefill() {
	b.resetLowerBounds()
	b.bwProbeUpRounds, b.bwProbeUpAcks = 0, 0
	b.ackPhase = acksRefilling
	b.startRound()
	b.state = bbrRefill
	b.pacingGain, b.cwndGain = 1, bbrDefaultCwndGain
}

func (b *BBR) startUp(now mono.Time) {
	b.ackPhase = acksProbeStarting
	b.startRound()
	b.resetFullBw()
	b.fullBw = b.rs.rate
	b.state = bbrUp
	b.pacingGain, b.cwndGain = 1.25, bbrUpCwndGain
	b.cycleStamp = now
	b.upStartRTT = b.t.latestRTT
	b.raiseInflightHiSlope()
}

// upQueueBuilt reports whether this probe has added a quarter of the min
// RTT of queueing delay: the probe has then shown what it can, and going on
// only fills the buffer. It is measured from the RTT when UP began, so that
// a flow facing another's standing queue still probes (and grows
// inflight_hi by the same absolute amount as its competitor: the additive
// increase that lets BBR flows converge).
func (b *BBR) upQueueBuilt(now mono.Time) bool {
	if now.Sub(b.cycleStamp) <= b.minRTT {
		return false
	}
	if b.upStartRTT < b.minRTT+b.minRTT/8 {
		// The queue was empty: what is in flight beyond the BDP is ours,
		// and it is known at once (the RTT shows it a round late).
		return float64(b.t.inFlightBytes) > b.bdpMultiple(b.maxBw, 1.25)
	}
	return b.rs.rtt > 0 && b.rs.rtt > b.upStartRTT+b.minRTT/4
}

func (b *BBR) raiseInflightHiSlope() {
	growth := float64(b.mss) * float64(uint64(1)<<b.bwProbeUpRounds)
	b.bwProbeUpRounds = min(b.bwProbeUpRounds+1, 30)
	b.bwProbeUpCnt = max(b.cwnd/growth, 1) * float64(b.mss)
}

func (b *BBR) probeInflightHiUpward() {
	if !b.cwndLimitedInRound || b.cwnd < b.inflightHi {
		return
	}
	b.bwProbeUpAcks += b.rs.newlyAcked
	if b.bwProbeUpAcks >= b.bwProbeUpCnt {
		delta := math.Floor(b.bwProbeUpAcks / b.bwProbeUpCnt)
		b.bwProbeUpAcks -= delta * b.bwProbeUpCnt
		b.inflightHi += delta * float64(b.mss)
	}
	if b.roundStart {
		b.raiseInflightHiSlope()
	}
}

func (b *BBR) isInflightTooHigh() bool {
	tx := float64(b.rs.txInFlight)
	if b.rs.lost > bbrLossThresh*tx && !b.randomLoss() {
		return true
	}
	return b.rs.ecn > 0 && b.rs.ecn > bbrECNThresh*b.rs.newlyAcked
}

func (b *BBR) handleInflightTooHigh(now mono.Time, appLimited bool, txInFlight float64) {
	b.bwProbeSamples = false
	if !appLimited {
		b.hiUndo.round, b.hiUndo.inflightHi, b.hiUndo.startupExit = max(b.roundCount, 1), b.inflightHi, false
		b.inflightHi = max(txInFlight, b.targetInflight()*bbrBeta)
		b.events++
	}
	if b.state == bbrUp {
		b.startDown(now)
	}
}

func (b *BBR) adaptUpperBounds() {
	if b.ackPhase == acksProbeStarting && b.roundStart {
		b.ackPhase = acksProbeFeedback
	}
	if b.ackPhase == acksProbeStopping && b.roundStart {
		if b.state >= bbrDown && b.state <= bbrUp && !b.rs.appLimited {
			// Advance the max-bw filter by one ProbeBW cycle.
			b.cycleCount++
			if b.bwHi[1] != 0 {
				b.bwHi[0], b.bwHi[1] = b.bwHi[1], 0
				if b.par.MaxBwCycles == 1 {
					b.bwHi[0] = 0
				}
				b.maxBw = max(b.bwHi[0], b.bwHi[1])
			}
		}
		b.ackPhase = acksInit
	}
	if b.rs.has && b.isInflightTooHigh() {
		if b.bwProbeSamples {
			b.handleInflightTooHigh(b.now, b.rs.appLimited, float64(b.rs.txInFlight))
		}
		return
	}
	if math.IsInf(b.inflightHi, 1) {
		return
	}
	if float64(b.rs.txInFlight) > b.inflightHi {
		b.inflightHi = float64(b.rs.txInFlight)
	}
	if b.state == bbrUp {
		b.probeInflightHiUpward()
	}
}

func (b *BBR) isTimeToProbeBW(now mono.Time) bool {
	reno := min(uint64(b.targetInflight()/float64(b.mss)), b.par.ProbeMaxRounds)
	if !math.IsInf(b.inflightHi, 1) {
		// A loss has shown where the path's buffer ends (see ProbeMinRounds).
		reno = max(reno, b.par.ProbeMinRounds)
	}
	if now.Sub(b.cycleStamp) > b.bwProbeWait || b.roundsSinceProbe >= reno {
		b.startRefill()
		return true
	}
	return false
}

func (b *BBR) updateProbeBWCyclePhase(now mono.Time) {
	if !b.fullBwReached {
		return
	}
	b.adaptUpperBounds()
	switch b.state {
	case bbrDown:
		if b.isTimeToProbeBW(now) {
			return
		}
		// Cruise once the queue is drained: the draft allows 3 send quanta
		// above the BDP, a standing queue that CRUISE's pacing at 0.99 ×
		// bw then drains only slowly.
		in := float64(b.t.inFlightBytes)
		if in <= b.inflightWithHeadroom() && in <= b.bdpMultiple(b.maxBw, 1)+float64(b.mss) {
			b.startCruise()
		}
	case bbrCruise:
		b.isTimeToProbeBW(now)
	case bbrRefill:
		if b.roundStart {
			b.bwProbeSamples = true
			b.startUp(now)
		}
	case bbrUp:
		if b.par.UpQueueExit && b.upQueueBuilt(now) {
			b.startDown(now)
		} else if b.cwndLimitedInRound && b.cwnd >= b.inflightHi {
			b.resetFullBw()
			b.fullBw = b.rs.rate
		} else if b.fullBwNow {
			b.startDown(now)
		}
	}
}

// ProbeRTT and min RTT.

func (b *BBR) updateMinRTT(now mono.Time) {
	expired := b.probeMinStamp != 0 && now.Sub(b.probeMinStamp) > bbrProbeRTTInterval
	b.probeMinExpired = expired
	switch {
	case b.rs.rtt <= 0:
	case b.probeMin < 0 || b.rs.rtt < b.probeMin || expired:
		b.probeMin = b.rs.rtt
		b.probeMinStamp = now
	case b.par.DrainedSkipsProbeRTT && b.rs.rtt <= b.probeMin+b.probeMin/8:
		// The queue drained at this point of the window (an
		// application-limited subflow, a DOWN phase): what ProbeRTT
		// would show has just been seen.
		b.probeMinStamp = now
	}
	minExpired := now.Sub(b.minRTTStamp) > bbrMinRTTFilterLen
	if b.probeMin > 0 && (b.minRTT < 0 || b.probeMin < b.minRTT || minExpired) {
		b.minRTT = b.probeMin
		b.minRTTStamp = b.probeMinStamp
	}
}

func (b *BBR) probeRTTCwnd() float64 {
	return max(b.bdpMultiple(b.bw, bbrProbeRTTCwndGain), b.minPipe())
}

func (b *BBR) checkProbeRTT(now mono.Time) {
	// The expiry updateMinRTT saw: it has already restarted the window
	// with this ack's sample, so the stamp no longer shows it. Read from
	// the stamp, ProbeRTT ran only on the odd ack without an RTT sample;
	// the min RTT then crept up to the standing queue every 10 s.
	if b.state != bbrProbeRTT && b.probeMinExpired && !b.idleRestart {
		b.priorCwnd = b.cwnd
		b.probeRTTDoneStamp = 0
		b.ackPhase = acksProbeStopping
		b.startRound()
		b.state = bbrProbeRTT
		b.pacingGain, b.cwndGain = 1, bbrProbeRTTCwndGain
	}
	if b.state == bbrProbeRTT {
		b.appLimited = max(b.delivered+uint64(b.t.inFlightBytes), 1)
		if b.probeRTTDoneStamp == 0 && float64(b.t.inFlightBytes) <= b.probeRTTCwnd() {
			b.probeRTTDoneStamp = now.Add(bbrProbeRTTDuration)
			b.probeRTTRoundDone = false
			b.startRound()
		} else if b.probeRTTDoneStamp != 0 {
			if b.roundStart {
				b.probeRTTRoundDone = true
			}
			if b.probeRTTRoundDone && now > b.probeRTTDoneStamp {
				b.probeMinStamp = now
				b.cwnd = max(b.cwnd, b.priorCwnd)
				b.resetLowerBounds()
				if b.fullBwReached {
					b.startDown(now)
					b.startCruise()
				} else {
					b.enterStartup()
				}
			}
		}
	}
	if b.rs.delivered > 0 {
		b.idleRestart = false
	}
}

// Control parameters.

func (b *BBR) updateControl(now mono.Time) {
	// Pacing rate.
	if b.bw > 0 {
		rate := b.pacingGain * b.bw * (1 - b.par.Margin)
		if b.fullBwReached || rate > b.pacingRate {
			b.pacingRate = rate
		}
	} else if b.minRTT > 0 && !b.fullBwReached {
		b.pacingRate = max(b.pacingRate, bbrStartupPacingGain*b.cwnd/b.minRTT.Seconds())
	}
	// Send quantum: one packet below 1.2 Mbit/s (as the draft), else about
	// 250 µs of data, 2 packets to 64 KB (the draft's 1 ms is for TSO; our
	// pacer's release times are exact).
	if b.pacingRate < 1.2e6/8 {
		b.sendQuantum = float64(b.mss)
	} else {
		b.sendQuantum = min(max(b.pacingRate*250e-6, float64(2*b.mss)), 64*1024)
	}

	// Congestion window.
	maxInflight := b.inflight(b.bw, b.cwndGain) + b.extra()
	if b.minRTT < 0 || b.bw == 0 {
		maxInflight = math.Inf(1)
	}
	if b.fullBwReached {
		b.cwnd = min(b.cwnd+b.rs.newlyAcked, maxInflight)
	} else if b.cwnd < maxInflight || b.delivered < uint64(10*b.mss) {
		b.cwnd += b.rs.newlyAcked
	}
	b.cwnd = max(b.cwnd, b.minPipe())
	if b.state == bbrProbeRTT {
		b.cwnd = min(b.cwnd, b.probeRTTCwnd())
	}
	limit := math.Inf(1)
	switch b.state {
	case bbrDown, bbrRefill, bbrUp:
		limit = b.inflightHi
	case bbrProbeRTT, bbrCruise:
		limit = b.inflightWithHeadroom()
	}
	limit = max(min(limit, b.inflightLo), b.minPipe())
	b.cwnd = min(b.cwnd, limit)
	if b.roundStart {
		b.cwndLimitedInRound = false
	}
	b.applyPacing(now)
}

func (b *BBR) applyPacing(now mono.Time) {
	rate := b.pacingRate
	if lim := b.cfg.RateLimit / 8; lim > 0 && rate > lim {
		rate = lim
	}
	b.p.SetRate(now, rate, int(b.sendQuantum))
}

// Timers.

func (b *BBR) rtoDeadline() mono.Time {
	if b.t.inFlight == 0 {
		return mono.Never
	}
	return b.rtoStart.Add(b.t.rto(b.backoff))
}

func (b *BBR) Deadline() mono.Time { return mono.Min(b.rtoDeadline(), b.t.lossDeadline()) }

func (b *BBR) OnTimer(now mono.Time) {
	b.now = now
	if now >= b.t.lossDeadline() {
		b.rs.newlyLost = 0
		b.t.onLossTimer(now, b)
		if b.rs.newlyLost > 0 {
			b.afterLoss(now)
		}
	}
	if b.t.inFlight > 0 && now >= b.rtoDeadline() {
		b.timeouts++
		if !b.inRTO {
			b.priorCwnd = b.cwnd
		}
		b.inRTO = true
		b.t.declareAllLost(b)
		b.rtoRecovery = b.t.next
		b.cwnd = float64(b.mss)
		b.backoff++
		b.rtoStart = now
		b.applyPacing(now)
	}
}

// ReseedRTT implements RTTReseeder.
func (b *BBR) ReseedRTT(rtt time.Duration) { b.t.reseedRTT(rtt) }

// OnPathRestored implements PathRestorer: what was in flight is lost
// without a congestion response, the loss-learnt bounds and the timeout
// state are cleared, and Startup probes from the old bandwidth estimate.
func (b *BBR) OnPathRestored(now mono.Time) {
	b.now = now
	b.inRTO = true // lost() skips its accounting while in RTO
	b.t.declareAllLost(b)
	b.inRTO = false
	b.backoff = 0
	b.rtoStart = now
	b.resetLowerBounds()
	b.inflightHi = math.Inf(1)
	b.resetFullBw()
	b.fullBwReached = false
	b.enterStartup()
	b.cwnd = max(b.cwnd, b.priorCwnd, b.bdpMultiple(b.maxBw, 1), float64(10*b.mss))
	b.applyPacing(now)
}

func (b *BBR) CanSend(now mono.Time) bool { return float64(b.t.inFlightBytes) < b.cwnd }

func (b *BBR) SendTime(now mono.Time) mono.Time { return b.p.SendTime(now, b.mss) }

// AckRatio asks for about 32 acks per window, as CCID2 does; the stretch
// this causes is budgeted by extra_acked. At high packet rates it asks for
// fewer (from stretchPPS on), about ackRateTarget per second but never
// fewer than minAcksPerWindow per window: at a Gbit/s an ack every few packets costs
// the receiver a send (and the sender a receive) per ack, about a tenth of
// the tunnel's CPU, while BBR needs no ack clock (it paces) and its rate
// samples lose nothing to stretch acks (Linux TCP acks 64 KB GRO segments).
// A power of two, so that it changes rarely; at most ceil(cwnd/2) (RFC
// 4341 §6.1.2) and 64, the largest a receiver here honours.
func (b *BBR) AckRatio() int {
	pk := int(b.cwnd) / b.mss
	if b.inRTO || pk <= 2 {
		return 1
	}
	r := 2
	for r < maxAckRatio && 2*r*32 <= pk {
		r *= 2
	}
	if pps := b.bw / float64(max(b.mss, 1)); pps >= stretchPPS {
		for r < maxAckRatio && float64(r)*ackRateTarget < pps && 2*r*minAcksPerWindow <= pk {
			r *= 2
		}
	}
	return min(r, (pk+1)/2)
}

const (
	// maxAckRatio is the largest Ack Ratio asked for.
	maxAckRatio = 64
	// stretchPPS is the delivery rate (packets per second, about 230
	// Mbit/s of full packets) from which BBR stretches acks beyond 32 per
	// window; slower paths keep the acks CCID2 would ask for.
	stretchPPS = 20000
	// ackRateTarget is the ack rate (per second) the stretch aims at.
	ackRateTarget = 2000
	// minAcksPerWindow bounds that stretch.
	minAcksPerWindow = 8
)

func (b *BBR) State() State {
	ps := b.p.Stats()
	return State{
		Cwnd:             int(b.cwnd) / b.mss,
		InFlight:         b.t.inFlight,
		SRTT:             b.t.srtt,
		RTTVar:           b.t.rttvar,
		MinRTT:           max(b.minRTT, 0),
		PacingRate:       b.p.Rate(),
		DeliveryRate:     b.bw,
		RateMeasured:     b.state != bbrStartup,
		Phase:            bbrStateNames[b.state],
		PacketsSent:      b.t.sent,
		PacketsAcked:     b.t.ackedPkts,
		PacketsLost:      b.t.lostPkts,
		ECNMarks:         b.t.ecnMarks,
		CongestionEvents: b.events,
		SpuriousEvents:   b.spurious,
		Timeouts:         b.timeouts,
		PacingLateMean:   ps.MeanLate(),
		PacingLateMax:    ps.LateMax,
	}
}
