// SPDX-License-Identifier: MIT

package reorder

import (
	"time"

	"github.com/mptun/mptun/flow"
	"github.com/mptun/mptun/internal/mono"
)

func init() {
	Register("passive", func(c Config) Reorderer { return newBuffer("passive", modePassive, c) })
	Register("fixed", func(c Config) Reorderer { return newBuffer("fixed", modeFixed, c) })
	Register("adaptive", func(c Config) Reorderer { return newBuffer("adaptive", modeAdaptive, c) })
	Register("equalize", func(c Config) Reorderer { return newBuffer("equalize", modeEqualize, c) })
}

type mode int

const (
	modePassive  mode = iota // deliver at once, only drop duplicates
	modeFixed                // gaps wait up to MaxHold
	modeAdaptive             // gaps wait for the estimated delay difference
	modeEqualize             // faster paths' packets wait out the delay difference
)

const (
	seqMask = 1<<48 - 1
	// estimateWindow is how long a lateness sample keeps the hold time up.
	estimateWindow = 2 * time.Second
	// pathIdle is how long a path may stay silent and still count as
	// active for early loss detection: an idle path carries nothing that
	// could fill a gap.
	pathIdle = time.Second
	// maxPathSeqHole bounds the DCCP sequence hole that is still taken as
	// evidence of loss (a bigger jump is more likely a resync).
	maxPathSeqHole = 64
)

// noTime marks an unset time (virtual time starts at 0).
const noTime mono.Time = -1

// seqDiff is a-b for 48-bit serial numbers, in (-2^47, 2^47].
func seqDiff(a, b uint64) int64 { return int64((a-b)<<16) >> 16 }

// slot holds one MP_SEQ of the window [next, next+len(slots)). A missing
// sequence number keeps it.Seq set (used false) to carry its gap state.
type slot struct {
	it        Item
	used      bool
	early     bool      // delivered already (urgent or path-ordered): nothing to hand out
	lost      bool      // gap known to be lost (DCCP sequence evidence)
	counted   bool      // held packet counted in heldFlow[flowB]
	flowB     uint8     // the held packet's flow bucket
	gapOpen   mono.Time // missing seq: when a later seq first arrived, or noTime
	giveUpAt  mono.Time // lost gap awaiting repair: skipped from then on (noTime: not set)
	nackAt    mono.Time // lost gap: when its repair was first asked for (noTime: not yet)
	releaseAt mono.Time // equalize: not delivered before this
}

// flowBuckets is the number of flow buckets the receiver tells flows
// apart by (for PathOrdered delivery); flows sharing one are treated as
// one, which only makes delivery more cautious.
const flowBuckets = 256

// flowSeed keys the receiver's flow hash.
const flowSeed = 0x6d707475 // "mptu"

// hole is a loss found in a path's own sequence: data packets missing
// between the path's packets with MP_SEQ before and after.
type hole struct {
	path          int
	before, after uint64
	nacks         int
	nextNACK      mono.Time
	open          bool
}

// Repair timing.
const (
	maxHoles = 64 // holes tracked at once; older ones are forgotten
	maxNACKs = 3  // repair requests per hole
	// defaultRepairWait is the repair round trip assumed before the
	// paths' RTTs are known.
	defaultRepairWait = 50 * time.Millisecond
	// minHoldCap and maxHoldCap bound the derived hold limit.
	minHoldCap = 50 * time.Millisecond
	maxHoldCap = 2 * time.Second
)

// fifoEntry is one packet in a path's arrival-order queue of held packets.
type fifoEntry struct {
	seq    uint64
	expire mono.Time
}

// winMax is a windowed maximum over two buckets of estimateWindow.
type winMax struct {
	cur, prev time.Duration
	start     mono.Time
}

func (w *winMax) roll(now mono.Time) {
	if el := now.Sub(w.start); el >= estimateWindow {
		if el >= 2*estimateWindow {
			w.prev = 0
		} else {
			w.prev = w.cur
		}
		w.cur, w.start = 0, now
	}
}

func (w *winMax) add(now mono.Time, v time.Duration) {
	w.roll(now)
	w.cur = max(w.cur, v)
}

func (w *winMax) get(now mono.Time) time.Duration {
	w.roll(now)
	return max(w.cur, w.prev)
}

type advance struct {
	seq uint64
	at  mono.Time
}

// passedAt is when the path first delivered an MP_SEQ above g (the oldest
// remembered time if that was earlier), and false if it has not yet.
func (p *pathState) passedAt(g uint64) (mono.Time, bool) {
	n := min(p.advN, uint64(len(p.adv)))
	if n == 0 {
		return 0, false
	}
	for i := p.advN - n; i < p.advN; i++ {
		a := p.adv[i%uint64(len(p.adv))]
		if seqDiff(a.seq, g) > 0 {
			return a.at, true
		}
	}
	return 0, false
}

type pathState struct {
	seen     bool
	told     bool // SetPaths knows this path
	active   bool // SetPaths says active
	frontier uint64
	lastPS   uint64 // DCCP sequence number of the last packet received
	lastAt   mono.Time
	rttOWD   time.Duration // one-way delay estimate from RTTs (RTT/2)
	baseOWD  time.Duration // one-way delay without queueing (MinRTT/2), for equalize
	late     winMax        // how late this path's packets fill gaps
	lateAvg  time.Duration // smoothed lateness, for equalize
	// inPath is how late packets arrived that this very path overtook:
	// a path that reorders by itself cannot prove a gap lost at once.
	inPath winMax
	// adv remembers when the frontier passed which MP_SEQ, for the last
	// len(adv) advances, to time the path's own reordering.
	adv  [32]advance
	advN uint64

	fifo       []fifoEntry // ring, len is a power of two
	head, tail uint64

	openHoles int // unresolved holes of this path
}

