// SPDX-License-Identifier: MIT

package config

import (
	"fmt"
	"net/netip"

	"github.com/mptun/mptun/internal/defaults"
)

// How mptund routes a client path's packets out of its interface
// (package policyroute): a rule by source address or by fwmark pointing
// at a table with a copy of the interface's default route, or nothing.
const (
	RoutingSource = "source"
	RoutingFwmark = "fwmark"
	RoutingNone   = "none"
)

// Tables the kernel reserves (unspec, default, main, local).
var reservedTables = map[int64]string{0: "unspec", 253: "default", 254: "main", 255: "local"}

// pathRouting checks path i's routing and table keys.
func (c *checker) pathRouting(f func(string) at, i int, rp *rawPath, p *Path) {
	p.Routing = RoutingNone
	if p.Device != "" {
		p.Routing = defaults.Routing
	}
	if rp.Routing != nil {
		p.Routing = *rp.Routing
		c.oneOf(f("routing"), p.Routing, RoutingSource, RoutingFwmark, RoutingNone)
	}
	switch {
	case p.Routing == RoutingNone:
	case p.Device == "":
		c.errf(f("routing"), "%q needs the path's device (the interface its packets leave through)", p.Routing)
	case p.Routing == RoutingFwmark && p.Fwmark == 0:
		c.errf(f("routing"), "\"fwmark\" needs the path's fwmark (not 0)")
	}
	if rp.Gateway != "" {
		gw, err := netip.ParseAddr(rp.Gateway)
		switch {
		case err != nil || gw.Zone() != "" && !gw.IsLinkLocalUnicast():
			c.errf(f("gateway"), "invalid address %q", rp.Gateway)
		case p.Routing == RoutingNone:
			c.errf(f("gateway"), "only with routing \"source\" or \"fwmark\" (the path's table gets it)")
		case p.Remote.IsValid() && gw.Is4() != p.Remote.Addr().Is4():
			c.errf(f("gateway"), "address family differs from remote %s", p.Remote.Addr())
		default:
			p.Gateway = gw.WithZone("")
		}
	}
	t := int64(defaults.RouteTableBase + i)
	if rp.Table != nil {
		t = *rp.Table
	}
	if name, ok := reservedTables[t]; ok || t < 0 || t > 1<<31-1 {
		if ok {
			c.errf(f("table"), "%d is the kernel's %q table: pick another (1-252, 256-2147483647)", t, name)
		} else {
			c.errf(f("table"), "%d out of range 1..2147483647", t)
		}
		return
	}
	p.Table = int(t)
}

// routingTables checks that paths on different interfaces do not share a
// table (each holds its interface's default route).
func (c *checker) routingTables(cfg *Config) {
	owner := map[int]int{}
	for i, p := range cfg.Paths {
		if p.Routing == RoutingNone {
			continue
		}
		j, seen := owner[p.Table]
		if !seen {
			owner[p.Table] = i
			continue
		}
		if cfg.Paths[j].Device != p.Device {
			c.errf(elem("path", i, p.Name)("table"), "%s", fmt.Sprintf("table %d is also path %s's, on another interface (%s)",
				p.Table, cfg.Paths[j].Name, cfg.Paths[j].Device))
		}
	}
}
