// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"testing"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/reorder"
)

// simCell is one pair of paths of the scenario matrix, in simulation:
// rates (bit/s), one-way delays and random loss (both directions).
type simCell struct {
	name   string
	rate   [2]float64
	delay  [2]time.Duration
	loss   [2]float64
	jitter [2]time.Duration
	// reorder lets a path's jitter reorder its own packets (radio links
	// with link-layer retransmission do); ge is bursty loss.
	reorder [2]bool
	ge      [2]*netsim.GilbertElliott
	// revRate, when set, is each path's rate from server to client, the
	// direction of the inner flow's ACKs (the flow runs client to server):
	// a download over an asymmetric line, seen from its narrow side.
	revRate [2]float64
	// ackEvery: the inner receiver's packets per ACK (0: 2).
	ackEvery int
}

// swapped is the cell with its paths exchanged, to run the second path
// alone.
func (c simCell) swapped() simCell {
	c.rate[0], c.rate[1] = c.rate[1], c.rate[0]
	c.delay[0], c.delay[1] = c.delay[1], c.delay[0]
	c.loss[0], c.loss[1] = c.loss[1], c.loss[0]
	c.jitter[0], c.jitter[1] = c.jitter[1], c.jitter[0]
	c.reorder[0], c.reorder[1] = c.reorder[1], c.reorder[0]
	c.ge[0], c.ge[1] = c.ge[1], c.ge[0]
	c.revRate[0], c.revRate[1] = c.revRate[1], c.revRate[0]
	return c
}

func (c simCell) links(n int) []netsim.LinkConfig {
	var ls []netsim.LinkConfig
	for i := 0; i < n; i++ {
		q := max(2*c.delay[i], 20*time.Millisecond)
		ls = append(ls, netsim.LinkConfig{Rate: c.rate[i], Delay: c.delay[i], Loss: c.loss[i],
			Jitter: c.jitter[i], Reorder: c.reorder[i], GE: c.ge[i], Queue: int(c.rate[i] / 8 * q.Seconds())})
	}
	return ls
}

// revLinks are the links from server to client when the cell's rates
// differ by direction (revRate), else nil.
func (c simCell) revLinks(n int) []netsim.LinkConfig {
	if c.revRate == [2]float64{} {
		return nil
	}
	ls := c.links(n)
	for i := range ls {
		ls[i].Rate = c.revRate[i]
		q := max(2*c.delay[i], 20*time.Millisecond)
		ls[i].Queue = int(c.revRate[i] / 8 * q.Seconds())
	}
	return ls
}

type cellResult struct {
	goodput             float64
	retrans, rtos, spur int
	rttP50              time.Duration
	// At the receiving end: packets delivered, duplicates dropped (a
	// copy that came second: a repair the original made needless, or the
	// other way round) and repair requests sent.
	delivered, dups, nacks uint64
}

// runInnerBulk runs one inner CUBIC flow from client to server for dur
// over the cell's first n paths, with the engine's defaults (bbr outer,
// flow scheduler, adaptive reorderer, repair, AQM) unless cfg says
// otherwise, and measures goodput after a warm-up of a quarter.
func runInnerBulk(t testing.TB, cell simCell, n int, cfg Config, dur time.Duration) cellResult {
	return runInner(t, cell, n, cfg, dur, false)
}

// runInner is runInnerBulk with inner CUBIC or (bbr) BBR.
func runInner(t testing.TB, cell simCell, n int, cfg Config, dur time.Duration, bbr bool) cellResult {
	if cfg.CCID == "" {
		cfg.CCID = "bbr"
	}
	cfg.Retransmit = true
	if cfg.AQM == nil {
		cfg.AQM = defaultAQM()
	}
	var flows []*innerTCP
	h, c := openInner(t, cell, n, cfg, simSeed, &flows)
	f := newInnerTCP(h, sideClient, 5201, 1400)
	f.ackEvery = cell.ackEvery
	if bbr {
		f.bbr = newInnerBBR(1400)
	}
	flows = append(flows, f)
	start := h.sim.Now()
	f.start(start.Add(dur))
	h.run(dur)
	from := start.Add(dur / 4)
	var r cellResult
	r.goodput = f.goodput(from, start.Add(dur))
	r.retrans, r.rtos, r.spur = f.retrans, f.rtos, f.spurious
	rs := h.serverConn().Stats().Reorder
	r.delivered, r.dups, r.nacks = rs.Delivered, rs.Duplicates, rs.NACKs
	t.Logf("%s %d paths: inner out-of-order arrivals %d; receiver gaps skipped %d, repaired %d; sender repaired %d", cell.name, n, f.oooArrivals, rs.GapsSkipped, rs.Repaired, c.Stats().Repaired)
	if len(f.rttSamples) > 0 {
		s := append([]time.Duration(nil), f.rttSamples...)
		r.rttP50 = quantileDur(s, 0.5)
	}
	return r
}