// buffer implements every reorderer: they share the window, the
// duplicate and loss logic and differ only in how long they hold.
type buffer struct {
	name string
	mode mode
	cfg  Config

	mask     uint64 // len(slots)-1
	slots    []slot // the window, from next; grows up to maxSlots
	maxSlots int
	histMask uint64      // len(pastOpen)-1; the history grows with the window
	histLen  uint64      // seqs in [next-histLen, next) have valid history
	pastBits []uint64    // 1 delivered, 0 skipped, by seq&histMask
	pastOpen []mono.Time // gapOpen of skipped seqs, for late samples

	started     bool
	next        uint64 // next MP_SEQ to deliver
	highest     uint64 // highest MP_SEQ received
	buffered    int
	releasing   bool
	releaseTo   uint64 // skip gaps up to and including this seq
	lastArrival mono.Time

	maxDelivered uint64
	anyDelivered bool

	ready        []Item // ring of late or flushed packets, delivered first
	rHead, rTail uint64
	paths        []pathState
	toldAny      bool
	maxRTTVar    time.Duration
	rttDiff      time.Duration
	lateAll      winMax
	deadline     mono.Time
	stats        Stats

	// Receiver-side flows and loss repair.
	heldFlow   [flowBuckets]uint16 // in-order packets held, by flow bucket
	holes      []hole              // ring of maxHoles
	holeN      uint64              // holes ever recorded (ring position)
	openHoles  int
	repairWait time.Duration // a NACK's and its repair's round trip
	repairLat  winMax        // measured: first NACK to the repair's arrival
	baseDiff   time.Duration // base one-way delay difference of the active paths
}

func newBuffer(name string, m mode, c Config) *buffer {
	c = c.withDefaults()
	n := 16
	for n < 2*c.BufferLimit {
		n <<= 1
	}
	b := &buffer{
		name:     name,
		mode:     m,
		cfg:      c,
		maxSlots: n,

		deadline:   mono.Never,
		repairWait: defaultRepairWait,
	}
	b.growSlots(int64(min(initialSlots, n)) - 1)
	return b
}

// initialSlots is the window a reorderer starts with; it doubles up to
// maxSlots as the traffic needs and shrinks back when the connection
// idles: a concentrator holds thousands of connections, most of them
// slow.
const initialSlots = 16

// The history of MP_SEQs behind the window (delivered or skipped, for
// duplicates and late samples) covers histPerSlot times the window, at
// least histMin and at most maxSlots: a late packet is about as far
// behind as the window had to reach ahead while its gap was held.
const (
	histPerSlot = 4
	histMin     = 64
)

// resizeHistory reallocates the history to n entries (a power of two),
// keeping the newest of what was valid.
func (b *buffer) resizeHistory(n int) {
	open := make([]mono.Time, n)
	for i := range open {
		open[i] = noTime
	}
	bits := make([]uint64, (n+63)/64)
	keep := min(b.histLen, uint64(n))
	mask := uint64(n - 1)
	for k := uint64(1); k <= keep; k++ {
		seq := (b.next - k) & seqMask
		if b.pastSet(seq) {
			bits[(seq&mask)/64] |= 1 << ((seq & mask) % 64)
		}
		open[seq&mask] = b.pastOpen[seq&b.histMask]
	}
	b.pastOpen, b.pastBits, b.histMask, b.histLen = open, bits, mask, keep
}

// passed records that next moved n MP_SEQs on, each marked in the history.
func (b *buffer) passed(n uint64) {
	b.histLen = min(b.histLen+n, uint64(len(b.pastOpen)))
}

// Shrink releases what an idle reorderer does not need: the window back
// to its first size, the history with it, and the rings of late packets,
// path arrivals and holes when they are empty. It does nothing while
// packets are held or gaps open.
func (b *buffer) Shrink() {
	if b.buffered > 0 || b.rHead != b.rTail || b.openHoles > 0 {
		return
	}
	b.ready, b.rHead, b.rTail = nil, 0, 0
	b.holes, b.holeN = nil, 0
	for i := range b.paths {
		if p := &b.paths[i]; p.head == p.tail {
			p.fifo, p.head, p.tail = nil, 0, 0
		}
	}
	if len(b.slots) > initialSlots {
		b.slots = nil
		b.growSlots(initialSlots - 1)
	}
	if h := min(max(histPerSlot*len(b.slots), histMin), b.maxSlots); len(b.pastOpen) > h {
		b.resizeHistory(h)
	}
}

// growSlots makes the window hold at least need+1 MP_SEQs past next (up to
// maxSlots), moving the live part [next, highest].
func (b *buffer) growSlots(need int64) {
	n := max(len(b.slots), 1)
	for int64(n) <= need && n < b.maxSlots {
		n *= 2
	}
	if n == len(b.slots) {
		return
	}
	grown := make([]slot, n)
	for i := range grown {
		grown[i].gapOpen, grown[i].giveUpAt, grown[i].nackAt = noTime, noTime, noTime
	}
	mask := uint64(n - 1)
	if b.started && len(b.slots) > 0 {
		for g := b.next; seqDiff(g, b.highest) <= 0; g = (g + 1) & seqMask {
			grown[g&mask] = b.slots[g&b.mask]
		}
	}
	b.slots, b.mask = grown, mask
	if h := min(max(histPerSlot*n, histMin), b.maxSlots); h > len(b.pastOpen) {
		b.resizeHistory(h)
	}
}

