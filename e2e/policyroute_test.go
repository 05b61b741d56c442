// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// concAddr is the concentrator's public address: on its loopback, so the
// CPE reaches it only through a gateway, as on the Internet.
const concAddr = "203.0.113.1"

// TestPolicyRouting runs a CPE whose second uplink (p1) has no route to
// the concentrator in the main table: only the DSL uplink (p0) has the
// default route. mptund installs a rule and table per path (DSL by source
// address with the main table's gateway copied, LTE by fwmark with its
// configured gateway), so both paths open; with routing = "none" on the
// LTE path it never opens. SIGTERM removes the rules and tables.
func TestPolicyRouting(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 0)
	a1, b1 := tp.addPath(t, ctx, 1, 0)
	must(t, tp.srv.IP(ctx, "addr", "add", concAddr+"/32", "dev", "lo"))
	// The concentrator's address is not on the uplinks' links: like an
	// ISP's router, the other end does not answer ARP for it (Linux
	// would, for any of its addresses, by default).
	must(t, tp.srv.Sysctl(ctx, "net.ipv4.conf.all.arp_ignore", "1"))
	must(t, tp.cpe.IP(ctx, "route", "add", "default", "via", b0, "dev", "p0", "metric", "100"))

	// Before: a packet from the LTE address to the concentrator leaves
	// through the DSL uplink.
	if out, _ := tp.cpe.Output(ctx, "ip", "route", "get", concAddr, "from", a1); !strings.Contains(string(out), "dev p0") {
		t.Fatalf("before mptund: %s", out)
	}

	id := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	srvSock := filepath.Join(t.TempDir(), "srv.sock")
	srv := startDaemon(t, ctx, tp.srv, shippedConfig(t, "concentrator", map[string]string{
		`socket = "/run/mptun/%i.sock"`: fmt.Sprintf("socket = %q", srvSock),
		`name = "mptun0"`:               `name = "mpts` + id + `"`,
		`address = "0.0.0.0:6511"`:      fmt.Sprintf("address = %q", concAddr+":6511"),
	}), "concentrator")
	srv.socket = srvSock
	time.Sleep(200 * time.Millisecond)

	cpeConfig := func(lteRouting string) (string, string) {
		sock := filepath.Join(t.TempDir(), "cpe.sock")
		return shippedConfig(t, "cpe", map[string]string{
			`local = "192.0.2.2"`:           fmt.Sprintf("local = %q", a0),
			`local = "100.64.0.2"`:          fmt.Sprintf("local = %q", a1),
			`device = "eth0"`:               `device = "p0"`,
			`device = "wwan0"`:              `device = "p1"`,
			`remote = "198.51.100.1:6511"`:  fmt.Sprintf("remote = %q", concAddr+":6511"),
			`socket = "/run/mptun/%i.sock"`: fmt.Sprintf("socket = %q", sock),
			`name = "mptun0"`:               `name = "mptc` + id + `"`,
			"routing = \"fwmark\"\n":        lteRouting,
			"\n# gateway = \"192.0.2.1\"\n": "\n",
		}), sock
	}

	// Without routing for the LTE path, it never opens.
	text, sock := cpeConfig("routing = \"none\"\n")
	cpe := startDaemon(t, ctx, tp.cpe, text, "cpe-none")
	cpe.socket = sock
	waitOpen(t, sock, 1, 10*time.Second)
	time.Sleep(3 * time.Second)
	if n := status(t, sock).Conns[0].OpenPaths(); n != 1 {
		t.Errorf("LTE path without policy routing: %d open paths, want 1 (the DSL one)", n)
	}
	must(t, cpe.stop())

	text, sock = cpeConfig(fmt.Sprintf("routing = \"fwmark\"\ngateway = %q\n", b1))
	cpe = startDaemon(t, ctx, tp.cpe, text, "cpe")
	cpe.socket = sock
	waitOpen(t, sock, 2, 10*time.Second)

	rules, err := tp.cpe.Output(ctx, "ip", "rule", "show")
	must(t, err)
	for _, want := range []string{"6511:\tfrom " + a0 + " lookup 6511 proto 109", "6512:\tfrom all fwmark 0x2 lookup 6512 proto 109"} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("ip rule lacks %q:\n%s", want, rules)
		}
	}
	for sel, want := range map[string]string{
		"from " + a0: "via " + b0 + " dev p0 table 6511",
		"mark 2":     "via " + b1 + " dev p1 table 6512",
	} {
		out, err := tp.cpe.Output(ctx, "ip", append([]string{"route", "get", concAddr}, strings.Fields(sel)...)...)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("route get %s %s: %v %s, want %q", concAddr, sel, err, out, want)
		}
	}
	// Both uplinks carry the tunnel: each path hears the concentrator
	// (handshake, acknowledgements, keepalives every second).
	time.Sleep(2 * time.Second)
	for _, p := range status(t, sock).Conns[0].Paths {
		if p.DatagramsReceived < 3 || p.DatagramsSent < 3 {
			t.Errorf("path %s: %d datagrams sent, %d received", p.Name, p.DatagramsSent, p.DatagramsReceived)
		}
	}

	// A reload moves the LTE path to another table.
	cfgText, err := os.ReadFile(cpe.config)
	must(t, err)
	must(t, os.WriteFile(cpe.config, []byte(strings.Replace(string(cfgText), "routing = \"fwmark\"\n", "routing = \"fwmark\"\ntable = 7000\n", 1)), 0o600))
	must(t, cpe.cmd.Process.Signal(syscall.SIGHUP))
	deadline := time.Now().Add(5 * time.Second)
	for {
		rules, err = tp.cpe.Output(ctx, "ip", "rule", "show")
		must(t, err)
		if strings.Contains(string(rules), "7000:\tfrom all fwmark 0x2 lookup 7000 proto 109") && !strings.Contains(string(rules), "lookup 6512") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reload with table = 7000:\n%s", rules)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// SIGTERM: mptund removes what it installed.
	must(t, cpe.stop())
	rules, err = tp.cpe.Output(ctx, "ip", "rule", "show")
	must(t, err)
	if strings.Contains(string(rules), "proto 109") {
		t.Errorf("rules left after mptund stopped:\n%s", rules)
	}
	for _, table := range []string{"6511", "6512", "7000"} {
		if out, _ := tp.cpe.Output(ctx, "ip", "route", "show", "table", table); strings.TrimSpace(string(out)) != "" {
			t.Errorf("table %s left after mptund stopped: %s", table, out)
		}
	}
}
