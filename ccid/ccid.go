// SPDX-License-Identifier: MIT

// Package ccid holds the per-subflow congestion controllers (CCID2, BBR and
// a rate-capped "none") behind one interface. It is pure logic: the engine
// passes the time in and asks for deadlines; nothing here sleeps or spawns.
package ccid

import (
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/registry"
)

// AckState is the two-bit state of an Ack Vector cell (RFC 4340 §11.4).
type AckState uint8

const (
	Received          AckState = 0
	ReceivedECNMarked AckState = 1
	NotReceived       AckState = 3
)

// AckRun is one decoded Ack Vector cell: the N sequence numbers
// High, High-1, …, High-N+1 (modulo 2^48) all have State.
type AckRun struct {
	High  uint64
	N     uint32
	State AckState
}

// Feedback is what a subflow's sender learns from one acknowledging packet.
type Feedback struct {
	// AckNo is the Ack Number of the packet: the peer's greatest sequence
	// number received (GSR).
	AckNo uint64
	// Runs is the Ack Vector, newest first, starting at AckNo. It is only
	// valid during the call.
	Runs []AckRun
	// Elapsed is the peer's Elapsed Time option, or 0.
	Elapsed time.Duration
	// Size is the size of the acknowledging packet on the wire, in bytes.
	Size int
}

// Controller is one subflow's sender-side congestion controller.
//
// The engine calls OnPacketSent for every packet it sends on the subflow
// (pure Acks too: every DCCP packet consumes a sequence number, but only
// packets with CountsInFlight take window space), OnFeedback for every
// acknowledgement, and OnTimer when Deadline has passed. It asks CanSend and
// SendTime before each data packet.
type Controller interface {
	// Name is the config name, e.g. "ccid2".
	Name() string
	// CCID is the number negotiated with the CCID feature (RFC 4340 §10).
	CCID() uint8

	// OnPacketSent records a packet sent at now with DCCP sequence number
	// seq and wire size bytes. inFlight is false for packets that do not
	// count against the window (pure Acks, Syncs).
	OnPacketSent(now mono.Time, seq uint64, bytes int, inFlight bool)
	// OnFeedback processes an Ack Vector received at now.
	OnFeedback(now mono.Time, fb *Feedback)
	// OnTimer runs the retransmission timer and similar; the engine calls
	// it when now >= Deadline().
	OnTimer(now mono.Time)
	// Deadline is when OnTimer must next run, or mono.Never.
	Deadline() mono.Time

	// CanSend reports whether the window has room for another data packet.
	CanSend(now mono.Time) bool
	// SendTime is the earliest time the next data packet may leave (pacing);
	// a time <= now means at once.
	SendTime(now mono.Time) mono.Time

	// AckRatio is the Ack Ratio the controller wants the peer to use
	// (RFC 4341 §6); the engine negotiates changes with feature 5.
	AckRatio() int

	// State is a snapshot for metrics and schedulers.
	State() State
}

// State is a controller's view of its path.
type State struct {
	Cwnd         int // congestion window, packets
	InFlight     int // packets sent, not yet acknowledged or declared lost
	Ssthresh     int // packets; 0 when not applicable
	SRTT         time.Duration
	RTTVar       time.Duration
	MinRTT       time.Duration
	PacingRate   float64 // bytes per second; 0 when not pacing
	DeliveryRate float64 // bytes per second, recent estimate
	// RateMeasured says DeliveryRate is the path's capacity: the
	// controller has filled the path (BBR left Startup, CCID2 had a
	// congestion event). Before, it is only what the path happened to
	// carry (pings, acks, a handshake), which is noise between two idle
	// paths.
	RateMeasured bool
	Phase        string // e.g. "slow-start", "congestion-avoidance", "startup", "probe-bw"

	PacketsSent      uint64
	PacketsAcked     uint64
	PacketsLost      uint64
	ECNMarks         uint64
	CongestionEvents uint64
	SpuriousEvents   uint64 // congestion events later undone because the "lost" packet arrived
	Timeouts         uint64

	// Pacing error: how late packets left compared with the release time
	// SendTime gave (the data path's timer error).
	PacingLateMean time.Duration
	PacingLateMax  time.Duration
}

// PathRestorer is implemented by controllers that restart after an
// outage. The engine calls OnPathRestored when it hears again from a path
// it had declared failed: packets sent into the outage are gone, and the
// bounds learnt from their loss (and the timeout backoff) say nothing
// about the path now. Without it a path came back over seconds (BBR's
// inflight_hi had been cut to a few packets by the outage's 100 % loss).
type PathRestorer interface {
	OnPathRestored(now mono.Time)
}

// RTTReseeder is implemented by controllers whose smoothed RTT can start
// afresh from one measured round trip. The engine calls ReseedRTT when it
// trusts a path again after an outage: the samples of packets that sat in
// the outage's queue (a radio link without capacity for a second) had
// pushed SRTT to a second or more, a path judged by that carried nothing,
// and without new samples the estimate stayed there for seconds.
type RTTReseeder interface {
	ReseedRTT(rtt time.Duration)
}

// AppLimitedNotifier is implemented by controllers that want to know when
// the sender ran out of data while the window and pacer had room, so that
// rate samples and window growth taken then are not trusted (RFC 7661,
// draft-cheng-iccrg-delivery-rate-estimation). The engine should call it
// when its send queue for the subflow is empty and CanSend is true.
type AppLimitedNotifier interface {
	OnAppLimited(now mono.Time)
}

// Config parameterises a controller. The zero value gets sensible defaults.
type Config struct {
	// MSS is the path's maximum packet size in bytes (outer DCCP packet).
	MSS int
	// RateLimit caps the sending rate in bits per second (0 = none). The
	// "none" controller is only this cap.
	RateLimit float64
	// InitialWindow overrides the initial window in packets (0 = RFC 4341).
	InitialWindow int
	// HyStart enables HyStart++ slow-start exit (CCID2).
	HyStart bool
	// ABE enables Alternative Backoff with ECN (RFC 8511) for CCID2.
	ABE bool
	// BBR, when set, replaces DefaultBBRParams (tests, evaluations).
	BBR *BBRParams
	// History, when set, is the subflow's sent-packet history, shared
	// with loss repair and ack-of-ack; else the controller keeps its own.
	History *History
}

// Factory builds a controller.
type Factory func(cfg Config) Controller

var registered = registry.New[Factory]("congestion controller")

// Register makes a congestion controller available under name; implementations call it
// from their init functions.
func Register(name string, f Factory) { registered.Register(name, f) }

// New returns a new congestion controller by its config name.
func New(name string, cfg Config) (Controller, error) {
	f, err := registered.Lookup(name)
	if err != nil {
		return nil, err
	}
	return f(cfg), nil
}

// Names lists the registered controllers.
func Names() []string { return registered.Names() }
