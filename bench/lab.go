// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/scenario"
)

// LabOptions parameterise `mptun bench aggregate|handover`.
type LabOptions struct {
	Seconds int      // length of each peer's run (default 20 aggregate, 60 handover)
	CCs     []string // inner congestion controls (aggregate; default cubic, bbr)
	Out     string   // report directory (default: a temporary one, removed)
	Log     io.Writer
}

// LabPeerResult is one peer's figures in a lab benchmark.
type LabPeerResult struct {
	Peer        string  `json:"peer"`
	InnerCC     string  `json:"inner_cc"`
	GoodputMbps float64 `json:"goodput_mbps"`
	CapacityMbs float64 `json:"capacity_sum_mbps"`
	Aggregation float64 `json:"aggregation"`
	Retrans     uint32  `json:"retrans"`
	DSACKs      uint64  `json:"spurious_retrans_dsack"`
	ProbeLost   int     `json:"probe_lost,omitempty"`
	MaxGapMs    float64 `json:"max_gap_ms,omitempty"`
	OWDp50ms    float64 `json:"owd_p50_ms,omitempty"`
	OWDp99ms    float64 `json:"owd_p99_ms,omitempty"`
	// VoIP flow (bench voip).
	VoIPSent     int     `json:"voip_sent,omitempty"`
	VoIPLost     int     `json:"voip_lost"`
	VoIPJitterMs float64 `json:"voip_jitter_ms,omitempty"`
	VoIPOWDp99ms float64 `json:"voip_owd_p99_ms,omitempty"`
}

// LabResult is what the lab benchmarks print with --json.
type LabResult struct {
	Benchmark string          `json:"benchmark"`
	Scenario  string          `json:"scenario"`
	Runs      []LabPeerResult `json:"runs"`
	// Ratios of mptun's goodput to kernel MPTCP's, per inner CC.
	VsMPTCP map[string]float64 `json:"vs_mptcp"`
}

const aggregatePaths = `
[[path]]
name = "dsl"
rate = "16mbit"
rtt = "10ms"
queue_time = "20ms"

[[path]]
name = "lte"
rate = "30mbit"
rtt = "40ms"
queue_time = "50ms"
`

// Aggregate runs kernel MPTCP and mptun on two heterogeneous emulated
// paths (16 Mbit/s 10 ms RTT + 30 Mbit/s 40 ms RTT) with a bulk TCP
// download, once per inner congestion control.
func Aggregate(ctx context.Context, o LabOptions) (LabResult, error) {
	if o.Seconds <= 0 {
		o.Seconds = 20
	}
	if len(o.CCs) == 0 {
		o.CCs = []string{"cubic", "bbr"}
	}
	res := LabResult{Benchmark: "aggregate", Scenario: "16 Mbit/s 10 ms RTT + 30 Mbit/s 40 ms RTT, bulk TCP download", VsMPTCP: map[string]float64{}}
	for _, cc := range o.CCs {
		sc := fmt.Sprintf("name = \"aggregate-%s\"\nduration = \"%ds\"\nseed = 1\npeers = [\"mptcp\", \"mptun\"]\n%s\n[traffic.bulk]\ncc = %q\ndirection = \"down\"\n",
			cc, o.Seconds, aggregatePaths, cc)
		r, err := runScenario(ctx, o, "aggregate-"+cc, sc)
		if err != nil {
			return res, err
		}
		addRuns(&res, r, cc)
	}
	// Baseline: spreading without reordering or repair (glorytun-style),
	// the same paths, inner cubic.
	sc := fmt.Sprintf("name = \"aggregate-passive\"\nduration = \"%ds\"\nseed = 1\npeers = [\"mptun\"]\n%s\n[traffic.bulk]\ncc = \"cubic\"\ndirection = \"down\"\n\n[tunnel]\nscheduler = \"rr\"\nreorderer = \"passive\"\nretransmit = false\n",
		o.Seconds, aggregatePaths)
	r, err := runScenario(ctx, o, "aggregate-passive", sc)
	if err != nil {
		return res, err
	}
	for _, run := range r.Runs {
		p := LabPeerResult{Peer: "mptun rr+passive, no repair", InnerCC: "cubic", GoodputMbps: run.GoodputMbps,
			CapacityMbs: run.CapacitySumMbps, Aggregation: run.Aggregation}
		if run.Bulk != nil {
			p.Retrans, p.DSACKs = run.Bulk.Retrans, run.Bulk.DSACKs
		}
		res.Runs = append(res.Runs, p)
	}
	return res, nil
}

