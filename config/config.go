// SPDX-License-Identifier: MIT

// Package config loads and validates mptund's TOML configuration.
//
// Validation is strict: unknown keys, values of the wrong type and bad
// values are all errors naming the file, line and key, e.g.
//
//	cpe.toml:12: path.dsl.remote: invalid address "x"
//
// configs/cpe.toml and configs/concentrator.toml document every key.
package config

import (
	"net/netip"
	"time"

	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/mpdccp/noise"
)

// Config is a validated configuration with defaults filled in.
type Config struct {
	File       string // path it was loaded from
	Tunnel     Tunnel
	Connection Connection
	Listen     []Listen
	Paths      []Path
	Offload    Offload
	Control    Control
	Metrics    Metrics
	Web        Web
	Log        Log
	Capture    Capture
	// Peers are the keys this end talks to (secure mode): a CPE has one,
	// the concentrator; a concentrator has every CPE.
	Peers  []Peer
	Tuning Tuning
}

// Tunnel describes the TUN device.
type Tunnel struct {
	Name      string
	Driver    string // "wireguard" (offloads, batches) or "water"
	MTU       int    // 0: derive from the paths' MTU minus overhead
	Addresses []netip.Prefix
	Routes    []netip.Prefix
}

// Roles.
const (
	RoleClient = "client"
	RoleServer = "server"
)

// Connection holds the MP-DCCP connection parameters.
type Connection struct {
	Role           string // RoleClient or RoleServer
	CCID           string // default congestion controller per path
	Scheduler      string
	Reorderer      string
	ReorderMaxHold time.Duration
	ReorderBuffer  int // packets
	DropLate       bool
	ServiceCode    uint32
	Keepalive      time.Duration
	PathTimeout    time.Duration
	SendQueue      int // packets
	AQM            bool
	Retransmit     bool // loss repair: resend a lost data packet once
	AQMTarget      time.Duration
	RateLimit      uint64 // bits per second, 0 = none
	ECN            bool   // RFC 6040 outer ECN and the controllers' ECN response
	HyStart        bool   // HyStart++ in CCID2's slow start
	ACKFilter      bool   // drop queued TCP ACKs a later one supersedes
	ABE            bool   // ABE (RFC 8511) in CCID2's ECN response
	InitialWindow  int    // packets; 0 = each controller's own
	Classes        []Class
	// Mode is how the paths share traffic: ModeAggregate, ModeActiveBackup
	// or ModeSwitch (with the Switch thresholds).
	Mode   string
	Switch Switch
	// Advertise are a server's other addresses, told to every CPE
	// (MP_ADDADDR) so its paths can fail over to them.
	Advertise []netip.AddrPort
	// ReconnectMax caps the backoff between connection and join attempts.
	ReconnectMax time.Duration
	// Security is SecurityNoise (authenticated, encrypted; the default) or
	// SecurityNone (plain RFC 9897: anyone may connect, nothing is secret).
	Security   string
	PrivateKey noise.Key // from private_key or private_key_file
}

// Modes.
const (
	ModeAggregate    = "aggregate"
	ModeActiveBackup = "active-backup"
	ModeSwitch       = "switch"
)

// Switch holds the thresholds of mode "switch": a path is left when its
// RTT or loss passes the high mark and taken again when both are below the
// low marks for Hold (Hold also delays the return to a preferred path in
// "active-backup").
type Switch struct {
	RTTHigh, RTTLow   time.Duration
	LossHigh, LossLow float64 // fractions
	Hold              time.Duration
}

// Security modes.
const (
	SecurityNoise = "noise"
	SecurityNone  = "none"
)

// Peer is a [[peer]] section: a remote public key and the inner prefixes
// it may source and receives (cryptokey routing).
type Peer struct {
	PublicKey    noise.Key
	PresharedKey noise.Key // zero when not set
	AllowedIPs   []netip.Prefix
}

// Class maps matching inner packets to their own scheduler.
type Class struct {
	Name      string
	Protocol  uint8 // IP protocol number; 0 = any
	SrcPorts  []PortRange
	DstPorts  []PortRange
	DSCP      []uint8
	Dst       []netip.Prefix
	Scheduler string
}

// PortRange is an inclusive range of ports.
type PortRange struct{ Lo, Hi uint16 }

// Contains reports whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return r.Lo <= p && p <= r.Hi }

// Listen is one server UDP socket.
type Listen struct {
	Address netip.AddrPort
	Device  string
	Fwmark  uint32
}

// Path is one client path: a local socket and the server it talks to.
type Path struct {
	Name string
	// Local is the address to bind; unspecified when not set. A path with
	// a Device and no Local follows the device's address.
	Local  netip.AddrPort
	Device string
	Fwmark uint32
	Remote netip.AddrPort
	Prio   uint8 // MP_PRIO: 0 never, 1 standby, 2 secondary, >=3 primary
	Weight int
	CCID   string // overrides Connection.CCID when not empty
	MTU    int    // outer (link) MTU of the path

	// Routing is RoutingSource, RoutingFwmark or RoutingNone: how mptund
	// makes the path's packets leave through Device, with routing table
	// (and rule priority) Table.
	Routing string
	Table   int
	// Gateway is the next hop Table's default route goes through; invalid:
	// the main table's default route through Device.
	Gateway netip.Addr
}

// Offload switches kernel offloads; each can be turned off when a kernel
// or NIC misbehaves.
type Offload struct {
	TUN    bool // virtio-net header TSO/USO/GRO on the TUN device
	UDPGSO bool
	UDPGRO bool
}

// Control is the daemon's local API socket.
type Control struct {
	Socket string // empty: no control socket
}

// Metrics is the Prometheus endpoint.
type Metrics struct {
	Listen string // host:port; empty: off
}

// Log configures log/slog.
type Log struct {
	Level  string // debug, info, warn, error
	Format string // text or json
}

// Capture writes tunnel packets to a pcap file.
type Capture struct {
	File    string // empty: off
	MaxSize int64  // bytes before the file is rotated; 0 = unlimited
}

// Defaults (all of them are in internal/defaults).
const (
	DefaultTunnelName     = defaults.TunnelName
	DefaultPort           = defaults.Port
	DefaultServiceCode    = defaults.ServiceCode
	DefaultPathMTU        = defaults.PathMTU
	DefaultPrio           = defaults.Prio
	DefaultControlPattern = defaults.ControlPattern
)
