// SPDX-License-Identifier: MIT

package bench

import (
	"math"
	"slices"
	"sort"

	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/traffic"
)

// PeerFigures are one peer's measurements in a cell.
type PeerFigures struct {
	Peer        string  `json:"peer"` // none (best single path), mptcp, mptun
	GoodputMbps float64 `json:"goodput_mbps"`
	// Aggregation is goodput / the emulated capacity sum (layer 2).
	Aggregation float64 `json:"aggregation"`
	// TCP cells.
	Retrans *uint32 `json:"inner_retrans,omitempty"`
	DSACKs  *uint64 `json:"spurious_retrans_dsack,omitempty"`
	// UDP cells.
	OfferedMbps *float64 `json:"udp_offered_mbps,omitempty"`
	Delivered   *float64 `json:"udp_delivered,omitempty"`
	OOO         *float64 `json:"udp_ooo,omitempty"`
	// Idle phase (issue 17): ICMP round trip through the peer (none for
	// MPTCP, which carries no ICMP) and short-transfer completion.
	IdleRTT   *traffic.RTTStats  `json:"idle_rtt_ms,omitempty"`
	Short10K  *float64           `json:"short_10kb_p50_ms,omitempty"`
	Short100K *float64           `json:"short_100kb_p50_ms,omitempty"`
	MPTCP     *report.MPTCPCheck `json:"mptcp_check,omitempty"`
	Checks    []report.Check     `json:"failed_checks,omitempty"` // the lab's honesty checks that failed
	CPU       report.CPU         `json:"cpu"`
	Error     string             `json:"error,omitempty"`
}

// CellResult is one cell's figures, ratios and targets.
type CellResult struct {
	Cell
	Description      string  `json:"description"`
	Seconds          float64 `json:"seconds"`
	CapacitySumMbps  float64 `json:"capacity_sum_mbps"`  // emulated rates in the data direction (layer 2)
	IdealGoodputMbps float64 `json:"ideal_goodput_mbps"` // the same as payload (see PayloadEfficiency)
	// FastPathRTTms is the lowest median ICMP round trip of a path alone
	// over the peers' idle phases.
	FastPathRTTms float64       `json:"fast_path_rtt_ms"`
	Peers         []PeerFigures `json:"peers"`
	// Ratios of goodput (pointers: absent when a peer failed).
	MptunVsBest  *float64 `json:"mptun_vs_best"`
	MptunVsMPTCP *float64 `json:"mptun_vs_mptcp"`
	// Benefit is (goodput − best) / (ideal − best): 1 perfect
	// aggregation, 0 no better than the best path, < 0 worse.
	BenefitMptun  *float64        `json:"benefit_mptun"`
	BenefitMPTCP  *float64        `json:"benefit_mptcp"`
	MPTCPVerified *bool           `json:"mptcp_verified"`
	Targets       []TargetResult  `json:"targets"`
	Baseline      report.Baseline `json:"emulator_baseline"`
	ReportDir     string          `json:"report_dir"`
	WallS         float64         `json:"wall_s"`
	Error         string          `json:"error,omitempty"`
	UDPLossMptun  *float64        `json:"udp_e2e_loss_mptun,omitempty"`
	// FailedChecks counts the lab's honesty checks that failed in the
	// cell's runs (emulator timer late, kernel socket drops, no queue in
	// the emulator): its figures are suspect.
	FailedChecks int `json:"failed_checks"`
}

// Peer returns the named peer's figures, or nil.
func (r *CellResult) Peer(name string) *PeerFigures {
	for i := range r.Peers {
		if r.Peers[i].Peer == name {
			return &r.Peers[i]
		}
	}
	return nil
}

// PayloadEfficiency is the payload carried per layer-2 byte by a full
// packet on a path alone: TCP 1448 of 1514 bytes (IPv4, TCP timestamps,
// Ethernet); UDP payload of payload + 42.
func PayloadEfficiency(udp bool) float64 {
	if udp {
		return float64(udpSize) / float64(udpSize+traffic.UDPIPOverhead+14)
	}
	return 1448.0 / 1514
}