func (b *buffer) Name() string { return b.name }

func (b *buffer) Deadline() mono.Time { return b.deadline }

func (b *buffer) Stats() Stats {
	s := b.stats
	s.Buffered = b.buffered
	return s
}

// maxPaths bounds per-path state: path ids index a small table, and a
// bogus id must not make the reorderer allocate.
const maxPaths = 64

func (b *buffer) path(id int) *pathState {
	id = max(0, min(id, maxPaths-1))
	if id >= len(b.paths) {
		b.paths = append(b.paths, make([]pathState, id+1-len(b.paths))...)
	}
	return &b.paths[id]
}

// SetPaths takes the RTT view of the receiving paths; paths not listed
// are treated as inactive.
func (b *buffer) SetPaths(infos []PathInfo) {
	for i := range b.paths {
		b.paths[i].told, b.paths[i].active = true, false
	}
	b.toldAny = true
	lo, hi := time.Duration(-1), time.Duration(0)
	b.maxRTTVar = 0
	for _, pi := range infos {
		p := b.path(pi.ID)
		p.told, p.active = true, pi.Active
		r := pi.SRTT
		if r <= 0 {
			r = pi.PeerRTT
		}
		if r <= 0 {
			r = pi.MinRTT
		}
		p.rttOWD = r / 2
		p.baseOWD = pi.MinRTT / 2
		if p.baseOWD <= 0 {
			p.baseOWD = r / 2
		}
		if !pi.Active || r <= 0 {
			continue
		}
		if lo < 0 || r/2 < lo {
			lo = r / 2
		}
		hi = max(hi, r/2)
		b.maxRTTVar = max(b.maxRTTVar, pi.RTTVar)
	}
	b.rttDiff = 0
	if lo >= 0 {
		b.rttDiff = hi - lo
	}
	// Base delays and the repair round trip: a NACK crosses the fastest
	// path back, the repair the fastest path forth.
	blo, bhi, fastest := time.Duration(-1), time.Duration(0), time.Duration(-1)
	for _, pi := range infos {
		if !pi.Active {
			continue
		}
		q := b.path(pi.ID)
		if q.baseOWD > 0 && (blo < 0 || q.baseOWD < blo) {
			blo = q.baseOWD
		}
		bhi = max(bhi, q.baseOWD)
		if r := max(pi.SRTT, pi.MinRTT); r > 0 && (fastest < 0 || r < fastest) {
			fastest = r
		}
	}
	b.baseDiff = 0
	if blo >= 0 {
		b.baseDiff = bhi - blo
	}
	b.repairWait = defaultRepairWait
	if fastest > 0 {
		b.repairWait = fastest + b.margin() + repairSlack
	}
}

// repairWaitNow is how long a repair may take: the estimate from the
// paths' RTTs, or what repairs took lately if that was longer.
func (b *buffer) repairWaitNow(now mono.Time) time.Duration {
	return max(b.repairWait, b.repairLat.get(now)+b.margin())
}

// repairSlack covers the sender's side of a repair: its pacer and the
// repair waiting for a window.
const repairSlack = 5 * time.Millisecond

// holdCap is the longest a packet waits for a gap: MaxHold when set,
// else (with Repair) what the paths need: their delay difference, jitter
// and two repair round trips.
func (b *buffer) holdCap(now mono.Time) time.Duration {
	if b.cfg.MaxHold > 0 {
		return b.cfg.MaxHold
	}
	c := max(b.rttDiff, b.baseDiff) + 4*b.maxRTTVar + 2*b.repairWaitNow(now) + b.margin()
	return min(max(c, minHoldCap), maxHoldCap)
}

// idleFlush is how long the buffer may wait without any arrival before
// it releases everything.
func (b *buffer) idleFlush(now mono.Time) time.Duration {
	if b.cfg.IdleFlush > 0 {
		return b.cfg.IdleFlush
	}
	return 2 * b.holdCap(now)
}

func (b *buffer) activePath(p *pathState, now mono.Time) bool {
	if p.told {
		// An active path that has been silent for long carries nothing
		// that could fill a gap; one never heard from may still.
		return p.active && (!p.seen || now.Sub(p.lastAt) <= pathIdle)
	}
	return p.seen && now.Sub(p.lastAt) <= pathIdle
}

// margin is the jitter allowance on top of a delay difference.
func (b *buffer) margin() time.Duration { return max(b.cfg.Margin, b.maxRTTVar/2) }

