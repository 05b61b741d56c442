// SPDX-License-Identifier: MIT

package mpdccp

import "net/netip"

// checksumAddr is the address put in the DCCP checksum pseudo-header
// (RFC 4340 §9.1) for both ends. Over DCCP-UDP the outer addresses are not
// known end to end: a NAT rewrites them without touching the DCCP
// checksum, and a server bound to the wildcard address does not learn the
// destination address of a datagram. The UDP checksum already covers the
// addresses, so the DCCP checksum covers header, options and payload with
// a zero-address pseudo-header, which every receiver can verify.
// Captures (pcapdccp) recompute the checksum for the real addresses.
var checksumAddr = netip.Addr{}