// openInner opens a tunnel over the cell's first n paths, cfg at both
// ends, and hands what it delivers to the inner flows *flows holds.
func openInner(t testing.TB, cell simCell, n int, cfg Config, seed int64, flows *[]*innerTCP) (*harness, *Conn) {
	h := newHarness(t, harnessConfig{seed: seed, links: cell.links(n), down: cell.revLinks(n), cli: cfg, srv: cfg})
	h.onDeliver = func(side int, c *Conn, b []byte) { routeInner(*flows, side, b) }
	c := h.dial(n)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n }) {
		t.Fatalf("%s: not open\n%s", cell.name, h.dumpEvents())
	}
	return h, c
}

func quantileDur(s []time.Duration, q float64) time.Duration {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

var simCells = []simCell{
	{name: "20+10 8/35ms", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}},
	{name: "20+10 8/35ms 2% loss", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}, loss: [2]float64{0, 0.02}},
	{name: "20+10 8/35ms 5% loss", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}, loss: [2]float64{0, 0.05}},
	{name: "20+10 8/120ms", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 120 * time.Millisecond}},
	{name: "20+10 8/120ms 2% loss", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 120 * time.Millisecond}, loss: [2]float64{0, 0.02}},
	{name: "10+10 5/5ms", rate: [2]float64{10e6, 10e6}, delay: [2]time.Duration{5 * time.Millisecond, 5 * time.Millisecond}},
	{name: "20+2 10/300ms", rate: [2]float64{20e6, 2e6}, delay: [2]time.Duration{10 * time.Millisecond, 300 * time.Millisecond}},
	{name: "20+10 8/35ms fast 1% loss", rate: [2]float64{20e6, 10e6}, delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}, loss: [2]float64{0.01, 0}},
}

// reportOnly skips a simulation report, which prints figures and asserts
// nothing, unless its output is asked for (go test -v) on a full run: in
// make test it would only take minutes of CI. The assertions on the same
// simulations are in TestSimDoNoHarm and TestSimDoNoHarmRange.
func reportOnly(t *testing.T) {
	t.Helper()
	if testing.Short() || !testing.Verbose() {
		t.Skip("simulation report, asserts nothing: run with -v and without -short to print it")
	}
}

// TestSimMatrixReport prints inner CUBIC goodput through the tunnel on
// both paths and on the fast path alone, per cell (go test -run
// SimMatrixReport -v). It asserts nothing; TestSimDoNoHarm does.
func TestSimMatrixReport(t *testing.T) {
	reportOnly(t)
	const dur = 20 * time.Second
	fmt.Printf("%-28s %-5s %8s %8s %6s %6s %7s %5s %5s %8s\n", "cell", "inner", "1 path", "2 paths", "ratio", "/sum", "retrans", "rto", "spur", "rtt p50")
	for _, bbr := range []bool{false, true} {
		for _, cell := range simCells {
			one := runInner(t, cell, 1, Config{}, dur, bbr)
			two := runInner(t, cell, 2, Config{}, dur, bbr)
			sum := cell.rate[0] + cell.rate[1]
			cc := "cubic"
			if bbr {
				cc = "bbr"
			}
			fmt.Printf("%-28s %-5s %8.2f %8.2f %6.2f %6.2f %7d %5d %5d %8v\n", cell.name, cc, one.goodput/1e6, two.goodput/1e6,
				two.goodput/one.goodput, two.goodput/sum, two.retrans, two.rtos, two.spur, two.rttP50.Round(time.Millisecond))
		}
	}
	_ = mono.Never
}

