// SPDX-License-Identifier: MIT

package policyroute

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (CI runs as root)")
	}
}

// nsHost is a namespace with a DSL-like uplink (veth, the main default
// route, metric 100), an LTE-like one (veth, a second default route with
// metric 700, as DHCP clients add it) and a raw-IP modem (no link
// layer, no default route).
func nsHost(t *testing.T, ctx context.Context) *netns.NS {
	t.Helper()
	ns, err := netns.Add(ctx, netns.UniqueName("pr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Delete() })
	for _, args := range [][]string{
		{"link", "add", "up0", "type", "veth", "peer", "name", "up0p"},
		{"link", "add", "up1", "type", "veth", "peer", "name", "up1p"},
		// No dummy module on every kernel: a veth without ARP is as
		// link-layer-less as a raw-IP modem.
		{"link", "add", "wwan0", "type", "veth", "peer", "name", "wwan0p"},
		{"link", "set", "wwan0", "arp", "off"},
		{"addr", "add", "192.0.2.2/24", "dev", "up0"},
		{"addr", "add", "198.51.100.2/24", "dev", "up1"},
		{"addr", "add", "100.64.7.9/30", "dev", "wwan0"},
		{"link", "set", "up0", "up"}, {"link", "set", "up0p", "up"},
		{"link", "set", "up1", "up"}, {"link", "set", "up1p", "up"},
		{"link", "set", "wwan0", "up"}, {"link", "set", "wwan0p", "up"},
		{"route", "add", "default", "via", "192.0.2.1", "dev", "up0", "metric", "100"},
		{"route", "add", "default", "via", "198.51.100.1", "dev", "up1", "metric", "700"},
		// Leftovers of a killed run (our mark, our table) and the
		// operator's own rule in the same table: the first goes, the
		// second stays.
		{"rule", "add", "from", "10.9.9.9", "lookup", "6511", "pref", "6511", "proto", "109"},
		{"rule", "add", "from", "10.8.8.8", "lookup", "6511", "pref", "200"},
	} {
		if err := ns.IP(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

func ipOut(t *testing.T, ctx context.Context, ns *netns.NS, args ...string) string {
	t.Helper()
	out, err := ns.Output(ctx, "ip", args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// eventually polls cond for up to 5 s (the manager reacts to netlink
// events after a short settle time).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s; last seen:\n%s", what, last)
}

// routeGet is the kernel's routing decision for a packet to the
// concentrator from a source or with a mark.
func routeGet(t *testing.T, ctx context.Context, ns *netns.NS, sel ...string) string {
	return ipOut(t, ctx, ns, append([]string{"route", "get", "203.0.113.1"}, sel...)...)
}

func TestManagerInNamespace(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := nsHost(t, ctx)

	// Without policy routing, a packet from the LTE address leaves
	// through the DSL uplink (the main table's best default route).
	if got := routeGet(t, ctx, ns, "from", "198.51.100.2"); !strings.Contains(got, "dev up0") {
		t.Fatalf("before: %s", got)
	}

	m, err := Start([]Path{
		{Name: "dsl", Device: "up0", Mode: BySource, Table: 6511},
		{Name: "lte", Device: "up1", Mode: BySource, Table: 6512},
		{Name: "modem", Device: "wwan0", Mode: ByMark, Fwmark: 7, Table: 6513},
	}, Options{NetNS: ns.Path()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()

	// Start installed everything before returning.
	for sel, want := range map[string]string{
		"from 198.51.100.2": "via 198.51.100.1 dev up1 table 6512",
		"from 192.0.2.2":    "via 192.0.2.1 dev up0 table 6511",
		"mark 7":            "dev wwan0 table 6513",
		// A socket bound to the interface (SO_BINDTODEVICE), any address.
		"oif up1": "via 198.51.100.1 dev up1 table 6512",
	} {
		if got := routeGet(t, ctx, ns, strings.Fields(sel)...); !strings.Contains(got, want) {
			t.Errorf("route get 203.0.113.1 %s: %q, want %q", sel, got, want)
		}
	}
	// The subnet of the link stays on the link.
	if got := ipOut(t, ctx, ns, "route", "get", "198.51.100.77", "from", "198.51.100.2"); !strings.Contains(got, "dev up1 table 6512") || strings.Contains(got, "via") {
		t.Errorf("on-link neighbour: %q", got)
	}
	rules := ipOut(t, ctx, ns, "rule", "show")
	for _, want := range []string{"6511:\tfrom 192.0.2.2 lookup 6511 proto 109", "6512:\tfrom 198.51.100.2 lookup 6512 proto 109",
		"6511:\tfrom all oif up0 lookup 6511 proto 109",
		"6513:\tfrom all fwmark 0x7 lookup 6513 proto 109", "200:\tfrom 10.8.8.8 lookup 6511"} {
		if !strings.Contains(rules, want) {
			t.Errorf("ip rule lacks %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "10.9.9.9") {
		t.Errorf("stale rule of a previous run kept:\n%s", rules)
	}

	// The LTE address changes (a new lease): the rule follows.
	for _, args := range [][]string{{"addr", "del", "198.51.100.2/24", "dev", "up1"}, {"addr", "add", "198.51.100.3/24", "dev", "up1"}} {
		if err := ns.IP(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Deleting the address took its routes with it; DHCP puts the
	// default route back, with a new gateway.
	if err := ns.IP(ctx, "route", "replace", "default", "via", "198.51.100.254", "dev", "up1", "metric", "700"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rule and table follow the new address and gateway", func() (bool, string) {
		rules := ipOut(t, ctx, ns, "rule", "show")
		got := routeGet(t, ctx, ns, "from", "198.51.100.3")
		return strings.Contains(rules, "from 198.51.100.3 lookup 6512") && !strings.Contains(rules, "198.51.100.2 ") &&
			strings.Contains(got, "via 198.51.100.254 dev up1 table 6512"), rules + got
	})

	// An operator flushing our rule gets it back at the next change or
	// resync; here a link event triggers it.
	if err := ns.IP(ctx, "rule", "del", "pref", "6511"); err != nil {
		t.Fatal(err)
	}
	if err := ns.IP(ctx, "link", "set", "wwan0", "mtu", "1400"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted rule restored", func() (bool, string) {
		rules := ipOut(t, ctx, ns, "rule", "show")
		return strings.Contains(rules, "from 192.0.2.2 lookup 6511"), rules
	})

	// The interface goes away: its rule and routes go too.
	if err := ns.IP(ctx, "link", "del", "up1"); err != nil {
		t.Fatal(err)
	}
	// (The rule by interface name stays, for when it comes back.)
	eventually(t, "rule of a removed interface removed", func() (bool, string) {
		rules := ipOut(t, ctx, ns, "rule", "show")
		table := ipOut(t, ctx, ns, "route", "show", "table", "6512")
		return !strings.Contains(rules, "198.51.100.3") && strings.Contains(rules, "oif up1 [detached] lookup 6512") &&
			strings.TrimSpace(table) == "", rules + table
	})

	// A reload moves the DSL path to table 7000 and drops the modem.
	if err := m.SetPaths([]Path{{Name: "dsl", Device: "up0", Mode: BySource, Table: 7000}}); err != nil {
		t.Fatal(err)
	}
	rules = ipOut(t, ctx, ns, "rule", "show")
	if !strings.Contains(rules, "7000:\tfrom 192.0.2.2 lookup 7000 proto 109") || strings.Contains(rules, "lookup 6511 proto") ||
		!strings.Contains(rules, "7000:\tfrom all oif up0 lookup 7000 proto 109") ||
		strings.Contains(rules, "lookup 6513") {
		t.Errorf("after SetPaths:\n%s", rules)
	}
	for _, table := range []string{"6511", "6513"} {
		if out := ipOut(t, ctx, ns, "route", "show", "table", table); strings.TrimSpace(out) != "" {
			t.Errorf("table %s after SetPaths: %s", table, out)
		}
	}

	// Close removes everything it installed, and only that.
	closed = true
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	rules = ipOut(t, ctx, ns, "rule", "show")
	if strings.Contains(rules, "proto 109") || !strings.Contains(rules, "from 10.8.8.8 lookup 6511") {
		t.Errorf("after Close:\n%s", rules)
	}
	for _, table := range []string{"6511", "6512", "6513", "7000"} {
		if out := ipOut(t, ctx, ns, "route", "show", "table", table); strings.TrimSpace(out) != "" {
			t.Errorf("table %s after Close: %s", table, out)
		}
	}
}
