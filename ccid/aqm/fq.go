// SPDX-License-Identifier: MIT

package aqm

import (
	"time"

	"github.com/mptun/mptun/internal/codel"
	"github.com/mptun/mptun/internal/mono"
)

// FQ is a flow-queueing send queue in the manner of FQ-CoDel (RFC 8290):
// inner packets are hashed into flow buckets, each bucket is its own
// CoDel queue, and buckets are served by deficit round robin with new
// (sparse) flows first. A ping, a DNS query or the first packets of a web
// request therefore never wait behind a bulk flow's standing queue, and
// CoDel's signal lands on the flow that builds the queue.
//
// The caller picks which flow to serve (Dequeue with a Picker): the
// tunnel's path choice depends on the flow, and a flow whose path cannot
// send now must not block the others. Buckets are identified by their
// index, so that the caller can keep per-flow state in a parallel array.
//
// Pure logic over a caller-supplied clock; no allocation after New.
type FQ struct {
	cfg     FQConfig
	slab    []fqEntry // packet entries; free ones are chained from free
	free    int32
	flows   []fqFlow
	mask    uint64
	newList fqList
	oldList fqList
	n       int
	bytes   int
	stats   Stats
	cur     fqEntry // CoDel's current packet (fqView)
	curFlow int
}

// FQConfig parameterises an FQ. Config's Target, Interval, Limit (all
// flows together), LimitBytes, MTU, NoECN, Disabled (no CoDel: drop-tail
// per flow) and Drop apply.
type FQConfig struct {
	Config
	// Buckets is the number of flow buckets, a power of two (default 256).
	// Flows that hash into one bucket share its queue.
	Buckets int
	// Quantum is the bytes a flow may send per round (default MTU).
	Quantum int
	// Supersedes, when set, reports whether an arriving packet makes the
	// last one queued in its bucket redundant (flow.ACKSupersedes: a
	// later cumulative ACK of the same TCP connection); the arrival then
	// takes that packet's place and the older one is dropped (counted in
	// Stats.Superseded).
	Supersedes func(newer, older []byte) bool
}

type fqEntry struct {
	pkt  []byte
	enq  mono.Time
	next int32
}

// listNone, listNew and listOld say which service list a flow is on.
const (
	listNone uint8 = iota
	listNew
	listOld
)

type fqFlow struct {
	head, tail int32 // slab indices, -1 when empty
	n          int32
	bytes      int
	deficit    int
	list       uint8
	next       int32 // next flow on its list, -1 at the end
	cd         codel.State
}

// fqList is a singly linked list of flow indices.
type fqList struct{ head, tail int32 }

// NewFQ returns an empty flow queue.
func NewFQ(cfg FQConfig) *FQ {
	cfg.Config = cfg.Config.withDefaults()
	if cfg.Buckets <= 0 {
		cfg.Buckets = 256
	}
	for cfg.Buckets&(cfg.Buckets-1) != 0 {
		cfg.Buckets &= cfg.Buckets - 1 // round down to a power of two
	}
	if cfg.Quantum <= 0 {
		cfg.Quantum = cfg.MTU
	}
	q := &FQ{cfg: cfg, slab: make([]fqEntry, cfg.Limit), flows: make([]fqFlow, cfg.Buckets),
		mask: uint64(cfg.Buckets - 1), newList: fqList{-1, -1}, oldList: fqList{-1, -1}}
	for i := range q.slab {
		q.slab[i].next = int32(i + 1)
	}
	q.slab[len(q.slab)-1].next = -1
	for i := range q.flows {
		q.flows[i] = fqFlow{head: -1, tail: -1, next: -1}
	}
	return q
}

// Buckets is the number of flow buckets.
func (q *FQ) Buckets() int { return len(q.flows) }

// Bucket is the bucket a flow hash maps to.
func (q *FQ) Bucket(hash uint64) int { return int(hash & q.mask) }

// Len is the number of queued packets, Bytes their size.
func (q *FQ) Len() int   { return q.n }
func (q *FQ) Bytes() int { return q.bytes }

// FlowLen and FlowBytes describe one bucket's queue.
func (q *FQ) FlowLen(f int) int   { return int(q.flows[f].n) }
func (q *FQ) FlowBytes(f int) int { return q.flows[f].bytes }

// FlowSignals is how many packets of bucket f CoDel has signalled in its
// current dropping state (codel.State.Signals).
func (q *FQ) FlowSignals(f int) int { return q.flows[f].cd.Signals() }

// FlowSojourn is how long bucket f's oldest packet has waited, or 0.
func (q *FQ) FlowSojourn(now mono.Time, f int) time.Duration {
	fl := &q.flows[f]
	if fl.head < 0 {
		return 0
	}
	return now.Sub(q.slab[fl.head].enq)
}

