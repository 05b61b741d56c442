// SPDX-License-Identifier: MIT

package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mptun/mptun/lab/report"
)

// MatrixResults is results.json of `mptun bench matrix`.
type MatrixResults struct {
	Benchmark   string    `json:"benchmark"`
	Started     time.Time `json:"started"`
	WallS       float64   `json:"wall_s"`
	Quick       bool      `json:"quick"`
	Seconds     float64   `json:"seconds"` // timed traffic per peer and cell
	Interrupted bool      `json:"interrupted"`
	// LoadStart and LoadEnd are /proc/loadavg at the start and the end:
	// other work on the machine shows here.
	LoadStart string          `json:"load_average_start"`
	LoadEnd   string          `json:"load_average_end"`
	Method    []string        `json:"method"`
	Host      report.Host     `json:"host"`
	Baseline  report.Baseline `json:"emulator_baseline"` // of the first cell; each cell has its own
	Cells     []CellResult    `json:"cells"`
	Summary   Summary         `json:"summary"`
}

// matrixMethod is printed into results.json and the README says the same.
var matrixMethod = []string{
	"Peers on freshly built, identical emulated links in every cell, one after another: none = plain TCP/UDP over the best single path (the one that carries the traffic faster alone: for inner CUBIC, a lossy path counts at the rate its loss allows, Mathis et al.), mptcp = kernel MPTCP (in-kernel path manager, one subflow endpoint per extra path, default scheduler) verified per cell from MPTCP_INFO/MPTCP_TCPINFO of the bulk socket, mptun = mptund with its shipped defaults (the generated configs set no scheduler, reorderer, ccid, hold, aqm or repair key).",
	"Paths: a and b, every impairment on b, in both directions; buffers max(path RTT, 20 ms) at the path's rate (one BDP, drop-tail).",
	"Goodput: TCP payload received (or UDP payload) per second of timed traffic, slow start included. aggregation = goodput / emulated capacity sum (layer 2).",
	"Benefit = (goodput - best path goodput) / (ideal - best path goodput), ideal = capacity sum x payload per layer-2 byte (TCP 1448/1514; UDP the offered CBR load when lower); negative when worse than the best path.",
	"UDP cells: CBR at 80 % of the rate sum counted in IP bytes, 1200-byte payloads; delivered = received / sent; out of order = arrivals below the highest sequence number seen.",
	"Idle phase (issue 17) before the timed traffic of every peer: 20 ICMP echoes through the peer and over each path alone, then 5 x (10 KB, 100 KB) downloads, each on a fresh TCP connection (connect to the response's end). The fastest path's RTT is the lowest of the peers' medians for a path alone (a busy machine only adds delay).",
	"Cells whose lab honesty checks failed (emulator timer p99 >= 500 us, kernel socket drops, no queue in the emulator) are marked: a busy machine makes their figures suspect.",
}

// WriteMatrixFiles writes results.json, results.csv and the heatmaps into
// dir; it returns the files written.
func WriteMatrixFiles(dir string, r *MatrixResults) ([]string, error) {
	var files []string
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	f := filepath.Join(dir, "results.json")
	if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	files = append(files, f)
	f = filepath.Join(dir, "results.csv")
	out, err := os.Create(f)
	if err != nil {
		return files, fmt.Errorf("matrix: %w", err)
	}
	err = WriteMatrixCSV(out, r.Cells)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return files, err
	}
	files = append(files, f)
	maps, err := plotHeatmaps(dir, r.Cells)
	return append(files, maps...), err
}

// CSVHeader names the columns of results.csv (rates are those in the
// cell's traffic direction; results.json has an asymmetric cell's both).
var CSVHeader = []string{"cell", "block", "traffic", "direction", "rate_a_mbps", "rate_b_mbps", "owd_a_ms", "owd_b_ms",
	"loss_b", "bursty", "jitter", "capacity_sum_mbps", "ideal_goodput_mbps",
	"best_mbps", "mptcp_mbps", "mptun_mbps", "mptun_vs_best", "mptun_vs_mptcp", "benefit_mptun", "benefit_mptcp",
	"mptun_aggregation", "retrans_best", "retrans_mptcp", "retrans_mptun", "mptcp_verified", "mptcp_subflows", "mptcp_detail",
	"udp_delivered_best", "udp_delivered_mptun", "udp_ooo_mptun", "udp_e2e_loss_mptun", "path_loss_b",
	"fast_path_rtt_ms", "idle_rtt_best_ms", "idle_rtt_mptun_ms",
	"short_10kb_best_ms", "short_10kb_mptcp_ms", "short_10kb_mptun_ms",
	"short_100kb_best_ms", "short_100kb_mptcp_ms", "short_100kb_mptun_ms",
	"targets_pass", "targets_total", "targets_failed", "error"}

