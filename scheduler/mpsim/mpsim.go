// SPDX-License-Identifier: MIT

// Package mpsim runs a scheduler and a reorderer over simulated paths
// (internal/netsim) in virtual time, for tests and benchmarks. The sender
// is a model, not the real engine: packets get consecutive MP_SEQs, the
// scheduler picks paths, each path has a fixed congestion window of about
// one BDP plus a few packets (a well-behaved delay-based controller), and
// every data packet is acknowledged over the reverse path.
package mpsim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// PathConfig is one path: the data direction's link and the window model.
type PathConfig struct {
	Link netsim.LinkConfig
	// Cwnd is the window in bytes on the wire; 0 = one BDP (Rate × RTT)
	// + CwndExtra packets. Bytes rather than packets so that a mix of
	// packet sizes keeps the link busy.
	Cwnd      int
	CwndExtra int // default 4
	Prio      uint8
	Weight    int
}

// Flow is a traffic source. Rate > 0 makes it constant bit rate; Bulk
// makes it backlogged (it offers a packet whenever a path can take one).
type Flow struct {
	Name  string
	Class int
	Rate  float64 // bits per second
	Size  int     // packet size in bytes (default MSS)
	Bulk  bool
	Start time.Duration // when a CBR flow starts
}

// Config is one simulation run.
type Config struct {
	Seed  int64
	Paths []PathConfig
	// Schedulers names the scheduler of every class; class 0 is the default.
	Schedulers []string
	Reorderer  string
	Reorder    reorder.Config
	Flows      []Flow
	Duration   time.Duration // traffic is offered in [0, Duration)
	Warmup     time.Duration // packets offered earlier are not measured
	MSS        int           // default 1400
	// NoPathQueues models an engine without per-path queues: a packet
	// picked for a full path waits at the connection for that path.
	NoPathQueues bool
	// NoRTTInfo withholds the paths' RTTs from the reorderer, which then
	// has only its own arrival timing.
	NoRTTInfo bool
}

// FlowResult is what one flow saw, over measured packets.
type FlowResult struct {
	Name            string
	Offered, Lost   int     // packets; Lost = never delivered to the app
	Throughput      float64 // delivered bits per second
	OWD50, OWD99    time.Duration
	App50, App99    time.Duration // until the reorderer handed it over
	DeliveredUnique int
}

// Result summarises a run.
type Result struct {
	Capacity   float64 // sum of path rates, bits per second
	Throughput float64 // all flows, delivered to the app, bits per second
	Flows      []FlowResult
	// Reordering, over measured packets handed to the app.
	Delivered               int
	OutOfOrder              int
	Hold50, Hold99, Hold999 time.Duration
	Reorder                 reorder.Stats
	Sched                   []scheduler.Stats
	PathSent, PathDropped   []uint64
}

// OOOFraction is the fraction of delivered packets that came out of order.
func (r Result) OOOFraction() float64 {
	if r.Delivered == 0 {
		return 0
	}
	return float64(r.OutOfOrder) / float64(r.Delivered)
}

// overhead is what the tunnel adds to an inner packet on the wire: outer
// IPv4 (20) + UDP (8) + DCCP with MP_SEQ and options (about 32).
const overhead = 60

type pkt struct {
	seq     uint64
	flow    int
	size    int
	enq     mono.Time
	pathSeq uint64
	sentAt  mono.Time
}

type record struct {
	flow      int
	size      int
	enq       mono.Time
	arrived   mono.Time // first copy at the receiver, -1 = never
	delivered mono.Time // handed to the app, -1 = never
}

type path struct {
	id       int
	cfg      PathConfig
	link     *netsim.Link
	cwnd     int   // bytes
	target   int   // window after slow start, bytes
	inFlight int   // bytes
	sizes    []int // wire size by DCCP seq, to release acked bytes
	nextPS   uint64
	acked    uint64
	queue    []*pkt
	queued   int
	srtt     time.Duration
	rttvar   time.Duration
	minRTT   time.Duration
}

type class struct {
	sched scheduler.Scheduler
	queue []*pkt
	bulk  []int // bulk flow indexes
}

type run struct {
	cfg     Config
	sim     *netsim.Sim
	paths   []*path
	classes []*class
	ro      reorder.Reorderer
	nextSeq uint64
	recs    []record
	armed   mono.Time
	maxDel  uint64
	anyDel  bool
	holds   []time.Duration
	ooo     int
	view    []scheduler.Path
	dst     []int
	pumping bool

	atWarmup  reorder.Stats
	schedWarm []scheduler.Stats
}

