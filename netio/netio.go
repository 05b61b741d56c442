// SPDX-License-Identifier: MIT

// Package netio is mptun's per-path UDP socket: bound to a local address
// and/or interface, optionally marked for policy routing, with large
// buffers, batched I/O (recvmmsg/sendmmsg), the outer TOS byte per packet
// (DSCP and ECN, RFC 6040), and UDP GSO/GRO when the kernel has them.
//
// The batch calls do not allocate: mmsghdrs, iovecs, socket addresses and
// control-message buffers are preallocated per Conn. That is why the
// syscalls are made directly rather than through golang.org/x/net/ipv4,
// whose ReadBatch allocates a net.Addr per message.
package netio

import (
	"errors"
	"net/netip"
)

// Message is one UDP datagram.
//
// ReadBatch fills Buf[:N] with the payload and sets Addr (the sender) and
// TOS (the outer IPv4 TOS / IPv6 Traffic Class byte; ECN is TOS&3).
// WriteBatch sends Buf[:N] to Addr with TOS as the whole TOS byte: a
// per-packet TOS replaces the socket's, so it must carry DSCP and ECN.
//
// Local is our address: on a socket bound to the wildcard address,
// ReadBatch sets it to the address the datagram was sent to (IP_PKTINFO,
// IPV6_PKTINFO), and WriteBatch sends from it when it is set. A
// multi-homed host answers from the address it was asked on, so the peer
// recognises the reply. On a socket bound to one address it is left
// invalid and ignored.
type Message struct {
	Buf   []byte
	N     int
	Addr  netip.AddrPort
	TOS   uint8
	Local netip.Addr
}

// SocketConfig describes one path socket.
type SocketConfig struct {
	// Network is "udp4" or "udp6". Empty: from Local, else "udp4".
	Network string
	// Local is the address to bind; the zero value or an unspecified
	// address binds the wildcard, port 0 picks an ephemeral port.
	Local netip.AddrPort
	// Device binds the socket to an interface (SO_BINDTODEVICE).
	Device string
	// Fwmark marks outgoing packets (SO_MARK) for policy routing.
	Fwmark uint32
	// BufferSize for SO_RCVBUF and SO_SNDBUF (the *FORCE variants are tried
	// first, which need CAP_NET_ADMIN). 0: DefaultBufferSize.
	BufferSize int
	// BatchSize is the most messages one call moves. 0: DefaultBatchSize.
	BatchSize int
	// DisableGSO and DisableGRO turn the offloads off even when the kernel
	// has them.
	DisableGSO bool
	DisableGRO bool
	// ReusePort lets several sockets share the address (SO_REUSEPORT):
	// a sharded concentrator gives each owner goroutine its own.
	ReusePort bool
}

// Defaults.
const (
	DefaultBufferSize = 7 << 20
	DefaultBatchSize  = 64
	// MaxGSOSegments is the kernel's limit on segments per UDP_SEGMENT send.
	MaxGSOSegments = 64
	// groBufSize holds the largest coalesced datagram.
	groBufSize = 65535
)

// Stats are counters kept by a Conn.
type Stats struct {
	// RxQueueDrops is the kernel's count of datagrams dropped because the
	// socket's receive queue was full (SO_RXQ_OVFL).
	RxQueueDrops uint32
	// RxTruncated counts datagrams longer than the buffer given; they are
	// dropped.
	RxTruncated uint64
	// GSOSends counts sendmmsg entries that carried more than one
	// datagram; GROReads counts reads that returned more than one.
	GSOSends uint64
	GROReads uint64
}

// ErrUnsupported is returned by Open on systems without the Linux socket
// API.
var ErrUnsupported = errors.New("netio: not supported on this OS")