// WriteMatrixCSV writes one line per cell; missing values are empty.
func WriteMatrixCSV(w io.Writer, cells []CellResult) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	for _, c := range cells {
		best, mptcp, mptun := c.Peer("none"), c.Peer("mptcp"), c.Peer("mptun")
		goodput := func(p *PeerFigures) string {
			if p == nil || p.Error != "" {
				return ""
			}
			return num(p.GoodputMbps, 3)
		}
		retr := func(p *PeerFigures) string {
			if p == nil || p.Retrans == nil {
				return ""
			}
			return strconv.Itoa(int(*p.Retrans))
		}
		field := func(p *PeerFigures, get func(*PeerFigures) *float64, prec int) string {
			if p == nil {
				return ""
			}
			return optNum(get(p), prec)
		}
		deliv := func(p *PeerFigures) *float64 { return p.Delivered }
		ooo := func(p *PeerFigures) *float64 { return p.OOO }
		verified, subflows, detail := "", "", ""
		if mptcp != nil && mptcp.MPTCP != nil {
			verified, subflows, detail = strconv.FormatBool(mptcp.MPTCP.Verified), strconv.Itoa(mptcp.MPTCP.Subflows), mptcp.MPTCP.Detail
		}
		pass, failed := 0, []string{}
		for _, t := range c.Targets {
			if t.Pass {
				pass++
			} else {
				failed = append(failed, t.ID)
			}
		}
		agg := ""
		if mptun != nil && mptun.Error == "" {
			agg = num(mptun.Aggregation, 4)
		}
		rateA, rateB := c.BulkRates() // an asymmetric line's rate in the traffic's direction
		cw.Write([]string{c.Name, c.Block, c.Traffic, c.Direction, num(rateA, 3), num(rateB, 3), num(c.DelayA, 1), num(c.DelayB, 1),
			num(c.LossB, 4), strconv.FormatBool(c.Bursty), strconv.FormatBool(c.Jitter), num(c.CapacitySumMbps, 3), num(c.IdealGoodputMbps, 3),
			goodput(best), goodput(mptcp), goodput(mptun), optNum(c.MptunVsBest, 4), optNum(c.MptunVsMPTCP, 4),
			optNum(c.BenefitMptun, 4), optNum(c.BenefitMPTCP, 4), agg, retr(best), retr(mptcp), retr(mptun), verified, subflows, detail,
			field(best, deliv, 5), field(mptun, deliv, 5), field(mptun, ooo, 5), optNum(c.UDPLossMptun, 5), num(c.PathLoss(), 5),
			num(c.FastPathRTTms, 2), field(best, idleRTT, 2), field(mptun, idleRTT, 2),
			field(best, short10K, 1), field(mptcp, short10K, 1), field(mptun, short10K, 1),
			field(best, short100K, 1), field(mptcp, short100K, 1), field(mptun, short100K, 1),
			strconv.Itoa(pass), strconv.Itoa(len(c.Targets)), strings.Join(failed, " "), cellError(c)})
	}
	cw.Flush()
	return cw.Error()
}

