// SPDX-License-Identifier: MIT

// Package scenario reads lab scenario files (TOML, documented in
// configs/lab/README.md) and runs them: it builds the emulated paths, runs
// each peer (no tunnel, kernel MPTCP, wireguard-go, mptun) on identical
// links one after another, drives the traffic and the timed events, and
// hands the measurements to lab/report.
package scenario

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/topo"
)

// Scenario is one scenario file.
type Scenario struct {
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Duration    Duration `toml:"duration"`
	Seed        uint64   `toml:"seed"`
	Peers       []string `toml:"peers"`
	// BestPath names the path the single-path peers use; default: the
	// path with the highest downlink rate.
	BestPath  string      `toml:"best_path"`
	PacketLog bool        `toml:"packet_log"` // write the emulator's per-packet logs
	Paths     []PathConf  `toml:"path"`
	Events    []EventConf `toml:"event"`
	Traffic   TrafficConf `toml:"traffic"`
	Tunnel    TunnelConf  `toml:"tunnel"`

	dir    string // directory of the file, for relative trace paths
	traces traces
}

// PathConf is one emulated path. Plain keys apply to both directions;
// up_* (client→server) and down_* override them.
type PathConf struct {
	Name      string   `toml:"name"`
	Rate      Rate     `toml:"rate"`
	UpRate    Rate     `toml:"up_rate"`
	DownRate  Rate     `toml:"down_rate"`
	RTT       Duration `toml:"rtt"` // split evenly between the directions
	UpDelay   Duration `toml:"up_delay"`
	DownDelay Duration `toml:"down_delay"`
	Jitter    Duration `toml:"jitter"`
	// Queue is the drop-tail buffer per direction in bytes; QueueTime
	// sizes it as time at the rate instead. Default: max(RTT, 20ms) at rate.
	Queue        Size     `toml:"queue"`
	QueueTime    Duration `toml:"queue_time"`
	QueuePackets int      `toml:"queue_packets"`
	CoDel        bool     `toml:"codel"`
	Loss         float64  `toml:"loss"`
	UpLoss       float64  `toml:"up_loss"`
	DownLoss     float64  `toml:"down_loss"`
	GE           *GEConf  `toml:"gilbert_elliott"`
	Duplicate    float64  `toml:"duplicate"`
	Reorder      float64  `toml:"reorder"`
	ReorderExtra Duration `toml:"reorder_extra"`
	// Mahimahi traces (one file per direction); override the rates.
	UpTrace    string  `toml:"up_trace"`
	DownTrace  string  `toml:"down_trace"`
	TraceScale float64 `toml:"trace_scale"`
}

// GEConf is Gilbert–Elliott loss.
type GEConf struct {
	PGoodBad float64 `toml:"p_good_bad"`
	PBadGood float64 `toml:"p_bad_good"`
	LossGood float64 `toml:"loss_good"`
	LossBad  float64 `toml:"loss_bad"`
}

// EventConf is a timed change of one path (or of the tunnel's server).
type EventConf struct {
	At   Duration `toml:"at"`
	Path string   `toml:"path"`
	Dir  string   `toml:"dir"` // "both" (default), "up" or "down"
	// Action: "blackhole" (silent drop, interfaces stay up), "restore",
	// "link_down" / "link_up" (carrier loss on the client side), "set",
	// "readdress" (the client's address on the path changes),
	// "restart_server" (the tunnel's server process is killed and started
	// again; no path).
	Action string `toml:"action"`
	// Every repeats the event every so long until Until (e.g. a flapping
	// path: link_down at 10s and link_up at 12s, both every 4s).
	Every Duration `toml:"every"`
	Until Duration `toml:"until"`
	// For "readdress": the new address (default 10.100.I.(101+n)) and how
	// long the path has no address in between. For "restart_server": how
	// long the server stays down, and Signal "kill" (a crash, default) or
	// "term" (an orderly restart).
	Address string   `toml:"address"`
	Down    Duration `toml:"down"`
	Signal  string   `toml:"signal"`
	// For "tunnel_set" (`mptun set`: scheduler, reorderer, hold, mode,
	// path_name, prio) and "tunnel_reload" (config keys such as
	// "connection.scheduler", then SIGHUP): what to change, on Side
	// "client", "server" or "both" (default). "restart_client" restarts
	// the client daemon (Signal "term" by default, Down in between).
	Side   string            `toml:"side"`
	Params map[string]string `toml:"params"`
	// For "set": the fields to change (zero means unchanged; loss uses a
	// pointer so 0 can be set).
	Rate  Rate     `toml:"rate"`
	RTT   Duration `toml:"rtt"`
	Delay Duration `toml:"delay"` // one way
	Loss  *float64 `toml:"loss"`
	Queue Size     `toml:"queue"`
}

