// SPDX-License-Identifier: MIT

// Package e2e runs mptund for real: two network namespaces joined by veth
// paths shaped with tbf, the daemons started from the shipped example
// configs, and traffic from ping and iperf3. Needs root; CI runs it.
package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/netns"
)

// e2eSeconds is the length of the throughput runs (issue: 20 s).
func e2eSeconds() int {
	if s, err := strconv.Atoi(os.Getenv("MPTUN_E2E_SECONDS")); err == nil && s > 0 {
		return s
	}
	return 20
}

// startTunnel brings up both daemons from configs/cpe.toml and
// configs/concentrator.toml over the topology's paths; cpeSubst are more
// substitutions in the CPE's config.
func startTunnel(t *testing.T, ctx context.Context, tp *topology, paths [][2]string, cpeSubst ...map[string]string) (cpe, srv *daemonProc) {
	t.Helper()
	return startShippedTunnel(t, ctx, tp, paths, [2]string{"mpts", "mptc"}, nil, cpeSubst...)
}

// startTwoPathTunnel builds the topology most tests use, two unshaped
// paths, and starts the tunnel over them; paths are the paths' (CPE,
// concentrator) addresses.
func startTwoPathTunnel(t *testing.T, ctx context.Context) (tp *topology, paths [][2]string, cpe, srv *daemonProc) {
	t.Helper()
	tp = newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 0)
	a1, b1 := tp.addPath(t, ctx, 1, 0)
	paths = [][2]string{{a0, b0}, {a1, b1}}
	cpe, srv = startTunnel(t, ctx, tp, paths)
	return tp, paths, cpe, srv
}

// startShippedTunnel is startTunnel with TUN names tun[0]+ID (concentrator)
// and tun[1]+ID (CPE), and srvSubst more substitutions in the
// concentrator's config.
func startShippedTunnel(t *testing.T, ctx context.Context, tp *topology, paths [][2]string, tun [2]string, srvSubst map[string]string, cpeSubst ...map[string]string) (cpe, srv *daemonProc) {
	t.Helper()
	id := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	srvSock := filepath.Join(t.TempDir(), "srv.sock")
	cpeSock := filepath.Join(t.TempDir(), "cpe.sock")
	srvMap := map[string]string{
		`socket = "/run/mptun/%i.sock"`: fmt.Sprintf("socket = %q", srvSock),
		`name = "mptun0"`:               `name = "` + tun[0] + id + `"`,
	}
	maps.Copy(srvMap, srvSubst)
	srvCfg := shippedConfig(t, "concentrator", srvMap)
	cpeCfg := shippedConfig(t, "cpe", map[string]string{
		`local = "192.0.2.2"`:                          fmt.Sprintf("local = %q", paths[0][0]),
		`local = "100.64.0.2"`:                         fmt.Sprintf("local = %q", paths[1][0]),
		`device = "eth0"`:                              `device = "p0"`,
		`device = "wwan0"`:                             `device = "p1"`,
		`remote = "198.51.100.1:6511"` + "\n# MP_PRIO": fmt.Sprintf("remote = %q\n# MP_PRIO", paths[0][1]+":6511"),
		`socket = "/run/mptun/%i.sock"`:                fmt.Sprintf("socket = %q", cpeSock),
		`name = "mptun0"`:                              `name = "` + tun[1] + id + `"`,
	})
	for _, m := range cpeSubst {
		for old, new := range m {
			if !strings.Contains(cpeCfg, old) {
				t.Fatalf("configs/cpe.toml has no %q to substitute", old)
			}
			cpeCfg = strings.ReplaceAll(cpeCfg, old, new)
		}
	}
	// The second path's remote is the other line naming the concentrator.
	cpeCfg = strings.Replace(cpeCfg, `remote = "198.51.100.1:6511"`, fmt.Sprintf("remote = %q", paths[1][1]+":6511"), 1)
	srv = startDaemon(t, ctx, tp.srv, srvCfg, "concentrator")
	srv.socket = srvSock
	time.Sleep(200 * time.Millisecond)
	cpe = startDaemon(t, ctx, tp.cpe, cpeCfg, "cpe")
	cpe.socket = cpeSock
	waitOpen(t, cpeSock, len(paths), 10*time.Second)
	return cpe, srv
}

// mptcpFloor is the least goodput, as a fraction of kernel MPTCP's on
// the same paths, that the end-to-end test accepts (see its use).
const mptcpFloor = 0.90

