// SPDX-License-Identifier: MIT

package scenario

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/topo"
	"github.com/mptun/mptun/lab/traffic"
)

// UDPConf is a constant-bit-rate UDP flow ([traffic.udp]).
type UDPConf struct {
	// Rate is the offered rate in IP bytes; Load instead offers a
	// fraction of the sum of the paths' rates in Direction.
	Rate      Rate    `toml:"rate"`
	Load      float64 `toml:"load"`
	Size      int     `toml:"size"` // payload bytes, default 1200
	Direction string  `toml:"direction"`
}

// IdleConf measures latency before the timed traffic starts, with the
// network idle ([traffic.idle]).
type IdleConf struct {
	Pings        int      `toml:"pings"`         // ICMP echoes per target, default 20
	PingInterval Duration `toml:"ping_interval"` // default 20 ms
	Transfers    []Size   `toml:"transfers"`     // default 10 KB and 100 KB
	Repeat       int      `toml:"repeat"`        // rounds of transfers, default 5
	CC           string   `toml:"cc"`
}

// TransfersConf runs short transfers during the timed traffic
// ([traffic.transfers]), e.g. beside a bulk flow.
type TransfersConf struct {
	Sizes  []Size   `toml:"sizes"`
	Repeat int      `toml:"repeat"` // default 10
	Start  Duration `toml:"start"`  // default 2 s after the traffic starts
	Gap    Duration `toml:"gap"`    // default 100 ms
	CC     string   `toml:"cc"`
}

const (
	idleTransferPort  = 5410
	timedTransferPort = 5411
	webPort           = 5400 // traffic.WebConfig's default
	idleBudget        = 3 * time.Minute
	maxTransferSize   = 100e6
)

func (c *IdleConf) transfers() []int {
	if len(c.Transfers) == 0 {
		return []int{10000, 100000}
	}
	return sizes(c.Transfers)
}

func sizes(s []Size) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}

// validateLatency checks the tables of this file.
func (sc *Scenario) validateLatency() []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	checkSizes := func(key string, s []Size) {
		for _, v := range s {
			if v <= 0 || v > maxTransferSize {
				bad("%s: size %d out of 1..%d bytes", key, v, int(maxTransferSize))
			}
		}
	}
	checkCC := func(key, cc string) {
		switch cc {
		case "", "cubic", "bbr", "reno":
		default:
			bad("%s %q: want cubic, bbr or reno", key, cc)
		}
	}
	if u := sc.Traffic.UDP; u != nil {
		if (u.Rate > 0) == (u.Load > 0) {
			bad("traffic.udp: set exactly one of rate and load")
		}
		if u.Load < 0 || u.Load > 2 {
			bad("traffic.udp.load %v: want a fraction of the paths' rate sum in (0, 2]", u.Load)
		}
		if u.Size != 0 && (u.Size < 16 || u.Size > 1400) {
			bad("traffic.udp.size %d: want 16..1400 bytes (one datagram per packet)", u.Size)
		}
		if u.Direction != "" && u.Direction != "up" && u.Direction != "down" {
			bad("traffic.udp.direction %q: want up or down", u.Direction)
		}
		if u.Load > 0 && sc.rateSum(u.Direction) == 0 {
			bad("traffic.udp.load: the paths have no rate to take a fraction of")
		}
	}
	if i := sc.Traffic.Idle; i != nil {
		if i.Pings < 0 || i.Pings > 10000 || i.Repeat < 0 || i.Repeat > 1000 {
			bad("traffic.idle: pings 0..10000, repeat 0..1000")
		}
		if i.PingInterval != 0 && i.PingInterval.D() < time.Millisecond {
			bad("traffic.idle.ping_interval %v: at least 1ms", i.PingInterval.D())
		}
		checkSizes("traffic.idle.transfers", i.Transfers)
		checkCC("traffic.idle.cc", i.CC)
	}
	if t := sc.Traffic.Transfers; t != nil {
		if len(t.Sizes) == 0 {
			bad("traffic.transfers.sizes: missing")
		}
		if t.Repeat < 0 || t.Repeat > 1000 {
			bad("traffic.transfers.repeat %d: 0..1000", t.Repeat)
		}
		checkSizes("traffic.transfers.sizes", t.Sizes)
		checkCC("traffic.transfers.cc", t.CC)
	}
	if w := sc.Traffic.Web; w != nil {
		checkCC("traffic.web.cc", w.CC)
	}
	return errs
}

