// SPDX-License-Identifier: MIT

// Package scheduler decides which subflow(s) carry the next inner packet.
// Schedulers are pure logic fed by the congestion controllers' view of each
// path; the engine asks before every data packet.
package scheduler

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/registry"
)

// Path is the engine's view of one subflow, refreshed before each Pick.
type Path struct {
	ID       int   // stable path id (index in the connection's path table)
	Usable   bool  // established and not failed
	Prio     uint8 // MP_PRIO: 0 never, 1 standby, 2 secondary, >=3 primary (default 3)
	Weight   int   // configured weight for weighted round robin (>=1)
	Cwnd     int   // packets
	InFlight int   // packets
	CanSend  bool  // the window has room now
	// SendTime is when pacing lets the next packet leave.
	SendTime   mono.Time
	SRTT       time.Duration
	RTTVar     time.Duration
	MinRTT     time.Duration
	PacingRate float64 // bytes per second (0 = unknown)
	// Rate is the controller's estimate of the path's bandwidth in bytes
	// per second (BBR's model, CCID2's window per RTT; 0 = unknown).
	// Unlike the pacing rate it does not swing with probing phases.
	Rate float64
	// RateMeasured: Rate is the path's capacity, measured while the
	// controller filled the path (ccid.State.RateMeasured); else it is
	// what an idle path happened to carry.
	RateMeasured bool
	// Queued is the number of bytes already queued on this path and not
	// yet sent.
	Queued int
	// OWD is the path's one-way delay without queueing (half its minimum
	// RTT), the base of the delay comparisons between paths.
	OWD time.Duration
	// Loss is the fraction of the path's packets recently lost (0..1).
	Loss float64
	// OutQueue is the queueing delay on the way to the peer: the RTT's
	// excess over its minimum less the way back's, measured from the
	// peer's timestamps; 0 when unknown. Unlike the RTT it tells a full
	// uplink from a full downlink.
	OutQueue time.Duration
}

// Packet describes the inner packet being scheduled.
type Packet struct {
	Size int
	// Class is the traffic class chosen by the classifier rules (0 = default).
	Class int
	// Backlog is the number of bytes waiting at the connection level,
	// this packet included. ECF uses it to decide whether the slow path is
	// needed at all; 0 means unknown, and ECF then never holds.
	Backlog int
}

// Scheduler picks paths for a packet.
type Scheduler interface {
	// Name is the config name, e.g. "rr".
	Name() string
	// Pick appends to dst the ids of the paths that should carry p and
	// returns it. An empty result means "hold the packet for now": no path
	// should take it yet (all windows full, or waiting for a faster path
	// is better). The engine then retries when a window opens or at
	// RetryAt.
	Pick(now mono.Time, paths []Path, p Packet, dst []int) []int
	// Stats returns per-path choice counters, keyed by path id.
	Stats() Stats
}

// FlowPicker is implemented by schedulers that place whole flows rather
// than single packets (`flow`). The engine keeps a queue per flow bucket
// and offers each bucket's oldest packet in service order; PickFlow
// returns the path for it, or false to leave the flow waiting (another
// flow may go meanwhile). extra is the queueing the flow may build on
// purpose before the send queue's AQM acts: a flow waits for its fast
// path until that wait exceeds what a slower path would add.
type FlowPicker interface {
	PickFlow(now mono.Time, paths []Path, f FlowPacket) FlowDecision
}

// Shrinker is implemented by schedulers with per-flow state. The engine
// calls Shrink when its connection has carried no data for a while (every
// flow would start afresh anyway); the state grows back on demand.
type Shrinker interface {
	Shrink()
}

// FlowDecision is PickFlow's answer.
type FlowDecision struct {
	OK   bool
	Path int // path id, when OK
	// Extra is the queueing the flow may build on purpose (see FlowPicker),
	// for its AQM.
	Extra time.Duration
	// RTT is the round trip the flow's packets take without queueing,
	// over the paths it may use (0 = unknown): its send queue's AQM waits
	// that long for the flow to react (aqm.Allowance).
	RTT time.Duration
	// RetryIn, when not OK and > 0, is when the flow's wait will have grown
	// enough for a ready slower path to take it.
	RetryIn time.Duration
	// Yielded: not OK because FlowPacket.FirstPass asks spread flows to
	// wait; the engine then offers the flows a second time.
	Yielded bool
}

// FlowPacket describes a flow's oldest queued packet for PickFlow.
type FlowPacket struct {
	Flow    int           // the flow's bucket (a small index, stable while the flow lives)
	Size    int           // bytes
	Sojourn time.Duration // how long it has waited
	// Overhead is what the tunnel adds to the packet, in the bytes the
	// paths' rate estimates count (its DCCP header and options).
	Overhead int
	// FirstPass: the engine offers the flows with FirstPass set first,
	// and a second time without it only if a flow yielded. A flow spread
	// over paths for capacity yields in the first pass (Yielded): the
	// flows kept on one path (web objects, requests, interactive traffic)
	// take free slots first and the spread flow the rest, so its backlog
	// goes to the slower paths rather than delaying them.
	FirstPass bool
	// Signals is how many of the flow's packets the send queue's AQM has
	// dropped or marked since it last let the flow's queue drain: a flow
	// that backs off keeps it small, a constant-rate stream does not.
	Signals int
}

// Stats counts decisions.
type Stats struct {
	Picks map[int]uint64 // packets assigned per path id
	Holds uint64         // Pick calls that returned no path
	// Switches counts changes of the active path (active-standby).
	Switches uint64
}

// Config parameterises schedulers. The zero value gives the defaults.
type Config struct {
	// MSS is the packet size assumed when converting windows to bytes
	// (default 1400).
	MSS int
	// PathQueues says the engine keeps a queue per path: a packet picked
	// for a path whose window is full waits there (and Path.Queued counts
	// it). Only then do otias and redundant pick full paths; without it
	// they choose among paths with room, as every other scheduler does.
	PathQueues bool
	// ECFBeta is ECF's hysteresis: once it has decided to wait for the
	// fast path it keeps waiting until the slow path is better by this
	// fraction (default 0.1).
	ECFBeta float64
}

func (c Config) withDefaults() Config {
	if c.MSS <= 0 {
		c.MSS = 1400
	}
	if c.ECFBeta <= 0 {
		c.ECFBeta = 0.1
	}
	return c
}

// Factory builds a scheduler.
type Factory func(cfg Config) Scheduler

var registered = registry.New[Factory]("scheduler")

// Register makes a scheduler available under name; implementations call it
// from their init functions.
func Register(name string, f Factory) { registered.Register(name, f) }

// New returns a new scheduler by its config name.
func New(name string, cfg Config) (Scheduler, error) {
	f, err := registered.Lookup(name)
	if err != nil {
		return nil, err
	}
	return f(cfg), nil
}

// Names lists the registered schedulers.
func Names() []string { return registered.Names() }
