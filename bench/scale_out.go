// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/mpdccp/noise"
)

// The scale-out lab (docs/scale-out.md): two concentrators share a
// virtual address behind a balancer built from nftables and policy
// routing, with no address rewriting and no per-flow state. A first
// Request to VIP:6511 is marked with a hash of its source (one of
// soBuckets buckets, a static bucket → concentrator map) and routed to
// that concentrator; concentrator k also listens on VIP:soJoinBase+k,
// and a join sent there is routed to it by port. The CPEs (in-process
// engines, two paths from two address ranges, both dialling VIP:6511)
// send their second path's join to the port of the concentrator the
// CI's top bits name (the engine's JoinRemote hook); when their
// concentrator goes silent they dial again.
var (
	soVIP     = netip.MustParseAddr("10.95.100.1")
	soCPENet  = [2]netip.Prefix{netip.MustParsePrefix("10.96.1.0/24"), netip.MustParsePrefix("10.96.2.0/24")}
	soInner   = netip.MustParsePrefix("10.97.0.0/16")
	soSrvTun  = netip.MustParseAddr("10.98.0.1")
	soLBToCPE = netip.MustParseAddr("10.95.0.1")
	soCPEAddr = netip.MustParseAddr("10.95.0.2")
)

const (
	soBuckets  = 4
	soJoinBase = 6600
	soServers  = 2
)

// ScaleOutOptions parameterise the scale-out lab.
type ScaleOutOptions struct {
	CPEs int // default 20
	Log  io.Writer
}

// ScaleOutCPE is where one CPE's connection was, before and after.
type ScaleOutCPE struct {
	Server, ServerAfter int    // concentrator by the peer CI's top bits
	CI, CIAfter         uint32 // the concentrator's CI of the connection
	Redials             int
}

// ScaleOutResult is what the lab saw.
type ScaleOutResult struct {
	CPEs []ScaleOutCPE
	// Before and After are each concentrator's open connections as its
	// status lists them (After: only the survivor, index 1).
	Before, After [soServers][]control.ConnStatus
	// Namespaces are the names the lab created (gone once it returns).
	Namespaces []string
	// DaemonCPE is the connection of an mptund CPE ([tuning]
	// join_port_base, two paths from soDaemonHost in each range) as the
	// concentrator its CI names lists it, before the failure; DaemonAt is
	// that concentrator (-1: none lists it).
	DaemonCPE control.ConnStatus
	DaemonAt  int
}

// soDaemonHost is the host number of the mptund CPE's two addresses.
const soDaemonHost = 250

type soBed struct {
	o       ScaleOutOptions
	lb, cli *netns.NS
	srv     [soServers]*netns.NS
	daemon  [soServers]*proc
	sock    [soServers]string
	dir     string
	cpes    []*cpe
	workers []*cpeWorker
	res     *ScaleOutResult
	// The mptund CPE.
	cpeDaemon *proc
	cpeSock   string
}

// ScaleOut runs the scale-out lab: every CPE connects through the
// balancer and joins its second path at the same concentrator; then
// concentrator 0 is killed and its buckets given to concentrator 1, and
// its CPEs dial again and land there while concentrator 1's keep their
// connections. The caller judges the result; ScaleOut fails only when
// the lab cannot run or a phase times out.
func ScaleOut(ctx context.Context, tools Tools, o ScaleOutOptions) (res ScaleOutResult, err error) {
	if o.CPEs <= 0 {
		o.CPEs = 20
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	b := &soBed{o: o, res: &res}
	defer b.close()
	if err := b.network(ctx); err != nil {
		return res, err
	}
	keys, srvPub, err := b.concentrators(ctx, tools)
	if err != nil {
		return res, err
	}
	if err := b.startCPEs(keys[:o.CPEs], srvPub); err != nil {
		return res, err
	}
	if err := b.daemonCPE(ctx, tools, keys[o.CPEs], srvPub); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "%d in-process CPEs and one mptund CPE dial %v:6511\n", len(b.cpes), soVIP)
	if err := b.waitJoined(ctx, 30*time.Second, -1); err != nil {
		return res, err
	}
	b.waitDaemonJoined(ctx, 10*time.Second)
	res.CPEs = make([]ScaleOutCPE, len(b.cpes))
	b.each(func(_ mono.Time, c *cpe) {
		ci := c.conn.Stats().PeerCI
		res.CPEs[c.id] = ScaleOutCPE{Server: int(ci >> (32 - config.ServerIDBits)), CI: ci}
	})
	res.DaemonAt = -1
	for k := range soServers {
		var d *control.ConnStatus
		if res.Before[k], d, err = b.openConns(k); err != nil {
			return res, err
		}
		if d != nil {
			res.DaemonCPE, res.DaemonAt = *d, k
		}
	}
	fmt.Fprintf(o.Log, "all joined: %d and %d connections; killing concentrator 0\n", len(res.Before[0]), len(res.Before[1]))
	if err := b.fail(ctx, 0); err != nil {
		return res, err
	}
	if err := b.waitJoined(ctx, 40*time.Second, 0); err != nil {
		return res, err
	}
	b.each(func(_ mono.Time, c *cpe) {
		ci := c.conn.Stats().PeerCI
		r := &res.CPEs[c.id]
		r.ServerAfter, r.CIAfter, r.Redials = int(ci>>(32-config.ServerIDBits)), ci, c.redials
	})
	if res.After[1], _, err = b.openConns(1); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "all joined again: %d connections at concentrator 1\n", len(res.After[1]))
	return res, nil
}

