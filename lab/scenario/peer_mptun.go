// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/reorder"
)

// Tunnel addresses of the tunnel peers (mptun, wireguard-go).
const (
	tunnelServer = "10.99.0.1"
	tunnelClient = "10.99.0.2"
)

func init() {
	RegisterPeer("mptun", func() PeerRunner { return &MptunPeer{} })
}

// MptunPeer runs mptund in the client and server namespaces with configs
// generated from the scenario, one path per emulated path.
type MptunPeer struct {
	// Binary is mptund; empty: scenario tunnel.binary, then the usual places.
	Binary string
	// Extra, if set, may edit the generated configs (side is "client" or
	// "server") before the daemons start.
	Extra func(side string, cfg *strings.Builder)

	procs []*proc              // server, client
	sides map[string]*sideProc // by "server", "client"
	echo  net.PacketConn
	keys  labKeys

	// The sampler polls both daemons' status during the run.
	stopSampling chan struct{}
	sampled      chan *report.TunnelMetrics
}

const sampleEvery = 200 * time.Millisecond

// sample polls the sending side for window, RTT and controller phase per
// path until stopped, then reads the receiving side's reorder hold
// histogram once.
func (m *MptunPeer) sample(sender, receiver string) {
	tm := &report.TunnelMetrics{Cwnd: map[string][]float64{}, SRTTms: map[string][]float64{}, Phase: map[string][]string{}}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	start := mono.Now()
	tm.ProcessStart = start
	var nextProcess mono.Time
	for {
		if now := mono.Now(); now >= nextProcess {
			nextProcess = now.Add(processEvery)
			sampleProcess(tm, start, map[string]string{"sender": sender, "receiver": receiver})
		}
		var st control.Status
		if control.Call(sender, "status", nil, &st) == nil && len(st.Conns) > 0 {
			now := mono.Now()
			if tm.First == 0 {
				tm.First = now
			}
			tm.TimesS = append(tm.TimesS, now.Sub(tm.First).Seconds())
			n := len(tm.TimesS)
			for _, p := range st.Conns[0].Paths {
				name := p.Name
				if name == "" {
					name = fmt.Sprintf("path %d", p.ID)
				}
				for _, series := range []map[string][]float64{tm.Cwnd, tm.SRTTms} {
					for len(series[name]) < n-1 { // a path that appeared late
						series[name] = append(series[name], 0)
					}
				}
				for len(tm.Phase[name]) < n-1 {
					tm.Phase[name] = append(tm.Phase[name], "")
				}
				tm.Phase[name] = append(tm.Phase[name], p.Phase)
				tm.Cwnd[name] = append(tm.Cwnd[name], float64(p.Cwnd))
				tm.SRTTms[name] = append(tm.SRTTms[name], p.RTTms)
			}
			c := st.Conns[0]
			tm.Repaired, tm.AQMDrops, tm.QueueDrops = c.Repaired, c.AQM.Dropped, c.QueueDrops
			tm.Suspicions, tm.Reinjected = 0, 0
			for _, p := range c.Paths {
				tm.Suspicions += p.Suspicions
				tm.Reinjected += p.Reinjected
			}
		}
		select {
		case <-m.stopSampling:
			roles := map[string]string{"sender": sender, "receiver": receiver}
			sampleProcess(tm, start, roles)
			finalState(tm, roles)
			var rs control.Status
			if control.Call(receiver, "status", nil, &rs) == nil && len(rs.Conns) > 0 {
				for _, b := range reorder.HoldBuckets {
					tm.HoldBucketsMs = append(tm.HoldBucketsMs, float64(b)/float64(time.Millisecond))
				}
				tm.HoldCounts = append([]uint64(nil), rs.Conns[0].Reorder.HoldHist[:]...)
			}
			m.sampled <- tm
			return
		case <-t.C:
		}
	}
}

