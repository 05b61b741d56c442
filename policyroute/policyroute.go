// SPDX-License-Identifier: MIT

// Package policyroute gives each CPE path that names an interface the
// routing that makes its packets leave through that interface: a routing
// table holding a copy of the interface's default route (and its on-link
// prefixes), and a rule sending the path's packets to that table — by
// source address (the interface's addresses) and by the interface the
// path's socket is bound to (the default), or by the path's firewall mark
// (SO_MARK). Without it, a second uplink with no
// default route of its own (or a lower-priority one) never carries the
// tunnel, and operators write `ip rule`/`ip route table` lines by hand.
//
// Plan is pure: it turns the paths and a View of the kernel's interfaces
// into the rules and routes wanted. Manager (Linux) reads the View over
// netlink, applies the difference to what it installed before (marked
// with Protocol in its own tables), follows interface, address and route
// changes, and removes everything on Close.
package policyroute

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Protocol marks the rules and routes this package installs (the kernel's
// rtm_protocol; iproute2 shows it as "proto 109"). Only entries with this
// mark, in the paths' tables, are ever changed or removed.
const Protocol = 109

// Mode is how packets are matched to a path's table.
type Mode string

const (
	// BySource matches packets from the interface's addresses: the
	// sockets of a path bound to (or following) that interface.
	BySource Mode = "source"
	// ByMark matches packets carrying the path's fwmark.
	ByMark Mode = "fwmark"
)

// Path is one path that wants policy routing.
type Path struct {
	Name   string
	Device string
	V6     bool // the path's remote is IPv6: routes and rules of that family
	Mode   Mode
	Fwmark uint32 // ByMark
	// Table is the routing table, also used as the rule's priority (below
	// the main table's 32766, so the rule is looked at first).
	Table int
	// Gateway is the uplink's next hop when the main table has no default
	// route through Device; invalid: copy the main table's.
	Gateway netip.Addr
}

// View is the part of the kernel's state a plan is made from.
type View struct {
	Links map[string]Link // by name
}

// Link is one interface.
type Link struct {
	Index int
	Up    bool
	// PointToPoint: no link-layer neighbours (ppp, raw-IP wwan, tun), so a
	// default route needs no gateway.
	PointToPoint bool
	Addrs        []netip.Prefix
	// Main-table routes through the interface.
	Defaults []Gateway      // default routes, best (lowest metric) first
	OnLink   []netip.Prefix // prefixes routed directly on the link
}

// Gateway is a default route's next hop: Via is invalid for a route
// "dev X" without gateway.
type Gateway struct {
	V6     bool
	Via    netip.Addr
	Metric int
}

// Rule is one wanted routing rule: it matches by source address, by the
// interface a socket is bound to (SO_BINDTODEVICE), or by mark.
type Rule struct {
	Priority int
	Table    int
	V6       bool
	Src      netip.Prefix // BySource
	Oif      string       // BySource
	Mark     uint32       // ByMark
}

// Route is one wanted route in a path's table.
type Route struct {
	Table   int
	V6      bool
	Link    int          // interface index
	Dst     netip.Prefix // the default route has bits 0
	Gateway netip.Addr   // invalid: on-link
}

func (r Rule) String() string {
	sel := fmt.Sprintf("fwmark %#x", r.Mark)
	switch {
	case r.Src.IsValid():
		sel = "from " + r.Src.String()
	case r.Oif != "":
		sel = "oif " + r.Oif
	}
	return fmt.Sprintf("%s lookup %d pref %d", sel, r.Table, r.Priority)
}

func (r Route) String() string {
	s := fmt.Sprintf("%s dev #%d table %d", r.Dst, r.Link, r.Table)
	if r.Gateway.IsValid() {
		s = fmt.Sprintf("%s via %s dev #%d table %d", r.Dst, r.Gateway, r.Link, r.Table)
	}
	return s
}

// Plan returns the rules and routes the paths want in view, sorted, and a
// note for each path that cannot have them yet (no such interface, no
// default route to copy); those paths get what can be had and the rest
// when the view changes.
func Plan(paths []Path, view View) (rules []Rule, routes []Route, notes []string) {
	for _, p := range paths {
		// The rules by mark and by bound interface need no address: they
		// are in place before the interface is.
		if p.Mode == ByMark {
			rules = append(rules, Rule{Priority: p.Table, Table: p.Table, V6: p.V6, Mark: p.Fwmark})
		} else {
			rules = append(rules, Rule{Priority: p.Table, Table: p.Table, V6: p.V6, Oif: p.Device})
		}
		l, ok := view.Links[p.Device]
		if !ok {
			notes = append(notes, fmt.Sprintf("path %s: no interface %s yet", p.Name, p.Device))
			continue
		}
		if p.Mode != ByMark {
			for _, a := range l.Addrs {
				if a.Addr().Is6() != p.V6 || a.Addr().IsLinkLocalUnicast() {
					continue
				}
				rules = append(rules, Rule{Priority: p.Table, Table: p.Table, V6: p.V6,
					Src: netip.PrefixFrom(a.Addr(), a.Addr().BitLen())})
			}
		}
		def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if p.V6 {
			def = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		gw := slices.IndexFunc(l.Defaults, func(g Gateway) bool { return g.V6 == p.V6 })
		switch {
		case p.Gateway.IsValid() && onLink(l, p.Gateway):
			routes = append(routes, Route{Table: p.Table, V6: p.V6, Link: l.Index, Dst: def, Gateway: p.Gateway})
		case p.Gateway.IsValid():
			notes = append(notes, fmt.Sprintf("path %s: gateway %s is not on %s's subnets (yet)", p.Name, p.Gateway, p.Device))
		case gw >= 0:
			routes = append(routes, Route{Table: p.Table, V6: p.V6, Link: l.Index, Dst: def, Gateway: l.Defaults[gw].Via})
		case l.PointToPoint && l.Up:
			routes = append(routes, Route{Table: p.Table, V6: p.V6, Link: l.Index, Dst: def})
		default:
			notes = append(notes, fmt.Sprintf("path %s: %s has no default route to copy into table %d (its packets use the main table)",
				p.Name, p.Device, p.Table))
		}
		for _, pre := range l.OnLink {
			if pre.Addr().Is6() == p.V6 && pre.Bits() > 0 {
				routes = append(routes, Route{Table: p.Table, V6: p.V6, Link: l.Index, Dst: pre})
			}
		}
	}
	rules = sortUnique(rules, compareRule)
	routes = sortUnique(routes, compareRoute)
	return rules, routes, notes
}

// onLink reports whether a is on one of the link's subnets.
func onLink(l Link, a netip.Addr) bool {
	for _, p := range slices.Concat(l.OnLink, l.Addrs) {
		if p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// Diff returns what to add and what to delete to go from have to want.
func Diff[T comparable](want, have []T) (add, del []T) {
	in := func(list []T, x T) bool { return slices.Contains(list, x) }
	for _, w := range want {
		if !in(have, w) {
			add = append(add, w)
		}
	}
	for _, h := range have {
		if !in(want, h) {
			del = append(del, h)
		}
	}
	return add, del
}

func compareRule(a, b Rule) int {
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Table, b.Table), boolCmp(a.V6, b.V6),
		cmp.Compare(a.Oif, b.Oif), a.Src.Addr().Compare(b.Src.Addr()), cmp.Compare(a.Mark, b.Mark))
}

func compareRoute(a, b Route) int {
	return cmp.Or(cmp.Compare(a.Table, b.Table), boolCmp(a.V6, b.V6), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()),
		a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Link, b.Link), a.Gateway.Compare(b.Gateway))
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func sortUnique[T comparable](s []T, c func(a, b T) int) []T {
	slices.SortFunc(s, c)
	return slices.Compact(s)
}