// Stats returns the counters.
func (q *FQ) Stats() Stats { return q.stats }

// Enqueue appends pkt to the bucket of hash at now and returns the
// bucket. When the queue is full, the fattest flow loses its oldest
// packet (RFC 8290 §4.1.1), so a sparse flow's packet is never refused
// because of a bulk flow; only when pkt's own flow is the fattest is pkt
// itself refused (ok false, after Config.Drop).
func (q *FQ) Enqueue(now mono.Time, pkt []byte, hash uint64) (flow int, ok bool) {
	f := q.Bucket(hash)
	if fl := &q.flows[f]; fl.tail >= 0 && q.cfg.Supersedes != nil {
		if t := &q.slab[fl.tail]; q.cfg.Supersedes(pkt, t.pkt) {
			// In the older packet's place: it keeps its turn and its wait.
			old := t.pkt
			t.pkt = pkt
			fl.bytes += len(pkt) - len(old)
			q.bytes += len(pkt) - len(old)
			q.stats.Enqueued++
			q.stats.Superseded++
			q.cfg.drop(old)
			return f, true
		}
	}
	for q.free < 0 || q.cfg.LimitBytes > 0 && q.bytes+len(pkt) > q.cfg.LimitBytes && q.n > 0 {
		fat := q.fattest()
		if q.flows[f].bytes >= q.flows[fat].bytes {
			q.stats.TailDropped++
			q.cfg.drop(pkt)
			return f, false
		}
		e, _ := q.pop(fat)
		q.stats.TailDropped++
		q.cfg.drop(e.pkt)
	}
	i := q.free
	q.free = q.slab[i].next
	q.slab[i] = fqEntry{pkt: pkt, enq: now, next: -1}
	fl := &q.flows[f]
	if fl.tail >= 0 {
		q.slab[fl.tail].next = i
	} else {
		fl.head = i
	}
	fl.tail = i
	fl.n++
	fl.bytes += len(pkt)
	q.n++
	q.bytes += len(pkt)
	q.stats.Enqueued++
	if fl.list == listNone {
		fl.deficit = q.cfg.Quantum
		fl.list = listNew
		q.push(&q.newList, f)
	}
	return f, true
}

func (q *FQ) fattest() int {
	best := 0
	for i := range q.flows {
		if q.flows[i].bytes > q.flows[best].bytes {
			best = i
		}
	}
	return best
}

// pop removes bucket f's oldest packet.
func (q *FQ) pop(f int) (fqEntry, bool) {
	fl := &q.flows[f]
	i := fl.head
	if i < 0 {
		return fqEntry{}, false
	}
	e := q.slab[i]
	fl.head = e.next
	if fl.head < 0 {
		fl.tail = -1
	}
	fl.n--
	fl.bytes -= len(e.pkt)
	q.n--
	q.bytes -= len(e.pkt)
	q.slab[i] = fqEntry{next: q.free}
	q.free = i
	return e, true
}

func (q *FQ) push(l *fqList, f int) {
	q.flows[f].next = -1
	if l.tail >= 0 {
		q.flows[l.tail].next = int32(f)
	} else {
		l.head = int32(f)
	}
	l.tail = int32(f)
}

// unlink removes f, which follows prev (-1: f is the head), from l.
func (q *FQ) unlink(l *fqList, prev, f int32) {
	next := q.flows[f].next
	if prev < 0 {
		l.head = next
	} else {
		q.flows[prev].next = next
	}
	if l.tail == f {
		l.tail = prev
	}
	q.flows[f].next = -1
}

// Picker chooses the flow to serve. Pick is offered bucket f's oldest
// packet and how long it has waited, in service order (new flows first,
// then deficit round robin); it accepts by returning true, with how far
// CoDel should widen its limits for this flow (Allowance).
type Picker interface {
	Pick(f int, head []byte, sojourn time.Duration) (ok bool, a Allowance)
}

// Allowance widens CoDel for one flow.
type Allowance struct {
	// Extra is sojourn time allowed on top of Config.Target: a flow spread
	// over paths of different delays queues on purpose.
	Extra time.Duration
	// RTT is the flow's round-trip time when known (0 = unknown). CoDel's
	// Interval stands for the longest RTT it expects (RFC 8289); a flow
	// whose RTT is longer (a satellite path, or a 120 ms second path it
	// spreads onto) would be signalled before its window could react,
	// again and again, and run far below the path's rate. Such a flow gets
	// its RTT as interval and at least half of it as target: after a
	// window cut CUBIC refills the pipe only from that much queue (its
	// cut is 30 %). Over a 20 Mbit/s, 300 ms path one inner CUBIC flow got
	// 1.4 Mbit/s with the fixed interval and 16.5 with this (simulator,
	// TestSimLongPathAQM). The queue is the flow's own: FQ keeps other
	// flows from waiting behind it.
	RTT time.Duration
}

