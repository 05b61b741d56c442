// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"math"
	"sort"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// innerTCP is a small model of a Linux TCP connection running inside the
// tunnel: CUBIC (RFC 9438, with its Reno-friendly region), SACK, RACK
// loss detection (a packet is lost once a packet sent after it was
// delivered and a reordering window of min RTT/4 has passed: reordering
// beyond that costs the flow a retransmission and a window cut, as it
// does a real TCP without DSACK undo), delayed ACKs and an RTO. Data goes
// from one side to the other, ACKs come back through the tunnel. It tells
// how a tunnel design treats the flows inside, deterministically and
// without a lab.
type innerTCP struct {
	h        *harness
	dataSide int
	port     uint16
	conn     [2]*Conn // the two ends' connections (data side first)
	pktSize  int

	// Sender.
	cwnd, ssthresh float64
	wMax, k        float64
	epoch          mono.Time
	pkts           []tcpPkt // by sequence number
	next, una      uint64
	inflight       int
	minRTT, srtt   time.Duration
	rttvar         time.Duration
	lastProgress   mono.Time
	recoveryEnd    uint64
	rackSent       mono.Time // send time of the most recently delivered packet
	rackRTT        time.Duration
	retrans, rtos  int
	spurious       int
	rttSamples     []time.Duration
	// HyStart (delay increase, as Linux CUBIC's default): the round's
	// smallest of its first 8 RTT samples against the previous round's.
	hsRoundEnd          uint64
	hsSamples           int
	hsCurMin, hsLastMin time.Duration
	stopAt              mono.Time
	// Receiver. ackEvery: in-order packets per ACK (0: 2, as delayed
	// ACKs; a Linux receiver behind GRO acks about every third).
	ackEvery   int
	rcvd       []bool
	rcvNext    uint64
	ackPending int
	delivered  uint64 // in-order packets
	deliveredT []mono.Time
	// clean marks the instants the receiver held nothing out of order:
	// how many packets it had delivered in order then.
	clean       []cleanPoint
	dupData     int
	oooArrivals int

	// A short transfer (startTransfer): the receiver opens the connection
	// (SYN, SYN-ACK), sends a request, the sender answers with limit
	// packets; done runs when the last one is delivered.
	limit   uint64
	done    func(now mono.Time)
	started bool

	bbr      *innerBBR // BBR instead of CUBIC
	paceWait bool      // a trySend is scheduled at the pacer's time
}

// Control messages of a short transfer, in the seq field.
const (
	tcpCtl    = 1 << 62
	tcpSYN    = tcpCtl | 1
	tcpSYNACK = tcpCtl | 2
	tcpREQ    = tcpCtl | 3
)

type tcpPkt struct {
	sent         mono.Time
	bbrDelivered uint64 // BBR: bytes delivered when it was sent
	sacked       bool
	lost         bool
	retrans      bool
}

const (
	tcpHdr      = 40 // inner IPv4 + TCP headers
	tcpAckSize  = 52
	tcpMinRTO   = 200 * time.Millisecond
	tcpInitCwnd = 10
)

func newInnerTCP(h *harness, dataSide int, port uint16, pktSize int) *innerTCP {
	f := &innerTCP{h: h, dataSide: dataSide, port: port, pktSize: pktSize, cwnd: tcpInitCwnd,
		ssthresh: math.Inf(1)}
	f.conn[0], f.conn[1] = h.conn, h.serverConn()
	if dataSide == sideServer {
		f.conn[0], f.conn[1] = f.conn[1], f.conn[0]
	}
	return f
}

// rtoDur is the retransmission timeout (RFC 6298, 200 ms floor as Linux).
func (f *innerTCP) rtoDur() time.Duration {
	if f.srtt == 0 {
		return time.Second
	}
	return max(tcpMinRTO, f.srtt+4*f.rttvar)
}

// packet builds an inner IPv4/TCP-shaped packet of this flow.
func (f *innerTCP) packet(ack bool, seq uint64, size int, extra uint64) []byte {
	p := make([]byte, size)
	p[0], p[9] = 0x45, 6
	binary.BigEndian.PutUint16(p[2:], uint16(size))
	src, dst := []byte{10, 1, 0, 1}, []byte{10, 2, 0, 1}
	sport, dport := uint16(40000), f.port
	if ack {
		src, dst, sport, dport = dst, src, dport, sport
	}
	copy(p[12:], src)
	copy(p[16:], dst)
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint64(p[24:], seq)
	binary.BigEndian.PutUint64(p[32:], uint64(f.h.sim.Now()))
	if size >= 52 {
		binary.BigEndian.PutUint64(p[40:], extra)
	}
	return p
}

