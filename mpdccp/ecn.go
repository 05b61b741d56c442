// SPDX-License-Identifier: MIT

package mpdccp

import "github.com/mptun/mptun/internal/ecn"

// The tunnel and ECN (RFC 6040). A data packet's outer header carries its
// inner packet's ECN field; at the far end the subflow first records a CE
// mark in its Ack Vector state, so the sender's controller hears it as
// congestion, and only then is the inner packet marked CE or, when it
// is Not-ECT, dropped.

// outerECN is the outer ECN field of a packet the engine sends: a data
// packet's inner field (RFC 6040 §4.1 normal mode: Not-ECT stays Not-ECT),
// ECT(0) on the tunnel's own packets (DCCP is ECN-capable, RFC 4340 §12).
func outerECN(isData bool, payload []byte) uint8 {
	if !isData {
		return ecn.ECT0
	}
	v, ok := ecn.Get(payload)
	if !ok {
		return ecn.NotECT
	}
	return ecn.Encap(v)
}

// decapInner applies RFC 6040 §4.2 to an inner packet that arrived under
// the outer field outer, in place, and reports false when the packet must
// be dropped.
func (e *Endpoint) decapInner(outer uint8, inner []byte) bool {
	changed, drop := ecn.DecapPacket(outer, inner)
	switch {
	case drop:
		e.stats.InnerECNDropped++
		return false
	case changed && outer&3 == ecn.CE:
		e.stats.InnerCEMarked++
	}
	return true
}
