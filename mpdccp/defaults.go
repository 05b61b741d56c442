// SPDX-License-Identifier: MIT

package mpdccp

import (
	"slices"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// Fallback implementations, registered under private names so that the
// engine works before (or without) the real ones in ccid/, scheduler/ and
// reorder/. resolve* prefer the real implementation when it is registered.
const (
	fallbackCCID      = "mpdccp-window"
	fallbackScheduler = "mpdccp-rr"
	fallbackReorderer = "mpdccp-passive"
)

func init() {
	if !slices.Contains(ccid.Names(), fallbackCCID) {
		ccid.Register(fallbackCCID, func(cfg ccid.Config) ccid.Controller { return newWindowCC(cfg) })
	}
	if !slices.Contains(scheduler.Names(), fallbackScheduler) {
		scheduler.Register(fallbackScheduler, func(scheduler.Config) scheduler.Scheduler { return newRRScheduler() })
	}
	if !slices.Contains(reorder.Names(), fallbackReorderer) {
		reorder.Register(fallbackReorderer, func(cfg reorder.Config) reorder.Reorderer { return newPassiveReorderer(cfg) })
	}
}

// resolveName maps a configured name to a registered one: the name itself
// when registered, else the fallback when name is the documented default.
func resolveName(name, def, fallback string, names []string) string {
	if name == "" {
		name = def
	}
	if slices.Contains(names, name) {
		return name
	}
	if name == def {
		return fallback
	}
	return name // let New report the unknown name
}

// ---------------------------------------------------------------------------
// windowCC is a minimal CCID2-like controller (RFC 4341): packet window,
// slow start and congestion avoidance, halving on loss at most once per
// window, RTO with backoff. It exists so that the engine can be tested before
// the real CCID2 lands.

type sentRec struct {
	seq    uint64
	at     mono.Time
	acked  bool
	lost   bool
	flight bool
}

type windowCC struct {
	cwnd, ssthresh int
	acc            int // acked packets counted towards the next increase
	pipe           int
	sent           []sentRec // ring, oldest first, in sequence order
	head, n        int
	srtt, rttvar   time.Duration
	rto            time.Duration
	rtoAt          mono.Time
	recoverSeq     uint64 // losses of packets sent before this do not reduce again
	haveRecover    bool
	highAcked      uint64
	haveHigh       bool
	st             ccid.State
}

func newWindowCC(cfg ccid.Config) *windowCC {
	w := &windowCC{cwnd: 3, ssthresh: 1 << 30, rto: time.Second, rtoAt: mono.Never, sent: make([]sentRec, 4096)}
	if cfg.InitialWindow > 0 {
		w.cwnd = cfg.InitialWindow
	}
	return w
}

func (w *windowCC) Name() string { return fallbackCCID }
func (w *windowCC) CCID() uint8  { return 2 }

func (w *windowCC) at(i int) *sentRec { return &w.sent[(w.head+i)%len(w.sent)] }

func (w *windowCC) OnPacketSent(now mono.Time, seq uint64, bytes int, inFlight bool) {
	w.st.PacketsSent++
	if !inFlight {
		return
	}
	if w.n == len(w.sent) { // forget the oldest record: treat as lost
		r := w.at(0)
		if r.flight && !r.acked && !r.lost {
			w.pipe--
		}
		w.head = (w.head + 1) % len(w.sent)
		w.n--
	}
	*w.at(w.n) = sentRec{seq: seq, at: now, flight: true}
	w.n++
	w.pipe++
	if w.rtoAt == mono.Never {
		w.rtoAt = now.Add(w.rto)
	}
}

// find returns the index of seq in the ring or -1 (binary search: the ring is in sequence order).
func (w *windowCC) find(seq uint64) int {
	lo, hi := 0, w.n
	for lo < hi {
		m := (lo + hi) / 2
		if seqLess(w.at(m).seq, seq) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < w.n && w.at(lo).seq == seq {
		return lo
	}
	return -1
}

func (w *windowCC) OnFeedback(now mono.Time, fb *ccid.Feedback) {
	newly := 0
	for _, r := range fb.Runs {
		if r.State == ccid.NotReceived {
			continue
		}
		for k := uint32(0); k < r.N; k++ {
			s := seqAdd(r.High, -int64(k))
			i := w.find(s)
			if i < 0 {
				if w.n > 0 && seqLess(s, w.at(0).seq) {
					break // older than anything tracked
				}
				continue
			}
			rec := w.at(i)
			if rec.acked {
				continue
			}
			if !rec.lost {
				w.pipe--
			}
			rec.acked = true
			newly++
			w.st.PacketsAcked++
			if !w.haveHigh || seqLess(w.highAcked, s) {
				w.highAcked, w.haveHigh = s, true
				w.rttSample(now.Sub(rec.at) - fb.Elapsed)
			}
			if r.State == ccid.ReceivedECNMarked {
				w.st.ECNMarks++
				w.congestion(now)
			}
		}
	}
	if newly == 0 {
		return
	}
	// Loss: a packet is lost when 3 packets sent after it were acked.
	later := 0
	for i := w.n - 1; i >= 0; i-- {
		rec := w.at(i)
		if rec.acked {
			later++
			continue
		}
		if !rec.lost && later >= 3 {
			rec.lost = true
			w.pipe--
			w.st.PacketsLost++
			if !w.haveRecover || !seqLess(rec.seq, w.recoverSeq) {
				w.congestion(now)
			}
		}
	}
	// Drop the acked/lost prefix.
	for w.n > 0 && (w.at(0).acked || w.at(0).lost) {
		w.head = (w.head + 1) % len(w.sent)
		w.n--
	}
	// Window growth.
	if w.cwnd < w.ssthresh {
		w.acc += newly
		for w.acc >= 2 {
			w.acc -= 2
			w.cwnd++
		}
	} else {
		w.acc += newly
		if w.acc >= w.cwnd {
			w.acc -= w.cwnd
			w.cwnd++
		}
	}
	if w.pipe > 0 {
		w.rtoAt = now.Add(w.rto)
	} else {
		w.rtoAt = mono.Never
	}
}

func (w *windowCC) congestion(now mono.Time) {
	w.cwnd = max(w.cwnd/2, 1)
	w.ssthresh = max(w.cwnd, 2)
	w.st.CongestionEvents++
	if w.n > 0 {
		w.recoverSeq, w.haveRecover = seqAdd(w.at(w.n-1).seq, 1), true
	}
}

func (w *windowCC) rttSample(d time.Duration) {
	if d <= 0 {
		d = time.Microsecond
	}
	if w.srtt == 0 {
		w.srtt, w.rttvar = d, d/2
	} else {
		diff := w.srtt - d
		if diff < 0 {
			diff = -diff
		}
		w.rttvar = (3*w.rttvar + diff) / 4
		w.srtt = (7*w.srtt + d) / 8
	}
	w.rto = min(max(w.srtt+4*w.rttvar, 200*time.Millisecond), 64*time.Second)
}

func (w *windowCC) OnTimer(now mono.Time) {
	if now < w.rtoAt {
		return
	}
	w.st.Timeouts++
	w.ssthresh = max(w.cwnd/2, 2)
	w.cwnd = 1
	w.acc = 0
	w.pipe = 0
	w.head, w.n = 0, 0
	w.rto = min(2*w.rto, 64*time.Second)
	w.rtoAt = mono.Never
}

func (w *windowCC) Deadline() mono.Time              { return w.rtoAt }
func (w *windowCC) CanSend(now mono.Time) bool       { return w.pipe < w.cwnd }
func (w *windowCC) SendTime(now mono.Time) mono.Time { return now }
func (w *windowCC) AckRatio() int                    { return max(1, min(2, (w.cwnd+1)/2)) }

func (w *windowCC) State() ccid.State {
	s := w.st
	s.Cwnd, s.InFlight, s.SRTT, s.RTTVar = w.cwnd, w.pipe, w.srtt, w.rttvar
	if w.ssthresh < 1<<30 {
		s.Ssthresh = w.ssthresh
	}
	s.Phase = "congestion-avoidance"
	if w.cwnd < w.ssthresh {
		s.Phase = "slow-start"
	}
	return s
}

// ---------------------------------------------------------------------------
// rrScheduler is plain round robin over usable paths with window room,
// skipping priority 0 and using lower priorities only when no primary
// path is usable.

type rrScheduler struct {
	next  int
	stats scheduler.Stats
}

func newRRScheduler() *rrScheduler {
	return &rrScheduler{stats: scheduler.Stats{Picks: map[int]uint64{}}}
}

func (r *rrScheduler) Name() string { return fallbackScheduler }

func (r *rrScheduler) Pick(now mono.Time, paths []scheduler.Path, p scheduler.Packet, dst []int) []int {
	best := uint8(0)
	for i := range paths {
		if paths[i].Usable && paths[i].Prio > best {
			best = paths[i].Prio
		}
	}
	if best >= 3 {
		best = 3 // all primaries share the load
	}
	if best == 0 {
		r.stats.Holds++
		return dst
	}
	for k := range paths {
		i := (r.next + k) % len(paths)
		pp := &paths[i]
		if pp.Usable && pp.CanSend && pp.Prio >= best {
			r.next = i + 1
			r.stats.Picks[pp.ID]++
			return append(dst, pp.ID)
		}
	}
	r.stats.Holds++
	return dst
}

func (r *rrScheduler) Stats() scheduler.Stats {
	s := scheduler.Stats{Holds: r.stats.Holds, Picks: make(map[int]uint64, len(r.stats.Picks))}
	for k, v := range r.stats.Picks {
		s.Picks[k] = v
	}
	return s
}

// ---------------------------------------------------------------------------
// passiveReorderer delivers packets as they arrive and only drops
// duplicates (redundant copies, replays), tracked in a sliding bitmap of
// MP_SEQ numbers.

const dupWindow = 1 << 14

type passiveReorderer struct {
	q       []reorder.Item // FIFO ring
	qh, qn  int
	high    uint64
	started bool
	seen    [dupWindow / 64]uint64
	st      reorder.Stats
}

func newPassiveReorderer(cfg reorder.Config) *passiveReorderer {
	return &passiveReorderer{q: make([]reorder.Item, 256)}
}

func (r *passiveReorderer) Name() string { return fallbackReorderer }

func (r *passiveReorderer) bit(s uint64) (*uint64, uint64) {
	i := s % dupWindow
	return &r.seen[i/64], 1 << (i % 64)
}

func (r *passiveReorderer) Push(now mono.Time, it reorder.Item) bool {
	if !r.started {
		r.started, r.high = true, it.Seq
		w, b := r.bit(it.Seq)
		*w |= b
	} else if d := seqDiff(it.Seq, r.high); d > 0 {
		if d >= dupWindow {
			r.seen = [dupWindow / 64]uint64{}
		} else {
			for s := seqAdd(r.high, 1); s != it.Seq; s = seqAdd(s, 1) {
				w, b := r.bit(s)
				*w &^= b
			}
		}
		r.high = it.Seq
		w, b := r.bit(it.Seq)
		*w |= b
	} else {
		if -d >= dupWindow {
			r.st.Duplicates++ // too old to tell: treat as a replay
			return false
		}
		w, b := r.bit(it.Seq)
		if *w&b != 0 {
			r.st.Duplicates++
			return false
		}
		*w |= b
		r.st.OutOfOrder++
	}
	if r.qn == len(r.q) {
		nq := make([]reorder.Item, 2*len(r.q))
		for i := 0; i < r.qn; i++ {
			nq[i] = r.q[(r.qh+i)%len(r.q)]
		}
		r.q, r.qh = nq, 0
	}
	r.q[(r.qh+r.qn)%len(r.q)] = it
	r.qn++
	return true
}

func (r *passiveReorderer) Pop(now mono.Time) (reorder.Item, bool) {
	if r.qn == 0 {
		return reorder.Item{}, false
	}
	it := r.q[r.qh]
	r.q[r.qh] = reorder.Item{}
	r.qh = (r.qh + 1) % len(r.q)
	r.qn--
	r.st.Delivered++
	r.st.InOrder++
	return it, true
}

func (r *passiveReorderer) Deadline() mono.Time               { return mono.Never }
func (r *passiveReorderer) OnTimer(now mono.Time)             {}
func (r *passiveReorderer) SetPaths(paths []reorder.PathInfo) {}
func (r *passiveReorderer) Stats() reorder.Stats              { s := r.st; s.Buffered = r.qn; return s }