// network: cpe ── lb ── srv0, srv1. The concentrators hold the VIP on
// lo; the balancer marks packets to it (nftables) and routes each mark
// to its concentrator (ip rule fwmark → table).
func (b *soBed) network(ctx context.Context) error {
	var err error
	add := func(role string) (*netns.NS, error) {
		ns, err := netns.Add(ctx, netns.UniqueName(role))
		if err == nil {
			b.res.Namespaces = append(b.res.Namespaces, ns.Name)
		}
		return ns, err
	}
	if b.lb, err = add("solb"); err != nil {
		return err
	}
	if b.cli, err = add("socpe"); err != nil {
		return err
	}
	for k := range soServers {
		if b.srv[k], err = add(fmt.Sprintf("sosrv%d", k)); err != nil {
			return err
		}
	}
	if err := netns.AddVeth(ctx, b.cli, "eth0", b.lb, "cpe0"); err != nil {
		return err
	}
	steps := []ipStep{
		{b.cli, []string{"addr", "add", soCPEAddr.String() + "/24", "dev", "eth0"}},
		{b.cli, []string{"link", "set", "eth0", "up"}},
		{b.cli, []string{"link", "set", "lo", "up"}},
		{b.cli, []string{"route", "add", "local", soCPENet[0].String(), "dev", "lo"}},
		{b.cli, []string{"route", "add", "local", soCPENet[1].String(), "dev", "lo"}},
		{b.cli, []string{"route", "add", "default", "via", soLBToCPE.String()}},
		{b.lb, []string{"addr", "add", soLBToCPE.String() + "/24", "dev", "cpe0"}},
		{b.lb, []string{"link", "set", "cpe0", "up"}},
		{b.lb, []string{"route", "add", "10.96.0.0/16", "via", soCPEAddr.String()}},
	}
	for k := range soServers {
		dev := fmt.Sprintf("srv%d", k)
		if err := netns.AddVeth(ctx, b.lb, dev, b.srv[k], "eth0"); err != nil {
			return err
		}
		lbAddr, srvAddr := fmt.Sprintf("10.95.%d.1", 10+k), fmt.Sprintf("10.95.%d.2", 10+k)
		table := fmt.Sprint(101 + k)
		steps = append(steps,
			ipStep{b.lb, []string{"addr", "add", lbAddr + "/24", "dev", dev}},
			ipStep{b.lb, []string{"link", "set", dev, "up"}},
			ipStep{b.lb, []string{"route", "add", soVIP.String() + "/32", "via", srvAddr, "table", table}},
			ipStep{b.lb, []string{"rule", "add", "fwmark", fmt.Sprint(k + 1), "table", table}},
			ipStep{b.srv[k], []string{"addr", "add", srvAddr + "/24", "dev", "eth0"}},
			ipStep{b.srv[k], []string{"link", "set", "eth0", "up"}},
			ipStep{b.srv[k], []string{"link", "set", "lo", "up"}},
			ipStep{b.srv[k], []string{"addr", "add", soVIP.String() + "/32", "dev", "lo"}},
			ipStep{b.srv[k], []string{"route", "add", "default", "via", lbAddr}},
		)
	}
	if err := runIPSteps(ctx, steps); err != nil {
		return err
	}
	if err := b.lb.Sysctl(ctx, "net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	for _, ns := range []*netns.NS{b.lb, b.srv[0], b.srv[1]} {
		// Replies leave from the VIP through another interface than the
		// balancer routes to: no reverse-path filter in the way.
		for _, k := range []string{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"} {
			if err := ns.Sysctl(ctx, k, "0"); err != nil {
				return err
			}
		}
	}
	return b.nft(ctx, soRuleset(func(bucket int) int { return bucket % soServers }))
}

