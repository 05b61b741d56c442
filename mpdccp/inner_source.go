// SPDX-License-Identifier: MIT

package mpdccp

import "net/netip"

// innerSource returns the source address of an IPv4 or IPv6 packet, for
// the check against the sending peer's allowed IPs (secure mode).
func innerSource(pkt []byte) (netip.Addr, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(pkt[12:16])), true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(pkt[8:24])), true
	}
	return netip.Addr{}, false
}