// Handover runs the demo scenario (the LTE path silently blackholed for a
// third of the run) with kernel MPTCP and mptun, bulk TCP plus a probe.
func Handover(ctx context.Context, o LabOptions) (LabResult, error) {
	if o.Seconds <= 0 {
		o.Seconds = 60
	}
	third := o.Seconds / 3
	sc := fmt.Sprintf(`name = "handover"
duration = "%ds"
seed = 1
peers = ["mptcp", "mptun"]
%s
[traffic.bulk]
cc = "cubic"
direction = "down"

[traffic.probe]
pps = 1000
size = 64
direction = "down"

[[event]]
at = "%ds"
path = "lte"
action = "blackhole"

[[event]]
at = "%ds"
path = "lte"
action = "restore"
`, o.Seconds, aggregatePaths, third, 2*third)
	res := LabResult{Benchmark: "handover", Scenario: fmt.Sprintf("demo paths, LTE silently blackholed %d-%d s of %d s, cubic + 1000 pps probe", third, 2*third, o.Seconds), VsMPTCP: map[string]float64{}}
	r, err := runScenario(ctx, o, "handover", sc)
	if err != nil {
		return res, err
	}
	addRuns(&res, r, "cubic")
	return res, nil
}

// voipScenario is the lab's VoIP check: the aggregate paths with 5 % loss
// on LTE (both directions; the loss key lands in aggregatePaths' last
// table, LTE), bulk TCP and a VoIP flow downstream. tunnel is
// the [tunnel] section.
const voipScenario = `name = "voip-%s"
duration = "%ds"
seed = 1
peers = ["mptun"]
` + aggregatePaths + `loss = 0.05

[traffic.bulk]
cc = "cubic"
direction = "down"

[traffic.voip]
direction = "down"

%s
`

// voipClasses sends the lab's VoIP flow (UDP port 5310 at the server)
// redundantly in both directions.
const voipClasses = `[[tunnel.class]]
name = "voip-down"
protocol = "udp"
src_ports = ["5310"]
scheduler = "redundant"

[[tunnel.class]]
name = "voip-up"
protocol = "udp"
dst_ports = ["5310"]
scheduler = "redundant"
`

// VoIP runs a VoIP flow beside bulk TCP while the LTE path drops 5 % of
// its packets: mptun with a traffic-class rule that sends VoIP redundant,
// then the glorytun-style baseline (rr, passive reorderer, no repair, no
// class) on the same paths.
func VoIP(ctx context.Context, o LabOptions) (LabResult, error) {
	if o.Seconds <= 0 {
		o.Seconds = 30
	}
	res := LabResult{Benchmark: "voip", Scenario: "16 Mbit/s 10 ms RTT + 30 Mbit/s 40 ms RTT with 5 % loss, VoIP (50 pps) beside bulk TCP cubic"}
	for _, v := range []struct{ name, peer, tunnel string }{
		{"redundant", "mptun, VoIP class redundant", voipClasses},
		{"baseline", "mptun rr+passive, no repair", "[tunnel]\nscheduler = \"rr\"\nreorderer = \"passive\"\nretransmit = false\n"},
	} {
		r, err := runScenario(ctx, o, "voip-"+v.name, fmt.Sprintf(voipScenario, v.name, o.Seconds, v.tunnel))
		if err != nil {
			return res, err
		}
		for _, run := range r.Runs {
			p := LabPeerResult{Peer: v.peer, InnerCC: "cubic", GoodputMbps: run.GoodputMbps,
				CapacityMbs: run.CapacitySumMbps, Aggregation: run.Aggregation}
			if run.Bulk != nil {
				p.Retrans, p.DSACKs = run.Bulk.Retrans, run.Bulk.DSACKs
			}
			if vr := run.VoIP; vr != nil {
				p.VoIPSent, p.VoIPLost, p.VoIPJitterMs, p.VoIPOWDp99ms = vr.Sent, vr.Lost, vr.JitterMs, vr.OWDms.P99
			}
			res.Runs = append(res.Runs, p)
		}
	}
	return res, nil
}