func defaultAQM() *aqm.Config { return &aqm.Config{Target: defaults.AQMTarget} }

// TestSimDoNoHarm checks the robust-aggregation and latency promises in
// simulation, with one inner CUBIC or BBR flow (innerTCP) and the defaults: on
// every cell two paths give at least 0.95 of what the fast path alone
// gives, and where the second path is worth it (lossless or lossy at 2 %,
// moderate delay difference) clearly more; a ping and a short transfer
// never take longer than over the fast path alone.
func TestSimDoNoHarm(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	const dur = 16 * time.Second
	for i, cell := range simCells {
		one := runInnerBulk(t, cell, 1, Config{}, dur)
		two := runInnerBulk(t, cell, 2, Config{}, dur)
		ratio := two.goodput / one.goodput
		t.Logf("%-28s one path %.2f, two %.2f Mbit/s (%.2f)", cell.name, one.goodput/1e6, two.goodput/1e6, ratio)
		if ratio < 0.95 {
			t.Errorf("%s: two paths give %.2f of the fast path alone", cell.name, ratio)
		}
		if (i <= 2 || i == 5) && ratio < 1.1 {
			t.Errorf("%s: two paths give only %.2f of one: the second path is not used", cell.name, ratio)
		}
	}
	// Inner BBR: never below the fast path alone either.
	for _, cell := range simCells {
		one := runInner(t, cell, 1, Config{}, dur, true)
		two := runInner(t, cell, 2, Config{}, dur, true)
		t.Logf("%-28s BBR one path %.2f, two %.2f Mbit/s (%.2f)", cell.name, one.goodput/1e6, two.goodput/1e6, two.goodput/one.goodput)
		if two.goodput < 0.95*one.goodput {
			t.Errorf("%s: inner BBR gets %.2f of the fast path alone over two paths", cell.name, two.goodput/one.goodput)
		}
	}
	for _, cell := range []simCell{simCells[0], simCells[3]} {
		one := runLatency(t, cell, 1, false, 4*time.Second)
		two := runLatency(t, cell, 2, false, 4*time.Second)
		if p50(two.ping) > p50(one.ping)+time.Millisecond {
			t.Errorf("%s: idle ping %v over two paths, %v over one", cell.name, p50(two.ping), p50(one.ping))
		}
		if p50(two.short10) > p50(one.short10)*11/10 || p50(two.short100) > p50(one.short100)*11/10 {
			t.Errorf("%s: 10/100 KB take %v/%v over two paths, %v/%v over one", cell.name,
				p50(two.short10), p50(two.short100), p50(one.short10), p50(one.short100))
		}
	}
}

// TestSimAblationReport prints what each mechanism of the default design
// contributes, one switched off at a time, in simulation with inner CUBIC
// (go test -run SimAblationReport -v): goodput over two paths, and a
// ping's round trip and 100 KB transfers beside a bulk download.
func TestSimAblationReport(t *testing.T) {
	reportOnly(t)
	noRandomLoss := ccid.DefaultBBRParams()
	noRandomLoss.RandomLossMax = 0
	variants := []struct {
		name string
		cfg  Config
	}{
		{"defaults (flow, adaptive, NACK)", Config{}},
		{"previous defaults (rr, equalize, 100 ms)", Config{Scheduler: "rr", Reorderer: "equalize", Reorder: reorder.Config{MaxHold: 100 * time.Millisecond}}},
		{"rr instead of flow", Config{Scheduler: "rr"}},
		{"no NACK (Ack Vector repair only)", Config{NoNACK: true}},
		{"BBR cuts on random loss", Config{CC: ccid.Config{BBR: &noRandomLoss}}},
		{"fixed 100 ms hold", Config{Reorder: reorder.Config{MaxHold: 100 * time.Millisecond}}},
	}
	cells := []simCell{simCells[0], simCells[1], simCells[2], simCells[3], simCells[7]}
	fmt.Printf("%-42s", "variant (Mbit/s; latency beside bulk)")
	for _, c := range cells {
		fmt.Printf(" %14s", c.name[:min(len(c.name), 14)])
	}
	fmt.Printf(" %9s %9s\n", "ping p50", "100KB p50")
	for _, v := range variants {
		row := fmt.Sprintf("%-42s", v.name)
		for _, cell := range cells {
			r := runInnerBulk(t, cell, 2, v.cfg, 16*time.Second)
			row += fmt.Sprintf(" %14.2f", r.goodput/1e6)
		}
		l := runLatencyWith(t, simCells[0], 2, true, 8*time.Second, v.cfg)
		fmt.Printf("%s %9v %9v\n", row, p50(l.ping).Round(100*time.Microsecond), p50(l.short100).Round(100*time.Microsecond))
	}
}

