// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestModesAndAdvertise(t *testing.T) {
	text := strings.Replace(base, `scheduler = "rr"`, "scheduler = \"rr\"\nmode = \"switch\"\nreconnect_max = \"5s\"", 1) +
		"[connection.switch]\nrtt_high = \"80ms\"\nloss_high = 0.1\nhold = \"3s\"\n"
	cfg, err := Load(writeFile(t, "m.toml", text))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Connection
	want := Switch{RTTHigh: 80 * time.Millisecond, RTTLow: 80 * time.Millisecond * 2 / 3, LossHigh: 0.1, LossLow: 0.025, Hold: 3 * time.Second}
	if c.Mode != ModeSwitch || c.Switch != want || c.ReconnectMax != 5*time.Second {
		t.Errorf("mode %q switch %+v reconnect %v", c.Mode, c.Switch, c.ReconnectMax)
	}
	// A path named only by its device follows the device's address.
	dev, err := Load(writeFile(t, "d.toml", base+"device = \"wwan0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := dev.Paths[1]; p.Device != "wwan0" || p.Local.Addr().IsValid() {
		t.Errorf("device-only path %+v", p)
	}
	srv := "[connection]\nrole = \"server\"\nsecurity = \"none\"\nadvertise = [\"203.0.113.7\", \"[2001:db8::7]:7000\"]\n[[listen]]\naddress = \"0.0.0.0\"\n"
	sc, err := Load(writeFile(t, "s.toml", srv))
	if err != nil {
		t.Fatal(err)
	}
	if a := sc.Connection.Advertise; len(a) != 2 || a[0] != netip.MustParseAddrPort("203.0.113.7:6511") || a[1].Port() != 7000 {
		t.Errorf("advertise %v", a)
	}

	for _, tt := range []struct{ text, want string }{
		{strings.Replace(base, `scheduler = "rr"`, `mode = "bonding"`, 1), `x.toml:7: connection.mode: invalid value "bonding": want "aggregate", "active-backup", "switch"`},
		{base + "[connection.switch]\nrtt_high = \"50ms\"\nrtt_low = \"90ms\"\n", `x.toml:19: connection.switch.rtt_low: 90ms must not exceed rtt_high 50ms`},
		{base + "[connection.switch]\nloss_high = 5\n", `x.toml:18: connection.switch.loss_high: 5 out of range 0..1 (a fraction: 0.05 is 5 %)`},
		{strings.Replace(base, `scheduler = "rr"`, `advertise = ["198.51.100.9"]`, 1), `x.toml:7: connection.advertise: only a server advertises addresses`},
		{strings.Replace(srv, `"203.0.113.7"`, `"0.0.0.0"`, 1), `x.toml:4: connection.advertise: invalid address "0.0.0.0" (entry 1): want a unicast IP or IP:port`},
	} {
		_, err := Load(writeFile(t, "x.toml", tt.text))
		var list ErrorList
		if !errors.As(err, &list) || list[0].Error() != tt.want {
			t.Errorf("got  %v\nwant %s", err, tt.want)
		}
	}
}
