// SPDX-License-Identifier: MIT

package bench

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
)

// Cell is one emulated situation of the scenario matrix: two paths a and
// b, every impairment on b, one traffic type in one direction.
type Cell struct {
	Name  string `json:"name"`
	Block string `json:"block"` // which part of the designed set it belongs to
	// Rates in Mbit/s and one-way delays in ms, the same in both
	// directions unless UpA/UpB say otherwise.
	RateA float64 `json:"rate_a_mbps"`
	RateB float64 `json:"rate_b_mbps"`
	// UpA and UpB, when set, are the paths' rates from client to server
	// (an access line's uplink); RateA and RateB are then the downlinks.
	UpA    float64 `json:"up_a_mbps,omitempty"`
	UpB    float64 `json:"up_b_mbps,omitempty"`
	DelayA float64 `json:"owd_a_ms"`
	DelayB float64 `json:"owd_b_ms"`
	// LossB is Bernoulli loss on path b (both directions).
	LossB float64 `json:"loss_b"`
	// Bursty is Gilbert–Elliott loss on path b instead.
	Bursty bool `json:"bursty"`
	// Jitter is 5 ms of uniform jitter on path b that reorders frames.
	Jitter    bool   `json:"jitter"`
	Traffic   string `json:"traffic"`   // cubic, bbr (inner TCP bulk) or udp (CBR at 80 % of the rate sum)
	Direction string `json:"direction"` // down (server to client) or up
}

// The designed set's constants (README and results.json say the same).
const (
	fastRate    = 20.0  // Mbit/s of path a (b in the inverted cells)
	udpLoad     = 0.8   // CBR offered load, fraction of the rate sum
	udpSize     = 1200  // CBR payload bytes
	jitterMs    = 5     // path b jitter in the jitter cells
	jitterReord = 0.001 // and the share of frames held longer; any > 0 lets jitter reorder
	// Gilbert–Elliott on b: good→bad 0.5 %, bad→good 25 % (mean burst 4
	// frames), every frame lost while bad: mean loss 1.96 %.
	gePGoodBad = 0.005
	gePBadGood = 0.25
)

// GEMeanLoss is the stationary loss rate of the bursty cells.
func GEMeanLoss() float64 { return gePGoodBad / (gePGoodBad + gePBadGood) }

// PathLoss is the mean loss rate of path b.
func (c Cell) PathLoss() float64 {
	if c.Bursty {
		return GEMeanLoss()
	}
	return c.LossB
}

// Lossless reports whether no path drops frames at random.
func (c Cell) Lossless() bool { return c.LossB == 0 && !c.Bursty }

// UDP reports whether the cell's traffic is the CBR flow.
func (c Cell) UDP() bool { return c.Traffic == "udp" }

// Peers are the peers compared in the cell: kernel MPTCP has no answer
// for UDP.
func (c Cell) Peers() []string {
	if c.UDP() {
		return []string{"none", "mptun"}
	}
	return []string{"none", "mptcp", "mptun"}
}

// Asymmetric reports whether the paths' rates differ by direction.
func (c Cell) Asymmetric() bool { return c.UpA > 0 || c.UpB > 0 }

// BulkRates are the paths' rates in the direction of the cell's traffic.
func (c Cell) BulkRates() (a, b float64) {
	if c.Asymmetric() && c.Direction == "up" {
		return c.UpA, c.UpB
	}
	return c.RateA, c.RateB
}

// CapacitySum is the sum of the paths' rates in the traffic's direction.
func (c Cell) CapacitySum() float64 {
	a, b := c.BulkRates()
	return a + b
}

// BestPath is the path the single-path peer uses: the one that carries
// the cell's traffic faster alone; a on a tie (it has the shorter delay).
// Inner CUBIC over a lossy path b gets what its loss rate allows, not the
// path's rate: over 20 Mbit/s at 35 ms with 2 % loss about 1 Mbit/s, so
// beside a lossless 10 Mbit/s path a is the best single path (the matrix
// compared mptun with path b alone there and reported 21 ×).
func (c Cell) BestPath() string {
	a, b := c.BulkRates()
	if c.Traffic == "cubic" && c.PathLoss() > 0 {
		b = min(b, mathisMbps(2*c.DelayB, c.PathLoss()))
	}
	if b > a {
		return "b"
	}
	return "a"
}