// simSeed seeds the inner-flow simulations.
var simSeed int64 = 3

// TestDownloadOverANarrowUplink: ADSL 16/1 Mbit/s (10 ms) beside LTE
// 30/10 Mbit/s (35 ms), one inner CUBIC download whose receiver acks
// every third packet (Linux behind GRO). The ACKs, a flow of their own on
// the way up, cost the tunnel's header each (more than twice their size)
// and about fill the ADSL uplink; the ADSL subflow's own acks queue behind
// them (its round trip doubles), and the download can get little more
// than the LTE path alone. The ADSL uplink's queue shows in its one-way
// delay (owd.go), not only in the RTT, which holds the download's queue
// on the downlink too: in the simulator the ACK flow is tried on LTE's
// uplink after about 3.5 s and stays there, and the download gets
// 37.7 Mbit/s against 27.5 over LTE alone (34 Mbit/s when the flow left
// only by overflowing, after about 9 s). The lab's runs of the same lines
// vary more (configs/lab/range/adsl-lte-down.toml, BENCHMARKS.md).
func TestDownloadOverANarrowUplink(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	// The inner flow runs client to server here, so the "down" rates of
	// the access lines are rate and their uplinks revRate.
	cell := simCell{name: "ADSL 16/1 + LTE 30/10", rate: [2]float64{16e6, 30e6}, revRate: [2]float64{1e6, 10e6}, ackEvery: 3,
		delay: [2]time.Duration{10 * time.Millisecond, 35 * time.Millisecond}}
	const dur = 16 * time.Second
	lte := runInnerBulk(t, cell.swapped(), 1, Config{}, dur)
	both := runInnerBulk(t, cell, 2, Config{}, dur)
	t.Logf("LTE alone %.2f Mbit/s, both paths %.2f", lte.goodput/1e6, both.goodput/1e6)
	if both.goodput < 1.3*lte.goodput {
		t.Errorf("both paths %.2f Mbit/s, LTE alone %.2f: the ADSL downlink adds less than 30 %%", both.goodput/1e6, lte.goodput/1e6)
	}
}

