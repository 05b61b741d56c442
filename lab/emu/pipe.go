// SPDX-License-Identifier: MIT

package emu

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"

	"github.com/mptun/mptun/internal/codel"
	"github.com/mptun/mptun/internal/lossmodel"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ring"
)

// MaxFrame is the largest frame the emulator carries (offloads are off, so
// frames are at most one MTU plus the Ethernet and VLAN headers).
const MaxFrame = 2048

// Frame is one layer-2 frame inside the emulator.
type Frame struct {
	Buf []byte // len(Buf) is the frame; cap is MaxFrame

	arrive    mono.Time
	txEnd     mono.Time
	deliverAt mono.Time
	seq       uint64
	remaining int // bytes still to serialize (trace mode)
}

// Stats counts one direction's frames. Serialized bytes are what the link
// carried at layer 2, the basis of capacity accounting.
type Stats struct {
	InFrames, InBytes                 uint64
	SerializedFrames, SerializedBytes uint64
	DeliveredFrames, DeliveredBytes   uint64
	DroppedQueue, DroppedCoDel        uint64
	DroppedLoss, DroppedBlackhole     uint64
	Duplicated                        uint64
	MaxQueueBytes                     int
	MaxSojourn                        time.Duration // arrival to start of serialization
	NonEmptyQueue                     uint64        // arrivals that found a backlog

	// Filled in by Link: frames the kernel dropped before the emulator read
	// them (socket buffer full) and frames the egress device refused.
	SocketDrops, SendErrors uint64
	// Frames of MaxFrame bytes or more (truncated by the read: an offload
	// is on somewhere), dropped.
	DroppedOversize uint64
}

// Bin is the bytes serialized in one interval, for throughput plots.
type Bin struct {
	Start mono.Time
	Bytes uint64
}

// Event is one per-packet log record (Mahimahi-like: '+' arrival, '-'
// departure, 'd' drop) with time in ms since the pipe started.
type Event struct {
	At    mono.Time
	Kind  byte
	Size  int
	Delay time.Duration // departures: arrival to delivery
}

// Pipe is one direction of an emulated link, free of I/O: frames go in with
// Enqueue, time moves with Advance, and due frames come out of Pop.
type Pipe struct {
	cfg   Config
	start mono.Time
	rng   *rand.Rand

	queue      ring.Ring[*Frame] // the bottleneck's FIFO, head in service
	queueBytes int
	busy       bool // head of queue is being serialized (rate mode)

	oppIdx int64 // next trace opportunity (trace mode)
	credit int   // bytes left in the current opportunity

	line        frameHeap // delay line, by deliverAt then seq
	seq         uint64
	lastDeliver mono.Time
	ge          lossmodel.Chain
	codel       codel.State
	codelNow    mono.Time // the time CoDel is deciding at

	free []*Frame

	Stats    Stats
	BinWidth time.Duration
	Bins     []Bin
	// OnEvent, if set, receives every arrival, departure and drop.
	OnEvent func(Event)
}

// NewPipe returns a pipe starting at start with its own seeded randomness.
func NewPipe(cfg Config, start mono.Time, seed uint64) *Pipe {
	p := &Pipe{start: start, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), BinWidth: 100 * time.Millisecond}
	p.SetConfig(cfg, start)
	return p
}

// Config returns the current configuration.
func (p *Pipe) Config() Config { return p.cfg }

// SetConfig changes the link at now. A frame in service finishes at the old
// rate; frames already in the delay line keep their delivery time.
func (p *Pipe) SetConfig(cfg Config, now mono.Time) {
	oldTrace := p.cfg.Trace
	p.cfg = cfg
	if cfg.Trace != nil && cfg.Trace != oldTrace {
		p.oppIdx = cfg.Trace.firstAtOrAfter(now.Sub(p.start))
		p.credit = 0
	}
	if cfg.Trace == nil && oldTrace != nil && p.busy {
		// From a trace to a rate: the head's remaining bytes go at the rate.
		f := *p.queue.Front()
		f.txEnd = now.Add(serialization(f.remaining, cfg.Rate))
	}
}

// GetFrame returns an empty frame buffer; frames are recycled with PutFrame,
// so the steady state does not allocate.
func (p *Pipe) GetFrame() *Frame {
	if n := len(p.free); n > 0 {
		f := p.free[n-1]
		p.free = p.free[:n-1]
		f.Buf = f.Buf[:0]
		return f
	}
	return &Frame{Buf: make([]byte, 0, MaxFrame)}
}

// PutFrame recycles a frame.
func (p *Pipe) PutFrame(f *Frame) { p.free = append(p.free, f) }

func (p *Pipe) emit(now mono.Time, kind byte, size int, d time.Duration) {
	if p.OnEvent != nil {
		p.OnEvent(Event{At: now - p.start, Kind: kind, Size: size, Delay: d})
	}
}