// owns reports whether an inner packet belongs to this flow (either way).
func (f *innerTCP) owns(b []byte) (isAck bool, ok bool) {
	if len(b) < 40 || b[9] != 6 {
		return false, false
	}
	sp, dp := binary.BigEndian.Uint16(b[20:]), binary.BigEndian.Uint16(b[22:])
	switch {
	case sp == 40000 && dp == f.port:
		return false, true
	case sp == f.port && dp == 40000:
		return true, true
	}
	return false, false
}

// start begins sending; the flow sends until stop.
func (f *innerTCP) start(stop mono.Time) {
	f.stopAt = stop
	f.lastProgress = f.h.sim.Now()
	f.trySend()
	f.h.sim.After(10*time.Millisecond, f.timer)
}

func (f *innerTCP) send(seq uint64, retrans bool) {
	now := f.h.sim.Now()
	for uint64(len(f.pkts)) <= seq {
		f.pkts = append(f.pkts, tcpPkt{})
	}
	p := &f.pkts[seq]
	p.sent, p.lost, p.retrans = now, false, retrans
	f.inflight++
	if f.bbr != nil {
		p.bbrDelivered = f.bbr.delivered
		f.bbr.onSend(now, float64(f.pktSize))
	}
	f.conn[0].Send(now, f.packet(false, seq, f.pktSize, 0))
}

func (f *innerTCP) trySend() {
	now := f.h.sim.Now()
	sent := false
	// may says whether one more packet may leave now: window, and for BBR
	// its pacer (a trySend is then scheduled at the release time).
	may := func() bool {
		if f.bbr == nil {
			return float64(f.inflight) < f.cwnd
		}
		if float64(f.inflight) >= f.bbr.cwnd() {
			return false
		}
		if f.bbr.nextSend > now {
			if !f.paceWait {
				f.paceWait = true
				f.h.sim.At(f.bbr.nextSend, func() { f.paceWait = false; f.trySend() })
			}
			return false
		}
		return true
	}
	// Retransmissions first.
	for s := f.una; s < f.next && may(); s++ {
		if p := &f.pkts[s]; p.lost && !p.sacked {
			f.retrans++
			f.send(s, true)
			sent = true
		}
	}
	for now < f.stopAt && (f.limit == 0 || f.next < f.limit) && may() &&
		f.conn[0].queued() < f.h.ep[f.dataSide].cfg.SendQueue-8 {
		f.send(f.next, false)
		f.next++
		sent = true
	}
	if sent {
		f.h.service(f.dataSide)
	}
}

// onData runs at the receiver.
func (f *innerTCP) onData(b []byte) {
	seq := binary.BigEndian.Uint64(b[24:])
	if seq == tcpSYNACK {
		f.conn[1].Send(f.h.sim.Now(), f.packet(true, tcpREQ, 60, 0))
		f.h.service(1 - f.dataSide)
		return
	}
	for uint64(len(f.rcvd)) <= seq {
		f.rcvd = append(f.rcvd, false)
	}
	outOfOrder := seq != f.rcvNext
	if seq > f.rcvNext {
		f.oooArrivals++
	}
	if f.rcvd[seq] {
		f.dupData++
		if int(seq) < len(f.pkts) && f.pkts[seq].retrans {
			f.spurious++
		}
		outOfOrder = true
	}
	f.rcvd[seq] = true
	now := f.h.sim.Now()
	for f.rcvNext < uint64(len(f.rcvd)) && f.rcvd[f.rcvNext] {
		f.rcvNext++
		f.delivered++
		f.deliveredT = append(f.deliveredT, now)
		if f.limit > 0 && f.delivered == f.limit && f.done != nil {
			f.done(now)
		}
	}
	if f.rcvNext == uint64(len(f.rcvd)) {
		f.clean = append(f.clean, cleanPoint{now, f.delivered})
	}
	f.ackPending++
	if outOfOrder || f.ackPending >= max(f.ackEvery, 2) || f.rcvNext < uint64(len(f.rcvd)) {
		f.sendAck(seq, binary.BigEndian.Uint64(b[32:]))
	} else {
		pend := f.ackPending
		f.h.sim.After(5*time.Millisecond, func() {
			if f.ackPending == pend && f.ackPending > 0 {
				f.sendAck(seq, 0)
			}
		})
	}
}