// soRuleset is the balancer: first Requests by a hash of the source into
// owner(bucket)'s mark, joins by port.
func soRuleset(owner func(bucket int) int) string {
	var buckets, ports []string
	for i := range soBuckets {
		buckets = append(buckets, fmt.Sprintf("%d : %d", i, owner(i)+1))
	}
	for k := range soServers {
		ports = append(ports, fmt.Sprintf("%d : %d", soJoinBase+k, k+1))
	}
	return fmt.Sprintf(`table ip mptunlb {
  map bucket { type mark : mark ; elements = { %s } }
  map joinport { type inet_service : mark ; elements = { %s } }
  chain pre {
    type filter hook prerouting priority mangle;
    ip daddr %s udp dport 6511 meta mark set jhash ip saddr . udp sport mod %d meta mark set meta mark map @bucket
    ip daddr %s udp dport %d-%d meta mark set udp dport map @joinport
  }
}
`, strings.Join(buckets, ", "), strings.Join(ports, ", "), soVIP, soBuckets, soVIP, soJoinBase, soJoinBase+soServers-1)
}

func (b *soBed) nft(ctx context.Context, rules string) error {
	cmd := b.lb.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// concentrators starts one mptund per server namespace: the same key and
// peers, server_id k, listening on VIP:6511 and VIP:soJoinBase+k.
func (b *soBed) concentrators(ctx context.Context, tools Tools) ([]noise.Key, noise.Key, error) {
	var err error
	if b.dir, err = os.MkdirTemp("", "mptun-scaleout"); err != nil {
		return nil, noise.Key{}, err
	}
	var peers strings.Builder
	srvKey, srvPub, keys, err := concentratorKeys(b.o.CPEs+1, soInner, &peers) // the last CPE: the mptund one
	if err != nil {
		return nil, noise.Key{}, err
	}
	for k := range soServers {
		b.sock[k] = filepath.Join(b.dir, fmt.Sprintf("srv%d.sock", k))
		cfg := fmt.Sprintf("[tunnel]\nname = \"mptso%d\"\naddresses = [\"%s/32\"]\n"+
			"[connection]\nrole = \"server\"\nprivate_key = %q\n%s"+
			"[[listen]]\naddress = \"%s:6511\"\n[[listen]]\naddress = \"%s:%d\"\n"+
			"[tuning]\nserver_id = %d\n[control]\nsocket = %q\n[log]\nlevel = \"warn\"\n",
			k, soSrvTun, srvKey, peers.String(), soVIP, soVIP, soJoinBase+k, k, b.sock[k])
		path := filepath.Join(b.dir, fmt.Sprintf("srv%d.toml", k))
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			return nil, noise.Key{}, err
		}
		if b.daemon[k], _, err = launchMptund(ctx, b.srv[k], tools.Mptund, path, b.sock[k], 2); err != nil {
			return nil, noise.Key{}, fmt.Errorf("concentrator %d: %w", k, err)
		}
	}
	return keys, srvPub, nil
}