func TestTunnelEndToEnd(t *testing.T) {
	requireRoot(t)
	requireTools(t, "iperf3", "tshark", "mptcpize", "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 50)
	a1, b1 := tp.addPath(t, ctx, 1, 30)
	cpe, srv := startTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})
	const capacity = 80.0

	t.Run("ping", func(t *testing.T) {
		for _, c := range []struct {
			ns   string
			addr string
		}{{"cpe", "10.99.0.1"}, {"cpe", "fd99::1"}, {"srv", "10.99.0.2"}, {"srv", "fd99::2"}} {
			ns := tp.cpe
			if c.ns == "srv" {
				ns = tp.srv
			}
			if out, err := ns.Output(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", c.addr); err != nil {
				t.Errorf("ping %s from %s: %v\n%s", c.addr, c.ns, err, out)
			}
		}
	})

	t.Run("tcp-both-ways", func(t *testing.T) {
		for _, c := range []struct{ from, addr string }{
			{"cpe", "10.99.0.1"}, {"cpe", "fd99::1"}, {"srv", "10.99.0.2"}, {"srv", "fd99::2"},
		} {
			cli, srvNS := tp.cpe, tp.srv
			if c.from == "srv" {
				cli, srvNS = tp.srv, tp.cpe
			}
			mbps, _ := iperf(t, ctx, srvNS, cli, c.addr, 2, nil)
			if mbps < 10 {
				t.Errorf("TCP %s -> %s: %.1f Mbit/s", c.from, c.addr, mbps)
			}
		}
	})

	var mptunMbps, mptcpMbps float64
	var mptunRetr, mptcpRetr int
	t.Run("goodput-vs-mptcp", func(t *testing.T) {
		secs := e2eSeconds()
		// Capture a window of the run for the wire-format check below.
		pcap := filepath.Join(t.TempDir(), "run.pcap")
		if err := control.Call(cpe.socket, "capture", control.CaptureRequest{File: pcap, Seconds: 2}, nil); err != nil {
			t.Fatalf("capture: %v", err)
		}
		stopTrace := traceSenderPaths(cpe.socket, 500*time.Millisecond)
		mptunMbps, mptunRetr = iperf(t, ctx, tp.srv, tp.cpe, "10.99.0.1", secs, nil)
		trace := stopTrace()
		logStatus(t, "cpe", cpe.socket)
		logStatus(t, "concentrator", srv.socket)
		logKernelDrops(t, ctx, tp)

		// Kernel MPTCP over the same two paths, right after.
		must(t, tp.srv.IP(ctx, "mptcp", "limits", "set", "subflows", "4", "add_addr_accepted", "4"))
		must(t, tp.cpe.IP(ctx, "mptcp", "limits", "set", "subflows", "4", "add_addr_accepted", "4"))
		must(t, tp.cpe.IP(ctx, "mptcp", "endpoint", "add", a1, "dev", "p1", "subflow"))
		mptcpMbps, mptcpRetr = iperf(t, ctx, tp.srv, tp.cpe, b0, secs, []string{"mptcpize", "run"})
		t.Logf("paths 50+30 Mbit/s, %d s cubic: mptun %.1f Mbit/s (%.1f%% of sum, %d retr), kernel MPTCP %.1f Mbit/s (%.1f%%, %d retr), ratio %.3f",
			secs, mptunMbps, 100*mptunMbps/capacity, mptunRetr, mptcpMbps, 100*mptcpMbps/capacity, mptcpRetr, mptunMbps/mptcpMbps)
		// A floor that catches a broken aggregate (the faster path alone
		// gives at most 56 % of the sum, about 0.6 × MPTCP), judged
		// against MPTCP measured on the same paths in the same run, so a
		// slower machine moves both. The performance target lives in
		// `mptun bench aggregate` (BENCHMARKS.md). Our 88 B of outer
		// headers leave an inner TCP segment of 1352 B per 1500 B
		// datagram where MPTCP carries about 1428 B, so 0.947 × MPTCP is
		// the ceiling here and a run at 0.94 is not a regression.
		if mptunMbps < mptcpFloor*mptcpMbps || os.Getenv("MPTUN_E2E_TRACE") != "" {
			t.Logf("the sending CPE's paths during the run:\n%s", trace)
		}
		if mptunMbps < mptcpFloor*mptcpMbps {
			t.Errorf("mptun goodput %.1f Mbit/s < %.2f x kernel MPTCP %.1f", mptunMbps, mptcpFloor, mptcpMbps)
		}

		// The captured datagrams must all be well-formed DCCP-UDP, with the
		// checksums they had on the wire. The shipped concentrator listens
		// on the wildcard address and fills its DCCP checksums for the
		// source address its data path tells it; Wireshark's DCCP verdict
		// is required here for the CPE's own datagrams (e2e/wire_test.go
		// checks both directions against a concentrator bound to its
		// addresses).
		cpeAddrs := []netip.Addr{netip.MustParseAddr(a0), netip.MustParseAddr(a1)}
		rep, err := checkWireCapture(pcap, func(src netip.Addr) bool { return slices.Contains(cpeAddrs, src) })
		if err != nil {
			t.Fatalf("mptun capture: %v", err)
		}
		if rep.packets < 10 {
			t.Fatalf("capture has only %d packets", rep.packets)
		}
		t.Logf("mptun capture: %d datagrams, all DCCP-UDP with good checksums", rep.packets)
	})

	st := status(t, srv.socket)
	if len(st.Conns) != 1 || len(st.Conns[0].Paths) != 2 {
		t.Errorf("concentrator status: %+v", st.Conns)
	}
	// A clean SIGTERM: MP_CLOSE on every subflow and exit 0.
	if err := cpe.stop(); err != nil {
		t.Errorf("cpe did not exit cleanly: %v", err)
	}
}