// sendAck sends a cumulative ACK with a SACK bitmap of the 64 packets
// up to the one that triggered it (like SACK's first block, which always
// holds the newest arrival); echo is that packet's send time.
func (f *innerTCP) sendAck(trigger uint64, echo uint64) {
	f.ackPending = 0
	var bits uint64
	for i := uint64(0); i < 64 && i <= trigger; i++ {
		if s := trigger - i; s < uint64(len(f.rcvd)) && f.rcvd[s] {
			bits |= 1 << i
		}
	}
	p := f.packet(true, f.rcvNext, tcpAckSize, bits)
	binary.BigEndian.PutUint64(p[32:], echo)
	if len(p) >= 52 {
		// trigger seq for RACK: which packet was just delivered
		binary.BigEndian.PutUint32(p[48:], uint32(trigger))
	}
	f.conn[1].Send(f.h.sim.Now(), p)
	f.h.service(1 - f.dataSide)
}

// onAck runs at the sender.
func (f *innerTCP) onAck(b []byte) {
	now := f.h.sim.Now()
	cum := binary.BigEndian.Uint64(b[24:])
	switch cum {
	case tcpSYN:
		f.conn[0].Send(now, f.packet(false, tcpSYNACK, 60, 0))
		f.h.service(f.dataSide)
		return
	case tcpREQ:
		if !f.started {
			f.started = true
			f.start(mono.Never)
		}
		return
	}
	echo := mono.Time(binary.BigEndian.Uint64(b[32:]))
	bits := binary.BigEndian.Uint64(b[40:])
	trigger := uint64(binary.BigEndian.Uint32(b[48:]))
	if trigger < cum || trigger >= uint64(len(f.pkts)) {
		bits = 0 // a delayed ACK for old data
	}
	acked := 0
	for f.una < cum && f.una < uint64(len(f.pkts)) {
		p := &f.pkts[f.una]
		if !p.sacked {
			if !p.lost {
				f.inflight--
			}
			acked++
			f.bbrAck(now, p)
		}
		f.una++
		f.lastProgress = now
	}
	for i := uint64(0); i < 64 && i <= trigger; i++ {
		s := trigger - i
		if bits&(1<<i) != 0 && s >= f.una && s < uint64(len(f.pkts)) && !f.pkts[s].sacked {
			f.pkts[s].sacked = true
			if !f.pkts[s].lost {
				f.inflight--
			}
			acked++
			f.bbrAck(now, &f.pkts[s])
		}
	}
	if echo > 0 {
		rtt := now.Sub(echo)
		f.hystart(rtt)
		f.rttSamples = append(f.rttSamples, rtt)
		if f.minRTT == 0 || rtt < f.minRTT {
			f.minRTT = rtt
		}
		if f.srtt == 0 {
			f.srtt, f.rttvar = rtt, rtt/2
		} else {
			f.rttvar = (3*f.rttvar + (f.srtt - rtt).Abs()) / 4
			f.srtt = (7*f.srtt + rtt) / 8
		}
		f.rackRTT = rtt
	}
	if trigger < uint64(len(f.pkts)) && f.pkts[trigger].sent > f.rackSent {
		f.rackSent = f.pkts[trigger].sent
	}
	f.detectLoss(now)
	for i := 0; i < acked; i++ {
		f.grow(now)
	}
	f.trySend()
}

// bbrAck feeds a delivered packet to the BBR model.
func (f *innerTCP) bbrAck(now mono.Time, p *tcpPkt) {
	if f.bbr != nil {
		rtt := now.Sub(p.sent)
		if p.retrans {
			rtt = 0 // Karn: the ACK may be for the first copy
		}
		f.bbr.onAck(now, float64(f.pktSize), p.bbrDelivered, p.sent, rtt, float64(f.inflight))
	}
}

// hystart ends slow start when a round's RTT rises by an eighth of the
// previous round's (4-16 ms), before a queue overflows.
func (f *innerTCP) hystart(rtt time.Duration) {
	if f.cwnd >= f.ssthresh || f.cwnd < 16 {
		return
	}
	if f.una >= f.hsRoundEnd {
		f.hsRoundEnd, f.hsLastMin, f.hsCurMin, f.hsSamples = f.next, f.hsCurMin, 0, 0
	}
	if f.hsSamples < 8 {
		f.hsSamples++
		if f.hsCurMin == 0 || rtt < f.hsCurMin {
			f.hsCurMin = rtt
		}
		return
	}
	if f.hsLastMin > 0 && f.hsCurMin >= f.hsLastMin+min(max(f.hsLastMin/8, 4*time.Millisecond), 16*time.Millisecond) {
		f.ssthresh = f.cwnd
	}
}

