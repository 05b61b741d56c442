// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/mpdccp/noise"
)

type keyPair struct{ priv, pub noise.Key }

func newKeyPair(t *testing.T) keyPair {
	t.Helper()
	priv, err := noise.GeneratePrivateKey(rand.Reader)
	must(t, err)
	pub, err := noise.PublicKey(priv)
	must(t, err)
	return keyPair{priv, pub}
}

// TestCryptokeyRouting: one concentrator, two CPEs with their own keys and
// inner addresses. CPE B sourcing CPE A's inner address is dropped and
// counted (inner-source); traffic to A's address reaches A, never B.
func TestCryptokeyRouting(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ping")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srvNS, err := netns.Add(ctx, netns.UniqueName("ckr-srv"))
	must(t, err)
	t.Cleanup(func() { srvNS.Delete() })
	srvKeys, aKeys, bKeys := newKeyPair(t), newKeyPair(t), newKeyPair(t)
	id := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	dir := t.TempDir()

	srvCfg := fmt.Sprintf(`[tunnel]
name = "ckrs%s"
addresses = ["10.99.0.1/24"]
[connection]
role = "server"
private_key = %q
[[peer]]
public_key = %q
allowed_ips = ["10.99.0.2/32"]
[[peer]]
public_key = %q
allowed_ips = ["10.99.0.3/32"]
[[listen]]
address = "0.0.0.0:6511"
[control]
socket = %q
`, id, srvKeys.priv, aKeys.pub, bKeys.pub, filepath.Join(dir, "srv.sock"))
	srv := startDaemon(t, ctx, srvNS, srvCfg, "concentrator")
	srv.socket = filepath.Join(dir, "srv.sock")

	type cpe struct {
		ns   *netns.NS
		d    *daemonProc
		addr string
	}
	var cpes []cpe
	for i, k := range []keyPair{aKeys, bKeys} {
		ns, err := netns.Add(ctx, netns.UniqueName(fmt.Sprintf("ckr-cpe%d", i)))
		must(t, err)
		t.Cleanup(func() { ns.Delete() })
		dev := fmt.Sprintf("k%d", i)
		must(t, netns.AddVeth(ctx, ns, dev, srvNS, dev))
		cAddr, sAddr := fmt.Sprintf("10.78.%d.1", i+1), fmt.Sprintf("10.78.%d.2", i+1)
		must(t, ns.IP(ctx, "addr", "add", cAddr+"/24", "dev", dev))
		must(t, srvNS.IP(ctx, "addr", "add", sAddr+"/24", "dev", dev))
		inner := fmt.Sprintf("10.99.0.%d", i+2)
		sock := filepath.Join(dir, fmt.Sprintf("cpe%d.sock", i))
		cfg := fmt.Sprintf(`[tunnel]
name = "ckrc%s"
addresses = ["%s/24"]
[connection]
role = "client"
private_key = %q
[[peer]]
public_key = %q
allowed_ips = ["10.99.0.0/24"]
[[path]]
name = "p"
local = %q
remote = "%s:6511"
[control]
socket = %q
`, id, inner, k.priv, srvKeys.pub, cAddr, sAddr, sock)
		d := startDaemon(t, ctx, ns, cfg, fmt.Sprintf("cpe%d", i))
		d.socket = sock
		waitOpen(t, sock, 1, 10*time.Second)
		cpes = append(cpes, cpe{ns, d, inner})
	}
	a, b := cpes[0], cpes[1]
	for _, c := range cpes {
		if out, err := c.ns.Output(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
			t.Fatalf("%s: ping the concentrator: %v\n%s", c.addr, err, out)
		}
	}
	// B claims A's address: its packets are dropped at the concentrator.
	tun := fmt.Sprintf("ckrc%s", id)
	must(t, b.ns.IP(ctx, "addr", "add", a.addr+"/32", "dev", tun))
	before := status(t, srv.socket).Dropped["inner-source"]
	if out, err := b.ns.Output(ctx, "ping", "-c", "5", "-i", "0.2", "-W", "1", "-I", a.addr, "10.99.0.1"); err == nil {
		t.Fatalf("B got answers while sourcing A's address:\n%s", out)
	}
	after := status(t, srv.socket).Dropped["inner-source"]
	if after-before < 5 {
		t.Fatalf("inner-source drops %d → %d, want at least 5 more", before, after)
	}
	// Downstream to A's address goes to A (which answers), whatever B sent.
	if out, err := srvNS.Output(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", a.addr); err != nil {
		t.Fatalf("concentrator → A: %v\n%s", err, out)
	}
	bst := status(t, b.d.socket)
	t.Logf("inner-source drops at the concentrator: %d; B's connection: %+v", after, bst.Conns[0].State)
}
