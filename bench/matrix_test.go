// SPDX-License-Identifier: MIT

package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/scenario"
	"github.com/mptun/mptun/lab/traffic"
)

func TestFullCellsCoverTheAxes(t *testing.T) {
	cells := FullCells()
	if len(cells) != 63 {
		t.Fatalf("%d cells, want the 63 of the designed set", len(cells))
	}
	names := map[string]bool{}
	ratios, delays, losses, traffic, dirs := map[float64]bool{}, map[[2]float64]bool{}, map[float64]bool{}, map[string]bool{}, map[string]bool{}
	var bursty, jitter, inverted, asym int
	for _, c := range cells {
		if names[c.Name] {
			t.Errorf("duplicate name %s", c.Name)
		}
		names[c.Name] = true
		ratios[c.RateA/c.RateB] = true
		delays[[2]float64{c.DelayA, c.DelayB}] = true
		losses[c.LossB] = true
		traffic[c.Traffic] = true
		dirs[c.Direction] = true
		if c.Bursty {
			bursty++
		}
		if c.Jitter {
			jitter++
		}
		if c.Asymmetric() {
			asym++
			// ADSL 16/1 beside LTE 30/10: LTE is the best path both ways,
			// and the capacity is that of the traffic's direction.
			want := 46.0
			if c.Direction == "up" {
				want = 11
			}
			if c.BestPath() != "b" || c.CapacitySum() != want || !strings.HasPrefix(c.Name, "asym16x1+30x10-10+35-l0-") {
				t.Errorf("%s: best path %s, capacity %v", c.Name, c.BestPath(), c.CapacitySum())
			}
			continue
		}
		if c.RateA < c.RateB {
			inverted++
			// Inner CUBIC over the bigger path's 0.5 % or more random
			// loss gets less than the lossless smaller path's rate.
			want := "b"
			if c.Traffic == "cubic" && c.PathLoss() >= 0.005 {
				want = "a"
			}
			if c.BestPath() != want {
				t.Errorf("%s: best path %s, want %s", c.Name, c.BestPath(), want)
			}
		}
	}
	for _, r := range []float64{1, 2, 10, 0.5} {
		if !ratios[r] {
			t.Errorf("no rate ratio %v", r)
		}
	}
	for _, d := range [][2]float64{{5, 5}, {8, 35}, {10, 120}, {8, 300}} {
		if !delays[d] {
			t.Errorf("no delays %v", d)
		}
	}
	for _, l := range []float64{0, 0.005, 0.02, 0.05} {
		if !losses[l] {
			t.Errorf("no loss %v", l)
		}
	}
	for _, k := range []string{"cubic", "bbr", "udp"} {
		if !traffic[k] {
			t.Errorf("no %s traffic", k)
		}
	}
	if !dirs["up"] || !dirs["down"] || bursty == 0 || jitter == 0 || inverted == 0 || asym != 4 {
		t.Errorf("dirs %v bursty %d jitter %d inverted %d asymmetric %d", dirs, bursty, jitter, inverted, asym)
	}
	quick, err := SelectCells("", true)
	if err != nil || len(quick) != len(QuickNames) {
		t.Fatalf("quick: %d cells, %v", len(quick), err)
	}
	var est time.Duration
	for _, c := range quick {
		est += EstimateCell(c, 12*time.Second)
	}
	// --quick must stay about 10 minutes on this machine.
	if est < 6*time.Minute || est > 11*time.Minute {
		t.Errorf("quick estimate %v", est)
	}
}

func TestSelectCells(t *testing.T) {
	cs, err := SelectCells("r2-8+35-l0-*,r2-8+35-l0-cubic-down", false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, c.Name)
	}
	want := "r2-8+35-l0-cubic-down r2-8+35-l0-bbr-down r2-8+35-l0-cubic-up r2-8+35-l0-udp-down r2-8+35-l0-udp-up"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if _, err := SelectCells("nothing-like-this", false); err == nil || !strings.Contains(err.Error(), "matches no cell") {
		t.Errorf("unknown pattern: %v", err)
	}
	if _, err := SelectCells("[", false); err == nil {
		t.Error("bad pattern accepted")
	}
	if cs, _ := SelectCells("*-udp-*", true); len(cs) != 2 {
		t.Errorf("quick udp cells: %d", len(cs))
	}
}

