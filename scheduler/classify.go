// SPDX-License-Identifier: MIT

package scheduler

import (
	"fmt"

	"github.com/mptun/mptun/flow"
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
		if cr.needPorts && r.Proto != 0 && !flow.HasPorts(r.Proto) {
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

// Classify returns the class of the inner IP packet pkt. Malformed or
// unknown packets fall into class 0.
func (c *Classifier) Classify(pkt []byte) int {
	if len(c.rules) == 0 {
		return 0
	}
	h, ok := flow.Parse(pkt)
	if !ok {
		return 0
	}
	for i := range c.rules {
		r := &c.rules[i]
		if r.proto != 0 && r.proto != h.Proto {
			continue
		}
		if r.dscpMask != 0 && r.dscpMask&(1<<h.DSCP) == 0 {
			continue
		}
		if r.needPorts && (!h.Ports || !r.src.match(h.SrcPort) || !r.dst.match(h.DstPort)) {
			continue
		}
		return i + 1
	}
	return 0
}
