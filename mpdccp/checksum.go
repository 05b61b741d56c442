// SPDX-License-Identifier: MIT

package mpdccp

import "github.com/mptun/mptun/mpdccp/wire"

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
// When a NAT moves the client to another public address, the server learns
// the new residual from the packet that moves the subflow (rebind); the
// client cannot tell, since its peer's address did not change, so it takes
// a new residual that residualRepeats packets in a row show. Damage gives
// random residuals, which do not repeat (odds 2^-16 per packet).

// residualRepeats is how many consecutive packets must show a new NAT
// residual before a subflow adopts it.
const residualRepeats = 3

// checksumOK reports whether a packet of sf with the given checksum residual
// is intact, learning the subflow's NAT residual from the server's Response
// and from a residual that repeats.
func (sf *subflow) checksumOK(p *wire.Packet, residual uint16) bool {
	if residual == wire.ResidualGood || residual == sf.natResidual {
		sf.newResidualN = 0
		return true
	}
	if sf.natResidual == 0 && sf.state == sfRequest && p.Type == wire.TypeResponse && sf.ackValid(p.Ack) {
		sf.natResidual = residual
		return true
	}
	if residual != sf.newResidual {
		sf.newResidual, sf.newResidualN = residual, 0
	}
	if sf.newResidualN++; sf.newResidualN >= residualRepeats {
		sf.natResidual, sf.newResidualN = residual, 0
		return true
	}
	return false
}