// rateSum is the sum of the paths' configured rates in direction dir
// ("up" or anything else for down).
func (sc *Scenario) rateSum(dir string) float64 {
	var sum float64
	for _, s := range sc.PathSpecs() {
		c := s.Down
		if dir == "up" {
			c = s.Up
		}
		sum += capacity(c, true)
	}
	return sum
}

// measuredDir is the direction whose capacity and goodput are compared:
// the bulk flow's, else the UDP flow's, else downstream.
func measuredDir(sc *Scenario) emu.Dir {
	if b := sc.Traffic.Bulk; b != nil {
		return dirOfTraffic(b.Direction)
	}
	if u := sc.Traffic.UDP; u != nil {
		return dirOfTraffic(u.Direction)
	}
	return emu.BA
}

// runIdle pings through the peer and over each path alone, then times
// short transfers, before any other traffic starts.
func runIdle(ctx context.Context, sc *Scenario, tb *topo.Testbed, ep Endpoint) *report.Idle {
	c := sc.Traffic.Idle
	if c == nil {
		return nil
	}
	env := traffic.Env{Cli: tb.Cli, Srv: tb.Srv, ServerAddr: ep.ServerAddr, ClientBind: ep.ClientBind, MPTCP: ep.MPTCP, Start: mono.Now()}
	ctx, cancel := context.WithTimeout(ctx, idleBudget)
	defer cancel()
	res := &report.Idle{}
	fail := func(what string, err error) {
		if err != nil {
			res.Errors = append(res.Errors, what+": "+err.Error())
		}
	}
	pc := traffic.PingConfig{Count: c.Pings, Interval: c.PingInterval.D()}
	if ep.MPTCP {
		res.PingNote = "kernel MPTCP carries no ICMP: see path_ping (its first subflow uses the best path)"
	} else {
		pc.Src, pc.Dst = ep.ClientBind, ep.ServerAddr
		r, err := traffic.RunPing(ctx, tb.Cli, pc)
		res.Ping = &r
		fail("ping through the peer", err)
	}
	for _, p := range tb.Paths {
		pc.Src, pc.Dst = p.CliAddr, p.SrvAddr
		r, err := traffic.RunPing(ctx, tb.Cli, pc)
		res.PathPing = append(res.PathPing, report.PathPing{Path: p.Spec.Name, RTT: r})
		fail("ping path "+p.Spec.Name, err)
	}
	r, err := traffic.RunTransfers(ctx, env, traffic.TransferConfig{Sizes: c.transfers(), Repeat: c.Repeat,
		CC: defaultCC(c.CC), Port: idleTransferPort})
	res.Transfer = &r
	fail("transfers", err)
	return res
}

// startLatencyTraffic starts the timed generators of this file (UDP CBR,
// transfers, the web flows' delay capture); they stop with ctx and store
// their results in run before wg is done.
func startLatencyTraffic(ctx context.Context, wg *sync.WaitGroup, sc *Scenario, tb *topo.Testbed, env traffic.Env, ep Endpoint, run *report.Run) {
	if u := sc.Traffic.UDP; u != nil {
		rate := float64(u.Rate)
		if u.Load > 0 {
			rate = u.Load * sc.rateSum(u.Direction)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := traffic.RunCBR(ctx, env, traffic.CBRConfig{RateBps: rate, Size: u.Size, Down: u.Direction != "up"})
			if err != nil && r.Err == "" {
				r.Err = err.Error()
			}
			run.UDP = &r
		}()
	}
	if t := sc.Traffic.Transfers; t != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := t.Start.D()
			if start == 0 {
				start = 2 * time.Second
			}
			r, err := traffic.RunTransfers(ctx, env, traffic.TransferConfig{Sizes: sizes(t.Sizes), Repeat: cmp.Or(t.Repeat, 10),
				Gap: t.Gap.D(), Delay: start, CC: defaultCC(t.CC), Port: timedTransferPort})
			if err != nil && r.Err == "" {
				r.Err = err.Error()
			}
			run.Transfers = &r
		}()
	}
	if w := sc.Traffic.Web; w != nil && w.Capture {
		cliDevs, srvDevs, err := innerDevices(ctx, tb, ep)
		var cp *traffic.OWDCapture
		if err == nil {
			cp, err = traffic.StartOWDCapture(traffic.OWDCaptureConfig{SendNS: tb.Srv, SendDevs: srvDevs,
				RecvNS: tb.Cli, RecvDevs: cliDevs, Port: webPort})
		}
		if err != nil {
			run.WebOWD = &traffic.OWDResult{Method: traffic.OWDMethod, Err: err.Error()}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // the last segments in flight
			r := cp.Stop()
			run.WebOWD = &r
		}()
	}
}