// TrafficConf chooses the generators; unset ones do not run.
type TrafficConf struct {
	Bulk  *BulkConf  `toml:"bulk"`
	Probe *ProbeConf `toml:"probe"`
	Web   *WebConf   `toml:"web"`
	VoIP  *VoIPConf  `toml:"voip"`
	// Latency and UDP measurements (latency.go).
	UDP       *UDPConf       `toml:"udp"`
	Idle      *IdleConf      `toml:"idle"`
	Transfers *TransfersConf `toml:"transfers"`
}

// BulkConf is long-running TCP.
type BulkConf struct {
	CC        string `toml:"cc"`        // cubic (default), bbr, reno
	Direction string `toml:"direction"` // down (default) or up
	Streams   int    `toml:"streams"`
}

// ProbeConf is the sequence-numbered probe.
type ProbeConf struct {
	PPS       int    `toml:"pps"`
	Size      int    `toml:"size"`
	Direction string `toml:"direction"`
}

// WebConf is web-like short flows.
type WebConf struct {
	Rate float64 `toml:"rate"` // flows per second
	CC   string  `toml:"cc"`
	// Capture times every data segment of the web flows at both ends
	// (per-packet one-way delay, report web_owd).
	Capture bool `toml:"capture"`
}

// VoIPConf is 50 packets/s of 160 bytes.
type VoIPConf struct {
	Direction string `toml:"direction"`
}

// TunnelConf is passed to the mptun peer.
type TunnelConf struct {
	Scheduler string `toml:"scheduler"`
	Reorderer string `toml:"reorderer"`
	CCID      string `toml:"ccid"`
	// AQM turns the tunnel's send-queue AQM on or off (nil = daemon default).
	AQM *bool `toml:"aqm"`
	// AQMTarget is passed as connection.aqm_target ("" = default).
	AQMTarget string `toml:"aqm_target"`
	// ReorderMaxHold is passed as connection.reorder_max_hold ("" = default).
	ReorderMaxHold string `toml:"reorder_max_hold"`
	// Retransmit turns loss repair on (nil = daemon default).
	Retransmit *bool `toml:"retransmit"`
	// HyStart, ABE and ECN are passed as connection.hystart, .abe and
	// .ecn (nil = daemon default).
	HyStart *bool `toml:"hystart"`
	ABE     *bool `toml:"abe"`
	ECN     *bool `toml:"ecn"`
	// Classes are passed as [[connection.class]] traffic-class rules.
	Classes []ClassConf `toml:"class"`
	// Mode is passed as connection.mode ("aggregate", "active-backup",
	// "switch"; "" = default).
	Mode string `toml:"mode"`
	// DeviceOnly names the client's paths by device only: they follow the
	// device's address (for "readdress").
	DeviceOnly bool `toml:"device_only"`
	// RemotePath sends every client path to the server address of this
	// path (a multi-homed server asked on one address over all paths).
	RemotePath string `toml:"remote_path"`
	// Prio sets client paths' MP_PRIO by path name (path.NAME.prio).
	Prio map[string]int `toml:"prio"`
	// Switch is the [connection.switch] table of both configs (rtt_high,
	// rtt_low, loss_high, loss_low, hold).
	Switch map[string]string `toml:"switch"`
	Binary string            `toml:"binary"` // mptund; default: next to this executable, then $PATH
}

// ClassConf is one traffic-class rule of the tunnel (configs/cpe.toml
// documents the keys); the lab's VoIP flow uses UDP port 5310.
type ClassConf struct {
	Name      string   `toml:"name"`
	Protocol  string   `toml:"protocol"`
	DstPorts  []string `toml:"dst_ports"`
	SrcPorts  []string `toml:"src_ports"`
	DSCP      []int    `toml:"dscp"`
	Scheduler string   `toml:"scheduler"`
}