// traceSenderPaths polls the daemon at socket every interval until the
// returned function is called, which returns a line per poll and path:
// the controller's phase, window, RTT, pacing rate and the packets sent and
// lost since the previous poll. A goodput figure that misses its floor is
// explained by when a path's loss or window changed, not by its totals.
func traceSenderPaths(socket string, interval time.Duration) (stop func() string) {
	done := make(chan struct{})
	result := make(chan string, 1)
	go func() {
		var b strings.Builder
		prev := map[int][2]uint64{}
		start := time.Now()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				result <- b.String()
				return
			case <-tick.C:
			}
			var st control.Status
			if control.Call(socket, "status", nil, &st) != nil || len(st.Conns) == 0 {
				continue
			}
			for _, p := range st.Conns[0].Paths {
				last := prev[p.ID]
				fmt.Fprintf(&b, "%5.1fs path %d %-16s cwnd %3d inflight %3d srtt %5.1fms min %4.1fms pacing %5.1f Mbit/s sent %5d lost %4d\n",
					time.Since(start).Seconds(), p.ID, p.Phase, p.Cwnd, p.InFlight, p.RTTms, p.MinRTTms, p.PacingMbps,
					p.PacketsSent-last[0], p.PacketsLost-last[1])
				prev[p.ID] = [2]uint64{p.PacketsSent, p.PacketsLost}
			}
		}
	}()
	return func() string {
		close(done)
		return <-result
	}
}

// logKernelDrops logs where the kernel dropped packets during a run: the
// paths' tbf queues, their veth links and the UDP sockets' buffers in
// both namespaces. A tunnel path's loss is one or the other, and they
// call for different fixes (sending too fast for the link, or a daemon
// that fell behind). tbf counts a dropped UDP GSO send (up to 64
// datagrams) as one drop, so its count can be far below the packets lost.
func logKernelDrops(t *testing.T, ctx context.Context, tp *topology) {
	t.Helper()
	for _, n := range []struct {
		name string
		ns   *netns.NS
	}{{"cpe", tp.cpe}, {"concentrator", tp.srv}} {
		for _, dev := range []string{"p0", "p1"} {
			out, err := n.ns.Output(ctx, "tc", "-s", "qdisc", "show", "dev", dev)
			if err == nil {
				t.Logf("%s: %s qdisc: %s", n.name, dev, strings.Join(strings.Fields(string(out)), " "))
			}
			out, err = n.ns.Output(ctx, "ip", "-s", "link", "show", "dev", dev)
			if err == nil {
				t.Logf("%s: %s link: %s", n.name, dev, strings.Join(strings.Fields(string(out)), " "))
			}
		}
		out, err := n.ns.Output(ctx, "nstat", "-az", "UdpRcvbufErrors", "UdpSndbufErrors", "UdpInErrors")
		if err == nil {
			t.Logf("%s: %s", n.name, strings.Join(strings.Fields(string(out)), " "))
		}
	}
}

// logStatus logs what explains a goodput figure: per-path loss, RTT and
// the reorder and AQM decisions.
func logStatus(t *testing.T, name, socket string) {
	t.Helper()
	st := status(t, socket)
	if len(st.Dropped) > 0 {
		t.Logf("%s: datagrams dropped by the daemon: %v", name, st.Dropped)
	}
	t.Logf("%s: data path: %+v", name, st.Datapath)
	for _, c := range st.Conns {
		t.Logf("%s: reorder %+v", name, c.Reorder)
		t.Logf("%s: aqm %+v queue drops %d", name, c.AQM, c.QueueDrops)
		for _, p := range c.Paths {
			t.Logf("%s: path %d %s cwnd %d srtt %.1fms sent %d lost %d spurious %d timeouts %d",
				name, p.ID, p.Phase, p.Cwnd, p.RTTms, p.PacketsSent, p.PacketsLost, p.Spurious, p.Timeouts)
		}
	}
}