// Metrics implements PeerMetrics: the samples taken during the run.
func (m *MptunPeer) Metrics(ctx context.Context) (any, error) {
	if m.stopSampling == nil {
		return nil, errors.New("mptun: no samples")
	}
	close(m.stopSampling)
	select {
	case tm := <-m.sampled:
		m.stopSampling = nil
		return tm, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// controlSocket is where the daemon of side ("client" or "server") listens.
func controlSocket(run *PeerRun, side string) string {
	return filepath.Join(run.Dir, "mptund-"+side+".sock")
}

// clientConfig and serverConfig follow configs/cpe.toml and
// configs/concentrator.toml.
func (m *MptunPeer) clientConfig(run *PeerRun) string {
	var b strings.Builder
	t := run.Scenario.Tunnel
	m.writeHead(&b, run, "client", tunnelClient, "\nroutes = [\"10.99.0.0/24\"]")
	for _, p := range run.Testbed.Paths {
		fmt.Fprintf(&b, "\n[[path]]\nname = %q\ndevice = %q\nremote = \"%s:6511\"\n", p.Spec.Name, p.Dev, remoteOf(run, p))
		if !t.DeviceOnly { // else the path follows the device's address
			fmt.Fprintf(&b, "local = \"%s\"\n", p.CliAddr)
		}
		if prio, ok := t.Prio[p.Spec.Name]; ok {
			fmt.Fprintf(&b, "prio = %d\n", prio)
		}
	}
	m.writeTail(&b, run, "client")
	return b.String()
}

func (m *MptunPeer) serverConfig(run *PeerRun) string {
	var b strings.Builder
	m.writeHead(&b, run, "server", tunnelServer, "")
	fmt.Fprintf(&b, "\n[[listen]]\naddress = \"0.0.0.0:6511\"\n")
	m.writeTail(&b, run, "server")
	return b.String()
}

// writeHead writes the start of side's config: a comment naming the
// scenario, [tunnel] with addr (and extra lines, ending in a newline when
// set) and [connection] with the key and the scenario's settings.
func (m *MptunPeer) writeHead(b *strings.Builder, run *PeerRun, side string, addr, extra string) {
	fmt.Fprintf(b, "# generated by mptun lab for scenario %s\n", run.Scenario.Name)
	fmt.Fprintf(b, "[tunnel]\nname = \"mptun0\"\naddresses = [\"%s/24\"]%s\n\n", addr, extra)
	fmt.Fprintf(b, "[connection]\nrole = %q\n", side)
	m.keys.writeKey(b, side)
	connSettings(b, run.Scenario.Tunnel)
}

// writeTail writes the end of side's config: the peer's key, [control],
// [log] and what Extra adds.
func (m *MptunPeer) writeTail(b *strings.Builder, run *PeerRun, side string) {
	m.keys.writePeer(b, side)
	fmt.Fprintf(b, "\n[control]\nsocket = %q\n", controlSocket(run, side))
	fmt.Fprintf(b, "\n[log]\nlevel = \"info\"\n")
	if m.Extra != nil {
		m.Extra(side, b)
	}
}

func connSettings(b *strings.Builder, t TunnelConf) {
	for _, kv := range [...]struct{ key, val string }{
		{"scheduler", t.Scheduler}, {"reorderer", t.Reorderer}, {"ccid", t.CCID},
		{"aqm_target", t.AQMTarget}, {"reorder_max_hold", t.ReorderMaxHold}, {"mode", t.Mode},
	} {
		if kv.val != "" {
			fmt.Fprintf(b, "%s = %q\n", kv.key, kv.val)
		}
	}
	for _, kv := range [...]struct {
		key string
		val *bool
	}{{"aqm", t.AQM}, {"retransmit", t.Retransmit}, {"hystart", t.HyStart}, {"abe", t.ABE}, {"ecn", t.ECN}} {
		if kv.val != nil {
			fmt.Fprintf(b, "%s = %v\n", kv.key, *kv.val)
		}
	}
	for _, c := range t.Classes {
		fmt.Fprintf(b, "\n[[connection.class]]\nname = %q\nscheduler = %q\n", c.Name, c.Scheduler)
		if c.Protocol != "" {
			fmt.Fprintf(b, "protocol = %q\n", c.Protocol)
		}
		for _, kv := range [...]struct {
			key  string
			list []string
		}{{"dst_ports", c.DstPorts}, {"src_ports", c.SrcPorts}} {
			if len(kv.list) > 0 {
				quoted := make([]string, len(kv.list))
				for i, v := range kv.list {
					quoted[i] = strconv.Quote(v)
				}
				fmt.Fprintf(b, "%s = [%s]\n", kv.key, strings.Join(quoted, ", "))
			}
		}
		if len(c.DSCP) > 0 {
			fmt.Fprintf(b, "dscp = %s\n", strings.ReplaceAll(fmt.Sprint(c.DSCP), " ", ", "))
		}
	}
	if len(t.Switch) > 0 {
		b.WriteString("\n[connection.switch]\n")
		keys := make([]string, 0, len(t.Switch))
		for k := range t.Switch {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "%s = %s\n", k, tomlValue(t.Switch[k]))
		}
	}
}

// Setup writes both configs, checks them with `mptund -check`, starts the
// daemons and waits until a datagram crosses the tunnel.
func (m *MptunPeer) Setup(ctx context.Context, run *PeerRun) (Endpoint, error) {
	bin, err := findBinary(firstNonEmpty(m.Binary, run.Scenario.Tunnel.Binary), "mptund")
	if err != nil {
		return Endpoint{}, err
	}
	if m.keys, err = newLabKeys(); err != nil {
		return Endpoint{}, err
	}
	tb := run.Testbed
	sides := []struct {
		name string
		ns   *netns.NS
		cfg  string
	}{{"server", tb.Srv, m.serverConfig(run)}, {"client", tb.Cli, m.clientConfig(run)}}
	for _, s := range sides {
		file := filepath.Join(run.Dir, "mptund-"+s.name+".toml")
		if err := os.WriteFile(file, []byte(s.cfg), 0o644); err != nil {
			return Endpoint{}, err
		}
		if out, err := s.ns.Output(ctx, bin, "-check", "-c", file); err != nil {
			return Endpoint{}, fmt.Errorf("mptund -check %s: %w %s", file, err, out)
		}
		p, err := startProc(s.ns, filepath.Join(run.Dir, "mptund-"+s.name+".log"), bin, "-c", file)
		if err != nil {
			return Endpoint{}, err
		}
		m.procs = append(m.procs, p)
		if m.sides == nil {
			m.sides = map[string]*sideProc{}
		}
		m.sides[s.name] = &sideProc{name: s.name, idx: len(m.procs) - 1, ns: s.ns, bin: bin, file: file,
			dir: run.Dir, sock: controlSocket(run, s.name)}
	}
	m.echo, err = udpEcho(tb.Srv, tunnelServer+":7")
	for i := 0; err != nil && i < 50; i++ { // the server's TUN address appears shortly after start
		time.Sleep(100 * time.Millisecond)
		m.echo, err = udpEcho(tb.Srv, tunnelServer+":7")
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("mptun: server tunnel address: %w", err)
	}
	if err := waitUDPEcho(ctx, tb.Cli, tunnelServer+":7", 15*time.Second); err != nil {
		for _, p := range m.procs {
			if done, perr := p.exited(); done {
				err = errors.Join(err, fmt.Errorf("mptund exited: %v (see %s)", perr, p.log.Name()))
			}
		}
		return Endpoint{}, fmt.Errorf("mptun: %w", err)
	}
	srvSock, cliSock := controlSocket(run, "server"), controlSocket(run, "client")
	// Traffic starts once every path is open at both ends, as it would on
	// a tunnel that has been up for a while: a flow inside that starts
	// over the first path alone takes that path's RTT as its minimum
	// (BBR keeps it for 10 s).
	waitPathsOpen(ctx, []string{cliSock, srvSock}, len(run.Scenario.Paths), 5*time.Second)
	sender, receiver := srvSock, cliSock
	if b := run.Scenario.Traffic.Bulk; b != nil && b.Direction == "up" {
		sender, receiver = cliSock, srvSock
	}
	m.stopSampling, m.sampled = make(chan struct{}), make(chan *report.TunnelMetrics, 1)
	go m.sample(sender, receiver)
	t := run.Scenario.Tunnel
	return Endpoint{
		ServerAddr: netipMust(tunnelServer),
		Note: fmt.Sprintf("mptun (scheduler %s, reorderer %s, ccid %s)", setting(t.Scheduler, defaults.Scheduler),
			setting(t.Reorderer, defaults.Reorderer), setting(t.CCID, defaults.CCID)),
	}, nil
}

// setting names a scenario's choice, or the daemon's default it left in place.
func setting(v, def string) string {
	if v == "" {
		return fmt.Sprintf("%q (default)", def)
	}
	return strconv.Quote(v)
}

// waitPathsOpen polls the daemons until each has n open paths or limit
// passes; a scenario may well start with a path down, so it does not fail.
func waitPathsOpen(ctx context.Context, socks []string, n int, limit time.Duration) {
	end := time.Now().Add(limit)
	for _, sock := range socks {
		for time.Now().Before(end) && ctx.Err() == nil {
			var st control.Status
			if control.Call(sock, "status", nil, &st) == nil && len(st.Conns) > 0 && st.Conns[0].OpenPaths() >= n {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Close stops both daemons (SIGTERM, so they close their subflows).
func (m *MptunPeer) Close() error {
	if m.stopSampling != nil {
		close(m.stopSampling)
		<-m.sampled
		m.stopSampling = nil
	}
	if m.echo != nil {
		m.echo.Close()
	}
	var errs []error
	for i := len(m.procs) - 1; i >= 0; i-- {
		errs = append(errs, m.procs[i].stop(3*time.Second))
	}
	return errors.Join(errs...)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
