// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mptun/mptun/bench"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/netns"
)

// TestScaleOutTwoConcentrators is docs/scale-out.md in the lab: two
// mptund concentrators (server_id 0 and 1) share a VIP behind a balancer
// made of nftables and policy routing; 20 in-process CPEs and one mptund
// CPE with two paths each dial the VIP and join their second path at the
// port of the concentrator their CI names. Every connection must have both subflows
// at one concentrator, and both concentrators must get some. Then
// concentrator 0 is killed and its buckets reassigned: its CPEs must
// reconnect to concentrator 1, whose own CPEs keep their connections,
// and the lab's namespaces must be gone afterwards.
func TestScaleOutTwoConcentrators(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (nftables) for the balancer")
	}
	bin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 20
	res, err := bench.ScaleOut(ctx, bench.Tools{Mptund: filepath.Join(bin, "mptund")}, bench.ScaleOutOptions{CPEs: n, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CPEs) != n {
		t.Fatalf("%d CPE results, want %d", len(res.CPEs), n)
	}
	per := [2]int{}
	for i, c := range res.CPEs {
		if c.Server < 0 || c.Server > 1 {
			t.Fatalf("cpe %d: its CI %#x names concentrator %d", i, c.CI, c.Server)
		}
		per[c.Server]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("the balancer sent %d CPEs to concentrator 0 and %d to 1: want both used", per[0], per[1])
	}
	for k := range 2 {
		checkConcentrator(t, "before", k, res.Before[k], res.CPEs, func(c bench.ScaleOutCPE) int { return c.Server }, per[k])
	}
	// The mptund CPE ([tuning] join_port_base) joined at its concentrator.
	if d := res.DaemonCPE; res.DaemonAt < 0 {
		t.Errorf("no concentrator lists the mptund CPE's connection")
	} else if int(d.LocalCI>>28) != res.DaemonAt || d.OpenPaths() != 2 {
		t.Errorf("mptund CPE at concentrator %d: CI %#x, %d paths up, want both paths and the CI naming it", res.DaemonAt, d.LocalCI, d.OpenPaths())
	}
	for i, c := range res.CPEs {
		switch {
		case c.ServerAfter != 1:
			t.Errorf("cpe %d: at concentrator %d after the failure, want 1", i, c.ServerAfter)
		case c.Server == 1 && (c.Redials != 0 || c.CIAfter != c.CI):
			t.Errorf("cpe %d of the survivor was disturbed: %d redials, CI %#x → %#x", i, c.Redials, c.CI, c.CIAfter)
		case c.Server == 0 && c.Redials == 0:
			t.Errorf("cpe %d of the dead concentrator kept CI %#x without dialling again", i, c.CIAfter)
		}
	}
	checkConcentrator(t, "after", 1, res.After[1], res.CPEs, func(c bench.ScaleOutCPE) int { return c.ServerAfter }, n)
	left := netns.List()
	for _, ns := range res.Namespaces {
		if slices.Contains(left, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

// checkConcentrator: concentrator k lists exactly the CPEs that say they
// are there, each connection with its CI naming k and both paths up,
// one from each of the CPE's address ranges.
func checkConcentrator(t *testing.T, when string, k int, conns []control.ConnStatus, cpes []bench.ScaleOutCPE, at func(bench.ScaleOutCPE) int, want int) {
	t.Helper()
	if len(conns) != want {
		t.Errorf("%s: concentrator %d lists %d open connections, want %d", when, k, len(conns), want)
	}
	for _, c := range conns {
		if int(c.LocalCI>>28) != k {
			t.Errorf("%s: concentrator %d has CI %#x naming %d", when, k, c.LocalCI, c.LocalCI>>28)
		}
		if c.OpenPaths() != 2 {
			t.Errorf("%s: concentrator %d: CI %#x has %d paths up, want 2", when, k, c.LocalCI, c.OpenPaths())
			continue
		}
		var ids [2]int
		for j, p := range c.Paths {
			a, err := netip.ParseAddrPort(p.Remote)
			if err != nil || j > 1 {
				t.Fatalf("%s: path remote %q: %v", when, p.Remote, err)
			}
			b := a.Addr().As4()
			if b[0] != 10 || b[1] != 96 || b[2] != byte(1+j) {
				t.Errorf("%s: CI %#x path %d from %v, want the CPE's range 10.96.%d.0/24", when, c.LocalCI, j, a, 1+j)
			}
			ids[j] = int(b[3]) - 1
		}
		if ids[0] != ids[1] || ids[0] < 0 || ids[0] >= len(cpes) {
			t.Errorf("%s: CI %#x joins paths of CPEs %d and %d", when, c.LocalCI, ids[0], ids[1])
		} else if got := at(cpes[ids[0]]); got != k {
			t.Errorf("%s: cpe %d is listed by concentrator %d but its CI names %d", when, ids[0], k, got)
		}
	}
}