// holdFor is how long a gap before a packet arriving on p may hold it.
func (b *buffer) holdFor(now mono.Time, p *pathState) (release, expire time.Duration) {
	switch b.mode {
	case modePassive:
		return 0, 0
	case modeFixed:
		return 0, b.holdCap(now)
	}
	// A gap holds for the delay difference (RTTs or observed lateness,
	// which includes the paths' own reordering) plus the margin.
	hc := b.holdCap(now)
	gap := max(b.rttDiff, b.lateAll.get(now)) + b.margin()
	if b.cfg.Repair {
		// A gap may be a loss whose repair is on its way: allow two
		// rounds of NACK and repair.
		gap += 2 * b.repairWaitNow(now)
	}
	gap = min(gap, hc)
	if b.cfg.HoldGaps {
		gap = hc
	}
	if b.mode == modeAdaptive {
		return 0, gap
	}
	// Equalize: hold p's packets by how much faster p is than the slowest
	// active path without queueing (half the minimum RTTs), else by the
	// smoothed lateness with which the paths fill each other's gaps. Base
	// delays, not smoothed ones: the point is that no packet reaches the
	// inner flow sooner than the slowest path's base delay, so that the
	// inner congestion control's minimum RTT is that of the path set
	// (inner BBR sizes its window from it). Queueing on top is seen by the
	// inner flow as any queue would be.
	var maxOWD, maxLate time.Duration
	for i := range b.paths {
		q := &b.paths[i]
		// A path the engine calls active counts even when it has been
		// silent: the next packets may take it (the sender's scheduler
		// decides), and the first ones after an idle time, a TCP
		// handshake for instance, must not show a shorter RTT.
		if (q.told && q.active) || b.activePath(q, now) || q == p {
			maxOWD = max(maxOWD, q.baseOWD)
			maxLate = max(maxLate, q.lateAvg)
		}
	}
	eq := maxLate - p.lateAvg
	if p.baseOWD > 0 {
		eq = maxOWD - p.baseOWD
	}
	eq = min(eq, hc)
	return eq, max(gap, min(eq+b.margin(), hc))
}

func (b *buffer) pastSet(seq uint64) bool {
	i := seq & b.histMask
	return b.pastBits[i/64]&(1<<(i%64)) != 0
}

func (b *buffer) markPast(seq uint64, delivered bool, open mono.Time) {
	i := seq & b.histMask
	if delivered {
		b.pastBits[i/64] |= 1 << (i % 64)
	} else {
		b.pastBits[i/64] &^= 1 << (i % 64)
	}
	b.pastOpen[i] = open
}

// maxLateQueued bounds late packets waiting in the ready queue, against a
// caller that never pops. The daemon pops after each receive batch (up to
// 128 datagrams), and after a stall a batch may be all late packets: at a
// failover, the re-injected copies of a gap the timer skipped meanwhile
// (by our reading, how a CI run lost 27 probe packets with a bound of 64).
const maxLateQueued = 512

// pushReady queues it for delivery ahead of the window, growing the queue
// when needed, so that a flush never fails.
func (b *buffer) pushReady(it Item) {
	if n := uint64(len(b.ready)); b.rTail-b.rHead >= n {
		// Grow (power of two): most connections never need a window's
		// worth, and a concentrator holds thousands of them.
		grown := make([]Item, max(16, 2*n))
		for i := b.rHead; i != b.rTail; i++ {
			grown[i-b.rHead] = b.ready[i%n]
		}
		b.rHead, b.rTail, b.ready = 0, b.rTail-b.rHead, grown
	}
	b.ready[b.rTail%uint64(len(b.ready))] = it
	b.rTail++
}

// Push offers a received packet.
func (b *buffer) Push(now mono.Time, it Item) bool {
	seq := it.Seq & seqMask
	it.Seq = seq
	if it.Arrival == 0 {
		it.Arrival = now
	}
	if !b.started {
		b.started = true
		b.next, b.highest = seq, (seq-1)&seqMask
		// The first packet need not be the first sent: those before it
		// may still arrive, as late ones (the history is all "skipped").
		b.histLen = uint64(len(b.pastOpen))
	}
	b.lastArrival = now
	p := b.path(it.Path)
	ps := it.PathSeq & seqMask
	// The path's packets before a hole in its sequence are named by the
	// highest MP_SEQ it delivered: a repair it carried has an older one.
	prevSeq, prevPS, hadPrev := p.frontier, p.lastPS, p.seen
	// A packet behind the path's own sequence came late on the path: it
	// reorders by itself. (A repair has an old MP_SEQ but a new place in
	// the path's sequence.)
	overtaken := p.seen && seqDiff(seq, p.frontier) < 0 && seqDiff(ps, p.lastPS) < 0
	if overtaken {
		if at, ok := p.passedAt(seq); ok {
			p.inPath.add(now, now.Sub(at))
		}
	}
	if !p.seen || seqDiff(seq, p.frontier) > 0 {
		p.frontier = seq
		p.adv[p.advN%uint64(len(p.adv))] = advance{seq, now}
		p.advN++
	}
	p.seen, p.lastAt = true, now
	if !hadPrev || seqDiff(ps, prevPS) > 0 {
		// A packet the path itself reordered does not move its position.
		p.lastPS = ps
	}

	d := seqDiff(seq, b.next)
	if d < 0 {
		return b.pushLate(now, p, it, d)
	}
	if d >= int64(len(b.slots)) {
		b.growSlots(d)
	}
	if d >= int64(len(b.slots)) {
		b.flushFarAhead(seq)
	}
	sl := &b.slots[seq&b.mask]
	if sl.used && sl.it.Seq == seq {
		b.stats.Duplicates++
		return false
	}
	if seqDiff(seq, b.highest) > 0 {
		// Every seq jumped over is now a gap, open since now.
		g := (b.highest + 1) & seqMask
		if d := seqDiff(g, b.next); d < 0 || d >= int64(len(b.slots)) {
			g = b.next
		}
		for ; g != seq; g = (g + 1) & seqMask {
			gs := &b.slots[g&b.mask]
			gs.used, gs.lost, gs.gapOpen, gs.giveUpAt, gs.nackAt = false, false, now, noTime, noTime
			gs.it = Item{Seq: g}
		}
		b.highest = seq
	} else if sl.it.Seq == seq && sl.gapOpen != noTime {
		// This packet fills a gap: it came this much after a later one.
		b.sampleLate(now, p, now.Sub(sl.gapOpen))
		if sl.lost {
			b.stats.Repaired++
			if sl.nackAt != noTime {
				b.repairLat.add(now, now.Sub(sl.nackAt))
			}
		}
	}
	if hadPrev && (b.cfg.Repair || p.inPath.get(now) == 0) {
		b.pathSeqLoss(now, p, it.Path, prevSeq, prevPS, seq, ps)
	}
	if b.deliverEarly(now, p, &it) {
		sl.it, sl.used, sl.early, sl.lost, sl.counted = Item{Seq: seq}, true, true, false, false
		sl.gapOpen, sl.giveUpAt, sl.releaseAt = noTime, noTime, 0
		b.buffered++
		b.pushReady(it)
		b.refresh(now)
		return true
	}
	it.Urgent, it.PathOrdered = false, false
	rel, exp := b.holdFor(now, p)
	sl.it, sl.used, sl.early, sl.lost = it, true, false, false
	sl.gapOpen, sl.giveUpAt = noTime, noTime
	sl.flowB, sl.counted = flowBucket(it.Buf), true
	b.heldFlow[sl.flowB]++
	sl.releaseAt = now.Add(rel)
	b.buffered++
	b.fifoPush(p, fifoEntry{seq: seq, expire: now.Add(exp)})
	b.refresh(now)
	return true
}