// mathisMbps is the steady rate, in Mbit/s, of a loss-based TCP flow of
// full segments over a round trip of rttMs with random loss p (Mathis et
// al. 1997: MSS / RTT × sqrt(3/2) / sqrt(p)).
func mathisMbps(rttMs, p float64) float64 {
	const mss = 1448 * 8 // bits
	return mss / (rttMs / 1000) * math.Sqrt(1.5/p) / 1e6
}

// ImpairmentLabel is the column of the heatmaps: l0, l0.5, l2, l5, ge, jitter.
func (c Cell) ImpairmentLabel() string {
	switch {
	case c.Bursty:
		return "ge"
	case c.Jitter:
		return "jitter"
	}
	return "l" + strconv.FormatFloat(c.LossB*100, 'f', -1, 64)
}

// Group is the cell's name without the impairment: a heatmap row.
func (c Cell) Group() string {
	return fmt.Sprintf("%s-%s+%s-%s-%s", c.rateLabel(), ms(c.DelayA), ms(c.DelayB), c.Traffic, c.Direction)
}

// rateLabel names the rates: r and the ratio a:b, or for asymmetric
// lines asym and each path's down x up rates (asym16x1+30x10).
func (c Cell) rateLabel() string {
	if c.Asymmetric() {
		return fmt.Sprintf("asym%sx%s+%sx%s", ms(c.RateA), ms(c.UpA), ms(c.RateB), ms(c.UpB))
	}
	return "r" + ratioLabel(c.RateA, c.RateB)
}

func ratioLabel(a, b float64) string { return strconv.FormatFloat(a/b, 'f', -1, 64) }

