// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestPathRoutingDefaults(t *testing.T) {
	text := strings.Replace(base, `name = "dsl"`, "name = \"dsl\"\ndevice = \"eth0\"", 1)
	cfg, err := Load(writeFile(t, "x.toml", text))
	if err != nil {
		t.Fatal(err)
	}
	dsl, lte := cfg.Paths[0], cfg.Paths[1]
	// A path with a device is routed by source; one without is left alone.
	if dsl.Routing != RoutingSource || dsl.Table != 6511 || lte.Routing != RoutingNone || lte.Table != 6512 {
		t.Errorf("dsl %s/%d, lte %s/%d", dsl.Routing, dsl.Table, lte.Routing, lte.Table)
	}
	cfg, err = Load(writeFile(t, "x.toml", base+"device = \"wwan0\"\nfwmark = 2\nrouting = \"fwmark\"\ntable = 300\ngateway = \"100.64.0.1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if lte := cfg.Paths[1]; lte.Routing != RoutingFwmark || lte.Table != 300 || lte.Fwmark != 2 || lte.Gateway != netip.MustParseAddr("100.64.0.1") {
		t.Errorf("lte %+v", lte)
	}
}

func TestPathRoutingErrors(t *testing.T) {
	for _, tt := range []struct{ extra, key, msg string }{
		{"routing = \"source\"\n", "routing", `"source" needs the path's device (the interface its packets leave through)`},
		{"device = \"wwan0\"\nrouting = \"fwmark\"\n", "routing", `"fwmark" needs the path's fwmark (not 0)`},
		{"device = \"wwan0\"\nrouting = \"auto\"\n", "routing", `invalid value "auto": want "source", "fwmark", "none"`},
		{"device = \"wwan0\"\ntable = 254\n", "table", `254 is the kernel's "main" table: pick another (1-252, 256-2147483647)`},
		{"device = \"wwan0\"\ntable = -1\n", "table", `-1 out of range 1..2147483647`},
		{"device = \"wwan0\"\ntable = 6511\n", "table", `table 6511 is also path dsl's, on another interface (eth0)`},
		{"device = \"wwan0\"\ngateway = \"x\"\n", "gateway", `invalid address "x"`},
		{"device = \"wwan0\"\ngateway = \"fd00::1\"\n", "gateway", `address family differs from remote 198.51.100.1`},
		{"gateway = \"198.51.100.254\"\n", "gateway", `only with routing "source" or "fwmark" (the path's table gets it)`},
	} {
		text := strings.Replace(base, `name = "dsl"`, "name = \"dsl\"\ndevice = \"eth0\"", 1) + tt.extra
		// The error is on the line of the (last) key it names.
		line := strings.Count(text[:strings.LastIndex(text, "\n"+tt.key+" =")+1], "\n") + 1
		want := fmt.Sprintf("x.toml:%d: path.lte.%s: %s", line, tt.key, tt.msg)
		_, err := Load(writeFile(t, "x.toml", text))
		var list ErrorList
		if !errors.As(err, &list) || list[0].Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", tt.extra, err, want)
		}
	}
	// Two paths on one interface may share its table; "none" needs nothing.
	for _, extra := range []string{"device = \"eth0\"\ntable = 6511\n", "routing = \"none\"\n"} {
		text := strings.Replace(base, `name = "dsl"`, "name = \"dsl\"\ndevice = \"eth0\"", 1) + extra
		if _, err := Load(writeFile(t, "x.toml", text)); err != nil {
			t.Errorf("%q: %v", extra, err)
		}
	}
}