// QueueBytes is the backlog, including the frame in service.
func (p *Pipe) QueueBytes() int { return p.queueBytes }

func (p *Pipe) queueLen() int { return p.queue.Len() }

// Enqueue offers a frame that arrived at now. The pipe owns f afterwards.
func (p *Pipe) Enqueue(now mono.Time, f *Frame) {
	p.Advance(now) // serve what was due first, so f cannot use a past opportunity
	size := len(f.Buf)
	if size >= MaxFrame {
		p.Stats.DroppedOversize++
		p.PutFrame(f)
		return
	}
	p.Stats.InFrames++
	p.Stats.InBytes += uint64(size)
	p.emit(now, '+', size, 0)
	if p.cfg.Blackhole {
		p.Stats.DroppedBlackhole++
		p.emit(now, 'd', size, 0)
		p.PutFrame(f)
		return
	}
	if (p.cfg.QueueBytes > 0 && p.queueBytes+size > p.cfg.QueueBytes) ||
		(p.cfg.QueuePackets > 0 && p.queueLen() >= p.cfg.QueuePackets) {
		p.Stats.DroppedQueue++
		p.emit(now, 'd', size, 0)
		p.PutFrame(f)
		return
	}
	if p.queueLen() > 0 {
		p.Stats.NonEmptyQueue++
	}
	f.arrive = now
	f.remaining = size
	p.queueBytes += size
	if p.queueBytes > p.Stats.MaxQueueBytes {
		p.Stats.MaxQueueBytes = p.queueBytes
	}
	p.queue.Push(f)
	if p.queueLen() == 1 {
		p.startService(now)
	}
}

// startService begins serializing the queue head at time t (rate mode), after
// CoDel has had its say.
func (p *Pipe) startService(t mono.Time) {
	if c := p.cfg.CoDel; c != nil {
		p.codelNow = t
		if !p.codel.Dequeue(t, codel.Params{Target: c.Target, Interval: c.Interval, MTU: TraceMTU}, (*codelView)(p)) {
			p.busy = false
			return
		}
	}
	if p.queueLen() == 0 {
		p.busy = false
		return
	}
	f := *p.queue.Front()
	t = max(t, f.arrive)
	if so := t.Sub(f.arrive); so > p.Stats.MaxSojourn {
		p.Stats.MaxSojourn = so
	}
	p.busy = true
	if p.cfg.Trace != nil {
		if p.credit == 0 {
			// Opportunities while the queue was empty are wasted.
			if min := p.cfg.Trace.firstAtOrAfter(t.Sub(p.start)); p.oppIdx < min {
				p.oppIdx = min
			}
		}
		return
	}
	f.txEnd = t.Add(serialization(len(f.Buf), p.cfg.Rate))
}

// codelView is the bottleneck queue as internal/codel sees it: the head
// is the frame about to be serialized; a CoDel signal drops it.
type codelView Pipe

func (v *codelView) Next(now mono.Time) (time.Duration, int, bool) {
	p := (*Pipe)(v)
	if p.queueLen() == 0 {
		return 0, 0, false
	}
	f := *p.queue.Front()
	return max(now.Sub(f.arrive), 0), p.queueBytes - len(f.Buf), true
}

func (v *codelView) Signal() bool {
	p := (*Pipe)(v)
	f := p.popHead()
	p.Stats.DroppedCoDel++
	p.emit(p.codelNow, 'd', len(f.Buf), 0)
	p.PutFrame(f)
	return false
}

func (p *Pipe) popHead() *Frame {
	f, _ := p.queue.Pop()
	p.queueBytes -= len(f.Buf)
	return f
}

func (p *Pipe) oppTime(i int64) mono.Time {
	return p.start.Add(p.cfg.Trace.opp(i))
}

func (p *Pipe) traceCapacity() int {
	s := p.cfg.TraceScale
	if s == 0 {
		s = 1
	}
	return int(math.Round(TraceMTU * s))
}

// Advance runs the link up to now: frames finish serialization and enter the
// delay line.
func (p *Pipe) Advance(now mono.Time) {
	for p.busy {
		if p.cfg.Trace != nil {
			t := p.oppTime(p.oppIdx)
			if t > now {
				return
			}
			if p.credit == 0 {
				p.credit = p.traceCapacity()
			}
			for p.queueLen() > 0 && p.credit > 0 {
				f := *p.queue.Front()
				if f.remaining > p.credit {
					f.remaining -= p.credit
					p.credit = 0
					break
				}
				p.credit -= f.remaining
				f.remaining = 0
				p.popHead()
				f.txEnd = t
				p.serialized(f)
				if p.queueLen() > 0 {
					p.startService(t)
				}
			}
			// Bytes left in an opportunity with nothing queued are wasted,
			// as in Mahimahi.
			p.credit = 0
			p.oppIdx++
			if p.queueLen() == 0 {
				p.busy = false
			}
			continue
		}
		f := *p.queue.Front()
		if f.txEnd > now {
			return
		}
		p.popHead()
		p.serialized(f)
		p.startService(f.txEnd)
	}
}

