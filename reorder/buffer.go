// SPDX-License-Identifier: MIT

package reorder

import (
	"time"

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
	early     bool      // an urgent packet, delivered already: nothing to hand out
	lost      bool      // gap known to be lost (DCCP sequence evidence)
	gapOpen   mono.Time // missing seq: when a later seq first arrived, or noTime
	releaseAt mono.Time // equalize: not delivered before this
}

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
	lastSeq  uint64
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
	histMask uint64      // len(pastOpen)-1: the history is allocated at full size
	pastBits []uint64    // seqs in [next-len, next): 1 delivered, 0 skipped
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
		histMask: uint64(n - 1),
		pastBits: make([]uint64, (n+63)/64),
		pastOpen: make([]mono.Time, n),

		deadline: mono.Never,
	}
	for i := range b.pastOpen {
		b.pastOpen[i] = noTime
	}
	b.growSlots(int64(min(initialSlots, n)) - 1)
	return b
}

// initialSlots is the window a reorderer starts with; it doubles up to
// maxSlots as the traffic needs: a concentrator holds thousands of
// connections, most of them slow.
const initialSlots = 64

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
		grown[i].gapOpen = noTime
	}
	mask := uint64(n - 1)
	if b.started && len(b.slots) > 0 {
		for g := b.next; seqDiff(g, b.highest) <= 0; g = (g + 1) & seqMask {
			grown[g&mask] = b.slots[g&b.mask]
		}
	}
	b.slots, b.mask = grown, mask
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
		return 0, b.cfg.MaxHold
	}
	// A gap holds for the delay difference (RTTs or observed lateness,
	// which includes the paths' own reordering) plus the margin.
	gap := min(max(b.rttDiff, b.lateAll.get(now))+b.margin(), b.cfg.MaxHold)
	if b.cfg.HoldGaps {
		gap = b.cfg.MaxHold
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
	eq = min(eq, b.cfg.MaxHold)
	return eq, max(gap, min(eq+b.margin(), b.cfg.MaxHold))
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

// maxLateQueued bounds late packets waiting in the ready queue; the
// engine pops after every push, so more means nobody is popping.
const maxLateQueued = 64

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
	}
	b.lastArrival = now
	p := b.path(it.Path)
	prevSeq, prevPS, hadPrev := p.lastSeq, p.lastPS, p.seen
	overtaken := p.seen && seqDiff(seq, p.frontier) < 0
	if overtaken {
		// This path delivered higher MP_SEQs first: it reorders by itself.
		if at, ok := p.passedAt(seq); ok {
			p.inPath.add(now, now.Sub(at))
		}
	}
	if !p.seen || seqDiff(seq, p.frontier) > 0 {
		p.frontier = seq
		p.adv[p.advN%uint64(len(p.adv))] = advance{seq, now}
		p.advN++
	}
	p.seen, p.lastAt, p.lastSeq, p.lastPS = true, now, seq, it.PathSeq&seqMask

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
			gs.used, gs.lost, gs.gapOpen = false, false, now
			gs.it = Item{Seq: g}
		}
		b.highest = seq
	} else if sl.it.Seq == seq && sl.gapOpen != noTime {
		// This packet fills a gap: it came this much after a later one.
		b.sampleLate(now, p, now.Sub(sl.gapOpen))
	}
	if it.Urgent && b.rTail-b.rHead < maxLateQueued {
		sl.it, sl.used, sl.early, sl.lost, sl.gapOpen = Item{Seq: seq}, true, true, false, noTime
		sl.releaseAt = 0
		b.buffered++
		b.pushReady(it)
		if hadPrev && p.inPath.get(now) == 0 {
			b.pathSeqLoss(prevSeq, prevPS, seq, it.PathSeq&seqMask)
		}
		b.refresh(now)
		return true
	}
	it.Urgent = false
	rel, exp := b.holdFor(now, p)
	sl.it, sl.used, sl.early, sl.lost, sl.gapOpen = it, true, false, false, noTime
	sl.releaseAt = now.Add(rel)
	b.buffered++
	b.fifoPush(p, fifoEntry{seq: seq, expire: now.Add(exp)})

	if hadPrev && p.inPath.get(now) == 0 {
		b.pathSeqLoss(prevSeq, prevPS, seq, it.PathSeq&seqMask)
	}
	b.refresh(now)
	return true
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
	if -d > int64(len(b.pastOpen)) {
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
	}
	if jump := seqDiff(seq, b.next) - int64(len(b.slots)) + 1; jump > 0 {
		b.stats.GapsSkipped += uint64(jump)
		b.stats.Overflow += uint64(jump)
		// Nothing was received of the seqs jumped over.
		for i := int64(0); i < min(jump, int64(len(b.slots))); i++ {
			b.markPast(b.next+uint64(jump-1-i), false, noTime)
		}
		b.next = (b.next + uint64(jump)) & seqMask
	}
	// Nothing is held: everything received is below next.
	b.highest = (b.next - 1) & seqMask
	b.releasing = false
}