// Load reads and validates a scenario file. Unknown keys are errors.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sc.dir = filepath.Dir(path)
	if err := sc.loadTraces(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// Parse decodes and validates scenario text.
func Parse(b []byte) (*Scenario, error) {
	sc := &Scenario{}
	md, err := toml.Decode(string(b), sc)
	if err != nil {
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("unknown keys: %s", strings.Join(keys, ", "))
	}
	return sc, sc.validate()
}

var knownPeers = map[string]bool{"none": true, "mptcp": true, "wireguard-go": true, "mptun": true}

func (sc *Scenario) validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if sc.Name == "" {
		bad("name: missing")
	}
	if sc.Duration <= 0 {
		bad("duration: missing")
	}
	if len(sc.Paths) == 0 {
		bad("no [[path]]")
	}
	if len(sc.Peers) == 0 {
		sc.Peers = []string{"none"}
	}
	for _, p := range sc.Peers {
		if !knownPeers[p] {
			bad("peers: %q: want none, mptcp, wireguard-go or mptun", p)
		}
	}
	names := map[string]bool{}
	for i, p := range sc.Paths {
		if p.Name == "" {
			bad("path %d: name missing", i+1)
		}
		if names[p.Name] {
			bad("path %q: duplicate name", p.Name)
		}
		names[p.Name] = true
		for _, pr := range []float64{p.Loss, p.UpLoss, p.DownLoss, p.Duplicate, p.Reorder} {
			if pr < 0 || pr > 1 {
				bad("path %q: probability %v out of [0,1]", p.Name, pr)
			}
		}
	}
	for i, s := range sc.PathSpecs() {
		for _, c := range []struct {
			dir string
			cfg emu.Config
		}{{"up", s.Up}, {"down", s.Down}} {
			if err := c.cfg.Validate(); err != nil {
				bad("path %q %s: %v", sc.Paths[i].Name, c.dir, err)
			}
		}
	}
	if sc.BestPath != "" && !names[sc.BestPath] {
		bad("best_path %q: no such path", sc.BestPath)
	}
	if rp := sc.Tunnel.RemotePath; rp != "" && !names[rp] {
		bad("tunnel.remote_path %q: no such path", rp)
	}
	for name, p := range sc.Tunnel.Prio {
		if !names[name] || p < 0 || p > 15 {
			bad("tunnel.prio.%s = %d: want a path's name and 0..15", name, p)
		}
	}
	for i, e := range sc.Events {
		tunnel := tunnelActions[e.Action]
		switch {
		case tunnel && e.Path != "":
			bad("event %d: %s takes no path", i+1, e.Action)
		case !tunnel && !names[e.Path]:
			bad("event %d: path %q: no such path", i+1, e.Path)
		}
		switch e.Action {
		case "blackhole", "restore", "link_down", "link_up", "set", "readdress", "restart_server",
			"restart_client", "tunnel_set", "tunnel_reload":
		default:
			bad("event %d: action %q: want blackhole, restore, link_down, link_up, set, readdress, restart_server, restart_client, tunnel_set or tunnel_reload", i+1, e.Action)
		}
		switch e.Side {
		case "", "both", "client", "server":
		default:
			bad("event %d: side %q: want client, server or both", i+1, e.Side)
		}
		if (e.Action == "tunnel_set" || e.Action == "tunnel_reload") != (len(e.Params) > 0) {
			bad("event %d: params are for tunnel_set and tunnel_reload, which need them", i+1)
		}
		switch e.Signal {
		case "", "kill", "term":
		default:
			bad("event %d: signal %q: want kill or term", i+1, e.Signal)
		}
		if e.Address != "" {
			if _, err := netip.ParseAddr(e.Address); err != nil || e.Action != "readdress" {
				bad("event %d: address %q: an IPv4 address, for readdress only", i+1, e.Address)
			}
		}
		if e.Every < 0 || e.Every > 0 && e.Every.D() < 10*time.Millisecond {
			bad("event %d: every %v: at least 10ms", i+1, e.Every.D())
		}
		switch e.Dir {
		case "", "both", "up", "down":
		default:
			bad("event %d: dir %q: want both, up or down", i+1, e.Dir)
		}
		if e.At.D() > sc.Duration.D() {
			bad("event %d: at %v is after the end (%v)", i+1, e.At.D(), sc.Duration.D())
		}
	}
	for _, d := range []struct{ name, v string }{
		{"traffic.bulk.direction", dirOf(sc.Traffic.Bulk)},
		{"traffic.probe.direction", dirOfProbe(sc.Traffic.Probe)},
	} {
		if d.v != "" && d.v != "up" && d.v != "down" {
			bad("%s %q: want up or down", d.name, d.v)
		}
	}
	errs = append(errs, sc.validateLatency()...)
	return errors.Join(errs...)
}