// TestUploadOverANarrowUplink: an upload over ADSL 16/1 Mbit/s (10 ms)
// beside LTE 30/10 Mbit/s (35 ms), buffers of 50 ms (four packets on the
// ADSL uplink), one inner CUBIC flow. The flow is pinned to LTE and takes
// the ADSL uplink as overflow; its outer BBR loses about 4 % there to the
// small buffer and keeps a queue of up to a round trip. Each loss holds
// the flow at the receiver until the repair arrives. Repairs went to the
// path with the least max(base one-way delay, RTT/2), and half the RTT
// counts only half of a full uplink's queue: by that formula the ADSL
// line, behind its own queue. Repairs, repair requests and the "should
// have arrived" deadline now use the one-way delay with the queue on the
// way out (oneWay): 0.942 of LTE alone before, 0.978 after (mean of four
// start times). The ADSL subflow's losses came from its BBR probing for
// bandwidth every few rounds on a BDP of three packets; with at least
// ProbeMinRounds rounds between probes once a loss has shown the buffer:
// 1.068. The target is the issue's: 0.95 of the better path.
func TestUploadOverANarrowUplink(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of many seconds; run without -short")
	}
	link := func(rate float64, d time.Duration) netsim.LinkConfig {
		q := max(2*d, 50*time.Millisecond)
		return netsim.LinkConfig{Rate: rate, Delay: d, Queue: int(rate / 8 * q.Seconds())}
	}
	adslUp, adslDown := link(1e6, 10*time.Millisecond), link(16e6, 10*time.Millisecond)
	lteUp, lteDown := link(10e6, 35*time.Millisecond), link(30e6, 35*time.Millisecond)
	const dur, warmup = 16 * time.Second, 4 * time.Second
	run := func(up, down []netsim.LinkConfig) float64 {
		var sum float64
		for k := 1; k <= 4; k++ {
			cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
			h := newHarness(t, harnessConfig{seed: simSeed, links: up, down: down, cli: cfg, srv: cfg})
			var flows []*innerTCP
			h.onDeliver = func(side int, c *Conn, b []byte) { routeInner(flows, side, b) }
			c := h.dial(len(up))
			if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == len(up) }) {
				t.Fatalf("%d paths: not open\n%s", len(up), h.dumpEvents())
			}
			// The start time varies the trajectory of this lossless cell.
			h.run(time.Duration(k) * 137 * time.Millisecond)
			f := newInnerTCP(h, sideClient, 5201, 1352)
			flows = append(flows, f)
			start := h.sim.Now()
			f.start(start.Add(dur))
			h.run(dur)
			sum += f.goodput(start.Add(warmup), start.Add(dur)) / 4
		}
		return sum
	}
	lte := run([]netsim.LinkConfig{lteUp}, []netsim.LinkConfig{lteDown})
	both := run([]netsim.LinkConfig{adslUp, lteUp}, []netsim.LinkConfig{adslDown, lteDown})
	t.Logf("LTE alone %.2f Mbit/s, with the ADSL uplink %.2f (%.3f)", lte/1e6, both/1e6, both/lte)
	if both < 0.95*lte {
		t.Errorf("with the ADSL uplink %.2f Mbit/s, LTE alone %.2f: below 0.95 of the better path", both/1e6, lte/1e6)
	}
}

// TestSimPathThatReordersItselfIsNotRepaired: a radio path whose jitter
// reorders its own packets must not be taken for a lossy one.
//   - 5 ms of jitter on a 10 Mbit/s path (a few packets' spacing): each
//     packet that came behind a later one looked lost to the receiver,
//     which asked for its repair at once; the repair crossed the fast path
//     and the original arrived a few milliseconds later as a duplicate:
//     2,995 duplicates of 24,878 packets delivered, 23.5 against 27.4
//     Mbit/s without the jitter.
//   - 15 ms on a 40 Mbit/s LTE path (tens of packets): the sender repaired
//     what its Ack Vectors showed missing behind three later sequence
//     numbers: 24,529 duplicates, 38 Mbit/s against 62.
func TestSimPathThatReordersItselfIsNotRepaired(t *testing.T) {
	dsl := simCell{name: "20+10 8/35ms", rate: [2]float64{20e6, 10e6},
		delay: [2]time.Duration{8 * time.Millisecond, 35 * time.Millisecond}}
	lte := simCell{name: "Wi-Fi 30/4ms + LTE 40/25ms", rate: [2]float64{30e6, 40e6},
		delay: [2]time.Duration{4 * time.Millisecond, 25 * time.Millisecond}}
	for _, c := range []struct {
		steady simCell
		jitter time.Duration
	}{{dsl, 5 * time.Millisecond}, {lte, 15 * time.Millisecond}} {
		jittery := c.steady
		jittery.name += fmt.Sprintf(", %v jitter on b", c.jitter)
		jittery.jitter[1], jittery.reorder[1] = c.jitter, true
		const dur = 12 * time.Second
		base := runInnerBulk(t, c.steady, 2, Config{}, dur)
		r := runInnerBulk(t, jittery, 2, Config{}, dur)
		t.Logf("%s: goodput %.2f Mbit/s (%.2f without jitter); receiver: %d delivered, %d duplicates, %d NACKs",
			jittery.name, r.goodput/1e6, base.goodput/1e6, r.delivered, r.dups, r.nacks)
		if r.dups*100 > r.delivered {
			t.Errorf("%s: %d duplicates of %d packets delivered: reordering on the path taken for loss", jittery.name, r.dups, r.delivered)
		}
		if r.goodput < 0.93*base.goodput {
			t.Errorf("%s: goodput %.2f Mbit/s with the jitter, %.2f without", jittery.name, r.goodput/1e6, base.goodput/1e6)
		}
	}
}
