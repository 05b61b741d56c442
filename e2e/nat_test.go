// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

// The CPE sits behind a NAT (nftables masquerade with random ports): both
// subflows reach the concentrator from the same public address, told apart
// by their DCCP connection identity. Flushing the NAT's connection table
// makes it rebind every subflow to a new port; the connection survives.
func TestConcentratorBehindNATAndRebinding(t *testing.T) {
	requireRoot(t)
	requireTools(t, "nft", "conntrack", "ethtool", "ping")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	nat, err := netns.Add(ctx, netns.UniqueName("nat"))
	must(t, err)
	t.Cleanup(func() { nat.Delete() })

	// cpe p0/p1 -> nat (10.77.{1,2}.0/24), nat wan -> srv (10.78.0.0/24).
	for i := 0; i < 2; i++ {
		dev := fmt.Sprintf("p%d", i)
		must(t, netns.AddVeth(ctx, tp.cpe, dev, nat, dev))
		must(t, tp.cpe.IP(ctx, "addr", "add", fmt.Sprintf("10.77.%d.1/24", i+1), "dev", dev))
		must(t, nat.IP(ctx, "addr", "add", fmt.Sprintf("10.77.%d.2/24", i+1), "dev", dev))
		must(t, tp.cpe.IP(ctx, "route", "add", "10.78.0.0/24", "via", fmt.Sprintf("10.77.%d.2", i+1), "dev", dev, "metric", fmt.Sprint(10+i)))
	}
	must(t, netns.AddVeth(ctx, nat, "wan", tp.srv, "wan"))
	must(t, nat.IP(ctx, "addr", "add", "10.78.0.1/24", "dev", "wan"))
	must(t, tp.srv.IP(ctx, "addr", "add", "10.78.0.2/24", "dev", "wan"))
	must(t, nat.Sysctl(ctx, "net.ipv4.ip_forward", "1"))
	rules := `table ip mptunnat {
	chain post { type nat hook postrouting priority 100; oifname "wan" masquerade random; }
}`
	cmd := nat.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = stringsReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}

	cpe, srv := startTunnel(t, ctx, tp, [][2]string{{"10.77.1.1", "10.78.0.2"}, {"10.77.2.1", "10.78.0.2"}})
	remotes := func() map[string]bool {
		m := map[string]bool{}
		for _, p := range status(t, srv.socket).Conns[0].Paths {
			m[p.Remote] = true
		}
		return m
	}
	before := remotes()
	if len(before) != 2 {
		t.Fatalf("concentrator sees subflows from %v, want two ports of the NAT's address", before)
	}
	for r := range before {
		if r[:len("10.78.0.1:")] != "10.78.0.1:" {
			t.Fatalf("subflow from %s, not from the NAT", r)
		}
	}
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Fatalf("ping through the NAT: %v\n%s", err, out)
	}

	// Rebind: forget every NAT mapping; the next packets get new ports.
	if out, err := nat.Output(ctx, "conntrack", "-F"); err != nil {
		t.Fatalf("conntrack -F: %v: %s", err, out)
	}
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "10", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Fatalf("ping after the NAT rebound: %v\n%s", err, out)
	}
	after := remotes()
	changed := 0
	for r := range after {
		if !before[r] {
			changed++
		}
	}
	st := status(t, srv.socket)
	t.Logf("subflow addresses before %v, after %v; concentrator connections %d", before, after, len(st.Conns))
	if changed == 0 {
		t.Errorf("no subflow moved to a new NAT port (before %v, after %v): rebinding not exercised", before, after)
	}
	if len(st.Conns) != 1 || st.Conns[0].State != "open" {
		t.Errorf("connection did not survive the rebinding: %+v", st.Conns)
	}
	_ = cpe
}