// Run simulates cfg and returns its measurements.
func Run(cfg Config) (Result, error) {
	if cfg.MSS == 0 {
		cfg.MSS = 1400
	}
	if len(cfg.Schedulers) == 0 {
		cfg.Schedulers = []string{"rr"}
	}
	r := &run{cfg: cfg, sim: netsim.New(cfg.Seed), armed: mono.Never}
	ro, err := reorder.New(cfg.Reorderer, cfg.Reorder)
	if err != nil {
		return Result{}, err
	}
	r.ro = ro
	for i, name := range cfg.Schedulers {
		s, err := scheduler.New(name, scheduler.Config{MSS: cfg.MSS, PathQueues: !cfg.NoPathQueues})
		if err != nil {
			return Result{}, fmt.Errorf("class %d: %w", i, err)
		}
		r.classes = append(r.classes, &class{sched: s})
	}
	var capacity float64
	for i, pc := range cfg.Paths {
		p := &path{id: i, cfg: pc, acked: 0, nextPS: 1}
		if pc.Prio == 0 {
			p.cfg.Prio = 3
		}
		if pc.Weight == 0 {
			p.cfg.Weight = 1
		}
		p.cwnd = pc.Cwnd
		if p.cwnd == 0 {
			extra := pc.CwndExtra
			if extra == 0 {
				extra = 4
			}
			// RTT as the window sees it: both propagation delays, the
			// jitter (FIFO links keep near its maximum) and serialization.
			rtt := 2*pc.Link.Delay + pc.Link.Jitter + time.Duration(float64(cfg.MSS*8)/pc.Link.Rate*1e9)
			bdp := pc.Link.Rate / 8 * rtt.Seconds()
			p.cwnd = int(math.Ceil(bdp)) + extra*(cfg.MSS+overhead)
		}
		// Slow start from 10 packets: no line-rate burst of a whole
		// window into the link at time 0.
		p.target, p.cwnd = p.cwnd, min(p.cwnd, 10*(cfg.MSS+overhead))
		p.link = r.sim.NewLink(pc.Link, r.receive(p))
		capacity += pc.Link.Rate
		r.paths = append(r.paths, p)
	}
	for i, f := range cfg.Flows {
		if f.Class < 0 || f.Class >= len(r.classes) {
			return Result{}, fmt.Errorf("flow %s: class %d has no scheduler", f.Name, f.Class)
		}
		if f.Size == 0 {
			cfg.Flows[i].Size = cfg.MSS
		}
		if f.Bulk {
			r.classes[f.Class].bulk = append(r.classes[f.Class].bulk, i)
		}
		if f.Rate > 0 {
			r.startCBR(i)
		}
	}
	r.cfg = cfg
	r.sim.At(0, r.pump)
	r.updatePaths()
	r.sim.At(mono.Time(cfg.Warmup), func() {
		r.atWarmup = r.ro.Stats()
		for _, c := range r.classes {
			r.schedWarm = append(r.schedWarm, c.sched.Stats())
		}
	})
	end := mono.Time(cfg.Duration)
	r.sim.RunUntil(end.Add(2 * time.Second))
	return r.result(capacity), nil
}

func (r *run) startCBR(i int) {
	f := r.cfg.Flows[i]
	size := f.Size
	if size == 0 {
		size = r.cfg.MSS
	}
	gap := time.Duration(float64(size*8) / f.Rate * 1e9)
	end := mono.Time(r.cfg.Duration)
	var tick func()
	tick = func() {
		if r.sim.Now() >= end {
			return
		}
		c := r.classes[f.Class]
		c.queue = append(c.queue, &pkt{flow: i, size: size, enq: r.sim.Now()})
		r.pump()
		r.sim.After(gap, tick)
	}
	r.sim.At(mono.Time(f.Start), tick)
}

// updatePaths gives the reorderer the receiver's view of the paths.
func (r *run) updatePaths() {
	infos := make([]reorder.PathInfo, len(r.paths))
	for i, p := range r.paths {
		infos[i] = reorder.PathInfo{ID: i, Active: true}
		if !r.cfg.NoRTTInfo {
			infos[i].SRTT, infos[i].MinRTT, infos[i].RTTVar = p.srtt, p.minRTT, p.rttvar
		}
	}
	r.ro.SetPaths(infos)
	if r.sim.Now() < mono.Time(r.cfg.Duration).Add(2*time.Second) {
		r.sim.After(10*time.Millisecond, r.updatePaths)
	}
}