// tunnelActions act on the tunnel peer rather than on a path.
var tunnelActions = map[string]bool{"restart_server": true, "restart_client": true, "tunnel_set": true, "tunnel_reload": true}

func dirOf(b *BulkConf) string {
	if b == nil {
		return ""
	}
	return b.Direction
}

func dirOfProbe(p *ProbeConf) string {
	if p == nil {
		return ""
	}
	return p.Direction
}

// traces keeps loaded traces per path index and direction.
type traces map[[2]int]*emu.Trace

func (sc *Scenario) tracePath(p string) string {
	if filepath.IsAbs(p) || sc.dir == "" {
		return p
	}
	return filepath.Join(sc.dir, p)
}

func (sc *Scenario) loadTraces() error {
	t := traces{}
	for i, p := range sc.Paths {
		for d, f := range []string{p.UpTrace, p.DownTrace} {
			if f == "" {
				continue
			}
			tr, err := emu.LoadTrace(sc.tracePath(f))
			if err != nil {
				return fmt.Errorf("path %q: %w", p.Name, err)
			}
			t[[2]int{i, d}] = tr
		}
	}
	sc.traces = t
	return nil
}

// PathSpecs converts the paths into emulator configurations.
func (sc *Scenario) PathSpecs() []topo.PathSpec {
	specs := make([]topo.PathSpec, len(sc.Paths))
	for i, p := range sc.Paths {
		up := p.dirConfig(p.UpRate, p.UpDelay, p.UpLoss)
		down := p.dirConfig(p.DownRate, p.DownDelay, p.DownLoss)
		if tr := sc.traces[[2]int{i, 0}]; tr != nil {
			up.Trace, up.TraceScale = tr, p.TraceScale
		}
		if tr := sc.traces[[2]int{i, 1}]; tr != nil {
			down.Trace, down.TraceScale = tr, p.TraceScale
		}
		specs[i] = topo.PathSpec{Name: p.Name, Up: up, Down: down}
	}
	return specs
}

func (p *PathConf) dirConfig(rate Rate, delay Duration, loss float64) emu.Config {
	c := emu.Config{
		Rate:         float64(p.Rate),
		Delay:        p.RTT.D() / 2,
		Jitter:       p.Jitter.D(),
		QueuePackets: p.QueuePackets,
		Loss:         p.Loss,
		Duplicate:    p.Duplicate,
		Reorder:      p.Reorder,
		ReorderExtra: p.ReorderExtra.D(),
	}
	if rate > 0 {
		c.Rate = float64(rate)
	}
	if delay > 0 {
		c.Delay = delay.D()
	}
	if loss > 0 {
		c.Loss = loss
	}
	if p.GE != nil {
		c.GE = &emu.GilbertElliott{PGoodBad: p.GE.PGoodBad, PBadGood: p.GE.PBadGood, LossGood: p.GE.LossGood, LossBad: p.GE.LossBad}
	}
	if p.CoDel {
		c.CoDel = &emu.CoDel{}
	}
	c.QueueBytes = int(p.Queue)
	if c.QueueBytes == 0 && c.Rate > 0 {
		qt := p.QueueTime.D()
		if qt == 0 {
			qt = max(p.RTT.D(), 2*c.Delay, 20*time.Millisecond)
		}
		c.QueueBytes = max(int(c.Rate/8*qt.Seconds()), 3000)
	}
	return c
}

// PathIndex returns the index of the named path, or -1.
func (sc *Scenario) PathIndex(name string) int {
	for i, p := range sc.Paths {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// Best returns the index of the best single path.
func (sc *Scenario) Best() int {
	if i := sc.PathIndex(sc.BestPath); i >= 0 {
		return i
	}
	best, bestRate := 0, -1.0
	for i, s := range sc.PathSpecs() {
		r := s.Down.Rate
		if s.Down.Trace != nil {
			r = s.Down.Trace.MeanRate() * traceScale(s.Down.TraceScale)
		}
		if r == 0 {
			r = 1e12
		}
		if r > bestRate {
			best, bestRate = i, r
		}
	}
	return best
}

func traceScale(s float64) float64 {
	if s == 0 {
		return 1
	}
	return s
}