// maxVisit bounds how many flows one Dequeue offers to the Picker.
const maxVisit = 64

// Dequeue serves the first flow, in service order, that p accepts, and
// returns its oldest packet (CoDel may drop some of that flow's packets
// first, handing them to Config.Drop, or mark the one returned CE). It
// returns false when the queue is empty or no flow was accepted.
func (q *FQ) Dequeue(now mono.Time, p Picker) (pkt []byte, flow int, ok bool) {
	visited, steps := 0, 0
	for _, l := range [2]*fqList{&q.newList, &q.oldList} {
		prev := int32(-1)
		for f := l.head; f >= 0 && visited < maxVisit && steps < 4*maxVisit; steps++ {
			fl := &q.flows[f]
			next := fl.next
			if fl.n == 0 {
				// Emptied while on a list (CoDel drops, or served): a new
				// flow moves to the old list once, an old one leaves.
				q.unlink(l, prev, f)
				if l == &q.newList {
					fl.list = listOld
					q.push(&q.oldList, int(f))
				} else {
					fl.list = listNone
				}
				f = next
				continue
			}
			if fl.deficit <= 0 {
				// Its turn is over: a new quantum, at the end of the old
				// flows (the walk of the old list comes back to it).
				fl.deficit += q.cfg.Quantum
				q.unlink(l, prev, f)
				fl.list = listOld
				q.push(&q.oldList, int(f))
				if next < 0 && l == &q.oldList {
					next = q.oldList.head
					prev = -1
				}
				f = next
				continue
			}
			visited++
			accept, allow := p.Pick(int(f), q.slab[fl.head].pkt, now.Sub(q.slab[fl.head].enq))
			if !accept {
				prev, f = f, next
				continue
			}
			if pkt, ok := q.dequeueFlow(now, int(f), allow); ok {
				fl.deficit -= len(pkt)
				return pkt, int(f), true
			}
			// CoDel dropped the whole flow: it leaves at the next visit.
			prev, f = f, next
		}
	}
	return nil, 0, false
}

// dequeueFlow is CoDel (RFC 8289, internal/codel) on bucket f with target
// the flow's allowance.
func (q *FQ) dequeueFlow(now mono.Time, f int, allow Allowance) ([]byte, bool) {
	q.curFlow = f
	var ok bool
	if q.cfg.Disabled {
		_, _, ok = (*fqView)(q).Next(now)
	} else {
		p := q.params(allow)
		ok = q.flows[f].cd.Dequeue(now, p, (*fqView)(q))
	}
	e := q.cur
	q.cur = fqEntry{}
	if !ok {
		return nil, false
	}
	q.stats.Dequeued++
	return e.pkt, true
}

// params are CoDel's parameters for a flow with allowance a.
func (q *FQ) params(a Allowance) codel.Params {
	p := codel.Params{Target: q.cfg.Target + a.Extra, Interval: q.cfg.Interval, MTU: q.cfg.MTU}
	if a.RTT > p.Interval {
		p.Interval = a.RTT
		p.Target = max(p.Target, a.RTT/2)
	}
	return p
}

// fqView is bucket curFlow as internal/codel sees it.
type fqView FQ

// Next pops the flow's head as CoDel's current packet.
func (v *fqView) Next(now mono.Time) (time.Duration, int, bool) {
	q := (*FQ)(v)
	e, ok := q.pop(q.curFlow)
	q.cur = e
	if !ok {
		return 0, 0, false
	}
	return q.stats.sojourn(now, e.enq), q.flows[q.curFlow].bytes, true
}

// Signal marks the current packet CE if it is ECN-capable, else drops it.
func (v *fqView) Signal() bool {
	q := (*FQ)(v)
	if q.stats.signal(&q.cfg.Config, q.cur.pkt) {
		return true
	}
	q.cur = fqEntry{}
	return false
}

// Flush removes every packet, handing each to fn.
func (q *FQ) Flush(fn func([]byte)) {
	for f := range q.flows {
		for {
			e, ok := q.pop(f)
			if !ok {
				break
			}
			fn(e.pkt)
		}
		fl := &q.flows[f]
		fl.list, fl.next, fl.cd, fl.deficit = listNone, -1, codel.State{}, 0
	}
	q.newList, q.oldList = fqList{-1, -1}, fqList{-1, -1}
}
