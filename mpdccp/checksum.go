// SPDX-License-Identifier: MIT

package mpdccp

import (
	"net/netip"

	"github.com/mptun/mptun/mpdccp/wire"
)

// DCCP checksums over DCCP-UDP (RFC 6773; the rule is described in
// mpdccp/wire/checksum.go and docs/interop.md).
//
// A sender fills the DCCP checksum for the outer addresses as it sends
// them: its local address (configured, or learnt from the destination
// address of datagrams it receives) and the peer's. A receiver computes the
// checksum's residual for the addresses it sees. Without a NAT on the path
// it is wire.ResidualGood. A NAT rewrites the addresses but not the DCCP
// checksum, which leaves a residual fixed by the two address pairs: one
// value per subflow, which the subflow's first packet shows (the Request at
// the server, the Response at the client). A packet of a subflow with any
// other residual was damaged, and is dropped; the UDP checksum, which NATs
// do update, has already been verified by the kernel.
//
// When a NAT moves the client to another public address, both ends see a
// new residual: the server on packets from an unknown address (which
// rebind moves the subflow for), the client on packets from the same peer.
// Either takes the new residual once residualRepeats packets in a row, with
// growing sequence numbers and from one address, show it. Damage gives
// random residuals, which do not repeat (odds 2^-16 per packet), and a
// replayed packet does not count twice.

// residualRepeats is how many consecutive packets must show a new NAT
// residual before a subflow adopts it.
const residualRepeats = 3

// checksumOK reports whether a packet of sf from its peer's address with the
// given checksum residual is intact, learning the subflow's NAT residual
// from the server's Response and from a residual that repeats.
func (sf *subflow) checksumOK(p *wire.Packet, residual uint16) bool {
	if residual == wire.ResidualGood || residual == sf.natResidual {
		sf.newResidualN = 0
		return true
	}
	if sf.natResidual == 0 && sf.state == sfRequest && p.Type == wire.TypeResponse && sf.ackValid(p.Ack) {
		sf.natResidual = residual
		return true
	}
	return sf.residualRepeats(sf.remote, p.Seq, residual)
}

// rebindChecksumOK is checksumOK for a packet that would move sf to the
// address from.
func (sf *subflow) rebindChecksumOK(from netip.AddrPort, p *wire.Packet, residual uint16) bool {
	if residual == wire.ResidualGood || residual == sf.natResidual {
		return true
	}
	return sf.residualRepeats(from, p.Seq, residual)
}

// residualRepeats counts a packet showing residual r, a candidate for the
// subflow's new NAT residual, and adopts r when it has been seen
// residualRepeats times in a row.
func (sf *subflow) residualRepeats(from netip.AddrPort, seq uint64, r uint16) bool {
	switch {
	case r != sf.newResidual || from != sf.newResidualFrom || sf.newResidualN == 0:
		sf.newResidual, sf.newResidualFrom, sf.newResidualN = r, from, 1
	case seqLess(sf.newResidualSeq, seq):
		sf.newResidualN++
	default:
		return false // a replay or a reordered packet: not a new sighting
	}
	sf.newResidualSeq = seq
	if sf.newResidualN < residualRepeats {
		return false
	}
	sf.natResidual, sf.newResidualN = r, 0
	return true
}