// Every cell's generated scenario is valid and says what the cell says,
// and leaves mptun's settings to the daemon's defaults.
func TestCellScenarios(t *testing.T) {
	for _, c := range FullCells() {
		sc, err := scenario.Parse([]byte(c.Scenario(20 * time.Second)))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if sc.Tunnel.Scheduler != "" || sc.Tunnel.Reorderer != "" || sc.Tunnel.CCID != "" || sc.Tunnel.AQM != nil ||
			sc.Tunnel.Retransmit != nil || sc.Tunnel.ReorderMaxHold != "" || len(sc.Tunnel.Classes) > 0 {
			t.Fatalf("%s: overrides mptun's defaults: %+v", c.Name, sc.Tunnel)
		}
		if strings.Join(sc.Peers, ",") != strings.Join(c.Peers(), ",") || sc.BestPath != c.BestPath() {
			t.Errorf("%s: peers %v best %s", c.Name, sc.Peers, sc.BestPath)
		}
		specs := sc.PathSpecs()
		for i, want := range []struct{ rate, up, delay float64 }{{c.RateA, c.UpA, c.DelayA}, {c.RateB, c.UpB, c.DelayB}} {
			if want.up == 0 {
				want.up = want.rate
			}
			// One BDP of buffer (max(RTT, 20 ms)); 50 ms at least on an
			// asymmetric access line.
			minQ := 20.0
			if c.Asymmetric() {
				minQ = 50
			}
			for _, d := range []struct {
				rate, wantRate float64
				delay          time.Duration
				queue          int
			}{{specs[i].Up.Rate, want.up, specs[i].Up.Delay, specs[i].Up.QueueBytes}, {specs[i].Down.Rate, want.rate, specs[i].Down.Delay, specs[i].Down.QueueBytes}} {
				bdp := int(d.wantRate * 1e6 / 8 * math.Max(2*want.delay, minQ) / 1000)
				if d.rate != d.wantRate*1e6 || d.delay != time.Duration(want.delay*float64(time.Millisecond)) || d.queue != bdp {
					t.Errorf("%s path %d: %+v, want %+v queue %d", c.Name, i, d, want, bdp)
				}
			}
		}
		b := specs[1].Down
		if b.Loss != c.LossB || specs[1].Up.Loss != c.LossB || specs[0].Down.Loss != 0 {
			t.Errorf("%s: loss %v/%v", c.Name, b.Loss, specs[1].Up.Loss)
		}
		if (b.GE != nil) != c.Bursty || (b.Jitter > 0) != c.Jitter || (c.Jitter && b.Reorder == 0) {
			t.Errorf("%s: ge %v jitter %v reorder %v", c.Name, b.GE, b.Jitter, b.Reorder)
		}
		if c.UDP() {
			if sc.Traffic.UDP == nil || sc.Traffic.Bulk != nil || sc.Traffic.UDP.Load != udpLoad || sc.Traffic.UDP.Direction != c.Direction {
				t.Errorf("%s: traffic %+v", c.Name, sc.Traffic)
			}
		} else if sc.Traffic.Bulk == nil || sc.Traffic.Bulk.CC != c.Traffic || sc.Traffic.Bulk.Direction != c.Direction {
			t.Errorf("%s: traffic %+v", c.Name, sc.Traffic)
		}
		if sc.Traffic.Idle == nil || sc.Traffic.Idle.Repeat != shortRepeat {
			t.Errorf("%s: no idle phase", c.Name)
		}
	}
	if m := GEMeanLoss(); math.Abs(m-0.0196) > 0.0001 {
		t.Errorf("GE mean loss %v", m)
	}
}