// peerFigures extracts a peer's figures from its lab run.
func peerFigures(run *report.Run) PeerFigures {
	f := PeerFigures{Peer: run.Peer, GoodputMbps: run.GoodputMbps, Aggregation: run.Aggregation, CPU: run.CPU,
		Error: run.Error, MPTCP: run.MPTCP}
	if b := run.Bulk; b != nil {
		f.Retrans, f.DSACKs = &b.Retrans, &b.DSACKs
	}
	if u := run.UDP; u != nil {
		f.OfferedMbps, f.Delivered, f.OOO = &u.OfferedMbps, &u.Delivered, &u.OOOFraction
		if u.Err != "" && f.Error == "" {
			f.Error = "udp: " + u.Err
		}
	}
	if i := run.Idle; i != nil {
		if i.Ping != nil && i.Ping.Received > 0 {
			s := *i.Ping
			s.Samples = nil
			f.IdleRTT = &s
		}
		if t := i.Transfer.Size(10000); t != nil && t.Done > 0 {
			f.Short10K = &t.P50ms
		}
		if t := i.Transfer.Size(100000); t != nil && t.Done > 0 {
			f.Short100K = &t.P50ms
		}
	}
	for _, c := range run.Checks {
		if !c.OK {
			f.Checks = append(f.Checks, c)
		}
	}
	return f
}

func ptr[T any](v T) *T { return &v }

// ratio returns a/b, or nil if either is missing or b is 0.
func ratio(a, b *PeerFigures) *float64 {
	if a == nil || b == nil || a.Error != "" || b.Error != "" || b.GoodputMbps <= 0 {
		return nil
	}
	return ptr(a.GoodputMbps / b.GoodputMbps)
}

// Benefit is (g − best) / (ideal − best), or nil if ideal ≤ best (the
// best path alone already reaches what aggregation could).
func Benefit(g, best, ideal float64) *float64 {
	if ideal-best <= 1e-9 {
		return nil
	}
	return ptr((g - best) / (ideal - best))
}

// evaluate fills a cell's result from its lab results.
func evaluate(c Cell, res *report.Results) CellResult {
	r := CellResult{Cell: c, Description: c.Describe(), CapacitySumMbps: c.CapacitySum()}
	r.IdealGoodputMbps = r.CapacitySumMbps * PayloadEfficiency(c.UDP())
	if c.UDP() {
		offered := udpLoad * r.CapacitySumMbps * udpSize / (udpSize + traffic.UDPIPOverhead)
		r.IdealGoodputMbps = min(r.IdealGoodputMbps, offered)
	}
	if res == nil {
		return r
	}
	r.Seconds = res.DurationS
	r.Baseline = res.Baseline
	for _, run := range res.Runs {
		f := peerFigures(run)
		r.FailedChecks += len(f.Checks)
		r.Peers = append(r.Peers, f)
		// Every peer pings the paths alone on identical links; a busy
		// machine only adds delay, so the lowest median is the path's.
		if run.Idle != nil {
			if v := run.Idle.FastestPathRTT(); v > 0 && (r.FastPathRTTms == 0 || v < r.FastPathRTTms) {
				r.FastPathRTTms = v
			}
		}
	}
	best, mptcp, mptun := r.Peer("none"), r.Peer("mptcp"), r.Peer("mptun")
	r.MptunVsBest = ratio(mptun, best)
	r.MptunVsMPTCP = ratio(mptun, mptcp)
	if best != nil && best.Error == "" {
		if mptun != nil && mptun.Error == "" {
			r.BenefitMptun = Benefit(mptun.GoodputMbps, best.GoodputMbps, r.IdealGoodputMbps)
		}
		if mptcp != nil && mptcp.Error == "" {
			r.BenefitMPTCP = Benefit(mptcp.GoodputMbps, best.GoodputMbps, r.IdealGoodputMbps)
		}
	}
	if mptcp != nil && mptcp.MPTCP != nil {
		r.MPTCPVerified = &mptcp.MPTCP.Verified
	}
	if mptun != nil && mptun.Delivered != nil {
		r.UDPLossMptun = ptr(1 - *mptun.Delivered)
	}
	r.Targets = EvaluateTargets(&r)
	return r
}

// TargetResult is one target judged in one cell.
type TargetResult struct {
	ID     string   `json:"id"`
	Issue  int      `json:"issue"`
	Text   string   `json:"text"`
	Value  *float64 `json:"value"` // null when not measured
	Op     string   `json:"op"`    // ">=", "<=" or "<": Value Op Limit passes
	Limit  float64  `json:"limit"`
	Pass   bool     `json:"pass"`
	Detail string   `json:"detail,omitempty"`
}

