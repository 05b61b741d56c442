// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/wgpeer"
)

// ThroughputOptions parameterise `mptun bench throughput`.
type ThroughputOptions struct {
	Runs    int // per peer, alternating (default 5)
	Seconds int // iperf3 duration per run (default 10)
	Log     io.Writer
	// Unencrypted runs mptun with security = "none" (plain RFC 9897);
	// the default is encrypted, as wireguard-go always is.
	Unencrypted bool
}

// Run is one measured transfer.
type Run struct {
	Peer        string  `json:"peer"`
	Gbps        float64 `json:"gbps"`
	CPUSecPerGB float64 `json:"cpu_s_per_gb"`
	Retransmits int     `json:"retransmits"`
}

// ThroughputResult is what `mptun bench throughput --json` prints.
type ThroughputResult struct {
	// Encrypted is whether mptun ran in secure mode (Noise + AEAD);
	// MptunAEAD names its packet protection.
	Encrypted              bool    `json:"encrypted"`
	MptunAEAD              string  `json:"mptun_aead,omitempty"`
	MptunGbps              float64 `json:"mptun_gbps"`
	WireguardGoGbps        float64 `json:"wireguard_go_gbps"`
	Ratio                  float64 `json:"ratio"`
	MptunCPUSecPerGB       float64 `json:"mptun_cpu_s_per_gb"`
	WireguardGoCPUSecPerGB float64 `json:"wireguard_go_cpu_s_per_gb"`
	CPURatio               float64 `json:"cpu_ratio"`
	Seconds                int     `json:"seconds"`
	RunsPerPeer            int     `json:"runs_per_peer"`
	Runs                   []Run   `json:"runs"`
}

const (
	underCli, underSrv = "10.88.0.1", "10.88.0.2"
	mptCli, mptSrv     = "10.89.0.1", "10.89.0.2"
	wgCli, wgSrv       = "10.90.0.1", "10.90.0.2"
)

// Throughput measures mptun and wireguard-go over the same unimpaired veth
// link between two namespaces, alternating runs so both see the same
// machine state.
func Throughput(ctx context.Context, tools Tools, o ThroughputOptions) (res ThroughputResult, err error) {
	if o.Runs <= 0 {
		o.Runs = 5
	}
	if o.Seconds <= 0 {
		o.Seconds = 10
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	res.Seconds, res.RunsPerPeer = o.Seconds, o.Runs
	res.Encrypted = !o.Unencrypted

	cli, err := netns.Add(ctx, netns.UniqueName("bcli"))
	if err != nil {
		return res, err
	}
	defer cli.Delete()
	srv, err := netns.Add(ctx, netns.UniqueName("bsrv"))
	if err != nil {
		return res, err
	}
	defer srv.Delete()
	if out, err := cli.Output(ctx, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", srv.Name); err != nil {
		return res, fmt.Errorf("veth: %w: %s", err, out)
	}
	for _, s := range []struct {
		ns   *netns.NS
		addr string
	}{{cli, underCli}, {srv, underSrv}} {
		if err := s.ns.IP(ctx, "addr", "add", s.addr+"/24", "dev", "eth0"); err != nil {
			return res, err
		}
		if err := s.ns.IP(ctx, "link", "set", "eth0", "up"); err != nil {
			return res, err
		}
	}

	dir, err := os.MkdirTemp("", "mptun-bench")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	mptun, err := startMptun(ctx, tools, dir, cli, srv, !o.Unencrypted)
	defer func() {
		for _, p := range mptun {
			p.stop()
		}
	}()
	if err != nil {
		return res, err
	}
	if res.Encrypted {
		res.MptunAEAD = mptunAEAD(filepath.Join(dir, "cli.sock"))
	}
	wg, err := startWireguard(ctx, tools, cli, srv)
	defer func() {
		for _, p := range wg {
			p.stop()
		}
	}()
	if err != nil {
		return res, err
	}

	measure := func(peer, addr string, procs []*proc) (Run, error) {
		var cpu0 float64
		for _, p := range procs {
			cpu0 += p.cpuSeconds()
		}
		bps, bytes, retr, err := iperfRun(ctx, srv, cli, addr, o.Seconds)
		if err != nil {
			return Run{}, fmt.Errorf("%s: %w", peer, err)
		}
		var cpu1 float64
		for _, p := range procs {
			cpu1 += p.cpuSeconds()
		}
		r := Run{Peer: peer, Gbps: bps / 1e9, Retransmits: retr}
		if bytes > 0 {
			r.CPUSecPerGB = (cpu1 - cpu0) / (bytes / 1e9)
		}
		fmt.Fprintf(o.Log, "  %-13s %6.3f Gbit/s  %5.2f CPU s/GB  %d retr\n", peer, r.Gbps, r.CPUSecPerGB, retr)
		return r, nil
	}
	var sum [2]Run
	for i := 0; i < o.Runs; i++ {
		fmt.Fprintf(o.Log, "run %d/%d\n", i+1, o.Runs)
		for k, pr := range []struct {
			peer, addr string
			procs      []*proc
		}{{"mptun", mptSrv, mptun}, {"wireguard-go", wgSrv, wg}} {
			r, err := measure(pr.peer, pr.addr, pr.procs)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, r)
			sum[k].Gbps += r.Gbps
			sum[k].CPUSecPerGB += r.CPUSecPerGB
		}
	}
	n := float64(o.Runs)
	res.MptunGbps, res.WireguardGoGbps = sum[0].Gbps/n, sum[1].Gbps/n
	res.MptunCPUSecPerGB, res.WireguardGoCPUSecPerGB = sum[0].CPUSecPerGB/n, sum[1].CPUSecPerGB/n
	if res.WireguardGoGbps > 0 {
		res.Ratio = res.MptunGbps / res.WireguardGoGbps
	}
	if res.WireguardGoCPUSecPerGB > 0 {
		res.CPURatio = res.MptunCPUSecPerGB / res.WireguardGoCPUSecPerGB
	}
	return res, nil
}

