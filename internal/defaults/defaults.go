// SPDX-License-Identifier: MIT

// Package defaults holds mptun's default settings, the one place they are
// written: config fills absent keys from them, the engine fills zero
// Config fields from them, and the shipped configs document them. A
// change of a default is made here (and judged on the lab's matrix).
package defaults

import "time"

// Connection: the components and how they behave.
const (
	// CCID is the congestion controller of each path: BBR keeps the
	// paths' queues short, so few packets need repair.
	CCID = "bbr"
	// Scheduler: "flow" keeps each flow on its lowest-delay path and
	// spreads it over slower paths only when they deliver sooner than
	// waiting would (scheduler/flow.go).
	Scheduler = "flow"
	// Reorderer: "adaptive" holds a gap for about the paths' delay
	// difference and a repair's round trip; flows kept on one path are
	// delivered without waiting for other paths.
	Reorderer = "adaptive"
	// ReorderMaxHold caps how long a packet waits for a gap; 0 ("auto")
	// derives it from the paths' delays and the repair round trip.
	ReorderMaxHold = 0
	// ReorderBuffer is the most inner packets the reorderer holds.
	ReorderBuffer = 4096
	// Retransmit turns loss repair on: a packet a path reports lost is
	// sent once more with its MP_SEQ.
	Retransmit = true
	// SendQueue is the inner packets queued per connection.
	SendQueue = 1024
	// AQM manages the send queue with CoDel; AQMTarget is its sojourn
	// target. One inner CUBIC flow needs some buffer after each cut, and
	// a radio path's capacity drops need more: the queue is the bulk
	// flow's own (FQ serves pings and short flows first), so it may hold
	// a capacity dip rather than cut the flow. Two trace-driven LTE paths:
	// 18.8-20.5 Mbit/s with 20 ms, 20.7-22.1 with 50 ms (lab, 7 December).
	AQM       = true
	AQMTarget = 50 * time.Millisecond
	// ECN: outer headers carry the inner packets' ECN field (RFC 6040)
	// and the controllers respond to CE marks.
	ECN = true
	// HyStart turns on HyStart++ (RFC 9406) in CCID2's slow start.
	HyStart = false
	// ACKFilter: a TCP ACK still in the send queue when a later ACK of
	// its connection arrives is dropped (the later one says all it did).
	ACKFilter = true
	// ABE turns on Alternative Backoff with ECN (RFC 8511) in CCID2: a
	// CE mark cuts the window to 0.8 instead of 0.5.
	ABE = false
	// InitialWindow is a controller's first window in packets; 0 keeps
	// each controller's own (CCID2: RFC 4341's, BBR: 10).
	InitialWindow = 0
)

// Liveness.
const (
	// Keepalive probes an idle path this often.
	Keepalive = time.Second
	// PathTimeout declares a path down after this long unheard.
	PathTimeout = 3 * time.Second
	// IdleTimeout closes a connection nothing was heard on for this long.
	IdleTimeout = 30 * time.Second
)

// Limits and wire.
const (
	// MaxSubflows is the server's limit of subflows per connection.
	MaxSubflows = 8
	// MaxConns is the server's limit of connections.
	MaxConns = 1024
	// MaxPacket is the largest DCCP packet (UDP payload) when nothing
	// smaller is known: a 1500-byte path MTU minus IPv6 and UDP headers.
	MaxPacket = PathMTU - 40 - 8
	// PathMTU is a path's outer (link) MTU.
	PathMTU = 1500
	// Prio is a path's MP_PRIO (>= 3: primary).
	Prio = 3
	// Port is the UDP port of DCCP-UDP (RFC 6773).
	Port = 6511
	// ServiceCode is the DCCP service code, "mptu".
	ServiceCode = 0x6D707475
)

// Daemon.
const (
	// TunnelName is the TUN device's name.
	TunnelName = "mptun0"
	// ControlPattern is the control socket; %i is the instance name.
	ControlPattern = "/run/mptun/%i.sock"
)

// Policy routing of CPE paths that name an interface.
const (
	// Routing: a path with a device gets a routing table and a rule by
	// source address ("source"); "fwmark" and "none" are the others.
	Routing = "source"
	// RouteTableBase is the first path's routing table (and rule
	// priority); the next paths take the following numbers.
	RouteTableBase = 6511
)