func TestBenefit(t *testing.T) {
	for _, tc := range []struct {
		g, best, ideal float64
		want           *float64
	}{
		{28, 18, 28, ptr(1.0)},
		{23, 18, 28, ptr(0.5)},
		{18, 18, 28, ptr(0.0)},
		{13, 18, 28, ptr(-0.5)},
		{20, 20, 19, nil}, // the best path alone beat "ideal"
	} {
		got := Benefit(tc.g, tc.best, tc.ideal)
		if (got == nil) != (tc.want == nil) || (got != nil && math.Abs(*got-*tc.want) > 1e-12) {
			t.Errorf("Benefit(%v, %v, %v) = %v, want %v", tc.g, tc.best, tc.ideal, deref(got), deref(tc.want))
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// labResults fakes the lab's results of a cell.
func labResults(c Cell, goodput map[string]float64, mutate func(*report.Run)) *report.Results {
	res := &report.Results{DurationS: 20}
	for _, peer := range c.Peers() {
		run := &report.Run{Peer: peer, GoodputMbps: goodput[peer], CapacitySumMbps: c.CapacitySum()}
		run.Aggregation = run.GoodputMbps / run.CapacitySumMbps
		run.Idle = &report.Idle{
			PathPing: []report.PathPing{{Path: "a", RTT: traffic.RTTStats{Received: 20, P50: 16.4}}, {Path: "b", RTT: traffic.RTTStats{Received: 20, P50: 70.3}}},
			Transfer: &traffic.TransferResult{Sizes: []traffic.TransferStats{{Bytes: 10000, Done: 5, P50ms: 38}, {Bytes: 100000, Done: 5, P50ms: 93}}},
		}
		if peer != "mptcp" {
			run.Idle.Ping = &traffic.RTTStats{Received: 20, P50: 16.6}
		}
		if c.UDP() {
			run.UDP = &traffic.CBRResult{Delivered: 0.995, OOOFraction: 0.0002}
		} else {
			run.Bulk = &report.BulkSummary{Retrans: 7}
		}
		if peer == "mptcp" {
			run.MPTCP = &report.MPTCPCheck{Verified: true, Subflows: 2, Expected: 2, Share: []float64{0.66, 0.34}}
		}
		if mutate != nil {
			mutate(run)
		}
		res.Runs = append(res.Runs, run)
	}
	return res
}

func targetByID(ts []TargetResult, id string) *TargetResult {
	for i := range ts {
		if ts[i].ID == id {
			return &ts[i]
		}
	}
	return nil
}

func cellNamed(t *testing.T, name string) Cell {
	t.Helper()
	cs, err := SelectCells(name, false)
	if err != nil || len(cs) != 1 {
		t.Fatalf("%s: %v", name, err)
	}
	return cs[0]
}

func TestEvaluateLosslessTCPCell(t *testing.T) {
	c := cellNamed(t, "r2-8+35-l0-cubic-down")
	r := evaluate(c, labResults(c, map[string]float64{"none": 19.1, "mptcp": 27.9, "mptun": 24.3}, nil))
	if math.Abs(*r.MptunVsBest-24.3/19.1) > 1e-9 || math.Abs(*r.MptunVsMPTCP-24.3/27.9) > 1e-9 {
		t.Fatalf("ratios %v %v", *r.MptunVsBest, *r.MptunVsMPTCP)
	}
	ideal := 30 * 1448.0 / 1514
	if math.Abs(r.IdealGoodputMbps-ideal) > 1e-9 || math.Abs(*r.BenefitMptun-(24.3-19.1)/(ideal-19.1)) > 1e-9 {
		t.Errorf("ideal %v benefit %v", r.IdealGoodputMbps, *r.BenefitMptun)
	}
	if r.FastPathRTTms != 16.4 || r.MPTCPVerified == nil || !*r.MPTCPVerified {
		t.Errorf("fast path %v verified %v", r.FastPathRTTms, r.MPTCPVerified)
	}
	// One peer's path pings hit by a stall do not move the reference.
	slow := evaluate(c, labResults(c, map[string]float64{"none": 19.1, "mptcp": 27.9, "mptun": 24.3}, func(run *report.Run) {
		if run.Peer == "none" {
			run.Idle.PathPing[0].RTT.P50 = 34
		}
	}))
	if slow.FastPathRTTms != 16.4 {
		t.Errorf("fast path rtt %v after one noisy peer", slow.FastPathRTTms)
	}
	var ids []string
	for _, tr := range r.Targets {
		ids = append(ids, tr.ID)
	}
	if strings.Join(ids, ",") != "vs_best,vs_mptcp_lossless,idle_rtt,short_10kb,short_100kb" {
		t.Fatalf("targets %v", ids)
	}
	if !targetByID(r.Targets, TVsBest).Pass || targetByID(r.Targets, TVsMPTCP).Pass {
		t.Errorf("0.87 x MPTCP passed or 1.27 x best failed: %+v", r.Targets)
	}
	// 16.6 ms through the tunnel vs 16.4 + 2: pass; equal transfer times: pass.
	for _, id := range []string{TIdleRTT, TShort10K, TShort100K} {
		if tr := targetByID(r.Targets, id); !tr.Pass || tr.Value == nil {
			t.Errorf("%s: %+v", id, tr)
		}
	}
	if tr := targetByID(r.Targets, TIdleRTT); tr.Limit != 18.4 || *tr.Value != 16.6 {
		t.Errorf("idle rtt %+v", tr)
	}
}

func TestEvaluateTargetsPerCellClass(t *testing.T) {
	lossy := cellNamed(t, "r2-8+35-l2-cubic-down")
	r := evaluate(lossy, labResults(lossy, map[string]float64{"none": 19, "mptcp": 14, "mptun": 19}, func(run *report.Run) {
		if run.Peer == "mptcp" {
			run.MPTCP = &report.MPTCPCheck{Fallback: true, Subflows: 1, Expected: 2}
		}
		if run.Peer == "mptun" {
			run.Idle.Ping.P50 = 72
			run.Idle.Transfer.Sizes[0].P50ms = 160
		}
	}))
	if targetByID(r.Targets, TVsMPTCP) != nil {
		t.Error("lossless target in a lossy cell")
	}
	vs, agg := targetByID(r.Targets, TVsMPTCPLossy), targetByID(r.Targets, TAggLossy)
	if vs == nil || !vs.Pass || !strings.Contains(vs.Detail, "NOT VERIFIED") {
		t.Errorf("lossy vs mptcp (19/14 = 1.36): %+v", vs)
	}
	if agg == nil || agg.Pass || math.Abs(*agg.Value-19.0/30) > 1e-9 {
		t.Errorf("aggregation 0.63 passed: %+v", agg)
	}
	if targetByID(r.Targets, TIdleRTT).Pass || targetByID(r.Targets, TShort10K).Pass || !targetByID(r.Targets, TShort100K).Pass {
		t.Errorf("latency targets %+v", r.Targets)
	}
	if *r.MPTCPVerified {
		t.Error("fallback counted as verified")
	}
	// Bursty loss is not random loss: only the best-path target.
	ge := cellNamed(t, "r2-8+35-ge-cubic-down")
	r = evaluate(ge, labResults(ge, map[string]float64{"none": 19, "mptcp": 14, "mptun": 19}, nil))
	if targetByID(r.Targets, TVsMPTCPLossy) != nil || targetByID(r.Targets, TVsMPTCP) != nil {
		t.Errorf("ge cell targets %+v", r.Targets)
	}
	// UDP: delivered only when lossless; e2e loss strictly below the path's.
	udp := cellNamed(t, "r2-8+35-l2-udp-down")
	r = evaluate(udp, labResults(udp, map[string]float64{"none": 19, "mptun": 22}, func(run *report.Run) {
		if run.Peer == "mptun" {
			run.UDP.Delivered = 0.98 // e2e loss 2 % = the path's: fails
		}
	}))
	if targetByID(r.Targets, TUDPDelivered) != nil || targetByID(r.Targets, TVsMPTCP) != nil {
		t.Errorf("udp lossy targets %+v", r.Targets)
	}
	if l := targetByID(r.Targets, TUDPLoss); l == nil || l.Pass || l.Op != "<" || l.Limit != 0.02 {
		t.Errorf("udp loss %+v", l)
	}
	if o := targetByID(r.Targets, TUDPOOO); o == nil || !o.Pass {
		t.Errorf("ooo %+v", o)
	}
	wantIdeal := math.Min(30*1200.0/1242, 0.8*30*1200/1228)
	if math.Abs(r.IdealGoodputMbps-wantIdeal) > 1e-9 {
		t.Errorf("udp ideal %v, want %v", r.IdealGoodputMbps, wantIdeal)
	}
	// A failed peer: its targets fail as not measured, not pass.
	r = evaluate(lossy, labResults(lossy, map[string]float64{"none": 19, "mptcp": 14, "mptun": 0}, func(run *report.Run) {
		if run.Peer == "mptun" {
			run.Error = "setup: mptund exited"
		}
	}))
	for _, tr := range r.Targets {
		if tr.Pass || tr.Value != nil || !strings.Contains(tr.Detail, "not measured") {
			t.Errorf("failed peer: %+v", tr)
		}
	}
	if r.MptunVsBest != nil || r.BenefitMptun != nil {
		t.Error("ratios of a failed run")
	}
}

func sampleMatrix(t *testing.T) *MatrixResults {
	var cells []CellResult
	for _, tc := range []struct {
		name    string
		goodput map[string]float64
	}{
		{"r2-8+35-l0-cubic-down", map[string]float64{"none": 19.1, "mptcp": 27.9, "mptun": 24.3}},
		{"r2-5+5-l0-cubic-down", map[string]float64{"none": 19.1, "mptcp": 27.0, "mptun": 28.0}},
		{"r2-8+35-l2-cubic-down", map[string]float64{"none": 19.1, "mptcp": 13, "mptun": 9}},
		{"r2-8+35-l0-udp-down", map[string]float64{"none": 18.5, "mptun": 22.9}},
	} {
		c := cellNamed(t, tc.name)
		cells = append(cells, evaluate(c, labResults(c, tc.goodput, nil)))
	}
	cells[1].FailedChecks = 1
	return &MatrixResults{Benchmark: "matrix", Seconds: 20, Method: matrixMethod, Cells: cells, Summary: Summarise(cells)}
}

func TestSummarise(t *testing.T) {
	s := sampleMatrix(t).Summary
	if s.Cells != 4 || s.Total[TVsBest] != 4 || s.Pass[TVsBest] != 3 || s.Total[TVsMPTCP] != 2 || s.Pass[TVsMPTCP] != 1 {
		t.Fatalf("%+v", s)
	}
	// Median of 24.3/27.9 and 28/27.
	if m := *s.MedianVsMPTCPLossless; math.Abs(m-(24.3/27.9+28.0/27)/2) > 1e-9 || *s.MedianPass {
		t.Errorf("median %v pass %v", m, *s.MedianPass)
	}
	if s.WorstVsBest != "r2-8+35-l2-cubic-down" || len(s.SuspectCells) != 1 || s.FailedCells[TVsBest][0] != "r2-8+35-l2-cubic-down" {
		t.Errorf("%+v", s)
	}
}

func TestMatrixFiles(t *testing.T) {
	dir := t.TempDir()
	r := sampleMatrix(t)
	files, err := WriteMatrixFiles(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() < 500 {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "results.json"))
	var doc struct {
		Cells []struct {
			Name         string   `json:"name"`
			MptunVsBest  *float64 `json:"mptun_vs_best"`
			MptunVsMPTCP *float64 `json:"mptun_vs_mptcp"`
			Peers        []struct {
				Peer    string  `json:"peer"`
				Goodput float64 `json:"goodput_mbps"`
			} `json:"peers"`
			Targets []struct {
				ID    string   `json:"id"`
				Pass  bool     `json:"pass"`
				Value *float64 `json:"value"`
			} `json:"targets"`
		} `json:"cells"`
		Summary struct {
			Pass map[string]int `json:"pass"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 4 || doc.Cells[3].MptunVsMPTCP != nil || doc.Cells[0].Peers[2].Goodput != 24.3 || doc.Summary.Pass[TVsBest] != 3 {
		t.Errorf("json %+v", doc)
	}
	f, _ := os.Open(filepath.Join(dir, "results.csv"))
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || len(rows[0]) != len(CSVHeader) {
		t.Fatalf("%d rows of %d columns", len(rows), len(rows[0]))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	if rows[1][col["mptun_vs_best"]] != "1.2723" || rows[1][col["mptcp_verified"]] != "true" || rows[4][col["mptcp_mbps"]] != "" ||
		rows[3][col["targets_failed"]] != "vs_best vs_mptcp_lossy aggregation_lossy" || rows[4][col["udp_delivered_mptun"]] != "0.99500" {
		t.Errorf("csv rows %v", rows[1:])
	}
	var tbl bytes.Buffer
	WriteMatrixTable(&tbl, r)
	for _, want := range []string{"r2-8+35-l0-cubic-down", "r2-5+5-l0-cubic-down *", "ok 2sf 66/34%", "FAIL   1/2   vs_mptcp_lossless", "UDP cells", "median mptun / MPTCP"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
}

func TestHeatmapGrid(t *testing.T) {
	r := sampleMatrix(t)
	g := Grid(r.Cells, func(c *CellResult) *float64 { return c.MptunVsMPTCP })
	// UDP cells have no MPTCP ratio: two rows (8+35 and 5+5 cubic), columns l0 and l2.
	if strings.Join(g.Rows, " ") != "r2-8+35-cubic-down r2-5+5-cubic-down" || strings.Join(g.Cols, " ") != "l0 l2" {
		t.Fatalf("rows %v cols %v", g.Rows, g.Cols)
	}
	if g.Values[0][1] == nil || math.Abs(*g.Values[0][1]-9.0/13) > 1e-9 || g.Values[1][1] != nil {
		t.Errorf("values %v", g.Values)
	}
}

func TestLatencyTargets(t *testing.T) {
	tf := func(p50s ...float64) []TransferFigure {
		var out []TransferFigure
		for i, p := range p50s {
			out = append(out, TransferFigure{Bytes: latencySizes[i], Done: 20, P50ms: p})
		}
		return out
	}
	web := func(p50, p99 float64) *traffic.WebResult {
		return &traffic.WebResult{Buckets: []traffic.FCTBucket{{Label: "<=10KB", Flows: 100, P50ms: p50, P99ms: p99}}}
	}
	r := &LatencyResults{FastPathRTTms: 16.6, Peers: []LatencyPeer{
		{Peer: "none", Idle: tf(38.6, 93.3, 488.9), UnderBulk: tf(60, 150, 900), Web: web(40, 200)},
		{Peer: "mptcp", Idle: tf(38.1, 92.8, 488.6), UnderBulk: tf(60, 150, 800), Web: web(40, 150)},
		{Peer: "mptun", IdleRTT: &traffic.RTTStats{P50: 71.9}, Idle: tf(160.7, 100, 480), UnderBulk: tf(66, 170, 700), Web: web(43, 180)},
	}}
	ts := LatencyTargets(r)
	want := map[string]bool{
		"idle_rtt": false, "transfer_10kb_idle": false, "transfer_100kb_idle": true, "transfer_1mb_idle": true,
		"transfer_10kb_bulk": true, "transfer_100kb_bulk": false, "transfer_1mb_bulk": true,
		"web_<=10KB_p50_vs_best": true, "web_<=10KB_p50_vs_mptcp": false, "web_<=10KB_p99_vs_best": true, "web_<=10KB_p99_vs_mptcp": false,
	}
	seen := 0
	for _, tr := range ts {
		if w, ok := want[tr.ID]; ok {
			seen++
			if tr.Pass != w {
				t.Errorf("%s: pass %v, want %v (%+v)", tr.ID, tr.Pass, w, tr)
			}
		} else if tr.Pass || tr.Value != nil {
			t.Errorf("%s judged without data: %+v", tr.ID, tr)
		}
	}
	if seen != len(want) {
		t.Errorf("saw %d of %d targets", seen, len(want))
	}
	pp := func(fast float64, received int) []report.PathPing {
		return []report.PathPing{{Path: "fast", RTT: traffic.RTTStats{P50: fast, Received: received}}, {Path: "slow", RTT: traffic.RTTStats{P50: 10, Received: 20}}}
	}
	if v := pathRTT([]LatencyPeer{{PathRTT: pp(34, 50)}, {PathRTT: pp(16.5, 50)}, {PathRTT: pp(1, 0)}}, "fast"); v != 16.5 {
		t.Errorf("fast path rtt %v, want the lowest measured median 16.5", v)
	}
	if w := WebRate(); math.Abs(w-139) > 1 {
		t.Errorf("web rate %v flows/s, want ≈ 139 (10 Mbit/s of 8.98 KB flows)", w)
	}
}

func TestProgressETA(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, 3, 30*time.Second)
	p.startStep(1, "a", 10*time.Second)
	p.startPeer("none")
	p.mu.Lock()
	// The first step took twice its estimate: the rest will too.
	p.stepStart = time.Now().Add(-20 * time.Second)
	p.mu.Unlock()
	p.endStep("done")
	p.startStep(2, "b", 10*time.Second)
	p.mu.Lock()
	eta := p.etaLocked()
	p.mu.Unlock()
	p.close()
	if eta < 39*time.Second || eta > 41*time.Second {
		t.Errorf("eta %v, want 40 s", eta)
	}
	if !strings.Contains(out.String(), "[1/3 a, none] elapsed") || !strings.Contains(out.String(), "a: done") {
		t.Errorf("output %q", out.String())
	}
	for d, want := range map[time.Duration]string{7 * time.Second: "7s", 245 * time.Second: "4m05s", 3723 * time.Second: "1h02m03s"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %s", d, got)
		}
	}
}

func TestMatrixMainListAndErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := MatrixMain([]string{"--list", "--quick"}, false, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != len(QuickNames)+1 || !strings.Contains(out.String(), "estimated") {
		t.Errorf("list:\n%s", out.String())
	}
	if code := MatrixMain([]string{"--list", "--cells", "nope"}, false, &out, &errb); code != 2 {
		t.Errorf("unknown cell: exit %d", code)
	}
	if code := MatrixMain([]string{"extra"}, false, &out, &errb); code != 2 {
		t.Errorf("stray argument: exit %d", code)
	}
}

// The shipped latency.toml is the scenario bench latency runs first.
func TestLatencyScenarioMatchesShippedFile(t *testing.T) {
	shipped, err := scenario.Load("../configs/lab/latency.toml")
	if err != nil {
		t.Fatal(err)
	}
	gen, err := scenario.Parse([]byte(transfersScenario(45*time.Second, 10)))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal([]any{shipped.PathSpecs(), shipped.Traffic, shipped.Peers, shipped.BestPath, shipped.Duration})
	b, _ := json.Marshal([]any{gen.PathSpecs(), gen.Traffic, gen.Peers, gen.BestPath, gen.Duration})
	if string(a) != string(b) {
		t.Errorf("configs/lab/latency.toml and bench latency differ:\n%s\n%s", a, b)
	}
	if _, err := scenario.Parse([]byte(webScenario(30 * time.Second))); err != nil {
		t.Error(err)
	}
}