// innerDevices finds the devices that carry the peer's inner traffic: the
// one the client routes the server address through and the one holding
// that address at the server (a TUN device for a tunnel, a path device
// otherwise); every path device for kernel MPTCP.
func innerDevices(ctx context.Context, tb *topo.Testbed, ep Endpoint) (cli, srv []string, err error) {
	if ep.MPTCP {
		for _, p := range tb.Paths {
			cli, srv = append(cli, p.Dev), append(srv, p.Dev)
		}
		return cli, srv, nil
	}
	args := []string{"-o", "route", "get", ep.ServerAddr.String()}
	if ep.ClientBind.IsValid() {
		args = append(args, "from", ep.ClientBind.String())
	}
	out, err := tb.Cli.Output(ctx, "ip", args...)
	if err != nil {
		return nil, nil, err
	}
	dev := fieldAfter(string(out), "dev")
	if dev == "" {
		return nil, nil, fmt.Errorf("no device in %q", out)
	}
	out, err = tb.Srv.Output(ctx, "ip", "-o", "-4", "addr", "show", "to", ep.ServerAddr.String())
	if err != nil {
		return nil, nil, err
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return nil, nil, fmt.Errorf("server: no device holds %v", ep.ServerAddr)
	}
	return []string{dev}, []string{f[1]}, nil
}

func fieldAfter(s, key string) string {
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key {
			return f[i+1]
		}
	}
	return ""
}

// finishLatency fills what needs the whole run: UDP goodput as the run's
// goodput when there is no bulk flow, and the MPTCP check.
func finishLatency(run *report.Run, bulk *traffic.BulkResult, tb *topo.Testbed, ep Endpoint) {
	if run.Bulk == nil && run.UDP != nil {
		run.GoodputMbps = run.UDP.GoodputMbps
	}
	if ep.MPTCP && bulk != nil {
		run.MPTCP = checkMPTCP(bulk.MPTCP, len(tb.Paths))
		run.MPTCP.Counters = traffic.MPTCPCounters(tb.Cli)
	}
}

// checkMPTCP judges the bulk senders' MPTCP state against the expected
// number of subflows (one per path).
func checkMPTCP(conns []traffic.MPTCPConnInfo, expected int) *report.MPTCPCheck {
	c := &report.MPTCPCheck{Expected: expected, Conns: conns, Subflows: -1}
	var problems []string
	var total float64
	var bytes []float64
	for i, info := range conns {
		if info.Err != "" {
			problems = append(problems, fmt.Sprintf("connection %d: %s", i, info.Err))
		}
		if info.Fallback || !info.MPTCP {
			c.Fallback = true
		}
		if c.Subflows < 0 || info.Subflows < c.Subflows {
			c.Subflows = info.Subflows
		}
		for j, s := range info.SubflowStats {
			for len(bytes) <= j {
				bytes = append(bytes, 0)
			}
			bytes[j] += float64(s.BytesAcked)
			total += float64(s.BytesAcked)
		}
	}
	if len(conns) == 0 {
		problems = append(problems, "no bulk connection to inspect")
		c.Subflows = 0
	}
	if c.Fallback {
		problems = append(problems, "fell back to plain TCP")
	}
	if c.Subflows >= 0 && c.Subflows != expected {
		problems = append(problems, fmt.Sprintf("%d subflows, expected %d", c.Subflows, expected))
	}
	if total > 0 {
		for _, b := range bytes {
			c.Share = append(c.Share, b/total)
		}
	}
	c.Verified = len(problems) == 0
	if c.Verified {
		c.Detail = fmt.Sprintf("MPTCP negotiated, %d subflows", c.Subflows)
	} else {
		c.Detail = strings.Join(problems, "; ")
	}
	return c
}