func startMptun(ctx context.Context, tools Tools, dir string, cli, srv *netns.NS, encrypted bool) ([]*proc, error) {
	srvSock, cliSock := filepath.Join(dir, "srv.sock"), filepath.Join(dir, "cli.sock")
	srvSec, cliSec, err := benchSecurity(encrypted)
	if err != nil {
		return nil, err
	}
	srvCfg := fmt.Sprintf(`[tunnel]
name = "mptb0"
addresses = ["%s/24"]
[connection]
role = "server"
%s
[[listen]]
address = "%s:6511"
[control]
socket = %q
`, mptSrv, srvSec, underSrv, srvSock)
	cliCfg := fmt.Sprintf(`[tunnel]
name = "mptb0"
addresses = ["%s/24"]
[connection]
role = "client"
%s
[[path]]
name = "veth"
local = "%s"
remote = "%s:6511"
[control]
socket = %q
`, mptCli, cliSec, underCli, underSrv, cliSock)
	var procs []*proc
	for _, c := range []struct {
		ns   *netns.NS
		name string
		cfg  string
	}{{srv, "srv", srvCfg}, {cli, "cli", cliCfg}} {
		path := filepath.Join(dir, c.name+".toml")
		if err := os.WriteFile(path, []byte(c.cfg), 0o600); err != nil {
			return procs, err
		}
		p, err := start(ctx, c.ns, "", tools.Mptund, "-c", path)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
		time.Sleep(100 * time.Millisecond)
	}
	if err := waitTunnel(cliSock, 10*time.Second); err != nil {
		return procs, fmt.Errorf("mptun: %w\n%s", err, firstLines(&procs[1].log, 20))
	}
	return procs, nil
}

func startWireguard(ctx context.Context, tools Tools, cli, srv *netns.NS) ([]*proc, error) {
	srvUAPI, cliUAPI, err := wgpeer.UAPIPair(underSrv, wgSrv, wgCli)
	if err != nil {
		return nil, err
	}
	var procs []*proc
	for _, s := range []struct {
		ns         *netns.NS
		uapi, addr string
	}{{srv, srvUAPI, wgSrv}, {cli, cliUAPI, wgCli}} {
		p, err := start(ctx, s.ns, s.uapi, tools.Self, "lab", "wgpeer", "-tun", "wgb0")
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
		if err := wgpeer.ConfigureDevice(ctx, s.ns, "wgb0", s.addr, nil); err != nil {
			return procs, fmt.Errorf("%w\n%s", err, firstLines(&p.log, 10))
		}
	}
	// Wait for the handshake: a ping through the tunnel.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := cli.Output(ctx, "ping", "-c", "1", "-W", "1", wgSrv); err == nil {
			return procs, nil
		}
	}
	return procs, fmt.Errorf("wireguard-go: no ping through the tunnel after 10 s\nserver: %s\nclient: %s",
		firstLines(&procs[0].log, 10), firstLines(&procs[1].log, 10))
}