// flowBucket is the receiver's flow bucket of an inner packet.
func flowBucket(pkt []byte) uint8 { return uint8(flow.Hash(pkt, flowSeed) % flowBuckets) }

// deliverEarly reports whether it goes to the application at once: an
// urgent packet always; a path-ordered one when its path has no
// unresolved loss before it and its flow has nothing held here (so its
// flow's earlier packets are all delivered).
func (b *buffer) deliverEarly(now mono.Time, p *pathState, it *Item) bool {
	if b.rTail-b.rHead >= uint64(b.cfg.BufferLimit) {
		return false // nobody is popping: hold
	}
	if it.Urgent {
		return true
	}
	if !it.PathOrdered || b.mode == modePassive {
		return false
	}
	return p.openHoles == 0 && b.heldFlow[flowBucket(it.Buf)] == 0
}

func (b *buffer) sampleLate(now mono.Time, p *pathState, v time.Duration) {
	if v < 0 {
		return
	}
	p.late.add(now, v)
	b.lateAll.add(now, v)
	p.lateAvg += (v - p.lateAvg) / 16
}

// pushLate handles a packet older than the next expected one.
func (b *buffer) pushLate(now mono.Time, p *pathState, it Item, d int64) bool {
	if -d > int64(len(b.pastOpen)/2) && len(b.pastOpen) < b.maxSlots {
		// Packets arrive this late: keep a longer history from now on.
		defer b.resizeHistory(2 * len(b.pastOpen))
	}
	if -d > int64(b.histLen) {
		// Too old to know whether it is a duplicate.
		b.stats.LateDropped++
		return false
	}
	if b.pastSet(it.Seq) {
		b.stats.Duplicates++
		return false
	}
	b.stats.GapsLateArrive++
	if open := b.pastOpen[it.Seq&b.histMask]; open != noTime {
		b.sampleLate(now, p, now.Sub(open))
	}
	b.markPast(it.Seq, true, noTime) // a second copy is a duplicate
	if b.cfg.DropLate || b.rTail-b.rHead >= maxLateQueued {
		b.stats.LateDropped++
		return false
	}
	b.pushReady(it)
	b.refresh(now)
	return true
}

// flushFarAhead makes room for seq, which lies beyond the window: every
// held packet is released in order and the window jumps.
func (b *buffer) flushFarAhead(seq uint64) {
	for b.buffered > 0 {
		sl := &b.slots[b.next&b.mask]
		if sl.used && sl.it.Seq == b.next {
			if !sl.early {
				b.pushReady(sl.it)
			}
			b.uncount(sl)
			sl.early = false
			b.buffered--
			sl.used = false
			sl.it = Item{}
			b.markPast(b.next, true, noTime)
		} else {
			b.stats.GapsSkipped++
			b.stats.Overflow++
			b.markPast(b.next, false, noTime)
		}
		b.next = (b.next + 1) & seqMask
		b.passed(1)
	}
	if jump := seqDiff(seq, b.next) - int64(len(b.slots)) + 1; jump > 0 {
		b.stats.GapsSkipped += uint64(jump)
		b.stats.Overflow += uint64(jump)
		// Nothing was received of the seqs jumped over.
		// Nothing was received of the seqs jumped over: as far as the
		// history reaches, they may still arrive late.
		marked := min(jump, int64(len(b.pastOpen)))
		for i := int64(0); i < marked; i++ {
			b.markPast(b.next+uint64(jump-1-i), false, noTime)
		}
		b.next = (b.next + uint64(jump)) & seqMask
		b.passed(uint64(marked))
	}
	// Nothing is held: everything received is below next.
	b.highest = (b.next - 1) & seqMask
	b.releasing = false
}

