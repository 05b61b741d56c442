// SPDX-License-Identifier: MIT

// Package wire encodes and decodes DCCP packets (RFC 4340) with the
// Multipath option of MP-DCCP (RFC 9897), as carried by mptun inside UDP
// (DCCP-UDP, RFC 6773).
//
// Decoding works in place: a parsed Packet, Option or MPOption holds slices
// into the caller's buffer. Encoding (Builder) writes into a caller buffer.
// Neither allocates, so the data path can use pooled buffers.
//
// Only the extended generic header (X=1, 48-bit sequence numbers) is sent
// and accepted; see Parse for why X=0 is rejected.
//
// Encapsulation (RFC 6773, DCCP-UDP): each UDP datagram carries exactly one
// DCCP packet, starting with the DCCP generic header; the server listens on
// UDP port 6511 (DefaultPort) unless configured otherwise. The DCCP header
// keeps its own Source and Destination Port fields. The rule this package
// assumes: a sender fills them with the UDP ports it sends from and to, and
// a receiver identifies the flow by the UDP 4-tuple it sees and does not
// require the DCCP ports to match it, because a NAT on the path rewrites
// the UDP header only. The checksum rule is described at SetChecksum.
package wire

import (
	"errors"
	"strconv"
)

// Type is the 4-bit DCCP packet type (RFC 4340 §5.1).
type Type uint8

// Packet types (RFC 4340 §5.1, Table 1).
const (
	TypeRequest  Type = 0
	TypeResponse Type = 1
	TypeData     Type = 2
	TypeAck      Type = 3
	TypeDataAck  Type = 4
	TypeCloseReq Type = 5
	TypeClose    Type = 6
	TypeReset    Type = 7
	TypeSync     Type = 8
	TypeSyncAck  Type = 9
)

var typeNames = [...]string{
	"Request", "Response", "Data", "Ack", "DataAck",
	"CloseReq", "Close", "Reset", "Sync", "SyncAck",
}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is one of the ten types RFC 4340 defines;
// types 10-15 are reserved and such packets are ignored (§5.1).
func (t Type) Valid() bool { return t <= TypeSyncAck }

// HasAck reports whether packets of type t carry an Acknowledgement Number
// subheader: every type but Request and Data (RFC 4340 §5.3).
func (t Type) HasAck() bool { return t != TypeRequest && t != TypeData && t.Valid() }

// HasData reports whether t is a type whose payload is application data
// (Data and DataAck; Request and Response may carry data too, §5.5 / §8.1).
func (t Type) HasData() bool { return t == TypeData || t == TypeDataAck }

const (
	// GenericHeaderLen is the length of the X=1 generic header (RFC 4340 §5.1).
	GenericHeaderLen = 16
	// ackSubheaderLen is the X=1 Acknowledgement Number subheader (§5.3).
	ackSubheaderLen = 8
	// shortGenericHeaderLen and shortAckSubheaderLen are their X=0 forms.
	shortGenericHeaderLen = 12
	shortAckSubheaderLen  = 4
	// DefaultPort is the IANA port of DCCP-UDP (RFC 6773 §3.1 / §6): 6511/udp.
	DefaultPort = 6511
	// MaxSeq is the largest 48-bit sequence number.
	MaxSeq = 1<<48 - 1
	// MaxHeaderLen is the largest header + options area Data Offset can
	// express: 255 32-bit words.
	MaxHeaderLen = 255 * 4
)

// Errors. Parse and the option decoders wrap these with context, so test
// with errors.Is.
var (
	ErrTruncated      = errors.New("dccp: packet truncated")
	ErrBadHeader      = errors.New("dccp: bad header")
	ErrShortSeqnos    = errors.New("dccp: short sequence numbers (X=0) where the type needs X=1")
	ErrReservedType   = errors.New("dccp: reserved packet type")
	ErrBadDataOffset  = errors.New("dccp: bad data offset")
	ErrBadOption      = errors.New("dccp: malformed option")
	ErrBadMP          = errors.New("mpdccp: malformed multipath option")
	ErrUnknownMP      = errors.New("mpdccp: unknown multipath sub-option")
	ErrNoSpace        = errors.New("dccp: buffer too small")
	ErrBadArgument    = errors.New("dccp: invalid argument")
	ErrNotBegun       = errors.New("dccp: builder not begun")
	ErrChecksumCover  = errors.New("dccp: checksum coverage exceeds packet")
	ErrMandatoryPlace = errors.New("dccp: Mandatory option misplaced")
)

// Serial-number arithmetic on 48-bit numbers (RFC 4340 §7.1; RFC 1982 style).

// SeqAdd returns a+d modulo 2^48.
func SeqAdd(a uint64, d int64) uint64 { return (a + uint64(d)) & MaxSeq }

// SeqDiff returns a-b as a signed distance in [-2^47, 2^47).
func SeqDiff(a, b uint64) int64 {
	d := (a - b) & MaxSeq
	if d >= 1<<47 {
		return int64(d) - 1<<48
	}
	return int64(d)
}

// SeqLess reports whether a comes before b in 48-bit circular order.
func SeqLess(a, b uint64) bool { return SeqDiff(a, b) < 0 }

// SeqLessEq reports whether a comes before b or equals it.
func SeqLessEq(a, b uint64) bool { return SeqDiff(a, b) <= 0 }

// SeqInWindow reports whether s lies in the closed circular interval [lo, hi].
func SeqInWindow(s, lo, hi uint64) bool {
	return SeqDiff(s, lo) >= 0 && SeqDiff(hi, s) >= 0
}

// ResetCode is the Reset Code of a DCCP-Reset (RFC 4340 §5.6, RFC 9897 §IANA).
type ResetCode uint8

// Reset codes.
const (
	ResetUnspecified       ResetCode = 0
	ResetClosed            ResetCode = 1
	ResetAborted           ResetCode = 2
	ResetNoConnection      ResetCode = 3
	ResetPacketError       ResetCode = 4
	ResetOptionError       ResetCode = 5
	ResetMandatoryError    ResetCode = 6
	ResetConnectionRefused ResetCode = 7
	ResetBadServiceCode    ResetCode = 8
	ResetTooBusy           ResetCode = 9
	ResetBadInitCookie     ResetCode = 10
	ResetAggressionPenalty ResetCode = 11
	// ResetMPAbrupt is "Abrupt MP termination" (RFC 9897), sent with MP_FAST_CLOSE.
	ResetMPAbrupt ResetCode = 13
)

var resetNames = [...]string{
	"Unspecified", "Closed", "Aborted", "No Connection", "Packet Error",
	"Option Error", "Mandatory Error", "Connection Refused", "Bad Service Code",
	"Too Busy", "Bad Init Cookie", "Aggression Penalty", "", "Abrupt MP termination",
}

func (c ResetCode) String() string {
	if int(c) < len(resetNames) && resetNames[c] != "" {
		return resetNames[c]
	}
	return "ResetCode(" + strconv.Itoa(int(c)) + ")"
}

// Feature numbers (RFC 4340 §6.4, RFC 9897 for Multipath Capable).
const (
	FeatCCID              = 1
	FeatShortSeqnos       = 2
	FeatSequenceWindow    = 3
	FeatECNIncapable      = 4
	FeatAckRatio          = 5
	FeatSendAckVector     = 6
	FeatSendNDPCount      = 7
	FeatMinCsCov          = 8
	FeatCheckDataChecksum = 9
	FeatMultipath         = 10
)
