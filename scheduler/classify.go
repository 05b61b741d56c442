// SPDX-License-Identifier: MIT

package scheduler

import (
	"encoding/binary"
	"fmt"
)

// PortRange is an inclusive range of transport ports. The zero value
// matches any port.
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) any() bool { return r.Lo == 0 && r.Hi == 0 }

func (r PortRange) match(p uint16) bool { return r.any() || (p >= r.Lo && p <= r.Hi) }

// Rule maps inner packets to a traffic class with its own scheduler. Zero
// fields match anything; a packet must match every set field.
type Rule struct {
	Name string
	// Proto is the IP protocol number (6 TCP, 17 UDP, ...); 0 = any.
	Proto uint8
	// SrcPorts and DstPorts are port ranges; they only match packets whose
	// transport header carries ports (TCP, UDP, UDP-Lite, SCTP, DCCP) and
	// that are not non-first fragments.
	SrcPorts, DstPorts PortRange
	// DSCP lists the DiffServ code points (0..63) that match; empty = any.
	DSCP []uint8
	// Scheduler is the registered scheduler name for this class.
	Scheduler string
}

type compiledRule struct {
	proto      uint8
	src, dst   PortRange
	needPorts  bool
	dscpMask   uint64 // 0 = any
	schedulers string
}

// Classifier assigns inner IP packets to traffic classes. Class 0 is the
// default class; rule i (in order, first match wins) is class i+1.
// Classify parses only the fixed headers it needs and never allocates.
type Classifier struct {
	rules []compiledRule
	names []string // scheduler name per class; names[0] is the default
}

// NewClassifier checks rules and builds a classifier whose default class
// uses defaultScheduler.
func NewClassifier(defaultScheduler string, rules []Rule) (*Classifier, error) {
	if !registered.Has(defaultScheduler) {
		return nil, fmt.Errorf("default class: unknown scheduler %q (have %v)", defaultScheduler, Names())
	}
	c := &Classifier{names: []string{defaultScheduler}}
	for i, r := range rules {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		if !registered.Has(r.Scheduler) {
			return nil, fmt.Errorf("class rule %s: unknown scheduler %q (have %v)", name, r.Scheduler, Names())
		}
		for _, pr := range []PortRange{r.SrcPorts, r.DstPorts} {
			if pr.Lo > pr.Hi {
				return nil, fmt.Errorf("class rule %s: port range %d-%d is empty", name, pr.Lo, pr.Hi)
			}
		}
		cr := compiledRule{proto: r.Proto, src: r.SrcPorts, dst: r.DstPorts, schedulers: r.Scheduler}
		cr.needPorts = !r.SrcPorts.any() || !r.DstPorts.any()
		if cr.needPorts && r.Proto != 0 && !hasPorts(r.Proto) {
			return nil, fmt.Errorf("class rule %s: protocol %d has no ports", name, r.Proto)
		}
		for _, d := range r.DSCP {
			if d > 63 {
				return nil, fmt.Errorf("class rule %s: DSCP %d out of range 0-63", name, d)
			}
			cr.dscpMask |= 1 << d
		}
		c.rules = append(c.rules, cr)
		c.names = append(c.names, r.Scheduler)
	}
	return c, nil
}

// Classes returns the scheduler name of every class, indexed by class.
func (c *Classifier) Classes() []string { return c.names }

func hasPorts(proto uint8) bool {
	switch proto {
	case 6, 17, 33, 132, 136: // TCP, UDP, DCCP, SCTP, UDP-Lite
		return true
	}
	return false
}

// Classify returns the class of the inner IP packet pkt. Malformed or
// unknown packets fall into class 0.
func (c *Classifier) Classify(pkt []byte) int {
	if len(c.rules) == 0 {
		return 0
	}
	h, ok := parseInner(pkt)
	if !ok {
		return 0
	}
	for i := range c.rules {
		r := &c.rules[i]
		if r.proto != 0 && r.proto != h.proto {
			continue
		}
		if r.dscpMask != 0 && r.dscpMask&(1<<h.dscp) == 0 {
			continue
		}
		if r.needPorts && (!h.ports || !r.src.match(h.sport) || !r.dst.match(h.dport)) {
			continue
		}
		return i + 1
	}
	return 0
}

type innerHeader struct {
	proto        uint8
	dscp         uint8
	ports        bool
	sport, dport uint16
}

// maxExtHeaders bounds the IPv6 extension header walk.
const maxExtHeaders = 8

func parseInner(b []byte) (h innerHeader, ok bool) {
	if len(b) < 1 {
		return h, false
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return h, false
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return h, false
		}
		h.dscp = b[1] >> 2
		h.proto = b[9]
		if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 { // not the first fragment
			return h, true
		}
		l4 = b[ihl:]
	case 6:
		if len(b) < 40 {
			return h, false
		}
		h.dscp = uint8(binary.BigEndian.Uint16(b[0:2])>>6) & 0x3f
		next, off := b[6], 40
		for i := 0; i < maxExtHeaders; i++ {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(b) < off+2 {
					return h, false
				}
				next, off = b[off], off+8*(int(b[off+1])+1)
				continue
			case 51: // AH: length in 4-octet units minus 2
				if len(b) < off+2 {
					return h, false
				}
				next, off = b[off], off+4*(int(b[off+1])+2)
				continue
			case 44: // fragment
				if len(b) < off+8 {
					return h, false
				}
				fragOff := binary.BigEndian.Uint16(b[off+2:off+4]) >> 3
				next, off = b[off], off+8
				if fragOff != 0 {
					h.proto = next
					return h, true
				}
				continue
			}
			break
		}
		h.proto = next
		if off > len(b) {
			return h, true
		}
		l4 = b[off:]
	default:
		return h, false
	}
	if hasPorts(h.proto) && len(l4) >= 4 {
		h.ports = true
		h.sport = binary.BigEndian.Uint16(l4[0:2])
		h.dport = binary.BigEndian.Uint16(l4[2:4])
	}
	return h, true
}
