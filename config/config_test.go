// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/defaults"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExamplesLoad(t *testing.T) {
	for _, name := range []string{"cpe.toml", "concentrator.toml"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(filepath.Join("..", "configs", name))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Tunnel.Name != "mptun0" {
				t.Errorf("tunnel name %q", cfg.Tunnel.Name)
			}
			want := "/run/mptun/" + strings.TrimSuffix(name, ".toml") + ".sock"
			if cfg.Control.Socket != want {
				t.Errorf("control socket %q, want %q", cfg.Control.Socket, want)
			}
		})
	}
}

func TestCPEValues(t *testing.T) {
	cfg, err := Load(filepath.Join("..", "configs", "cpe.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Connection.Role != RoleClient || len(cfg.Paths) != 2 {
		t.Fatalf("role %q, %d paths", cfg.Connection.Role, len(cfg.Paths))
	}
	dsl := cfg.Paths[0]
	if dsl.Name != "dsl" || dsl.Remote != netip.MustParseAddrPort("198.51.100.1:6511") ||
		dsl.Local != netip.MustParseAddrPort("192.0.2.2:0") || dsl.Device != "eth0" ||
		dsl.Fwmark != 1 || dsl.Weight != 2 || dsl.MTU != 1492 || dsl.Prio != 3 {
		t.Errorf("dsl path %+v", dsl)
	}
	if cfg.Paths[1].CCID != "bbr" {
		t.Errorf("lte ccid %q", cfg.Paths[1].CCID)
	}
	c := cfg.Connection
	if c.ReorderMaxHold != 0 || c.ServiceCode != 0x6D707475 || c.AQMTarget != 50*time.Millisecond {
		t.Errorf("connection %+v", c)
	}
	if len(c.Classes) != 2 || c.Classes[1].SrcPorts[0] != (PortRange{5060, 5060}) || c.Classes[0].Protocol != 17 || len(c.Classes[0].DstPorts) != 2 ||
		c.Classes[0].DstPorts[1] != (PortRange{10000, 20000}) || c.Classes[0].DSCP[0] != 46 {
		t.Errorf("classes %+v", c.Classes)
	}
	if len(cfg.Tunnel.Addresses) != 2 || cfg.Tunnel.Addresses[1] != netip.MustParsePrefix("fd99::2/64") {
		t.Errorf("addresses %v", cfg.Tunnel.Addresses)
	}
}

func TestDefaults(t *testing.T) {
	p := writeFile(t, "min.toml", "[connection]\nrole = \"client\"\nsecurity = \"none\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n")
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	// Absent keys take the one set of defaults.
	want := Connection{Role: "client", CCID: defaults.CCID, Scheduler: defaults.Scheduler, Reorderer: defaults.Reorderer,
		ReorderMaxHold: defaults.ReorderMaxHold, ReorderBuffer: defaults.ReorderBuffer, ServiceCode: defaults.ServiceCode,
		Keepalive: defaults.Keepalive, PathTimeout: defaults.PathTimeout, SendQueue: defaults.SendQueue,
		AQM: defaults.AQM, AQMTarget: defaults.AQMTarget, Retransmit: defaults.Retransmit,
		ECN: defaults.ECN, HyStart: defaults.HyStart, ABE: defaults.ABE, InitialWindow: defaults.InitialWindow}
	if got := cfg.Connection; !sameSettings(got, want) {
		t.Errorf("connection defaults %+v", got)
	}
	if p := cfg.Paths[0]; p.Remote.Port() != DefaultPort || p.MTU != DefaultPathMTU || p.Weight != 1 || p.Prio != DefaultPrio {
		t.Errorf("path defaults %+v", p)
	}
	if !cfg.Offload.TUN || !cfg.Offload.UDPGSO || !cfg.Offload.UDPGRO || cfg.Tunnel.Driver != "wireguard" ||
		cfg.Log.Level != "info" || cfg.Control.Socket != "/run/mptun/min.sock" {
		t.Errorf("defaults %+v", cfg)
	}
}

const base = `[tunnel]
name = "mptun0"
addresses = ["10.99.0.2/24"]

[connection]
role = "client"
scheduler = "rr"
security = "none"

[[path]]
name = "dsl"
remote = "198.51.100.1:6511"

[[path]]
name = "lte"
remote = "198.51.100.1"
`

// sameSettings compares the connection settings that have defaults.
func sameSettings(a, b Connection) bool {
	return a.Role == b.Role && a.CCID == b.CCID && a.Scheduler == b.Scheduler && a.Reorderer == b.Reorderer &&
		a.ReorderMaxHold == b.ReorderMaxHold && a.ReorderBuffer == b.ReorderBuffer && a.ServiceCode == b.ServiceCode &&
		a.Keepalive == b.Keepalive && a.PathTimeout == b.PathTimeout && a.SendQueue == b.SendQueue && a.AQM == b.AQM &&
		a.AQMTarget == b.AQMTarget && a.Retransmit == b.Retransmit && a.ECN == b.ECN && a.HyStart == b.HyStart &&
		a.ABE == b.ABE && a.InitialWindow == b.InitialWindow
}

// The shipped configs spell out every connection setting with the value
// it has by default, so what they document is what runs: a change of a
// default (internal/defaults) shows up here until they follow it.
func TestShippedConfigsShowTheDefaults(t *testing.T) {
	for _, name := range []string{"cpe.toml", "concentrator.toml"} {
		cfg, err := Load(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.Connection
		want := Connection{Role: got.Role, CCID: defaults.CCID, Scheduler: defaults.Scheduler, Reorderer: defaults.Reorderer,
			ReorderMaxHold: defaults.ReorderMaxHold, ReorderBuffer: defaults.ReorderBuffer, ServiceCode: defaults.ServiceCode,
			Keepalive: defaults.Keepalive, PathTimeout: defaults.PathTimeout, SendQueue: defaults.SendQueue,
			AQM: defaults.AQM, AQMTarget: defaults.AQMTarget, Retransmit: defaults.Retransmit,
			ECN: defaults.ECN, HyStart: defaults.HyStart, ABE: defaults.ABE, InitialWindow: defaults.InitialWindow}
		if !sameSettings(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		raw, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"ccid", "scheduler", "reorderer", "reorder_max_hold", "reorder_buffer", "keepalive",
			"path_timeout", "send_queue", "aqm", "aqm_target", "retransmit", "ecn", "hystart", "abe", "initial_window", "ack_filter"} {
			if !strings.Contains(string(raw), "\n"+key+" = ") {
				t.Errorf("%s does not set connection.%s", name, key)
			}
		}
	}
}

// The controller options reach the config as set.
func TestControllerOptions(t *testing.T) {
	p := writeFile(t, "cc.toml", strings.Replace(base, `scheduler = "rr"`,
		"ccid = \"ccid2\"\nhystart = true\nabe = true\necn = false\ninitial_window = 32\nack_filter = false", 1))
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Connection; c.CCID != "ccid2" || !c.HyStart || !c.ABE || c.ECN || c.InitialWindow != 32 || c.ACKFilter {
		t.Errorf("connection %+v", c)
	}
}

func TestReorderMaxHoldAutoOrDuration(t *testing.T) {
	for text, want := range map[string]time.Duration{`reorder_max_hold = "auto"`: 0, `reorder_max_hold = "150ms"`: 150 * time.Millisecond} {
		cfg, err := Parse("x.toml", "x.toml", []byte(strings.Replace(base, `scheduler = "rr"`, text, 1)), Names{})
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if cfg.Connection.ReorderMaxHold != want {
			t.Errorf("%s: hold %v, want %v", text, cfg.Connection.ReorderMaxHold, want)
		}
	}
}

func TestBrokenConfigs(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // the first error, exactly
	}{
		{"unknown top-level key", "bogus = 1\n" + base, `x.toml:1: bogus: unknown key`},
		{"unknown table key", strings.Replace(base, `scheduler = "rr"`, "schedular = \"rr\"", 1), `x.toml:7: connection.schedular: unknown key`},
		{"unknown key in second path", base + "colour = \"red\"\n", `x.toml:17: path.lte.colour: unknown key`},
		{"upper-case key", strings.Replace(base, `name = "mptun0"`, `Name = "mptun0"`, 1), `x.toml:2: tunnel.Name: unknown key (keys are lower case)`},
		{"bad remote", strings.Replace(base, `"198.51.100.1:6511"`, `"x"`, 1), `x.toml:12: path.dsl.remote: invalid address "x" (want IP or IP:port)`},
		{"wrong type", strings.Replace(base, `role = "client"`, `role = 1`, 1), `x.toml:6: connection.role: wrong type: got integer, want string`},
		{"syntax error", strings.Replace(base, `scheduler = "rr"`, `scheduler = "rr`, 1), `x.toml:7: connection.scheduler: strings cannot contain newlines`},
		{"missing role", strings.Replace(base, "role = \"client\"\n", "", 1), `x.toml:5: connection.role: missing: set "client" or "server"`},
		{"bad role", strings.Replace(base, `"client"`, `"peer"`, 1), `x.toml:6: connection.role: invalid value "peer": want "client", "server"`},
		{"bad driver", strings.Replace(base, "[tunnel]\n", "[tunnel]\ndriver = \"tap\"\n", 1), `x.toml:2: tunnel.driver: invalid value "tap": want "wireguard", "water"`},
		{"bad tunnel address", strings.Replace(base, `10.99.0.2/24`, `10.99.0.2`, 1), `x.toml:3: tunnel.addresses: invalid address/prefix "10.99.0.2" (entry 1)`},
		{"tunnel mtu too small for v6", strings.Replace(base, `["10.99.0.2/24"]`, "[\"fd99::2/64\"]\nmtu = 1000", 1), `x.toml:4: tunnel.mtu: 1000 out of range: 0 (derive) or 1280..65535`},
		{"route with host bits", strings.Replace(base, "[connection]", "routes = [\"10.1.2.3/16\"]\n[connection]", 1), `x.toml:5: tunnel.routes: route "10.1.2.3/16" has host bits set; did you mean "10.1.0.0/16"?`},
		{"bad duration", strings.Replace(base, `scheduler = "rr"`, `keepalive = "1 second"`, 1), `x.toml:7: connection.keepalive: invalid duration "1 second" (e.g. "150ms", "2s")`},
		{"bad hold", strings.Replace(base, `scheduler = "rr"`, `reorder_max_hold = "automatic"`, 1), `x.toml:7: connection.reorder_max_hold: invalid duration "automatic" (e.g. "150ms", "2s")`},
		{"timeout shorter than keepalive", strings.Replace(base, `scheduler = "rr"`, "keepalive = \"5s\"\npath_timeout = \"2s\"", 1), `x.toml:8: connection.path_timeout: 2s must be longer than keepalive 5s`},
		{"duplicate path name", strings.Replace(base, `name = "lte"`, `name = "dsl"`, 1), `x.toml:15: path.dsl.name: duplicate path name (also path[0])`},
		{"path without remote", strings.Replace(base, "remote = \"198.51.100.1\"\n", "", 1), `x.toml:14: path.lte: missing remote`},
		{"path weight out of range", base + "weight = 0\n", `x.toml:17: path.lte.weight: 0 out of range 1..1000`},
		{"path mtu too small", base + "mtu = 100\n", `x.toml:17: path.lte.mtu: 100 out of range 576..65535`},
		{"negative fwmark", base + "fwmark = -1\n", `x.toml:17: path.lte.fwmark: -1 out of range 0..4294967295`},
		{"family mismatch", base + "local = \"fd00::1\"\n", `x.toml:16: path.lte.remote: address family differs from local fd00::1`},
		{"bad path name", strings.Replace(base, `name = "lte"`, `name = "lte 2"`, 1), `x.toml:15: path[1].name: invalid name "lte 2" (letters, digits, '-' and '_', up to 32)`},
		{"unknown scheduler with registry", base, ""}, // replaced below
		{"class bad port range", base + "[[connection.class]]\nname = \"voip\"\nprotocol = \"udp\"\ndst_ports = [\"20000-10000\"]\nscheduler = \"redundant\"\n",
			`x.toml:20: connection.class.voip.dst_ports: invalid port or range "20000-10000" (e.g. "5060" or "10000-20000")`},
		{"class dscp out of range", base + "[[connection.class]]\nname = \"voip\"\ndscp = [64]\nscheduler = \"redundant\"\n",
			`x.toml:19: connection.class.voip.dscp: 64 out of range 0..63`},
		{"class ports without protocol", base + "[[connection.class]]\nname = \"voip\"\ndst_ports = [\"5060\"]\nscheduler = \"redundant\"\n",
			`x.toml:17: connection.class.voip.protocol: ports need protocol "tcp", "udp", "sctp" or "dccp"`},
		{"server without listen", strings.Replace(base[:strings.Index(base, "[[path]]")], `"client"`, `"server"`, 1), `x.toml: listen: role "server" needs at least one [[listen]] socket`},
		{"listen bad address", strings.Replace(base[:strings.Index(base, "[[path]]")], `"client"`, `"server"`, 1) + "[[listen]]\naddress = \"0.0.0.0:99999\"\n",
			`x.toml:11: listen[0].address: invalid address "0.0.0.0:99999" (want IP or IP:port)`},
		{"hystart not a bool", strings.Replace(base, `scheduler = "rr"`, `hystart = "yes"`, 1), `x.toml:7: connection.hystart: wrong type: got string, want boolean`},
		{"initial window out of range", strings.Replace(base, `scheduler = "rr"`, `initial_window = 5000`, 1), `x.toml:7: connection.initial_window: 5000 out of range 0..1000`},
		{"bad rate", strings.Replace(base, `scheduler = "rr"`, `rate_limit = "fast"`, 1), `x.toml:7: connection.rate_limit: invalid rate "fast" (bits per second, e.g. "0", "50M", "1.5Gbit")`},
		{"bad log level", base + "[log]\nlevel = \"loud\"\n", `x.toml:18: log.level: invalid value "loud": want "debug", "info", "warn", "error"`},
		{"bad metrics listen", base + "[metrics]\nlisten = \"9100\"\n", `x.toml:18: metrics.listen: invalid listen address "9100": want host:port`},
		{"relative control socket", base + "[control]\nsocket = \"mptun.sock\"\n", `x.toml:18: control.socket: must be an absolute path, got "mptun.sock"`},
		{"string where array expected", strings.Replace(base, `["10.99.0.2/24"]`, `"10.99.0.2/24"`, 1), `x.toml:3: tunnel.addresses: wrong type: got string, want array`},
		{"duplicate key", strings.Replace(base, `scheduler = "rr"`, "scheduler = \"rr\"\nscheduler = \"rr\"", 1), `x.toml:8: connection.scheduler: Key 'connection.scheduler' has already been defined.`},
		{"service code out of range", strings.Replace(base, `scheduler = "rr"`, `service_code = 0x1FFFFFFFF`, 1), `x.toml:7: connection.service_code: 8589934591 out of range 0..4294967294`},
		{"interface name too long", strings.Replace(base, `name = "mptun0"`, `name = "averyveryverylongname"`, 1), `x.toml:2: tunnel.name: invalid interface name "averyveryverylongname" (1-15 characters, no '/', ':' or blanks)`},
		{"multi-line array then bad key", strings.Replace(base, "addresses = [\"10.99.0.2/24\"]", "addresses = [\n  \"10.99.0.2/24\",\n  # comment\n  \"fd99::2/64\",\n]\nmtux = 1", 1), `x.toml:8: tunnel.mtux: unknown key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := Names{}
			if tt.want == "" {
				names.Schedulers = []string{"prio", "srtt"}
				tt.want = `x.toml:7: connection.scheduler: unknown scheduler "rr": want "prio", "srtt"`
			}
			p := writeFile(t, "x.toml", tt.text)
			_, err := LoadWith(p, names)
			if err == nil {
				t.Fatalf("no error for:\n%s", tt.text)
			}
			if !IsInvalid(err) {
				t.Fatalf("IsInvalid false for %v", err)
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("not an ErrorList: %T %v", err, err)
			}
			if got := list[0].Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s\n(all: %v)", got, tt.want, err)
			}
		})
	}
}

func TestMissingFileIsNotInvalid(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.toml"))
	if err == nil || IsInvalid(err) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "800k": 800e3, "50M": 50e6, "1.5Gbit": 1.5e9, "100mbit": 100e6, "2000": 2000, "10Mbps": 10e6} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1T", "NaNk"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded", in)
		}
	}
}

func TestLineIndex(t *testing.T) {
	idx := newLineIndex("a = 1\n[t]\nb = \"\"\"\nc = 2\n\"\"\"\n[[p]]\nd.e = 3\n[[p]]\n'q k' = 4\n[[p.s]]\nf = 5\n")
	for k, want := range map[string]int{"a": 1, "t": 2, "t.b": 3, "t.c": 0, "p[0].d.e": 7, "p[1]": 8, "p[1].q k": 9, "p[1].s[0].f": 11, "p[0].zz": 6} {
		if got := idx.line(k); got != want && !(want == 0 && got == 2) {
			t.Errorf("line(%q) = %d, want %d", k, got, want)
		}
	}
}