func runScenario(ctx context.Context, o LabOptions, name, text string) (*report.Results, error) {
	dir, err := os.MkdirTemp("", "mptun-bench-lab")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "report")
	if o.Out != "" {
		out = filepath.Join(o.Out, name+"-"+time.Now().Format("150405"))
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	return scenario.RunWith(ctx, file, out, scenario.Options{Progress: log})
}

func addRuns(res *LabResult, r *report.Results, cc string) {
	var mptcp, mptun float64
	for _, run := range r.Runs {
		p := LabPeerResult{Peer: run.Peer, InnerCC: cc, GoodputMbps: run.GoodputMbps,
			CapacityMbs: run.CapacitySumMbps, Aggregation: run.Aggregation}
		if run.Bulk != nil {
			p.Retrans, p.DSACKs = run.Bulk.Retrans, run.Bulk.DSACKs
		}
		if pr := run.Probe; pr != nil {
			p.ProbeLost, p.MaxGapMs, p.OWDp50ms, p.OWDp99ms = pr.Lost, pr.MaxGapMs, pr.OWDms.P50, pr.OWDms.P99
		}
		res.Runs = append(res.Runs, p)
		switch run.Peer {
		case "mptcp":
			mptcp = run.GoodputMbps
		case "mptun":
			mptun = run.GoodputMbps
		}
	}
	if mptcp > 0 {
		res.VsMPTCP[cc] = mptun / mptcp
	}
}

// CCMatrix runs inner TCP (cubic, bbr) through mptun over one emulated
// 20 Mbit/s, 40 ms RTT path for every outer controller (ccid2, bbr, none)
// with and without the send-queue AQM. The probe's one-way delay shows the
// inner RTT inflation the tunnel adds.
func CCMatrix(ctx context.Context, o LabOptions) ([]CCRow, error) {
	if o.Seconds <= 0 {
		o.Seconds = 15
	}
	var rows []CCRow
	for _, inner := range []string{"cubic", "bbr"} {
		for _, outer := range []string{"ccid2", "bbr", "none"} {
			for _, aqm := range []bool{true, false} {
				sc := fmt.Sprintf(`name = "cc-%s-%s-%v"
duration = "%ds"
seed = 1
peers = ["mptun"]

[[path]]
name = "wan"
rate = "20mbit"
rtt = "40ms"
queue_time = "50ms"

[traffic.bulk]
cc = %q
direction = "down"

[traffic.probe]
pps = 200
size = 64
direction = "down"

[tunnel]
ccid = %q
aqm = %v
`, inner, outer, aqm, o.Seconds, inner, outer, aqm)
				r, err := runScenario(ctx, o, fmt.Sprintf("cc-%s-%s-%v", inner, outer, aqm), sc)
				if err != nil {
					return rows, err
				}
				for _, run := range r.Runs {
					row := CCRow{Inner: inner, Outer: outer, AQM: aqm, GoodputMbps: run.GoodputMbps, Aggregation: run.Aggregation}
					if run.Bulk != nil {
						row.Retrans = run.Bulk.Retrans
					}
					if run.Probe != nil {
						row.OWDp50ms, row.OWDp99ms = run.Probe.OWDms.P50, run.Probe.OWDms.P99
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows, nil
}

// CCRow is one cell of the congestion-control matrix.
type CCRow struct {
	Inner       string  `json:"inner_cc"`
	Outer       string  `json:"outer_ccid"`
	AQM         bool    `json:"aqm"`
	GoodputMbps float64 `json:"goodput_mbps"`
	Aggregation float64 `json:"utilisation"`
	Retrans     uint32  `json:"inner_retrans"`
	OWDp50ms    float64 `json:"owd_p50_ms"`
	OWDp99ms    float64 `json:"owd_p99_ms"`
}