// detectLoss is RACK: a packet sent before the most recently delivered
// one is lost once its own RTT plus the reordering window has passed.
func (f *innerTCP) detectLoss(now mono.Time) {
	reo := f.minRTT / 4
	lostAny := false
	for s := f.una; s < f.next; s++ {
		p := &f.pkts[s]
		if p.sacked || p.lost || p.sent >= f.rackSent {
			continue
		}
		if now >= p.sent.Add(f.rackRTT+reo) {
			p.lost = true
			f.inflight--
			lostAny = true
		}
	}
	if lostAny && f.una >= f.recoveryEnd {
		f.recoveryEnd = f.next
		f.wMax = f.cwnd
		f.cwnd = max(f.cwnd*0.7, 2)
		f.ssthresh = f.cwnd
		f.epoch = 0
	}
}

// grow is CUBIC's window increase per acknowledged packet.
func (f *innerTCP) grow(now mono.Time) {
	if f.una < f.recoveryEnd {
		return
	}
	if f.cwnd < f.ssthresh {
		f.cwnd++
		return
	}
	if f.epoch == 0 {
		f.epoch = now
		if f.wMax <= f.cwnd {
			f.wMax, f.k = f.cwnd, 0 // no loss to recover from: grow at once (as Linux)
		} else {
			f.k = math.Cbrt(f.wMax * (1 - 0.7) / 0.4)
		}
	}
	rtt := max(f.minRTT, time.Millisecond)
	t := now.Sub(f.epoch).Seconds() + rtt.Seconds()
	target := 0.4*math.Pow(t-f.k, 3) + f.wMax
	west := f.wMax*0.7 + 3*(1-0.7)/(1+0.7)*now.Sub(f.epoch).Seconds()/rtt.Seconds()
	target = max(target, west)
	if target > f.cwnd {
		f.cwnd += min((target-f.cwnd)/f.cwnd, 0.5)
	} else {
		f.cwnd += 0.01 / f.cwnd
	}
}

// timer is the RTO.
func (f *innerTCP) timer() {
	now := f.h.sim.Now()
	if f.una < f.next && now.Sub(f.lastProgress) >= f.rtoDur() {
		f.rtos++
		for s := f.una; s < f.next; s++ {
			if p := &f.pkts[s]; !p.sacked && !p.lost {
				p.lost = true
				f.inflight--
			}
		}
		f.wMax, f.ssthresh, f.cwnd, f.epoch = f.cwnd, max(f.cwnd/2, 2), 1, 0
		f.recoveryEnd = f.next
		f.lastProgress = now
		f.trySend()
	}
	if f.limit > 0 && f.una < f.limit || f.limit == 0 && now < f.stopAt.Add(2*time.Second) {
		f.h.sim.After(10*time.Millisecond, f.timer)
	}
}

// startTransfer opens a short transfer of n packets from the data side:
// the other side sends SYN, gets SYN-ACK, sends its request, and done runs
// when the last data packet is delivered to it.
func (f *innerTCP) startTransfer(n int, done func(now mono.Time)) {
	f.limit, f.done = uint64(n), done
	f.conn[1].Send(f.h.sim.Now(), f.packet(true, tcpSYN, 60, 0))
	f.h.service(1 - f.dataSide)
}

// cleanPoint is an instant the inner receiver held no hole, with the
// number of packets it had delivered in order by then.
type cleanPoint struct {
	at        mono.Time
	delivered uint64
}

// goodput is the receiver's in-order rate in bit/s over [from, to),
// measured between the first and the last instant in it that the receiver
// held no hole. Counting in-order releases over the whole window would
// credit it with a backlog that arrived before from and waited behind a
// hole (a one-path start with heavy loss released 46 Mbit/s worth in one
// second of a 20 Mbit/s path); with fewer than two such instants (a
// window of standing holes) it falls back to that count.
func (f *innerTCP) goodput(from, to mono.Time) float64 {
	i := sort.Search(len(f.clean), func(i int) bool { return f.clean[i].at >= from })
	j := sort.Search(len(f.clean), func(i int) bool { return f.clean[i].at >= to }) - 1
	if i < j && f.clean[j].at.Sub(f.clean[i].at) >= to.Sub(from)/2 {
		n := f.clean[j].delivered - f.clean[i].delivered
		return float64(n*uint64(f.pktSize-tcpHdr)*8) / f.clean[j].at.Sub(f.clean[i].at).Seconds()
	}
	n := 0
	for _, t := range f.deliveredT {
		if t >= from && t < to {
			n++
		}
	}
	return float64(n*(f.pktSize-tcpHdr)*8) / to.Sub(from).Seconds()
}

// route dispatches a delivered inner packet to the flow it belongs to.
func routeInner(flows []*innerTCP, side int, b []byte) bool {
	for _, f := range flows {
		isAck, ok := f.owns(b)
		if !ok {
			continue
		}
		switch {
		case !isAck && side != f.dataSide:
			f.onData(b)
		case isAck && side == f.dataSide:
			f.onAck(b)
		}
		return true
	}
	return false
}
