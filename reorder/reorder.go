// SPDX-License-Identifier: MIT

// Package reorder puts packets that arrived over several paths back into
// overall (MP_SEQ) order at the receiver. It is pure logic: the engine
// passes the time in, and asks for the next deadline so that held packets
// are released even when nothing else arrives.
package reorder

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/registry"
)

// Item is one received inner packet. Buf is owned by the reorderer from a
// successful Push until Pop returns it.
type Item struct {
	Seq  uint64 // MP_SEQ, 48-bit, wraps
	Path int    // path id it arrived on
	// PathSeq numbers the path's data packets in the order it sent them
	// (the engine derives it from DCCP sequence numbers and NDP Count): a
	// jump is a loss, a packet below the path's last one came late.
	PathSeq uint64
	Arrival mono.Time // when it arrived
	Buf     []byte
	// Urgent packets (a traffic class: VoIP, say) are delivered at once,
	// neither waiting for gaps nor equalised; their MP_SEQ still counts as
	// received, so that nothing waits for it and a second copy is a
	// duplicate. Their own order is their application's business (RTP has
	// sequence numbers and a jitter buffer).
	Urgent bool
	// PathOrdered is the sender's word (mptun's empty MP_EXP) that the
	// packet's flow has nothing in flight on another path: it is delivered
	// as soon as its own path has no unresolved loss before it and its flow
	// has nothing held here, without waiting for other paths' gaps. Flows
	// that stay on one path (pings, short transfers, a flow one path
	// carries) thus never wait for a slower path.
	PathOrdered bool
}

// PathInfo is what the engine knows about a receiving path.
type PathInfo struct {
	ID     int
	Active bool
	// SRTT and MinRTT are the subflow's own RTT estimates; PeerRTT is the
	// last MP_RTT the peer reported for that path (0 if none).
	SRTT    time.Duration
	MinRTT  time.Duration
	RTTVar  time.Duration
	PeerRTT time.Duration
}

// Reorderer restores MP_SEQ order.
type Reorderer interface {
	// Name is the config name, e.g. "adaptive".
	Name() string
	// Push offers a received packet. It returns false when the packet is
	// refused (a duplicate, or late and configured to drop); the caller
	// keeps the buffer then.
	Push(now mono.Time, it Item) bool
	// Pop returns the next packet ready for delivery, if any, in delivery
	// order. Call it until it returns false after every Push and OnTimer.
	Pop(now mono.Time) (Item, bool)
	// Deadline is when OnTimer must next run, or mono.Never.
	Deadline() mono.Time
	// OnTimer releases packets whose hold time has expired.
	OnTimer(now mono.Time)
	// SetPaths updates the per-path delay information.
	SetPaths(paths []PathInfo)
	// Stats returns the decision counters.
	Stats() Stats
}

// Stats counts reordering decisions.
type Stats struct {
	Delivered      uint64
	InOrder        uint64 // delivered without waiting
	Held           uint64 // delivered after waiting in the buffer
	OutOfOrder     uint64 // delivered with a lower MP_SEQ than one already delivered
	Urgent         uint64 // delivered at once (Item.Urgent), not counted in the others
	GapsSkipped    uint64 // sequence numbers given up on
	GapsLateArrive uint64 // skipped sequence numbers that arrived later
	Duplicates     uint64
	LateDropped    uint64
	Overflow       uint64 // skips forced by the buffer limit
	PathOrdered    uint64 // delivered at once by path order (Item.PathOrdered), not counted in InOrder/Held
	Holes          uint64 // losses found in a path's sequence
	NACKs          uint64 // repair requests (PollNACK), first ones and repeats
	Repaired       uint64 // gaps of a hole filled after a NACK
	RepairGivenUp  uint64 // gaps of a hole skipped after the last NACK
	Buffered       int    // packets held now
	// HoldHist counts hold times in buckets: bucket i counts holds in
	// [HoldBuckets[i-1], HoldBuckets[i]).
	HoldHist [len(HoldBuckets) + 1]uint64
}

// HoldBuckets are the upper bounds of the hold-time histogram buckets.
var HoldBuckets = [...]time.Duration{
	0, 100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	200 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// Config parameterises reorderers.
type Config struct {
	// MaxHold caps the time a packet waits for a gap (fixed: the hold time).
	MaxHold time.Duration
	// BufferLimit is the most packets held; beyond it the oldest gap is skipped.
	BufferLimit int
	// DropLate drops packets older than what was already delivered instead
	// of delivering them out of order.
	DropLate bool
	// IdleFlush releases everything when nothing arrived for this long.
	IdleFlush time.Duration
	// NoEarlyLoss turns off early loss detection (gaps then wait for
	// their timer); for ablation studies.
	NoEarlyLoss bool
	// HoldGaps makes adaptive and equalize hold a gap for the full
	// MaxHold, as fixed does, while keeping their other behaviour: the
	// sender repairs losses (mpdccp Config.Retransmit) and the repair
	// takes about a round trip to arrive.
	HoldGaps bool
	// Margin is the jitter allowance added to the adaptive and equalize
	// hold times on top of the estimated delay difference.
	Margin time.Duration
	// Repair says the sender repairs losses (mpdccp Config.Retransmit): a
	// gap known lost on a path (a hole in its sequence) waits for the
	// repair, which PollNACK asks for at once, instead of being skipped;
	// holds include the repair's round trip.
	Repair bool
}

// NACK asks the sender to repair the data packets a path lost between
// two of its packets, named by their MP_SEQs (Before < lost < After); or,
// with Path -1, the MP_SEQs between Before and After, on whatever path
// they were sent (no path's sequence showed them lost, yet every path is
// past them).
type NACK struct {
	Path          int
	Before, After uint64
}

// NACKer is implemented by reorderers that detect losses per path and
// want them repaired (Config.Repair). The engine polls it after every
// Push and timer and sends each NACK to the peer on its fastest path.
type NACKer interface {
	PollNACK(now mono.Time) (NACK, bool)
}

// Shrinker is implemented by reorderers whose window can shrink. The
// engine calls Shrink when a connection has idled a while; the window
// grows back on demand.
type Shrinker interface {
	Shrink()
}

// Defaults used for zero Config fields. With Repair and no MaxHold the
// hold limit follows the paths (see buffer.holdCap).
const (
	DefaultMaxHold     = 100 * time.Millisecond
	DefaultBufferLimit = 2048
	DefaultMargin      = 2 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.MaxHold <= 0 && !c.Repair {
		c.MaxHold = DefaultMaxHold
	}
	if c.BufferLimit <= 0 {
		c.BufferLimit = DefaultBufferLimit
	}
	if c.IdleFlush <= 0 && c.MaxHold > 0 {
		c.IdleFlush = 2 * c.MaxHold
	}
	if c.Margin <= 0 {
		c.Margin = DefaultMargin
	}
	return c
}

// Factory builds a reorderer.
type Factory func(cfg Config) Reorderer

var registered = registry.New[Factory]("reorderer")

// Register makes a reorderer available under name; implementations call it
// from their init functions.
func Register(name string, f Factory) { registered.Register(name, f) }

// New returns a new reorderer by its config name.
func New(name string, cfg Config) (Reorderer, error) {
	f, err := registered.Lookup(name)
	if err != nil {
		return nil, err
	}
	return f(cfg), nil
}

// Names lists the registered reorderers.
func Names() []string { return registered.Names() }