// pathSeqLoss uses the subflow's own sequence numbers: if DCCP sequence
// numbers are missing between two consecutive packets of one path, and no
// more MP_SEQs are missing between them than that, the missing ones were
// lost on this path and need no waiting.
func (b *buffer) pathSeqLoss(prevSeq, prevPS, seq, ps uint64) {
	hole := seqDiff(ps, prevPS) - 1
	span := seqDiff(seq, prevSeq)
	if hole <= 0 || hole > maxPathSeqHole || span <= 1 || span > int64(len(b.slots)) {
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
	if missing == 0 || missing > hole {
		return
	}
	for g := from & seqMask; g != seq; g = (g + 1) & seqMask {
		if sl := &b.slots[g&b.mask]; !sl.used {
			sl.it.Seq, sl.lost = g, true
		}
	}
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
	if b.buffered > 0 {
		if sl := &b.slots[b.next&b.mask]; sl.used && sl.it.Seq == b.next && sl.releaseAt > now {
			dl = mono.Min(dl, sl.releaseAt)
		}
		if !b.releasing || seqDiff(b.highest, b.releaseTo) > 0 {
			dl = mono.Min(dl, b.lastArrival.Add(b.cfg.IdleFlush))
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
	if now >= b.lastArrival.Add(b.cfg.IdleFlush) {
		release(b.highest)
	}
	b.refresh(now)
}

// lostGap reports whether the missing seq at next can be given up now.
func (b *buffer) lostGap(now mono.Time, sl *slot, seq uint64) bool {
	if b.releasing && seqDiff(seq, b.releaseTo) <= 0 {
		return true
	}
	if b.mode == modePassive || b.buffered > b.cfg.BufferLimit {
		return true
	}
	if b.cfg.NoEarlyLoss {
		return false
	}
	if sl.it.Seq == seq && sl.lost {
		return true
	}
	// Every active path has already delivered beyond seq: as paths keep
	// their order, nothing can still bring it. A path seen reordering by
	// itself only counts once it passed seq longer ago than it reorders.
	// Without SetPaths a lone path may just be the first one heard from.
	n := 0
	for i := range b.paths {
		p := &b.paths[i]
		if !b.activePath(p, now) {
			continue
		}
		if !p.seen || seqDiff(p.frontier, seq) <= 0 {
			return false
		}
		if w := p.inPath.get(now); w > 0 {
			if at, ok := p.passedAt(seq); !ok || now.Sub(at) < w+b.margin() {
				return false
			}
		}
		n++
	}
	return n >= 2 || (n == 1 && b.toldAny)
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
			continue
		}
		if sl.used && sl.it.Seq == seq {
			if sl.releaseAt > now {
				break // equalize: not yet; later packets wait behind it
			}
			it := sl.it
			sl.used, sl.it = false, Item{}
			b.buffered--
			b.markPast(seq, true, noTime)
			b.next = (seq + 1) & seqMask
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
		open := noTime
		if sl.it.Seq == seq {
			open = sl.gapOpen
		}
		b.markPast(seq, false, open)
		b.next = (seq + 1) & seqMask
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