func ms(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (c Cell) name() string {
	return fmt.Sprintf("%s-%s+%s-%s-%s-%s", c.rateLabel(), ms(c.DelayA), ms(c.DelayB), c.ImpairmentLabel(), c.Traffic, c.Direction)
}

// Describe is one line for humans.
func (c Cell) Describe() string {
	imp := "no loss"
	switch {
	case c.Bursty:
		imp = fmt.Sprintf("Gilbert-Elliott loss on b (mean %.2f %%, bursts of 4)", GEMeanLoss()*100)
	case c.Jitter:
		imp = fmt.Sprintf("%d ms uniform jitter on b that reorders (and %g %% of frames held half the delay longer)", jitterMs, jitterReord*100)
	case c.LossB > 0:
		imp = fmt.Sprintf("%g %% random loss on b", c.LossB*100)
	}
	t := "inner " + c.Traffic + " bulk"
	if c.UDP() {
		t = fmt.Sprintf("UDP CBR at %.0f %% of the rate sum", udpLoad*100)
	}
	if c.Asymmetric() {
		return fmt.Sprintf("a %g/%g Mbit/s (down/up) %g ms + b %g/%g Mbit/s %g ms one way, %s, %s, %s",
			c.RateA, c.UpA, c.DelayA, c.RateB, c.UpB, c.DelayB, imp, t, c.Direction)
	}
	return fmt.Sprintf("a %g Mbit/s %g ms + b %g Mbit/s %g ms one way, %s, %s, %s", c.RateA, c.DelayA, c.RateB, c.DelayB, imp, t, c.Direction)
}

// QueueMs is the drop-tail buffer of a path with one-way delay d, in ms
// at the path's rate: max(path RTT, 20 ms), one BDP; on asymmetric
// access lines at least 50 ms (an ADSL modem's uplink buffer holds
// seconds of traffic; 20 ms of a 1 Mbit/s uplink would be one packet).
func (c Cell) QueueMs(d float64) float64 {
	if c.Asymmetric() {
		return max(2*d, 50)
	}
	return max(2*d, 20)
}

// delays are the one-way delay pairs of the set: equal short paths,
// DSL+LTE-like, a long second path, a GEO-like second path.
var delays = [][2]float64{{5, 5}, {8, 35}, {10, 120}, {8, 300}}

func cell(block string, ratio float64, d [2]float64, loss float64, traffic, dir string) Cell {
	c := Cell{Block: block, RateA: fastRate, RateB: fastRate / ratio, DelayA: d[0], DelayB: d[1], LossB: loss, Traffic: traffic, Direction: dir}
	if ratio < 1 { // inverted: the short path is the slow one
		c.RateA, c.RateB = fastRate*ratio, fastRate
	}
	return c
}

// FullCells is the designed set (not the full product of the axes):
//
//	core:    2:1, every delay pair × loss 0, 0.5, 2, 5 %, inner cubic, down   16
//	ratio:   1:1, 10:1, inverted 1:2 × 8+35, 10+120 × loss 0, 2 %             12
//	bbr:     2:1, every delay pair × loss 0, 2 %, inner bbr                     8
//	         inverted 1:2 (a small short path beside a big long one, DSL
//	         beside LTE) × 8+35, 10+120, lossless, inner bbr                  2
//	upload:  2:1, 8+35, 10+120 × loss 0, 2 %, inner cubic, up                   4
//	udp:     2:1, every delay pair × loss 0, 2 %; 8+35 × 0.5, 5 %; 8+35 up      11
//	bursty:  2:1, 8+35, Gilbert–Elliott on b: cubic, bbr, udp                   3
//	jitter:  2:1, 8+35, reordering jitter on b: cubic, bbr, udp                 3
//	access:  asymmetric lines, ADSL 16/1 Mbit/s 10 ms beside LTE 30/10
//	         Mbit/s 35 ms: cubic, bbr × down, up                              4
func FullCells() []Cell {
	var cs []Cell
	for _, d := range delays {
		for _, l := range []float64{0, 0.005, 0.02, 0.05} {
			cs = append(cs, cell("core", 2, d, l, "cubic", "down"))
		}
	}
	for _, r := range []float64{1, 10, 0.5} {
		for _, d := range delays[1:3] {
			for _, l := range []float64{0, 0.02} {
				cs = append(cs, cell("ratio", r, d, l, "cubic", "down"))
			}
		}
	}
	for _, d := range delays {
		for _, l := range []float64{0, 0.02} {
			cs = append(cs, cell("bbr", 2, d, l, "bbr", "down"))
		}
	}
	for _, d := range delays[1:3] {
		cs = append(cs, cell("bbr", 0.5, d, 0, "bbr", "down"))
	}
	for _, d := range delays[1:3] {
		for _, l := range []float64{0, 0.02} {
			cs = append(cs, cell("upload", 2, d, l, "cubic", "up"))
		}
	}
	for _, d := range delays {
		for _, l := range []float64{0, 0.02} {
			cs = append(cs, cell("udp", 2, d, l, "udp", "down"))
		}
	}
	for _, l := range []float64{0.005, 0.05} {
		cs = append(cs, cell("udp", 2, delays[1], l, "udp", "down"))
	}
	cs = append(cs, cell("udp", 2, delays[1], 0, "udp", "up"))
	for _, t := range []string{"cubic", "bbr", "udp"} {
		c := cell("bursty", 2, delays[1], 0, t, "down")
		c.Bursty = true
		cs = append(cs, c)
	}
	for _, t := range []string{"cubic", "bbr", "udp"} {
		c := cell("jitter", 2, delays[1], 0, t, "down")
		c.Jitter = true
		cs = append(cs, c)
	}
	// A download's ACKs alone about fill the ADSL uplink; an upload over
	// it is a tenth of LTE's.
	for _, t := range []string{"cubic", "bbr"} {
		for _, dir := range []string{"down", "up"} {
			cs = append(cs, Cell{Block: "access", RateA: 16, UpA: 1, RateB: 30, UpB: 10, DelayA: 10, DelayB: 35, Traffic: t, Direction: dir})
		}
	}
	for i := range cs {
		cs[i].Name = cs[i].name()
	}
	return cs
}

// QuickNames is the representative subset of --quick: the issue's
// DSL+LTE-like paths lossless and lossy for each traffic type and
// direction, the long second path, a 10:1 rate ratio and the bursty cell.
var QuickNames = []string{
	"r2-8+35-l0-cubic-down",
	"r2-8+35-l2-cubic-down",
	"r2-10+120-l0-cubic-down",
	"r10-8+35-l0-cubic-down",
	"r2-8+35-l0-bbr-down",
	"r2-8+35-l0-cubic-up",
	"r2-8+35-ge-cubic-down",
	"r2-8+35-l0-udp-down",
	"r2-8+35-l2-udp-down",
}

// SelectCells returns the cells of the set whose names match any of the
// comma-separated glob patterns (all if patterns is empty); quick starts
// from the quick subset. An unknown pattern is an error.
func SelectCells(patterns string, quick bool) ([]Cell, error) {
	all := FullCells()
	if quick {
		var q []Cell
		for _, name := range QuickNames {
			for _, c := range all {
				if c.Name == name {
					q = append(q, c)
				}
			}
		}
		all = q
	}
	if strings.TrimSpace(patterns) == "" {
		return all, nil
	}
	var out []Cell
	taken := map[string]bool{}
	for _, p := range strings.Split(patterns, ",") {
		p = strings.TrimSpace(p)
		n := 0
		for _, c := range all {
			ok, err := path.Match(p, c.Name)
			if err != nil {
				return nil, fmt.Errorf("--cells %q: %w", p, err)
			}
			if ok {
				n++
				if !taken[c.Name] {
					taken[c.Name] = true
					out = append(out, c)
				}
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("--cells %q matches no cell (see `mptun bench matrix --list`)", p)
		}
	}
	return out, nil
}

// Scenario returns the lab scenario of the cell, run for d.
func (c Cell) Scenario(d time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# generated by mptun bench matrix\nname = %q\ndescription = %q\nduration = \"%s\"\nseed = 1\n",
		"matrix-"+c.Name, c.Describe(), d)
	fmt.Fprintf(&b, "peers = [%s]\nbest_path = %q\n", quoteList(c.Peers()), c.BestPath())
	// Buffers: QueueMs at the path's rate.
	for _, p := range []struct {
		name            string
		rate, up, delay float64
	}{{"a", c.RateA, c.UpA, c.DelayA}, {"b", c.RateB, c.UpB, c.DelayB}} {
		rate := fmt.Sprintf("rate = \"%gmbit\"", p.rate)
		if c.Asymmetric() {
			rate = fmt.Sprintf("down_rate = \"%gmbit\"\nup_rate = \"%gmbit\"", p.rate, p.up)
		}
		fmt.Fprintf(&b, "\n[[path]]\nname = %q\n%s\nup_delay = \"%gms\"\ndown_delay = \"%gms\"\nqueue_time = \"%gms\"\n",
			p.name, rate, p.delay, p.delay, c.QueueMs(p.delay))
		if p.name != "b" {
			continue
		}
		if c.LossB > 0 {
			fmt.Fprintf(&b, "loss = %g\n", c.LossB)
		}
		if c.Jitter {
			fmt.Fprintf(&b, "jitter = \"%dms\"\nreorder = %g\n", jitterMs, jitterReord)
		}
		if c.Bursty {
			fmt.Fprintf(&b, "[path.gilbert_elliott]\np_good_bad = %g\np_bad_good = %g\nloss_good = 0.0\nloss_bad = 1.0\n", gePGoodBad, gePBadGood)
		}
	}
	cc := c.Traffic
	if c.UDP() {
		cc = "cubic"
		fmt.Fprintf(&b, "\n[traffic.udp]\nload = %g\nsize = %d\ndirection = %q\n", udpLoad, udpSize, c.Direction)
	} else {
		fmt.Fprintf(&b, "\n[traffic.bulk]\ncc = %q\ndirection = %q\n", c.Traffic, c.Direction)
	}
	// Idle RTT and short transfers before the bulk or UDP flow starts.
	fmt.Fprintf(&b, "\n[traffic.idle]\npings = 20\nping_interval = \"20ms\"\ntransfers = [\"10KB\", \"100KB\"]\nrepeat = %d\ncc = %q\n", shortRepeat, cc)
	return b.String()
}

// shortRepeat is how many times each short transfer runs per peer.
const shortRepeat = 5

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// EstimateCell guesses a cell's wall time: per peer the timed traffic,
// the idle phase (pings and short transfers, a few round trips of the
// slower path each) and set-up; per cell the emulator baseline.
func EstimateCell(c Cell, d time.Duration) time.Duration {
	slowRTT := time.Duration(2*max(c.DelayA, c.DelayB)) * time.Millisecond
	idle := 3*time.Second + time.Duration(shortRepeat*6)*slowRTT/2
	return time.Duration(len(c.Peers()))*(d+idle+3*time.Second) + 2*time.Second
}
