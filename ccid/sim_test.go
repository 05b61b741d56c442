// SPDX-License-Identifier: MIT

package ccid

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
)

// This file is a small sender/receiver model over netsim: a sender that
// sends sequence-numbered packets under a Controller, a receiver that
// returns Ack-Vector-like feedback every Ack Ratio packets, a bottleneck
// link with a drop-tail buffer and a reverse link.

const simMSS = 1400

type pathSpec struct {
	RateBps     float64
	RTT         time.Duration
	Buffer      int     // bytes; 0 = one BDP, at least minBufferPkts packets
	Loss        float64 // random loss on the forward link
	ReorderFrac float64 // fraction of packets delayed by uniform [0, ReorderMax]
	ReorderMax  time.Duration
	// Jitter adds a uniform [0, Jitter] delay on the forward link, in
	// FIFO order (a radio link's scheduling: packets wait behind a late
	// one).
	Jitter time.Duration
	// CE-mark every packet delivered in [CEFrom, CETo) (a congested AQM).
	CEFrom, CETo time.Duration
	// Burst > 1 models a sender that batches (sendmmsg): packets the
	// controller releases are held until Burst of them are waiting or
	// BurstHold (default 1 ms) has passed since the first, then leave
	// back to back. The controller sees them as sent at release time.
	Burst     int
	BurstHold time.Duration
	// Bucket > 0 makes the bottleneck a token-bucket shaper of that many
	// bytes of burst (netsim.LinkConfig.Bucket), as Linux tbf.
	Bucket int
}

func (p pathSpec) bdpBytes() int {
	return int(p.RateBps / 8 * p.RTT.Seconds())
}

type simNet struct {
	sim  *netsim.Sim
	spec pathSpec
	fwd  *netsim.Link
	rev  *netsim.Link

	flows []*simFlow

	// Queueing delay samples at send time (what each packet will wait).
	qdelay   []time.Duration
	qFrom    mono.Time
	qEnabled bool
}

type dataMeta struct {
	flow int
	seq  uint64
}

func newSimNet(seed int64, spec pathSpec) *simNet {
	n := &simNet{sim: netsim.New(seed), spec: spec}
	buf := spec.Buffer
	if buf == 0 {
		buf = max(spec.bdpBytes(), minBufferPkts*simMSS)
	}
	n.fwd = n.sim.NewLink(netsim.LinkConfig{
		Rate: spec.RateBps, Queue: buf, Delay: spec.RTT / 2, Loss: spec.Loss, Jitter: spec.Jitter,
		Bucket: spec.Bucket,
	}, n.deliverData)
	n.rev = n.sim.NewLink(netsim.LinkConfig{Delay: spec.RTT / 2}, n.deliverAck)
	return n
}

func (n *simNet) deliverData(p netsim.Packet) {
	m := p.Meta.(dataMeta)
	f := n.flows[m.flow]
	if now := n.sim.Now(); n.spec.CETo > 0 && now >= mono.Time(n.spec.CEFrom) && now < mono.Time(n.spec.CETo) {
		p.ECN = 3
	}
	if n.spec.ReorderFrac > 0 && n.sim.Rand().Float64() < n.spec.ReorderFrac {
		d := time.Duration(n.sim.Rand().Int64N(int64(n.spec.ReorderMax) + 1))
		n.sim.After(d, func() { f.rcv.onData(m.seq, p.ECN) })
		return
	}
	f.rcv.onData(m.seq, p.ECN)
}

func (n *simNet) deliverAck(p netsim.Packet) {
	fb := p.Meta.(*Feedback)
	f := n.flows[p.Size-ackSizeBase]
	f.onFeedback(fb)
}

const ackSizeBase = 40 // ack packets are 40+flow bytes, so the size names the flow

// simFlow is one sender/receiver pair.
type simFlow struct {
	net   *simNet
	id    int
	cc    Controller
	seq   uint64
	start mono.Time
	stop  mono.Time // 0 = never

	// appRate, if > 0, limits the offered load (bytes per second).
	appRate float64
	// fedOnly: appRate is what a scheduler hands this path while the
	// connection has more queued (an overflow path), so the controller is
	// not told it is application-limited.
	fedOnly   bool
	appTokens float64
	appLast   mono.Time

	wakeAt  mono.Time // pending pacing wake-up
	timerAt mono.Time // pending controller timer

	rcv receiver

	sent, dropped uint64
	batch         []uint64 // released, not yet on the wire (pathSpec.Burst)
	ssEvents      int      // congestion events when slow start first ended
	ssLost        uint64
	leftSS        bool
}

func (n *simNet) addFlow(name string, cfg Config, start time.Duration) *simFlow {
	if cfg.MSS == 0 {
		cfg.MSS = simMSS
	}
	cc, err := New(name, cfg)
	if err != nil {
		panic(err)
	}
	f := &simFlow{net: n, id: len(n.flows), cc: cc, start: mono.Time(start), seq: 1000 + uint64(n.sim.Rand().Int64N(1<<20))}
	f.rcv = receiver{flow: f, span: uint64(4*n.spec.bdpBytes()/simMSS + 2048), lastByTime: -1}
	n.flows = append(n.flows, f)
	n.sim.At(f.start, f.trySend)
	return f
}