func (r *run) pathView() []scheduler.Path {
	r.view = r.view[:0]
	now := r.sim.Now()
	wire := r.cfg.MSS + overhead
	for _, p := range r.paths {
		r.view = append(r.view, scheduler.Path{
			ID: p.id, Usable: true, Prio: p.cfg.Prio, Weight: p.cfg.Weight,
			Cwnd: p.cwnd / wire, InFlight: p.inFlight / wire, CanSend: p.inFlight+p.queued < p.cwnd,
			SendTime: now, SRTT: p.srtt, RTTVar: p.rttvar, MinRTT: p.minRTT,
			PacingRate: p.cfg.Link.Rate / 8, Queued: p.queued,
		})
	}
	return r.view
}

// bulkRoom reports whether some path could send a bulk packet right away.
func (r *run) bulkRoom() bool {
	for _, p := range r.paths {
		if p.inFlight+p.queued < p.cwnd {
			return true
		}
	}
	return false
}

// pump offers queued and bulk packets to the schedulers, highest class
// first, until they hold.
func (r *run) pump() {
	if r.pumping {
		return
	}
	r.pumping = true
	defer func() { r.pumping = false }()
	now := r.sim.Now()
	end := mono.Time(r.cfg.Duration)
	for ci := len(r.classes) - 1; ci >= 0; ci-- {
		c := r.classes[ci]
		for {
			var head *pkt
			fresh := false
			switch {
			case len(c.queue) > 0:
				head = c.queue[0]
			case len(c.bulk) > 0 && now < end && r.bulkRoom():
				fi := c.bulk[int(r.nextSeq)%len(c.bulk)]
				head = &pkt{flow: fi, size: r.cfg.Flows[fi].Size, enq: now}
				fresh = true
			default:
			}
			if head == nil {
				break
			}
			backlog := 0
			for _, q := range c.queue {
				backlog += q.size
			}
			if fresh || len(c.bulk) > 0 {
				backlog += 64 * r.cfg.MSS // a backlogged source has more
			}
			r.dst = c.sched.Pick(now, r.pathView(), scheduler.Packet{Size: head.size, Class: ci, Backlog: max(backlog, head.size)}, r.dst[:0])
			if len(r.dst) == 0 {
				if fresh {
					c.queue = append(c.queue, head) // keep it for the retry
				}
				break
			}
			if !fresh {
				c.queue = c.queue[1:]
			}
			head.seq = r.nextSeq
			r.nextSeq++
			r.recs = append(r.recs, record{flow: head.flow, size: head.size, enq: head.enq, arrived: -1, delivered: -1})
			for _, id := range r.dst {
				cp := *head
				p := r.paths[id]
				p.queue = append(p.queue, &cp)
				p.queued += cp.size
				r.send(p)
			}
		}
	}
}

// send moves packets from the path queue into the network while the
// window allows.
func (r *run) send(p *path) {
	for len(p.queue) > 0 && p.inFlight < p.cwnd {
		k := p.queue[0]
		p.queue = p.queue[1:]
		p.queued -= k.size
		k.pathSeq = p.nextPS
		p.nextPS++
		k.sentAt = r.sim.Now()
		p.inFlight += k.size + overhead
		p.sizes = append(p.sizes, k.size+overhead)
		p.link.Send(netsim.Packet{Size: k.size + overhead, Meta: k})
	}
}

func (r *run) receive(p *path) func(netsim.Packet) {
	return func(np netsim.Packet) {
		k := np.Meta.(*pkt)
		now := r.sim.Now()
		rec := &r.recs[k.seq]
		if rec.arrived < 0 {
			rec.arrived = now
		}
		r.ro.Push(now, reorder.Item{Seq: k.seq, Path: p.id, PathSeq: k.pathSeq, Arrival: now})
		r.drain()
		// Acknowledge over the reverse path (propagation only).
		ps, sent := k.pathSeq, k.sentAt
		r.sim.After(p.cfg.Link.Delay, func() { r.ack(p, ps, sent) })
	}
}

func (r *run) ack(p *path, ps uint64, sent mono.Time) {
	// Everything up to ps is acknowledged or lost.
	for ; p.acked < ps; p.acked++ {
		p.inFlight -= p.sizes[p.acked]
		if p.cwnd < p.target {
			p.cwnd = min(p.target, p.cwnd+p.sizes[p.acked])
		}
	}
	rtt := r.sim.Now().Sub(sent)
	if p.srtt == 0 {
		p.srtt, p.rttvar, p.minRTT = rtt, rtt/2, rtt
	} else {
		d := p.srtt - rtt
		if d < 0 {
			d = -d
		}
		p.rttvar = (3*p.rttvar + d) / 4
		p.srtt = (7*p.srtt + rtt) / 8
		p.minRTT = min(p.minRTT, rtt)
	}
	r.send(p)
	r.pump()
}