// daemonCPE starts an mptund CPE in the CPE namespace: two paths, from
// host soDaemonHost of each range, both to VIP:6511, joins to the port
// the concentrator's CI names.
func (b *soBed) daemonCPE(ctx context.Context, tools Tools, key, srvPub noise.Key) error {
	b.cpeSock = filepath.Join(b.dir, "cpe.sock")
	var paths strings.Builder
	for p, net := range soCPENet {
		fmt.Fprintf(&paths, "[[path]]\nname = \"p%d\"\nlocal = \"%s\"\nremote = \"%s:6511\"\n", p, nthAddr(net, soDaemonHost), soVIP)
	}
	cfg := fmt.Sprintf("[tunnel]\nname = \"mptsoc\"\naddresses = [\"%s/32\"]\n"+
		"[connection]\nrole = \"client\"\nprivate_key = %q\n[[peer]]\npublic_key = %q\nallowed_ips = [\"0.0.0.0/0\"]\n%s"+
		"[tuning]\njoin_port_base = %d\n[control]\nsocket = %q\n[log]\nlevel = \"warn\"\n",
		nthAddr(soInner, b.o.CPEs+1), key, srvPub, paths.String(), soJoinBase, b.cpeSock)
	path := filepath.Join(b.dir, "cpe.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	var err error
	if b.cpeDaemon, _, err = launchMptund(ctx, b.cli, tools.Mptund, path, b.cpeSock, 1); err != nil {
		return fmt.Errorf("mptund CPE: %w", err)
	}
	return nil
}

// waitDaemonJoined waits (at most limit) until the mptund CPE's
// connection is open on both paths; the caller judges what it got.
func (b *soBed) waitDaemonJoined(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var st control.Status
		if control.Call(b.cpeSock, control.MethodStatus, control.StatusRequest{}, &st) == nil &&
			len(st.Conns) == 1 && st.Conns[0].OpenPaths() == 2 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startCPEs creates the CPEs: two sockets each, one per address range;
// they dial the VIP on the first and, once open, join on the second at
// their concentrator's join port.
func (b *soBed) startCPEs(keys []noise.Key, srvPub noise.Key) error {
	err := b.cli.Do(func() error {
		for i := range keys {
			var socks []cpeSock
			for p := range 2 {
				fd, local, err := udpSocket(netip.AddrPortFrom(nthAddr(soCPENet[p], i+1), 0))
				if err != nil {
					return fmt.Errorf("cpe %d socket: %w", i, err)
				}
				socks = append(socks, cpeSock{fd, local})
			}
			c, err := newCPE(i, keys[i], srvPub, nthAddr(soInner, i+1), socks, []netip.AddrPort{netip.AddrPortFrom(soVIP, 6511)})
			if err != nil {
				return err
			}
			c.joinRemote = datapath.JoinAtServer(soJoinBase, config.ServerIDBits)
			if c.ep, err = newCPEEngine(keys[i], srvPub, c.joinRemote); err != nil {
				return err
			}
			c.redialSilence, c.dialAt = 3*time.Second, mono.Now()
			b.cpes = append(b.cpes, c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w, err := newCPEWorker(b.cpes, 2048)
	if err != nil {
		return err
	}
	b.workers = append(b.workers, w)
	go w.run()
	return nil
}

func (b *soBed) each(fn func(now mono.Time, c *cpe)) {
	w := b.workers[0]
	w.do(func() {
		now := mono.Now()
		for _, c := range w.cpes {
			fn(now, c)
		}
	})
}

// waitJoined waits until every CPE's connection is open with both paths
// at a concentrator other than dead (-1: any).
func (b *soBed) waitJoined(ctx context.Context, limit time.Duration, dead int) error {
	deadline := time.Now().Add(limit)
	for {
		var missing []string
		b.each(func(_ mono.Time, c *cpe) {
			up := 0
			if c.state == cpeOpen && int(c.conn.Stats().PeerCI>>(32-config.ServerIDBits)) != dead {
				for _, p := range c.conn.Stats().Paths {
					if p.State == "open" && !p.Failed {
						up++
					}
				}
			}
			if up < 2 {
				missing = append(missing, fmt.Sprintf("cpe %d: state %d, %d paths up %s", c.id, c.state, up, c.reason))
			}
		})
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d CPEs not joined after %v: %s", len(missing), limit, strings.Join(missing[:min(len(missing), 5)], "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// openConns is concentrator k's open connections of in-process CPEs,
// and the mptund CPE's if k has it.
func (b *soBed) openConns(k int) ([]control.ConnStatus, *control.ConnStatus, error) {
	var st control.Status
	if err := control.Call(b.sock[k], control.MethodStatus, control.StatusRequest{}, &st); err != nil {
		return nil, nil, fmt.Errorf("concentrator %d status: %w", k, err)
	}
	var open []control.ConnStatus
	var daemon *control.ConnStatus
	for _, c := range st.Conns {
		switch {
		case c.State != "open":
		case isDaemonConn(c):
			daemon = &c
		default:
			open = append(open, c)
		}
	}
	return open, daemon, nil
}

// isDaemonConn reports whether c is the mptund CPE's connection: a path
// from its host in either CPE range (after a redial its first path may be
// the second range's).
func isDaemonConn(c control.ConnStatus) bool {
	for _, p := range c.Paths {
		for _, n := range soCPENet {
			if strings.HasPrefix(p.Remote, nthAddr(n, soDaemonHost).String()+":") {
				return true
			}
		}
	}
	return false
}

// fail kills concentrator k outright and gives its buckets to the others.
func (b *soBed) fail(ctx context.Context, k int) error {
	p := b.daemon[k]
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done <- nil
	var rules strings.Builder
	for i := range soBuckets {
		if i%soServers == k {
			to := (k + 1) % soServers
			fmt.Fprintf(&rules, "delete element ip mptunlb bucket { %d }\nadd element ip mptunlb bucket { %d : %d }\n", i, i, to+1)
		}
	}
	return b.nft(ctx, rules.String())
}

func (b *soBed) close() {
	for _, w := range b.workers {
		w.close()
	}
	b.cpeDaemon.stop()
	for _, p := range b.daemon {
		p.stop()
	}
	removeBed(b.dir, append([]*netns.NS{b.cli, b.lb}, b.srv[:]...)...)
}