func (f *simFlow) trySend() {
	s := f.net.sim
	now := s.Now()
	if f.stop != 0 && now >= f.stop {
		return
	}
	for f.cc.CanSend(now) {
		if f.appRate > 0 {
			f.appTokens = min(f.appTokens+f.appRate*now.Sub(f.appLast).Seconds(), 4*simMSS)
			f.appLast = now
			if f.appTokens < simMSS {
				if n, ok := f.cc.(AppLimitedNotifier); ok && !f.fedOnly {
					n.OnAppLimited(now)
				}
				// At least 1 µs: a shortfall that rounds to 0 ns would wake now, forever.
				f.wake(now.Add(max(time.Duration((simMSS-f.appTokens)/f.appRate*1e9), time.Microsecond)))
				break
			}
		}
		t := f.cc.SendTime(now)
		if t > now {
			f.wake(t)
			break
		}
		f.seq++
		f.cc.OnPacketSent(now, f.seq, simMSS, true)
		if f.appRate > 0 {
			f.appTokens -= simMSS
		}
		f.sent++
		f.emit(f.seq)
	}
	f.armTimer()
}

// emit puts a released packet on the wire, or into the sender's batch.
func (f *simFlow) emit(seq uint64) {
	if f.net.spec.Burst <= 1 {
		f.wire(seq)
		return
	}
	f.batch = append(f.batch, seq)
	if len(f.batch) >= f.net.spec.Burst {
		f.flush()
		return
	}
	if len(f.batch) == 1 {
		hold := f.net.spec.BurstHold
		if hold <= 0 {
			hold = time.Millisecond
		}
		first := seq
		f.net.sim.After(hold, func() {
			if len(f.batch) > 0 && f.batch[0] == first {
				f.flush()
			}
		})
	}
}

func (f *simFlow) flush() {
	for _, q := range f.batch {
		f.wire(q)
	}
	f.batch = f.batch[:0]
}

func (f *simFlow) wire(seq uint64) {
	now := f.net.sim.Now()
	if f.net.qEnabled && now >= f.net.qFrom {
		f.net.qdelay = append(f.net.qdelay, f.net.fwd.QueueDelay())
	}
	if !f.net.fwd.Send(netsim.Packet{Size: simMSS, Meta: dataMeta{f.id, seq}}) {
		f.dropped++
	}
}

func (f *simFlow) wake(t mono.Time) {
	if f.wakeAt != 0 && f.wakeAt <= t && f.wakeAt >= f.net.sim.Now() {
		return
	}
	f.wakeAt = t
	f.net.sim.At(t, func() {
		if f.wakeAt == t {
			f.wakeAt = 0
		}
		f.trySend()
	})
}

func (f *simFlow) armTimer() {
	d := f.cc.Deadline()
	if d == mono.Never || (f.timerAt != 0 && f.timerAt <= d && f.timerAt >= f.net.sim.Now()) {
		return
	}
	f.timerAt = d
	f.net.sim.At(d, func() {
		if f.timerAt == d {
			f.timerAt = 0
		}
		now := f.net.sim.Now()
		if now >= f.cc.Deadline() {
			f.cc.OnTimer(now)
			f.noteSS()
		}
		f.trySend()
	})
}

func (f *simFlow) onFeedback(fb *Feedback) {
	now := f.net.sim.Now()
	f.cc.OnFeedback(now, fb)
	f.noteSS()
	f.trySend()
}

// noteSS records the congestion events taken before the first exit from
// slow start into congestion avoidance.
func (f *simFlow) noteSS() {
	if f.leftSS {
		return
	}
	st := f.cc.State()
	switch st.Phase {
	case "congestion-avoidance", "probe-bw-down", "probe-bw-cruise", "probe-bw-refill", "probe-bw-up":
		f.leftSS = true
		f.ssEvents = int(st.CongestionEvents)
		f.ssLost = st.PacketsLost
	}
}

// receiver records arrivals and builds Ack Vectors (as run lists).
type receiver struct {
	flow      *simFlow
	span      uint64 // how far back the Ack Vector reaches (stands in for ack-of-ack trimming)
	gsr       uint64
	started   bool
	holes     []uint64 // missing seqs below gsr, ascending
	ecnMarked []uint64 // CE-marked seqs not yet reported... (kept simple: reported once)
	unacked   int
	ackTimer  bool
	gsrAt     mono.Time

	delivered  uint64 // unique data packets
	byTime     []uint64
	lastByTime int
}