func num(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

func optNum(v *float64, prec int) string {
	if v == nil {
		return ""
	}
	return num(*v, prec)
}

// cellError joins the cell's and its peers' errors.
func cellError(c CellResult) string {
	var e []string
	if c.Error != "" {
		e = append(e, c.Error)
	}
	for _, p := range c.Peers {
		if p.Error != "" {
			e = append(e, p.Peer+": "+p.Error)
		}
	}
	return strings.Join(e, "; ")
}

func dash(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// triple formats one figure for several peers: "a/b/c".
func triple(format string, peers ...*PeerFigures) func(func(*PeerFigures) *float64) string {
	return func(get func(*PeerFigures) *float64) string {
		parts := make([]string, len(peers))
		for i, p := range peers {
			if p == nil || p.Error != "" {
				parts[i] = "-"
				continue
			}
			parts[i] = dash(get(p), format)
		}
		return strings.Join(parts, "/")
	}
}

func targetsCell(c CellResult) string {
	pass := 0
	var failed []string
	for _, t := range c.Targets {
		if t.Pass {
			pass++
		} else {
			failed = append(failed, t.ID)
		}
	}
	s := fmt.Sprintf("%d/%d", pass, len(c.Targets))
	if len(failed) > 0 {
		s += " FAIL " + strings.Join(failed, ",")
	}
	return s
}

func mptcpCell(p *PeerFigures) string {
	switch {
	case p == nil:
		return "-"
	case p.MPTCP == nil:
		return "unchecked"
	case p.MPTCP.Verified:
		s := fmt.Sprintf("ok %dsf", p.MPTCP.Subflows)
		if len(p.MPTCP.Share) == 2 {
			s += fmt.Sprintf(" %.0f/%.0f%%", p.MPTCP.Share[0]*100, p.MPTCP.Share[1]*100)
		}
		return s
	case p.MPTCP.Fallback:
		return "FALLBACK"
	}
	return fmt.Sprintf("NO %dsf", p.MPTCP.Subflows)
}

// WriteMatrixTable prints the human-readable tables and the summary.
func WriteMatrixTable(out io.Writer, r *MatrixResults) {
	fmt.Fprintf(out, "\nmptun bench matrix: %d cells, %.0f s of traffic per peer, on %s (%d CPUs), %s\n", len(r.Cells), r.Seconds,
		r.Host.Kernel, r.Host.CPUs, time.Duration(r.WallS*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(out, "emulator baseline RTT p50 %.3f ms p99 %.3f ms; goodput Mbit/s; b/m/t = best single path / kernel MPTCP / mptun\n",
		r.Baseline.RTTP50ms, r.Baseline.RTTP99ms)
	retr := func(p *PeerFigures) *float64 {
		if p.Retrans == nil {
			return nil
		}
		return ptr(float64(*p.Retrans))
	}
	var tcp, udp []CellResult
	for _, c := range r.Cells {
		if c.UDP() {
			udp = append(udp, c)
		} else {
			tcp = append(tcp, c)
		}
	}
	if len(tcp) > 0 {
		fmt.Fprintln(out, "\nTCP cells (idle RTT: fastest path alone / best path peer / mptun, ms; short transfers p50 ms)")
		tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
		fmt.Fprintln(tw, "cell\tbest\tmptcp\tmptun\tt/best\tt/mptcp\tbenefit t\tagg t\tretrans b/m/t\tmptcp check\tidle rtt f/b/t\t10KB b/m/t\t100KB b/m/t\ttargets")
		for _, c := range tcp {
			b, m, t := c.Peer("none"), c.Peer("mptcp"), c.Peer("mptun")
			g := triple("%.1f", b, m, t)
			three := triple("%.0f", b, m, t)
			agg := "-"
			if t != nil && t.Error == "" {
				agg = fmt.Sprintf("%.2f", t.Aggregation)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", suspect(c),
				triple("%.2f", b)(gp), triple("%.2f", m)(gp), triple("%.2f", t)(gp),
				dash(c.MptunVsBest, "%.2f"), dash(c.MptunVsMPTCP, "%.2f"), dash(c.BenefitMptun, "%.2f"), agg,
				three(retr), mptcpCell(m), fmt.Sprintf("%.1f/%s", c.FastPathRTTms, triple("%.1f", b, t)(idleRTT)),
				g(short10K), g(short100K), targetsCell(c))
		}
		tw.Flush()
	}
	if len(udp) > 0 {
		fmt.Fprintln(out, "\nUDP cells (CBR at 80 % of the rate sum; delivered fraction, out-of-order fraction, end-to-end loss vs path b's)")
		tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
		fmt.Fprintln(tw, "cell\tbest\tmptun\tt/best\tbenefit t\tdelivered b/t\tooo t\tloss t / path\tidle rtt f/b/t\t10KB b/t\t100KB b/t\ttargets")
		for _, c := range udp {
			b, t := c.Peer("none"), c.Peer("mptun")
			deliv := func(p *PeerFigures) *float64 { return p.Delivered }
			ooo := func(p *PeerFigures) *float64 { return p.OOO }
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", suspect(c),
				triple("%.2f", b)(gp), triple("%.2f", t)(gp), dash(c.MptunVsBest, "%.2f"), dash(c.BenefitMptun, "%.2f"),
				triple("%.4f", b, t)(deliv), triple("%.5f", t)(ooo),
				fmt.Sprintf("%s / %.4f", dash(c.UDPLossMptun, "%.4f"), c.PathLoss()),
				fmt.Sprintf("%.1f/%s", c.FastPathRTTms, triple("%.1f", b, t)(idleRTT)),
				triple("%.0f", b, t)(short10K), triple("%.0f", b, t)(short100K), targetsCell(c))
		}
		tw.Flush()
	}
	WriteMatrixSummary(out, r.Summary)
	for _, c := range r.Cells {
		if e := cellError(c); e != "" {
			fmt.Fprintf(out, "error in %s: %s\n", c.Name, e)
		}
		for _, p := range c.Peers {
			for _, ch := range p.Checks {
				fmt.Fprintf(out, "check failed in %s (%s): %s: %s\n", c.Name, p.Peer, ch.Name, ch.Detail)
			}
		}
	}
	if r.Interrupted {
		fmt.Fprintln(out, "INTERRUPTED: the cells above are the ones that finished")
	}
}

func gp(p *PeerFigures) *float64 { return &p.GoodputMbps }

// suspect marks a cell whose honesty checks failed.
func suspect(c CellResult) string {
	if c.FailedChecks > 0 {
		return c.Name + " *"
	}
	return c.Name
}

// WriteMatrixSummary prints pass counts per target.
func WriteMatrixSummary(out io.Writer, s Summary) {
	fmt.Fprintf(out, "\ntargets (issue 10 goodput, issue 17 latency), %d cells", s.Cells)
	if s.Failed > 0 {
		fmt.Fprintf(out, ", %d with a failed peer run", s.Failed)
	}
	fmt.Fprintln(out)
	for _, id := range TargetOrder {
		if s.Total[id] == 0 {
			continue
		}
		mark := "PASS"
		if s.Pass[id] < s.Total[id] {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "  %s %3d/%-3d %-18s %s", mark, s.Pass[id], s.Total[id], id, TargetTexts[id])
		if f := s.FailedCells[id]; len(f) > 0 {
			shown := f
			if len(shown) > 4 {
				shown = shown[:4]
			}
			fmt.Fprintf(out, "; missed in %s", strings.Join(shown, ", "))
			if len(f) > len(shown) {
				fmt.Fprintf(out, " and %d more", len(f)-len(shown))
			}
		}
		fmt.Fprintln(out)
	}
	if s.MedianVsMPTCPLossless != nil {
		mark := "PASS"
		if !*s.MedianPass {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "  %s median mptun / MPTCP over lossless TCP cells %.3f (target >= 1.0)\n", mark, *s.MedianVsMPTCPLossless)
	}
	if s.WorstVsBestValue != nil {
		fmt.Fprintf(out, "  median mptun / best path %.3f; worst %.3f in %s\n", *s.MedianVsBest, *s.WorstVsBestValue, s.WorstVsBest)
	}
	if len(s.SuspectCells) > 0 {
		fmt.Fprintf(out, "  * %d cells failed the lab's honesty checks (listed below; a busy machine shows as a late emulator timer): %s\n",
			len(s.SuspectCells), strings.Join(s.SuspectCells, ", "))
	}
	if len(s.MPTCPUnverified) > 0 {
		fmt.Fprintf(out, "  kernel MPTCP NOT verified (fallback or missing subflow) in: %s\n", strings.Join(s.MPTCPUnverified, ", "))
	}
}

// The figures of a peer the CSV and the table both show, as the
// accessors field, g and triple take.
func idleRTT(p *PeerFigures) *float64 {
	if p.IdleRTT == nil {
		return nil
	}
	return &p.IdleRTT.P50
}

func short10K(p *PeerFigures) *float64  { return p.Short10K }
func short100K(p *PeerFigures) *float64 { return p.Short100K }