// serialized moves a frame that left the bottleneck into the delay line,
// applying loss, duplication, jitter and reordering.
func (p *Pipe) serialized(f *Frame) {
	size := len(f.Buf)
	p.Stats.SerializedFrames++
	p.Stats.SerializedBytes += uint64(size)
	p.addBin(f.txEnd, size)
	if p.lost() {
		p.Stats.DroppedLoss++
		p.emit(f.txEnd, 'd', size, 0)
		p.PutFrame(f)
		return
	}
	if p.cfg.Duplicate > 0 && p.rng.Float64() < p.cfg.Duplicate {
		d := p.GetFrame()
		d.Buf = append(d.Buf, f.Buf...)
		d.arrive, d.txEnd = f.arrive, f.txEnd
		p.Stats.Duplicated++
		p.toLine(d)
	}
	p.toLine(f)
}

func (p *Pipe) lost() bool {
	if p.cfg.Loss > 0 && p.rng.Float64() < p.cfg.Loss {
		return true
	}
	if g := p.cfg.GE; g != nil {
		return p.ge.Lost(g, p.rng)
	}
	return false
}

func (p *Pipe) toLine(f *Frame) {
	at := f.txEnd.Add(p.cfg.Delay)
	if p.cfg.Jitter > 0 {
		at = at.Add(time.Duration(p.rng.Int64N(int64(p.cfg.Jitter) + 1)))
	}
	reorder := p.cfg.Reorder > 0
	if reorder && p.rng.Float64() < p.cfg.Reorder {
		extra := p.cfg.ReorderExtra
		if extra == 0 {
			extra = max(p.cfg.Delay/2, time.Millisecond)
		}
		at = at.Add(extra)
	} else if !reorder && at < p.lastDeliver {
		at = p.lastDeliver // jitter and delay drops keep FIFO order
	}
	if at > p.lastDeliver {
		p.lastDeliver = at
	}
	f.deliverAt = at
	p.seq++
	f.seq = p.seq
	heap.Push(&p.line, f)
}

func (p *Pipe) addBin(t mono.Time, size int) {
	if p.BinWidth <= 0 {
		return
	}
	start := p.start + mono.Time(int64(t-p.start)/int64(p.BinWidth)*int64(p.BinWidth))
	if n := len(p.Bins); n > 0 && p.Bins[n-1].Start == start {
		p.Bins[n-1].Bytes += uint64(size)
		return
	}
	// Fill idle intervals with zero bins so plots show outages.
	if n := len(p.Bins); n > 0 {
		for s := p.Bins[n-1].Start.Add(p.BinWidth); s < start; s = s.Add(p.BinWidth) {
			p.Bins = append(p.Bins, Bin{Start: s})
		}
	}
	p.Bins = append(p.Bins, Bin{Start: start, Bytes: uint64(size)})
}

// Pop returns the next frame due at now, or nil. The caller hands it back
// with PutFrame after sending it.
func (p *Pipe) Pop(now mono.Time) *Frame {
	for len(p.line) > 0 && p.line[0].deliverAt <= now {
		f := heap.Pop(&p.line).(*Frame)
		if p.cfg.Blackhole {
			p.Stats.DroppedBlackhole++
			p.emit(now, 'd', len(f.Buf), 0)
			p.PutFrame(f)
			continue
		}
		p.Stats.DeliveredFrames++
		p.Stats.DeliveredBytes += uint64(len(f.Buf))
		p.emit(f.deliverAt, '-', len(f.Buf), f.deliverAt.Sub(f.arrive))
		return f
	}
	return nil
}

// NextDeadline is when Advance or Pop next has work, or mono.Never.
func (p *Pipe) NextDeadline() mono.Time {
	d := mono.Never
	if p.busy {
		if p.cfg.Trace != nil {
			d = p.oppTime(p.oppIdx)
		} else {
			d = (*p.queue.Front()).txEnd
		}
	}
	if len(p.line) > 0 && p.line[0].deliverAt < d {
		d = p.line[0].deliverAt
	}
	return d
}

type frameHeap []*Frame

func (h frameHeap) Len() int { return len(h) }
func (h frameHeap) Less(i, j int) bool {
	if h[i].deliverAt != h[j].deliverAt {
		return h[i].deliverAt < h[j].deliverAt
	}
	return h[i].seq < h[j].seq
}
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *frameHeap) Push(x any)   { *h = append(*h, x.(*Frame)) }
func (h *frameHeap) Pop() any {
	old := *h
	n := len(old)
	f := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return f
}
