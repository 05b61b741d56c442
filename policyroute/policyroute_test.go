// SPDX-License-Identifier: MIT

package policyroute

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var (
	def4 = netip.MustParsePrefix("0.0.0.0/0")
	def6 = netip.MustParsePrefix("::/0")
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// A CPE: DSL on eth0 with the main default route, LTE on wwan0 (raw IP,
// no link layer) with none, Wi-Fi on wlan0 with a second default route.
func cpeView() View {
	return View{Links: map[string]Link{
		"eth0": {Index: 2, Up: true, Addrs: []netip.Prefix{pfx("192.0.2.2/24"), pfx("2001:db8:1::2/64"), pfx("fe80::1/64")},
			Defaults: []Gateway{{Via: ip("192.0.2.1"), Metric: 100}, {V6: true, Via: ip("fe80::ff"), Metric: 1024}},
			OnLink:   []netip.Prefix{pfx("192.0.2.0/24"), pfx("2001:db8:1::/64")}},
		"wwan0": {Index: 3, Up: true, PointToPoint: true, Addrs: []netip.Prefix{pfx("100.64.7.9/30")}},
		"wlan0": {Index: 4, Up: true, Addrs: []netip.Prefix{pfx("192.168.1.20/24"), pfx("192.168.1.21/24")},
			Defaults: []Gateway{{Via: ip("192.168.1.1"), Metric: 600}, {Via: ip("192.168.1.254"), Metric: 700}},
			OnLink:   []netip.Prefix{pfx("192.168.1.0/24")}},
	}}
}

func TestPlanSourceRules(t *testing.T) {
	rules, routes, notes := Plan([]Path{
		{Name: "dsl", Device: "eth0", Mode: BySource, Table: 6511},
		{Name: "lte", Device: "wwan0", Mode: BySource, Table: 6512},
		{Name: "wifi", Device: "wlan0", Mode: BySource, Table: 6513},
	}, cpeView())
	if len(notes) != 0 {
		t.Errorf("notes %v", notes)
	}
	wantRules := []Rule{
		// The socket bound to the interface, and every address of the
		// interface (the path binds one of them).
		{Priority: 6511, Table: 6511, Src: pfx("192.0.2.2/32")},
		{Priority: 6511, Table: 6511, Oif: "eth0"},
		{Priority: 6512, Table: 6512, Src: pfx("100.64.7.9/32")},
		{Priority: 6512, Table: 6512, Oif: "wwan0"},
		{Priority: 6513, Table: 6513, Src: pfx("192.168.1.20/32")},
		{Priority: 6513, Table: 6513, Src: pfx("192.168.1.21/32")},
		{Priority: 6513, Table: 6513, Oif: "wlan0"},
	}
	if !slices.Equal(rules, wantRules) {
		t.Errorf("rules\n got %v\nwant %v", rules, wantRules)
	}
	wantRoutes := []Route{
		{Table: 6511, Link: 2, Dst: def4, Gateway: ip("192.0.2.1")},
		{Table: 6511, Link: 2, Dst: pfx("192.0.2.0/24")},
		// A point-to-point link needs no gateway.
		{Table: 6512, Link: 3, Dst: def4},
		// The best (lowest-metric) default route of the interface.
		{Table: 6513, Link: 4, Dst: def4, Gateway: ip("192.168.1.1")},
		{Table: 6513, Link: 4, Dst: pfx("192.168.1.0/24")},
	}
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("routes\n got %v\nwant %v", routes, wantRoutes)
	}
}

func TestPlanIPv6(t *testing.T) {
	rules, routes, _ := Plan([]Path{{Name: "dsl6", Device: "eth0", V6: true, Mode: BySource, Table: 100}}, cpeView())
	// No rule for the link-local address; IPv4 left alone.
	want := []Rule{{Priority: 100, Table: 100, V6: true, Src: pfx("2001:db8:1::2/128")}, {Priority: 100, Table: 100, V6: true, Oif: "eth0"}}
	if !slices.Equal(rules, want) {
		t.Errorf("rules %v, want %v", rules, want)
	}
	wantRoutes := []Route{
		{Table: 100, V6: true, Link: 2, Dst: def6, Gateway: ip("fe80::ff")},
		{Table: 100, V6: true, Link: 2, Dst: pfx("2001:db8:1::/64")},
	}
	// eth0's best default is IPv4's: the IPv6 table gets the IPv6 one.
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("routes %v, want %v", routes, wantRoutes)
	}
}

