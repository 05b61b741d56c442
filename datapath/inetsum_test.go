// SPDX-License-Identifier: MIT

package datapath

import "github.com/mptun/mptun/internal/inetsum"

// inetSum is the folded ones'-complement sum of b from initial, for the
// tests' checks of IPv4 and ICMP checksums.
func inetSum(b []byte, initial uint32) uint16 { return inetsum.Fold(inetsum.Sum(uint64(initial), b)) }