// Target identifiers, in the order they are printed.
const (
	TVsBest       = "vs_best"
	TVsMPTCP      = "vs_mptcp_lossless"
	TVsMPTCPLossy = "vs_mptcp_lossy"
	TAggLossy     = "aggregation_lossy"
	TUDPDelivered = "udp_delivered"
	TUDPOOO       = "udp_ooo"
	TUDPLoss      = "udp_e2e_loss"
	TIdleRTT      = "idle_rtt"
	TShort10K     = "short_10kb"
	TShort100K    = "short_100kb"
)

// TargetTexts describe the targets (issue 10 "Targets", issue 17 "Must show").
var TargetTexts = map[string]string{
	TVsBest:       "mptun goodput >= 0.95 x best single path (every cell)",
	TVsMPTCP:      "mptun goodput >= 0.95 x kernel MPTCP (lossless TCP cells)",
	TVsMPTCPLossy: "mptun goodput >= 1.3 x kernel MPTCP (TCP cells, >= 2 % random loss)",
	TAggLossy:     "mptun goodput >= 0.8 x capacity sum (TCP cells, >= 2 % random loss)",
	TUDPDelivered: "UDP delivered >= 99 % of offered (lossless UDP cells)",
	TUDPOOO:       "UDP out of order <= 0.1 % (UDP cells)",
	TUDPLoss:      "UDP end-to-end loss < the lossy path's loss (UDP cells with loss)",
	TIdleRTT:      "idle RTT through mptun <= fastest path + 2 ms",
	TShort10K:     "10 KB transfer p50 <= 1.1 x best single path",
	TShort100K:    "100 KB transfer p50 <= 1.1 x best single path",
}

// TargetOrder lists the target identifiers in print order.
var TargetOrder = []string{TVsBest, TVsMPTCP, TVsMPTCPLossy, TAggLossy, TUDPDelivered, TUDPOOO, TUDPLoss, TIdleRTT, TShort10K, TShort100K}

// EvaluateTargets judges the targets that apply to the cell. A target
// whose inputs are missing (a peer failed) fails with the reason.
func EvaluateTargets(r *CellResult) []TargetResult {
	var ts []TargetResult
	best, mptcp, mptun := r.Peer("none"), r.Peer("mptcp"), r.Peer("mptun")
	add := func(id string, issue int, value *float64, op string, limit float64, detail string) {
		t := TargetResult{ID: id, Issue: issue, Text: TargetTexts[id], Op: op, Limit: limit, Detail: detail}
		switch {
		case value == nil || math.IsNaN(*value):
			if t.Detail != "" {
				t.Detail += "; "
			}
			t.Detail += "not measured (a peer failed)"
		case op == ">=":
			t.Value, t.Pass = value, *value >= limit
		case op == "<=":
			t.Value, t.Pass = value, *value <= limit
		case op == "<":
			t.Value, t.Pass = value, *value < limit
		}
		ts = append(ts, t)
	}
	ok := func(p *PeerFigures) bool { return p != nil && p.Error == "" }
	add(TVsBest, 10, r.MptunVsBest, ">=", 0.95, "value = mptun / best path goodput")
	if !r.UDP() {
		detail := "value = mptun / MPTCP goodput"
		if mptcp != nil && (mptcp.MPTCP == nil || !mptcp.MPTCP.Verified) {
			detail += "; MPTCP NOT VERIFIED, compared with what ran"
		}
		if r.Lossless() {
			add(TVsMPTCP, 10, r.MptunVsMPTCP, ">=", 0.95, detail)
		}
		if r.LossB >= 0.02 { // random (Bernoulli) loss; the bursty cells are not in this class
			add(TVsMPTCPLossy, 10, r.MptunVsMPTCP, ">=", 1.3, detail)
			var agg *float64
			if ok(mptun) {
				agg = &mptun.Aggregation
			}
			add(TAggLossy, 10, agg, ">=", 0.8, "value = mptun goodput / capacity sum (layer 2)")
		}
	} else {
		var delivered, ooo *float64
		if ok(mptun) {
			delivered, ooo = mptun.Delivered, mptun.OOO
		}
		if r.Lossless() {
			add(TUDPDelivered, 10, delivered, ">=", 0.99, "value = fraction delivered")
		}
		add(TUDPOOO, 10, ooo, "<=", 0.001, "value = fraction out of order")
		if !r.Lossless() {
			var loss *float64
			if ok(mptun) {
				loss = r.UDPLossMptun
			}
			add(TUDPLoss, 10, loss, "<", r.PathLoss(), "value = end-to-end loss, limit = path b's mean loss")
		}
	}
	var rtt *float64
	if ok(mptun) && mptun.IdleRTT != nil && r.FastPathRTTms > 0 {
		rtt = &mptun.IdleRTT.P50
	}
	add(TIdleRTT, 17, rtt, "<=", r.FastPathRTTms+2, "value = mptun idle ICMP RTT p50 (ms), limit = fastest path's + 2 ms")
	for _, s := range []struct {
		id  string
		get func(*PeerFigures) *float64
	}{{TShort10K, func(p *PeerFigures) *float64 { return p.Short10K }},
		{TShort100K, func(p *PeerFigures) *float64 { return p.Short100K }}} {
		var v *float64
		if ok(best) && ok(mptun) && s.get(best) != nil && s.get(mptun) != nil && *s.get(best) > 0 {
			v = ptr(*s.get(mptun) / *s.get(best))
		}
		add(s.id, 17, v, "<=", 1.1, "value = mptun p50 / best path p50")
	}
	return ts
}

