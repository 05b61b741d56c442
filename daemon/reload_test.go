// SPDX-License-Identifier: MIT

package daemon

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/config"
)

// Every config field is in the reload table: a new key cannot be
// silently ignored by a reload.
func TestReloadTableCoversConfig(t *testing.T) {
	var leaves []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := strings.TrimPrefix(prefix+"."+f.Name, ".")
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == "github.com/mptun/mptun/config" {
				walk(name, f.Type)
				continue
			}
			leaves = append(leaves, name)
		}
	}
	walk("", reflect.TypeOf(config.Config{}))
	for _, leaf := range leaves {
		if leaf == "File" {
			continue
		}
		covered := slices.ContainsFunc(reloadKeys, func(k reloadKey) bool {
			return leaf == k.field || strings.HasPrefix(leaf, k.field+".")
		})
		if !covered {
			t.Errorf("config field %s is not in reloadKeys: say whether a reload applies it", leaf)
		}
	}
}

const cpe = `[tunnel]
addresses = ["10.99.0.2/24"]
[connection]
role = "client"
security = "none"
scheduler = "rr"
reorderer = "equalize"
aqm = true
[[path]]
name = "dsl"
remote = "198.51.100.1"
[[path]]
name = "lte"
device = "wwan0"
remote = "198.51.100.1"
`

func TestConfigChanges(t *testing.T) {
	old := load(t, cpe)
	for _, tt := range []struct {
		from, to      string
		live, restart string
	}{
		{`scheduler = "rr"`, `scheduler = "srtt"`, "connection.scheduler", ""},
		{`reorderer = "equalize"`, "reorderer = \"fixed\"\nreorder_max_hold = \"150ms\"", "connection.reorderer connection.reorder_max_hold", ""},
		{`aqm = true`, `aqm = false`, "", "connection.aqm"},
		{`addresses = ["10.99.0.2/24"]`, `addresses = ["10.99.0.3/24"]`, "", "tunnel.addresses"},
		{"name = \"lte\"\ndevice", "name = \"lte\"\nprio = 1\ndevice", "path.lte", ""},
		{"name = \"lte\"\ndevice", "name = \"lte\"\nmtu = 1400\ndevice", "", "path.lte.mtu"},
		{"[[path]]\nname = \"lte\"\ndevice = \"wwan0\"\nremote = \"198.51.100.1\"\n", "", "path.lte (removed)", ""},
		{`aqm = true`, "aqm = true\nmode = \"active-backup\"", "connection.mode", ""},
		{"[tunnel]", "[log]\nlevel = \"debug\"\n[tunnel]", "", "log.level"},
	} {
		cur := load(t, strings.Replace(cpe, tt.from, tt.to, 1))
		live, restart := configChanges(old, cur)
		if strings.Join(live, " ") != tt.live || strings.Join(restart, " ") != tt.restart {
			t.Errorf("%q → %q: live %q restart %q; want %q, %q", tt.from, tt.to, live, restart, tt.live, tt.restart)
		}
	}
}

// The path manager gets the config's runtime settings whole: a reorderer
// change keeps the hold and repair (the bug of issue 12 rebuilt the
// reorderer without them).
func TestSettingsOfConfig(t *testing.T) {
	text := strings.Replace(cpe, `reorderer = "equalize"`, "reorderer = \"fixed\"\nreorder_max_hold = \"150ms\"\nmode = \"switch\"\nreconnect_max = \"4s\"", 1)
	text = strings.Replace(text, "aqm = true\n", "aqm = true\n[connection.switch]\nrtt_high = \"90ms\"\n", 1)
	cfg := load(t, text)
	s := settingsOf(cfg)
	rc := s.ReorderConfig()
	if s.Reorderer != "fixed" || rc.MaxHold != 150*time.Millisecond || rc.HoldGaps || rc.NoEarlyLoss || !s.Retransmit {
		t.Errorf("settings %+v, reorder config %+v", s, rc)
	}
	if s.Mode != "switch" || s.Switch.RTTHigh != 90*time.Millisecond {
		t.Errorf("mode %q switch %+v", s.Mode, s.Switch)
	}
	mc := managerConfig(cfg, true)
	if len(mc.Paths) != 2 || mc.Paths[1].Device != "wwan0" || mc.Paths[1].Local.IsValid() || mc.BackoffMax != 4*time.Second || !mc.OSEvents {
		t.Errorf("manager config %+v", mc)
	}
}