func (r *run) drain() {
	now := r.sim.Now()
	for {
		it, ok := r.ro.Pop(now)
		if !ok {
			break
		}
		rec := &r.recs[it.Seq]
		rec.delivered = now
		if rec.enq >= mono.Time(r.cfg.Warmup) {
			r.holds = append(r.holds, now.Sub(it.Arrival))
			if r.anyDel && it.Seq < r.maxDel {
				r.ooo++
			}
		}
		if !r.anyDel || it.Seq > r.maxDel {
			r.maxDel, r.anyDel = it.Seq, true
		}
	}
	r.arm()
}

// arm keeps one simulator event at the reorderer's deadline.
func (r *run) arm() {
	d := r.ro.Deadline()
	if d == mono.Never || d == r.armed {
		return
	}
	r.armed = d
	r.sim.At(d, func() {
		if r.armed != d {
			return
		}
		r.armed = mono.Never
		r.ro.OnTimer(r.sim.Now())
		r.drain()
	})
}

func pct(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

func (r *run) result(capacity float64) Result {
	res := Result{Capacity: capacity, Reorder: since(r.ro.Stats(), r.atWarmup)}
	from, to := mono.Time(r.cfg.Warmup), mono.Time(r.cfg.Duration)
	secs := (to - from).Seconds()
	per := make([]struct {
		owd, app  []time.Duration
		off, lost int
		bytes     int
	}, len(r.cfg.Flows))
	for _, rec := range r.recs {
		if rec.enq < from || rec.enq >= to {
			continue
		}
		f := &per[rec.flow]
		f.off++
		if rec.arrived >= 0 {
			f.owd = append(f.owd, rec.arrived.Sub(rec.enq))
		}
		if rec.delivered < 0 {
			f.lost++
			continue
		}
		f.app = append(f.app, rec.delivered.Sub(rec.enq))
		f.bytes += rec.size
	}
	// CBR packets still queued at the sender never got a seq: count them
	// as offered and lost, so a scheduler cannot hide by holding.
	for _, c := range r.classes {
		for _, k := range c.queue {
			if k.enq >= from && k.enq < to && r.cfg.Flows[k.flow].Rate > 0 {
				per[k.flow].off++
				per[k.flow].lost++
			}
		}
	}
	for i, f := range per {
		slices.Sort(f.owd)
		slices.Sort(f.app)
		fr := FlowResult{Name: r.cfg.Flows[i].Name, Offered: f.off, Lost: f.lost,
			Throughput: float64(f.bytes*8) / secs, DeliveredUnique: len(f.app),
			OWD50: pct(f.owd, .5), OWD99: pct(f.owd, .99), App50: pct(f.app, .5), App99: pct(f.app, .99)}
		res.Throughput += fr.Throughput
		res.Flows = append(res.Flows, fr)
	}
	slices.Sort(r.holds)
	res.Delivered, res.OutOfOrder = len(r.holds), r.ooo
	res.Hold50, res.Hold99, res.Hold999 = pct(r.holds, .5), pct(r.holds, .99), pct(r.holds, .999)
	for i, c := range r.classes {
		st := c.sched.Stats()
		if i < len(r.schedWarm) {
			st.Holds -= r.schedWarm[i].Holds
			for id, n := range r.schedWarm[i].Picks {
				st.Picks[id] -= n
			}
		}
		res.Sched = append(res.Sched, st)
	}
	for _, p := range r.paths {
		st := p.link.Stats()
		res.PathSent = append(res.PathSent, st.Sent)
		res.PathDropped = append(res.PathDropped, st.DroppedLoss+st.DroppedQueue+st.DroppedOutage)
	}
	return res
}

// since returns the counters of s accumulated after w.
func since(s, w reorder.Stats) reorder.Stats {
	s.Delivered -= w.Delivered
	s.InOrder -= w.InOrder
	s.Held -= w.Held
	s.OutOfOrder -= w.OutOfOrder
	s.GapsSkipped -= w.GapsSkipped
	s.GapsLateArrive -= w.GapsLateArrive
	s.Duplicates -= w.Duplicates
	s.LateDropped -= w.LateDropped
	s.Overflow -= w.Overflow
	for i := range s.HoldHist {
		s.HoldHist[i] -= w.HoldHist[i]
	}
	return s
}
