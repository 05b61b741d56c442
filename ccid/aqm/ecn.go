// SPDX-License-Identifier: MIT

package aqm

import "github.com/mptun/mptun/internal/ecn"

// ECN codepoints (RFC 3168).
const (
	NotECT = ecn.NotECT
	ECT1   = ecn.ECT1
	ECT0   = ecn.ECT0
	CE     = ecn.CE
)

// ECN returns the ECN field of an IPv4 or IPv6 packet, and false if pkt is
// not a well-formed IP header.
func ECN(pkt []byte) (uint8, bool) { return ecn.Get(pkt) }

// MarkCE sets CE on an ECN-capable (ECT(0), ECT(1) or CE) IPv4 or IPv6
// packet in place, fixing the IPv4 header checksum. It reports false,
// leaving pkt alone, for Not-ECT packets and anything that is not a
// well-formed IP header: those must be dropped instead (RFC 3168 §5).
func MarkCE(pkt []byte) bool { return ecn.MarkCE(pkt) }