// pathSeqLoss uses the subflow's own sequence numbers: if DCCP sequence
// numbers are missing between two consecutive packets of one path, data
// packets that path carried were lost (or, on a path that reorders by
// itself, are late). If no more MP_SEQs are missing between them than
// that, the missing ones are those packets and need no waiting (or, with
// Repair, wait for their repair only). With Repair every such hole is
// recorded so that PollNACK asks the sender for the lost packets at once.
func (b *buffer) pathSeqLoss(now mono.Time, p *pathState, pathID int, prevSeq, prevPS, seq, ps uint64) {
	lostN := seqDiff(ps, prevPS) - 1
	span := seqDiff(seq, prevSeq)
	if lostN <= 0 || lostN > maxPathSeqHole || span <= 1 || span > int64(len(b.slots)) {
		return
	}
	from := prevSeq + 1
	if seqDiff(from, b.next) < 0 {
		from = b.next
	}
	var missing int64
	for g := from & seqMask; g != seq; g = (g + 1) & seqMask {
		if sl := &b.slots[g&b.mask]; !sl.used {
			missing++
		}
	}
	if missing == 0 {
		return
	}
	reorders := p.inPath.get(now) > 0
	sure := missing <= lostN && !reorders
	if !b.cfg.Repair {
		if sure {
			b.markLost(from, seq, noTime)
		}
		return
	}
	b.stats.Holes++
	// Ask at once, unless the path reorders by itself: then the "lost"
	// packets may just be late.
	first := now
	if reorders {
		first = now.Add(p.inPath.get(now) + b.margin())
	}
	if sure {
		// Skipped if no repair came after every NACK had its round trip.
		b.markLost(from, seq, first.Add(time.Duration(maxNACKs+1)*b.repairWaitNow(now)))
	}
	b.addHole(hole{path: pathID, before: prevSeq, after: seq, nextNACK: first, open: true})
}

// markLost marks the missing MP_SEQs in [from, to) lost; giveUp is when
// they are skipped if no repair came (noTime: at once).
func (b *buffer) markLost(from, to uint64, giveUp mono.Time) {
	for g := from & seqMask; g != to; g = (g + 1) & seqMask {
		if sl := &b.slots[g&b.mask]; !sl.used {
			sl.it.Seq, sl.lost, sl.giveUpAt = g, true, giveUp
		}
	}
}

func (b *buffer) addHole(h hole) {
	if b.holes == nil {
		b.holes = make([]hole, maxHoles)
	}
	old := &b.holes[b.holeN%maxHoles]
	if old.open {
		b.closeHole(old) // too many at once: forget the oldest
	}
	*old = h
	b.holeN++
	if h.path >= 0 {
		b.path(h.path).openHoles++
	}
	b.openHoles++
}

func (b *buffer) closeHole(h *hole) {
	if !h.open {
		return
	}
	h.open = false
	if h.path >= 0 {
		b.path(h.path).openHoles--
	}
	b.openHoles--
}

// holeResolved reports whether every MP_SEQ of h's range has arrived or
// was given up.
func (b *buffer) holeResolved(h *hole) bool {
	if seqDiff(b.next, h.after) >= 0 {
		return true
	}
	from := (h.before + 1) & seqMask
	if seqDiff(from, b.next) < 0 {
		from = b.next
	}
	for g := from; g != h.after; g = (g + 1) & seqMask {
		if sl := &b.slots[g&b.mask]; !(sl.used && sl.it.Seq == g) {
			return false
		}
	}
	return true
}

// resolveHoles closes the holes whose packets are all in (or given up)
// and returns the earliest NACK still due.
func (b *buffer) resolveHoles() mono.Time {
	due := mono.Never
	if b.openHoles == 0 {
		return due
	}
	n := min(b.holeN, maxHoles)
	for i := b.holeN - n; i != b.holeN; i++ {
		h := &b.holes[i%maxHoles]
		if !h.open {
			continue
		}
		if b.holeResolved(h) {
			b.closeHole(h)
			continue
		}
		if h.nacks < maxNACKs {
			due = mono.Min(due, h.nextNACK)
		}
	}
	return due
}

// PollNACK returns the next repair request due at now (see NACKer). Each
// hole is asked for up to maxNACKs times, a repair round trip apart; its
// lost gaps wait until a round trip after the last request.
func (b *buffer) PollNACK(now mono.Time) (NACK, bool) {
	if b.openHoles == 0 {
		return NACK{}, false
	}
	n := min(b.holeN, maxHoles)
	for i := b.holeN - n; i != b.holeN; i++ {
		h := &b.holes[i%maxHoles]
		if !h.open || h.nacks >= maxNACKs || h.nextNACK > now {
			continue
		}
		if b.holeResolved(h) {
			b.closeHole(h)
			continue
		}
		h.nacks++
		rw := b.repairWaitNow(now)
		h.nextNACK = now.Add(rw)
		// The lost gaps wait for this repair, and for the ones still to
		// be asked for.
		giveUp := now.Add(time.Duration(maxNACKs-h.nacks+1) * rw)
		b.stats.NACKs++
		from := (h.before + 1) & seqMask
		if seqDiff(from, b.next) < 0 {
			from = b.next
		}
		for g := from; g != h.after; g = (g + 1) & seqMask {
			if sl := &b.slots[g&b.mask]; !sl.used && sl.lost && sl.it.Seq == g {
				sl.giveUpAt = giveUp
				if sl.nackAt == noTime {
					sl.nackAt = now
				}
			}
		}
		b.refresh(now)
		return NACK{Path: h.path, Before: h.before, After: h.after}, true
	}
	return NACK{}, false
}