// Summary counts target results over the cells.
type Summary struct {
	Cells  int            `json:"cells"`
	Failed int            `json:"cells_failed"` // a peer's run failed
	Pass   map[string]int `json:"pass"`
	Total  map[string]int `json:"total"`
	// FailedCells lists per target the cells that missed it.
	FailedCells map[string][]string `json:"failed_cells"`
	// MedianVsMPTCPLossless is the median mptun / MPTCP over the
	// lossless TCP cells (target ≥ 1.0).
	MedianVsMPTCPLossless *float64 `json:"median_vs_mptcp_lossless"`
	MedianPass            *bool    `json:"median_vs_mptcp_lossless_pass"`
	MedianVsBest          *float64 `json:"median_vs_best"`
	WorstVsBest           string   `json:"worst_vs_best_cell"`
	WorstVsBestValue      *float64 `json:"worst_vs_best"`
	MPTCPUnverified       []string `json:"mptcp_unverified_cells"`
	// SuspectCells had failed honesty checks.
	SuspectCells []string `json:"suspect_cells"`
}

// Summarise counts the targets.
func Summarise(cells []CellResult) Summary {
	s := Summary{Cells: len(cells), Pass: map[string]int{}, Total: map[string]int{}, FailedCells: map[string][]string{}}
	var lossless, vsBest []float64
	for _, c := range cells {
		failed := c.Error != ""
		for _, p := range c.Peers {
			failed = failed || p.Error != ""
		}
		if failed {
			s.Failed++
		}
		for _, t := range c.Targets {
			s.Total[t.ID]++
			if t.Pass {
				s.Pass[t.ID]++
			} else {
				s.FailedCells[t.ID] = append(s.FailedCells[t.ID], c.Name)
			}
		}
		if !c.UDP() && c.Lossless() && c.MptunVsMPTCP != nil {
			lossless = append(lossless, *c.MptunVsMPTCP)
		}
		if v := c.MptunVsBest; v != nil {
			vsBest = append(vsBest, *v)
			if s.WorstVsBestValue == nil || *v < *s.WorstVsBestValue {
				s.WorstVsBest, s.WorstVsBestValue = c.Name, ptr(*v)
			}
		}
		if c.FailedChecks > 0 {
			s.SuspectCells = append(s.SuspectCells, c.Name)
		}
		if c.MPTCPVerified != nil && !*c.MPTCPVerified {
			s.MPTCPUnverified = append(s.MPTCPUnverified, c.Name)
		}
	}
	if m, ok := median(lossless); ok {
		s.MedianVsMPTCPLossless, s.MedianPass = &m, ptr(m >= 1.0)
	}
	if m, ok := median(vsBest); ok {
		s.MedianVsBest = &m
	}
	return s
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}
