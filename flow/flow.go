// SPDX-License-Identifier: MIT

// Package flow reads what the tunnel needs to know of an inner IP packet:
// its transport protocol, DSCP and ports (for traffic classes) and which
// flow it belongs to (for per-flow queueing, path pinning and reordering).
// It parses only the fixed headers, never allocates, and treats anything
// it cannot parse as one anonymous flow.
package flow

import (
	"encoding/binary"
	"math/bits"
)

// Header is the part of an inner packet's headers the tunnel looks at.
type Header struct {
	Proto   uint8 // IP protocol (IPv6: after extension headers)
	DSCP    uint8
	Ports   bool // SrcPort and DstPort are valid
	SrcPort uint16
	DstPort uint16
	// l4 is the offset of the transport header, or 0 if there is none
	// (a non-first fragment, or headers cut short).
	l4 int
}

// maxExtHeaders bounds the IPv6 extension header walk.
const maxExtHeaders = 8

// HasPorts reports whether the transport protocol carries 16-bit source
// and destination ports in its first four bytes.
func HasPorts(proto uint8) bool {
	switch proto {
	case 6, 17, 33, 132, 136: // TCP, UDP, DCCP, SCTP, UDP-Lite
		return true
	}
	return false
}

// Parse reads the IPv4 or IPv6 header of pkt (walking IPv6 hop-by-hop,
// routing, destination-options, AH and fragment headers). It reports
// false for packets that are not IP or are cut short.
func Parse(b []byte) (h Header, ok bool) {
	if len(b) < 1 {
		return h, false
	}
	off := 0
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return h, false
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return h, false
		}
		h.DSCP = b[1] >> 2
		h.Proto = b[9]
		if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 { // not the first fragment
			return h, true
		}
		off = ihl
	case 6:
		if len(b) < 40 {
			return h, false
		}
		h.DSCP = uint8(binary.BigEndian.Uint16(b[0:2])>>6) & 0x3f
		var frag bool
		h.Proto, off, frag, ok = walkIPv6(b)
		if !ok {
			return h, false
		}
		if frag || off > len(b) {
			return h, true
		}
	default:
		return h, false
	}
	h.l4 = off
	if HasPorts(h.Proto) && len(b) >= off+4 {
		h.Ports = true
		h.SrcPort = binary.BigEndian.Uint16(b[off : off+2])
		h.DstPort = binary.BigEndian.Uint16(b[off+2 : off+4])
	}
	return h, true
}

// walkIPv6 skips extension headers. It returns the upper-layer protocol,
// its offset, and whether the packet is a non-first fragment.
func walkIPv6(b []byte) (proto uint8, off int, nonFirstFrag, ok bool) {
	next, off := b[6], 40
	for i := 0; i < maxExtHeaders; i++ {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(b) < off+2 {
				return 0, 0, false, false
			}
			next, off = b[off], off+8*(int(b[off+1])+1)
			continue
		case 51: // AH: length in 4-octet units minus 2
			if len(b) < off+2 {
				return 0, 0, false, false
			}
			next, off = b[off], off+4*(int(b[off+1])+2)
			continue
		case 44: // fragment
			if len(b) < off+8 {
				return 0, 0, false, false
			}
			fragOff := binary.BigEndian.Uint16(b[off+2:off+4]) >> 3
			next, off = b[off], off+8
			if fragOff != 0 {
				return next, off, true, true
			}
			continue
		}
		break
	}
	return next, off, false, true
}

// Hash returns a hash of pkt's flow: addresses, protocol and ports (the
// echo identifier for ICMP echo), mixed with seed. Packets of one flow
// hash alike; fragments after the first hash with their addresses and
// protocol only (they carry no ports), so a fragmented flow may look like
// two. Unparseable packets hash to seed's anonymous flow.
func Hash(pkt []byte, seed uint64) uint64 {
	h, ok := Parse(pkt)
	if !ok {
		return mix(seed, 0)
	}
	x := mix(seed, uint64(h.Proto)<<32|uint64(h.SrcPort)<<16|uint64(h.DstPort))
	switch pkt[0] >> 4 {
	case 4:
		x = mix(x, uint64(binary.BigEndian.Uint32(pkt[12:16]))<<32|uint64(binary.BigEndian.Uint32(pkt[16:20])))
	case 6:
		for i := 8; i < 40; i += 8 {
			x = mix(x, binary.BigEndian.Uint64(pkt[i:i+8]))
		}
	}
	if echo, ok := echoID(pkt, &h); ok {
		x = mix(x, uint64(echo)|1<<20)
	}
	return x
}

// echoID returns the identifier of an ICMP or ICMPv6 echo request or
// reply, so that two pings from one host are two flows.
func echoID(pkt []byte, h *Header) (uint16, bool) {
	if h.l4 == 0 || len(pkt) < h.l4+6 {
		return 0, false
	}
	t := pkt[h.l4]
	switch {
	case h.Proto == 1 && (t == 8 || t == 0), h.Proto == 58 && (t == 128 || t == 129):
		return binary.BigEndian.Uint16(pkt[h.l4+4 : h.l4+6]), true
	}
	return 0, false
}

// mix folds v into the running hash x (a 128-bit multiply folded to 64
// bits, as wyhash does: fast and well spread).
func mix(x, v uint64) uint64 {
	hi, lo := bits.Mul64(x^0x9e3779b97f4a7c15, v^0xe7037ed1a0b428db)
	return hi ^ lo
}