func (b *buffer) fifoPush(p *pathState, e fifoEntry) {
	n := uint64(len(p.fifo))
	if p.tail-p.head >= n && n < uint64(len(b.slots)) {
		// Grow by doubling up to the window size (both powers of two).
		grown := make([]fifoEntry, max(16, 2*n))
		for i := p.head; i != p.tail; i++ {
			grown[i-p.head] = p.fifo[i&(n-1)]
		}
		p.head, p.tail, p.fifo = 0, p.tail-p.head, grown
		n = uint64(len(grown))
	}
	if p.tail-p.head >= n {
		p.head++ // cannot happen with valid entries only; keep the newest
	}
	p.fifo[p.tail&(n-1)] = e
	p.tail++
}

// held reports whether seq is still held in the window.
func (b *buffer) held(seq uint64) bool {
	sl := &b.slots[seq&b.mask]
	return sl.used && sl.it.Seq == seq
}

// refresh drops delivered packets from the paths' queues and recomputes
// the deadline.
func (b *buffer) refresh(now mono.Time) {
	dl := mono.Never
	for i := range b.paths {
		p := &b.paths[i]
		if b.buffered == 0 {
			p.head = p.tail
			continue
		}
		n := uint64(len(p.fifo))
		// Drop delivered packets, and expired ones already released.
		for p.head != p.tail {
			e := p.fifo[p.head&(n-1)]
			if b.held(e.seq) && !(b.releasing && seqDiff(e.seq, b.releaseTo) <= 0) {
				break
			}
			p.head++
		}
		if p.head != p.tail {
			dl = mono.Min(dl, p.fifo[p.head&(n-1)].expire)
		}
	}
	dl = mono.Min(dl, b.resolveHoles())
	if b.buffered > 0 {
		sl := &b.slots[b.next&b.mask]
		switch {
		case sl.used && sl.it.Seq == b.next && sl.releaseAt > now:
			dl = mono.Min(dl, sl.releaseAt)
		case !sl.used && sl.it.Seq == b.next && b.cfg.Repair && !b.cfg.NoEarlyLoss:
			// When the gap at next may be given up (see lostGap); a time
			// already past means it waits for something else.
			var t mono.Time = noTime
			if sl.lost && sl.giveUpAt != noTime {
				t = sl.giveUpAt
			} else if !sl.lost && sl.gapOpen != noTime {
				t = b.passTime(now, b.next, sl.gapOpen)
			}
			if t > now {
				dl = mono.Min(dl, t)
			}
		}
		if !b.releasing || seqDiff(b.highest, b.releaseTo) > 0 {
			dl = mono.Min(dl, b.lastArrival.Add(b.idleFlush(now)))
		}
	}
	b.deadline = dl
}

// OnTimer gives up the gaps in front of packets whose hold expired.
func (b *buffer) OnTimer(now mono.Time) {
	if b.buffered == 0 {
		b.refresh(now)
		return
	}
	release := func(seq uint64) {
		if !b.releasing || seqDiff(seq, b.releaseTo) > 0 {
			b.releasing, b.releaseTo = true, seq
		}
	}
	for i := range b.paths {
		p := &b.paths[i]
		n := uint64(len(p.fifo))
		for j := p.head; j != p.tail; j++ {
			e := p.fifo[j&(n-1)]
			if e.expire > now {
				break
			}
			if b.held(e.seq) {
				release(e.seq)
			}
		}
	}
	if now >= b.lastArrival.Add(b.idleFlush(now)) {
		release(b.highest)
	}
	b.refresh(now)
}

// lostGap reports whether the missing seq at next can be given up now.
func (b *buffer) lostGap(now mono.Time, sl *slot, seq uint64) bool {
	if b.mode == modePassive || b.buffered > b.cfg.BufferLimit {
		return true
	}
	if b.cfg.Repair && sl.it.Seq == seq && sl.lost && sl.giveUpAt != noTime {
		// A repair is on its way: not even an expired hold gives it up
		// before it is overdue.
		return now >= sl.giveUpAt
	}
	if b.releasing && seqDiff(seq, b.releaseTo) <= 0 {
		return true
	}
	if b.cfg.NoEarlyLoss {
		return false
	}
	known := sl.it.Seq == seq
	if known && sl.lost {
		// Lost on a path: skip it at once, or, with Repair, once its repair
		// is overdue.
		return !b.cfg.Repair || sl.giveUpAt != noTime && now >= sl.giveUpAt
	}
	open := noTime
	if known {
		open = sl.gapOpen
	}
	if b.passTime(now, seq, open) > now {
		return false
	}
	if !b.cfg.Repair || !known {
		return true
	}
	b.nackMissing(now, seq)
	return false
}