func TestPlanFwmark(t *testing.T) {
	rules, routes, notes := Plan([]Path{
		{Name: "lte", Device: "wwan0", Mode: ByMark, Fwmark: 0x2, Table: 6512},
		// Not there yet: the mark's rule is in place for when it comes.
		{Name: "5g", Device: "wwan1", Mode: ByMark, Fwmark: 0x3, Table: 6514},
	}, cpeView())
	wantRules := []Rule{{Priority: 6512, Table: 6512, Mark: 2}, {Priority: 6514, Table: 6514, Mark: 3}}
	if !slices.Equal(rules, wantRules) {
		t.Errorf("rules %v, want %v", rules, wantRules)
	}
	if want := []Route{{Table: 6512, Link: 3, Dst: def4}}; !slices.Equal(routes, want) {
		t.Errorf("routes %v, want %v", routes, want)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "path 5g: no interface wwan1") {
		t.Errorf("notes %v", notes)
	}
}

func TestPlanNothingToCopy(t *testing.T) {
	v := cpeView()
	eth := v.Links["eth0"]
	eth.Defaults = nil
	v.Links["eth0"] = eth
	p2p := v.Links["wwan0"]
	p2p.Up = false
	v.Links["wwan0"] = p2p
	rules, routes, notes := Plan([]Path{
		{Name: "dsl", Device: "eth0", Mode: BySource, Table: 1},
		{Name: "lte", Device: "wwan0", Mode: BySource, Table: 2},
		{Name: "gone", Device: "eth9", Mode: BySource, Table: 3},
	}, v)
	// Rules for the addresses that exist; an Ethernet link without a
	// gateway gets only its on-link prefix (never "default dev eth0",
	// which would ARP for the whole Internet); a down point-to-point link
	// gets nothing.
	// (and the rules by bound interface, even for the missing one).
	wantRules := []Rule{{Priority: 1, Table: 1, Src: pfx("192.0.2.2/32")}, {Priority: 1, Table: 1, Oif: "eth0"},
		{Priority: 2, Table: 2, Src: pfx("100.64.7.9/32")}, {Priority: 2, Table: 2, Oif: "wwan0"}, {Priority: 3, Table: 3, Oif: "eth9"}}
	if !slices.Equal(rules, wantRules) {
		t.Errorf("rules %v, want %v", rules, wantRules)
	}
	if want := []Route{{Table: 1, Link: 2, Dst: pfx("192.0.2.0/24")}}; !slices.Equal(routes, want) {
		t.Errorf("routes %v, want %v", routes, want)
	}
	if len(notes) != 3 || !strings.Contains(notes[0], "eth0 has no default route") ||
		!strings.Contains(notes[1], "wwan0 has no default route") || !strings.Contains(notes[2], "no interface eth9") {
		t.Errorf("notes %q", notes)
	}
}

// Two paths over one interface (to two concentrator addresses) share its
// routes; duplicates collapse.
func TestPlanSharedInterface(t *testing.T) {
	rules, routes, _ := Plan([]Path{
		{Name: "a", Device: "eth0", Mode: BySource, Table: 10},
		{Name: "b", Device: "eth0", Mode: BySource, Table: 10},
	}, cpeView())
	if len(rules) != 2 || len(routes) != 2 {
		t.Errorf("rules %v routes %v", rules, routes)
	}
}

func TestDiff(t *testing.T) {
	have := []Rule{{Priority: 1, Table: 1, Src: pfx("10.0.0.1/32")}, {Priority: 1, Table: 1, Src: pfx("10.0.0.2/32")}}
	want := []Rule{{Priority: 1, Table: 1, Src: pfx("10.0.0.2/32")}, {Priority: 1, Table: 1, Src: pfx("10.0.0.3/32")}}
	add, del := Diff(want, have)
	if len(add) != 1 || add[0].Src != pfx("10.0.0.3/32") || len(del) != 1 || del[0].Src != pfx("10.0.0.1/32") {
		t.Errorf("add %v del %v", add, del)
	}
	if add, del := Diff(want, want); add != nil || del != nil {
		t.Errorf("no change: add %v del %v", add, del)
	}
}

// A configured gateway replaces the copy of the main table's default
// route (there is none on a second uplink whose DHCP client kept quiet),
// once it is on the link.
func TestPlanGateway(t *testing.T) {
	v := cpeView()
	wlan := v.Links["wlan0"]
	wlan.Defaults = nil
	v.Links["wlan0"] = wlan
	_, routes, notes := Plan([]Path{{Name: "wifi", Device: "wlan0", Mode: BySource, Table: 7, Gateway: ip("192.168.1.254")}}, v)
	if len(notes) != 0 || len(routes) != 2 || routes[0].Gateway != ip("192.168.1.254") || routes[0].Dst != def4 {
		t.Errorf("routes %v notes %v", routes, notes)
	}
	_, routes, notes = Plan([]Path{{Name: "wifi", Device: "wlan0", Mode: BySource, Table: 7, Gateway: ip("10.1.1.1")}}, v)
	if len(routes) != 1 || len(notes) != 1 || !strings.Contains(notes[0], "gateway 10.1.1.1 is not on wlan0's subnets") {
		t.Errorf("off-link gateway: routes %v notes %v", routes, notes)
	}
}