func (r *receiver) onData(seq uint64, ecn uint8) {
	s := r.flow.net.sim
	now := s.Now()
	if !r.started {
		r.started = true
		r.gsr = seq - 1
	}
	switch {
	case seq > r.gsr:
		for q := r.gsr + 1; q < seq; q++ {
			r.holes = append(r.holes, q)
		}
		r.gsr = seq
		r.gsrAt = now
	default:
		i, ok := slices.BinarySearch(r.holes, seq)
		if !ok {
			return // duplicate or too old
		}
		r.holes = slices.Delete(r.holes, i, i+1)
	}
	if ecn == 3 {
		r.ecnMarked = append(r.ecnMarked, seq)
	}
	r.delivered++
	sec := int(now / mono.Time(100*time.Millisecond))
	for len(r.byTime) <= sec {
		r.byTime = append(r.byTime, 0)
	}
	r.byTime[sec]++
	r.unacked++
	if r.unacked >= r.flow.cc.AckRatio() {
		r.sendAck()
	} else if !r.ackTimer {
		r.ackTimer = true
		s.After(2*time.Millisecond, func() {
			r.ackTimer = false
			if r.unacked > 0 {
				r.sendAck()
			}
		})
	}
}

func (r *receiver) sendAck() {
	s := r.flow.net.sim
	r.unacked = 0
	floor := uint64(0)
	if r.gsr > r.span {
		floor = r.gsr - r.span
	}
	// Drop holes the vector no longer reaches.
	k := 0
	for k < len(r.holes) && r.holes[k] <= floor {
		k++
	}
	r.holes = r.holes[k:]
	fb := &Feedback{AckNo: r.gsr, Elapsed: s.Now().Sub(r.gsrAt), Size: 40}
	// Walk down from gsr: Received runs between the holes (NotReceived,
	// consecutive ones merged) and the CE-marked packets not yet reported.
	slices.Sort(r.ecnMarked)
	hi := r.gsr
	hIdx, cIdx := len(r.holes)-1, len(r.ecnMarked)-1
	for hi > floor {
		var b uint64
		var st AckState
		switch {
		case hIdx >= 0 && (cIdx < 0 || r.holes[hIdx] > r.ecnMarked[cIdx]):
			b, st = r.holes[hIdx], NotReceived
		case cIdx >= 0:
			b, st = r.ecnMarked[cIdx], ReceivedECNMarked
		default:
			fb.Runs = append(fb.Runs, AckRun{High: hi, N: uint32(hi - floor), State: Received})
			hi = floor
			continue
		}
		if b <= floor {
			hIdx, cIdx = -1, -1
			continue
		}
		if b < hi {
			fb.Runs = append(fb.Runs, AckRun{High: hi, N: uint32(hi - b), State: Received})
		}
		n := uint64(1)
		if st == NotReceived {
			for hIdx-int(n) >= 0 && r.holes[hIdx-int(n)] == b-n && (cIdx < 0 || r.ecnMarked[cIdx] < b-n) {
				n++
			}
			hIdx -= int(n)
		} else {
			cIdx--
		}
		fb.Runs = append(fb.Runs, AckRun{High: b, N: uint32(n), State: st})
		hi = b - n
	}
	r.ecnMarked = r.ecnMarked[:0]
	r.flow.net.rev.Send(netsim.Packet{Size: ackSizeBase + r.flow.id, Meta: fb})
}

// goodput is the flow's delivered rate in bits per second over [from, to).
func (r *receiver) goodput(from, to time.Duration) float64 {
	a := int(from / (100 * time.Millisecond))
	b := int(to / (100 * time.Millisecond))
	var n uint64
	for i := a; i < b && i < len(r.byTime); i++ {
		n += r.byTime[i]
	}
	return float64(n) * simMSS * 8 / (to - from).Seconds()
}

func (n *simNet) run(d time.Duration) { n.sim.RunUntil(mono.Time(d)) }

func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func jain(xs ...float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// utilRun runs one flow over spec and reports utilisation over the steady
// window, the p95 queueing delay there, and the flow.
type utilResult struct {
	Util     float64
	P95Queue time.Duration
	MinRTT   time.Duration
	Flow     *simFlow
	Warm     time.Duration
	Total    time.Duration
}

func utilRun(name string, cfg Config, spec pathSpec, seed int64) utilResult {
	n := newSimNet(seed, spec)
	f := n.addFlow(name, cfg, 0)
	warm := max(3*time.Second, 25*spec.RTT)
	meas := max(4*time.Second, 20*spec.RTT)
	n.qEnabled = true
	n.qFrom = mono.Time(warm)
	n.run(warm + meas)
	return utilResult{
		Util:     f.rcv.goodput(warm, warm+meas) / spec.RateBps,
		P95Queue: percentile(n.qdelay, 0.95),
		MinRTT:   spec.RTT,
		Flow:     f,
		Warm:     warm,
		Total:    warm + meas,
	}
}

// minBufferPkts is the smallest "BDP buffer": below about 8 packets Reno's
// halving cannot keep a packet-granular pipe full (CCID2 measured 87–91% with
// a 4-packet floor at 10 Mbit/s × 5 ms and 1 Mbit/s × 50 ms).
var minBufferPkts = 8