// passTime is when no path can still bring seq, missing since open
// (<= now: already; mono.Never: not while things stay as they are):
// every path has delivered beyond it (paths keep their order), or has not
// but is past its delay difference to the fastest path since the gap
// opened (a path that carried nothing for a while, or just failed, must
// not hold gaps longer than it could take). A path seen reordering by
// itself only counts once it passed seq longer ago than it reorders.
// Without SetPaths a lone path may just be the first one heard from.
func (b *buffer) passTime(now mono.Time, seq uint64, open mono.Time) mono.Time {
	n := 0
	minBase := time.Duration(-1)
	for i := range b.paths {
		if p := &b.paths[i]; p.told && p.active && p.baseOWD > 0 && (minBase < 0 || p.baseOWD < minBase) {
			minBase = p.baseOWD
		}
	}
	t := mono.Time(0)
	for i := range b.paths {
		p := &b.paths[i]
		if !(p.told && p.active) && !(p.seen && now.Sub(p.lastAt) <= pathIdle) {
			continue
		}
		if !p.seen || seqDiff(p.frontier, seq) <= 0 {
			if minBase < 0 || open == noTime {
				// Delays unknown: a path silent for long carries nothing.
				if !p.seen {
					return mono.Never
				}
				t = mono.Max(t, p.lastAt.Add(pathIdle+1))
				continue
			}
			// Its delay difference to the fastest path, with the jitter
			// seen: how late its packets came to fill gaps, once that was
			// measured, else four RTT variations. The measurement is the
			// lag itself; the RTT variation of a path whose queue comes
			// and goes is large (4 × 27 ms beside a 2 Mbit/s path's
			// 90 ms lag), and a tail loss there held the fast path's
			// packets that much longer before its NACK (a repair too
			// many costs one packet).
			lag := max(p.rttOWD, p.baseOWD) - minBase
			if late := p.late.get(now); late > 0 {
				lag = max(lag, late)
			} else {
				lag += 4 * b.maxRTTVar
			}
			lag += 2 * b.margin()
			t = mono.Max(t, open.Add(lag))
			continue
		}
		if w := p.inPath.get(now); w > 0 {
			at, ok := p.passedAt(seq)
			if !ok {
				return mono.Never
			}
			t = mono.Max(t, at.Add(w+b.margin()))
		}
		n++
	}
	if n >= 2 || (n == 1 && b.toldAny) {
		return t
	}
	return mono.Never
}

// nackMissing treats seq, which every path is past with no path's
// sequence showing it lost (an ambiguous hole, a packet lost last on a
// path, a path that closed), as lost somewhere: it is asked for by its
// MP_SEQ, and waits for the repair like any lost gap.
func (b *buffer) nackMissing(now mono.Time, seq uint64) {
	// The run of missing seqs from seq on that every path is past goes
	// together: one NACK, one wait.
	end := (seq + 1) & seqMask
	for seqDiff(b.highest, end) > 0 {
		sl := &b.slots[end&b.mask]
		if sl.used || sl.lost || sl.it.Seq != end || b.passTime(now, end, sl.gapOpen) > now {
			break
		}
		end = (end + 1) & seqMask
	}
	rw := b.repairWaitNow(now)
	b.markLost(seq, end, now.Add(time.Duration(maxNACKs+1)*rw))
	b.stats.Holes++
	b.addHole(hole{path: -1, before: (seq - 1) & seqMask, after: end, nextNACK: now, open: true})
}

// uncount removes a held packet from its flow's count.
func (b *buffer) uncount(sl *slot) {
	if sl.counted {
		b.heldFlow[sl.flowB]--
		sl.counted = false
	}
}

// Pop returns the next packet to deliver.
func (b *buffer) Pop(now mono.Time) (Item, bool) {
	if b.rHead != b.rTail {
		i := b.rHead % uint64(len(b.ready))
		it := b.ready[i]
		b.ready[i] = Item{}
		b.rHead++
		b.account(now, it)
		return it, true
	}
	for b.buffered > 0 {
		seq := b.next
		sl := &b.slots[seq&b.mask]
		if sl.used && sl.it.Seq == seq && sl.early {
			// Delivered when it arrived; its place in the window is done.
			sl.used, sl.early, sl.it = false, false, Item{}
			b.buffered--
			b.markPast(seq, true, noTime)
			b.next = (seq + 1) & seqMask
			b.passed(1)
			continue
		}
		if sl.used && sl.it.Seq == seq {
			if sl.releaseAt > now {
				break // equalize: not yet; later packets wait behind it
			}
			it := sl.it
			b.uncount(sl)
			sl.used, sl.it = false, Item{}
			b.buffered--
			b.markPast(seq, true, noTime)
			b.next = (seq + 1) & seqMask
			b.passed(1)
			b.account(now, it)
			b.afterAdvance(now)
			return it, true
		}
		if !b.lostGap(now, sl, seq) {
			break
		}
		b.stats.GapsSkipped++
		if b.buffered > b.cfg.BufferLimit {
			b.stats.Overflow++
		}
		if sl.it.Seq == seq && sl.lost && b.cfg.Repair {
			b.stats.RepairGivenUp++
		}
		open := noTime
		if sl.it.Seq == seq {
			open = sl.gapOpen
		}
		b.markPast(seq, false, open)
		b.next = (seq + 1) & seqMask
		b.passed(1)
	}
	b.afterAdvance(now)
	return Item{}, false
}

func (b *buffer) afterAdvance(now mono.Time) {
	if b.releasing && seqDiff(b.next, b.releaseTo) > 0 {
		b.releasing = false
	}
	b.refresh(now)
}

// account counts one delivery.
func (b *buffer) account(now mono.Time, it Item) {
	b.stats.Delivered++
	if it.Urgent {
		b.stats.Urgent++
		return
	}
	if it.PathOrdered {
		b.stats.PathOrdered++
		return
	}
	if b.anyDelivered && seqDiff(it.Seq, b.maxDelivered) < 0 {
		b.stats.OutOfOrder++
	} else {
		b.maxDelivered, b.anyDelivered = it.Seq, true
	}
	hold := now.Sub(it.Arrival)
	if hold <= 0 {
		b.stats.InOrder++
	} else {
		b.stats.Held++
	}
	i := 0
	for i < len(HoldBuckets) && hold >= HoldBuckets[i] {
		i++
	}
	b.stats.HoldHist[i]++
}
