// SPDX-License-Identifier: MIT

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// ScaleOptions parameterise `mptun bench scale`.
type ScaleOptions struct {
	Clients int // CPEs (default 1000)
	Active  int // CPEs running a bulk flow in the throughput phase (default 2)
	// Rate paces the dials (CPEs per second); 0 dials them all at once,
	// like CPEs coming back after a concentrator restart.
	Rate int
	// ConnectTimeout bounds the connect phase (default 60 s).
	ConnectTimeout time.Duration
	// Idle is the idle phase (keepalives only) over which the
	// concentrator's CPU is measured (default 10 s; at least 6 s, so that
	// connections release their traffic state first).
	Idle time.Duration
	// Seconds is the throughput phase's length (default 10).
	Seconds int
	// Soak, when set, idles that long and samples memory every 10 s.
	Soak time.Duration
	// GOMAXPROCS lists the concentrator settings to run one after another
	// (0: the machine's); each gets a fresh concentrator and CPEs.
	GOMAXPROCS []int
	Log        io.Writer
}

// ScaleResult is what `mptun bench scale --json` prints.
type ScaleResult struct {
	Clients int        `json:"clients"`
	Active  int        `json:"active"`
	Runs    []ScaleRun `json:"runs"`
	// ThroughputRatio is the last run's aggregate over the first's (for
	// --gomaxprocs 1,2: the scaling with cores).
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
	// LoadAvg is the machine's load average when the benchmark started
	// (other work on the machine skews every figure).
	LoadAvg string `json:"load_avg"`
}

// ScaleRun is one concentrator setting.
type ScaleRun struct {
	GOMAXPROCS int `json:"gomaxprocs"`
	// Connect phase.
	Connected        int            `json:"connected"`
	Failed           int            `json:"failed"`
	Failures         map[string]int `json:"failures,omitempty"`
	ConnectP50Ms     float64        `json:"connect_p50_ms"`
	ConnectP99Ms     float64        `json:"connect_p99_ms"`
	ConnectMaxMs     float64        `json:"connect_max_ms"`
	ConnectAllS      float64        `json:"connect_all_s"`      // first dial to last open
	ServerConns      int            `json:"server_connections"` // open, as `mptun status` counts them
	ListedConns      int            `json:"listed_connections"` // open, in `mptun status`'s list at the end
	CookieReplies    uint64         `json:"cookie_replies"`
	ServerRateLimits uint64         `json:"server_rate_limited"`
	// Memory of the concentrator: before any CPE, after the idle phase.
	RSSBaseBytes      uint64  `json:"rss_base_bytes"`
	RSSBytes          uint64  `json:"rss_bytes"`
	RSSPerConnBytes   float64 `json:"rss_per_conn_bytes"`
	HeapBaseBytes     uint64  `json:"heap_live_base_bytes"`
	HeapBytes         uint64  `json:"heap_live_bytes"`
	HeapPerConnBytes  float64 `json:"heap_per_conn_bytes"`
	IdleSeconds       float64 `json:"idle_s"`
	IdleCPUSeconds    float64 `json:"idle_cpu_s"`
	IdleCPUPerConnUs  float64 `json:"idle_cpu_us_per_conn_per_s"` // µs of CPU per connection per second
	ClosedDuringIdle  int     `json:"closed_during_idle"`
	ThroughputGbps    float64 `json:"throughput_gbps"` // inner bytes the concentrator wrote to its TUN
	ThroughputPPS     float64 `json:"throughput_pps"`
	ThroughputCPUUtil float64 `json:"throughput_cpu_cores"` // concentrator CPU seconds per second
	GeneratorCPUUtil  float64 `json:"cpe_cpu_cores"`        // the in-process CPEs' (the bench's) CPU seconds per second
	SendDrops         uint64  `json:"cpe_send_drops"`
	// Soak, when asked for.
	Soak *SoakResult `json:"soak,omitempty"`
}

// SoakResult samples the concentrator's memory while every CPE idles.
type SoakResult struct {
	Seconds float64     `json:"seconds"`
	Samples []MemSample `json:"samples"`
	Flat    bool        `json:"flat"`
	Growth  SoakGrowth  `json:"growth"`
	Closed  int         `json:"closed"`
	Rule    string      `json:"rule"`
}

// SoakGrowth compares the last minute with the second.
type SoakGrowth struct {
	RSSPct  float64 `json:"rss_pct"`
	HeapPct float64 `json:"heap_live_pct"`
}

// MemSample is one sample of the concentrator's memory.
type MemSample struct {
	T         float64 `json:"t_s"`
	RSSBytes  uint64  `json:"rss_bytes"`
	HeapBytes uint64  `json:"heap_live_bytes"`
}

func (o *ScaleOptions) defaults() {
	if o.Clients <= 0 {
		o.Clients = 1000
	}
	if o.Active < 0 {
		o.Active = 0
	}
	o.Active = min(o.Active, o.Clients)
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = time.Minute
	}
	if o.Idle <= 0 {
		o.Idle = 10 * time.Second
	}
	o.Idle = max(o.Idle, 6*time.Second)
	if o.Seconds <= 0 {
		o.Seconds = 10
	}
	if len(o.GOMAXPROCS) == 0 {
		o.GOMAXPROCS = []int{0}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Scale runs `mptun bench scale`: for each GOMAXPROCS setting one real
// mptund concentrator (secure mode, a [[peer]] per CPE) in a namespace,
// and Clients in-process CPEs in another that connect, carry a little
// traffic, idle, then Active of them run bulk flows.
func Scale(ctx context.Context, tools Tools, o ScaleOptions) (ScaleResult, error) {
	o.defaults()
	res := ScaleResult{Clients: o.Clients, Active: o.Active, LoadAvg: loadAvg()}
	// A socket per CPE here, plus room (the concentrator is another process).
	if err := raiseNoFile(uint64(o.Clients)*2+1024, uint64(o.Clients)+256); err != nil {
		return res, err
	}
	for _, g := range o.GOMAXPROCS {
		if g <= 0 {
			g = runtime.NumCPU()
		}
		fmt.Fprintf(o.Log, "== concentrator GOMAXPROCS=%d, %d CPEs\n", g, o.Clients)
		r, err := scaleRun(ctx, tools, o, g)
		res.Runs = append(res.Runs, r)
		if err != nil {
			return res, err
		}
	}
	if n := len(res.Runs); n > 1 && res.Runs[0].ThroughputGbps > 0 {
		res.ThroughputRatio = res.Runs[n-1].ThroughputGbps / res.Runs[0].ThroughputGbps
	}
	return res, nil
}

// ParseGOMAXPROCS parses "1,2".
func ParseGOMAXPROCS(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var g int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &g); err != nil || g < 1 || g > 1024 {
			return nil, fmt.Errorf("--gomaxprocs %q: want a comma-separated list of counts, e.g. 1,2", s)
		}
		out = append(out, g)
	}
	return out, nil
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// soakVerdict fills Flat and Growth: memory is flat when the last
// minute's mean RSS and live heap are within 2 % (plus 1 MiB) of the
// second minute's, the first minute being warm-up.
func soakVerdict(s *SoakResult) {
	s.Rule = "last minute's mean RSS and live heap within 2 % + 1 MiB of the second minute's"
	var a, b []MemSample
	for _, m := range s.Samples {
		switch {
		case m.T >= 60 && m.T < 120:
			a = append(a, m)
		case m.T >= s.Seconds-60:
			b = append(b, m)
		}
	}
	if len(a) == 0 || len(b) == 0 || s.Seconds < 180 {
		// Too short for minutes: compare the first and last third.
		n := len(s.Samples)
		a, b = s.Samples[n/3:max(2*n/3, n/3+1)], s.Samples[max(n-n/3, 0):]
		s.Rule = "last third's mean RSS and live heap within 2 % + 1 MiB of the middle third's"
	}
	mean := func(ms []MemSample, f func(MemSample) uint64) float64 {
		var t float64
		for _, m := range ms {
			t += float64(f(m))
		}
		return t / float64(max(len(ms), 1))
	}
	rss := func(m MemSample) uint64 { return m.RSSBytes }
	heap := func(m MemSample) uint64 { return m.HeapBytes }
	ra, rb := mean(a, rss), mean(b, rss)
	ha, hb := mean(a, heap), mean(b, heap)
	if ra > 0 {
		s.Growth.RSSPct = 100 * (rb - ra) / ra
	}
	if ha > 0 {
		s.Growth.HeapPct = 100 * (hb - ha) / ha
	}
	s.Flat = rb <= ra*1.02+1<<20 && hb <= ha*1.02+1<<20
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// sortedDurations sorts a copy.
func sortedDurations(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

var errNoDaemon = errors.New("concentrator exited")

// ScaleTable formats a result for the terminal.
func ScaleTable(res ScaleResult) string {
	var b strings.Builder
	row := func(name string, f func(r ScaleRun) string) {
		fmt.Fprintf(&b, "  %-34s", name)
		for _, r := range res.Runs {
			fmt.Fprintf(&b, " %16s", f(r))
		}
		b.WriteByte('\n')
	}
	row("concentrator GOMAXPROCS", func(r ScaleRun) string { return fmt.Sprint(r.GOMAXPROCS) })
	row("connected / failed", func(r ScaleRun) string { return fmt.Sprintf("%d / %d", r.Connected, r.Failed) })
	row("open at the concentrator", func(r ScaleRun) string { return fmt.Sprint(r.ServerConns) })
	row("listed by status at the end", func(r ScaleRun) string { return fmt.Sprint(r.ListedConns) })
	row("connect p50 / p99 ms", func(r ScaleRun) string { return fmt.Sprintf("%.0f / %.0f", r.ConnectP50Ms, r.ConnectP99Ms) })
	row("all connected in s", func(r ScaleRun) string { return fmt.Sprintf("%.2f", r.ConnectAllS) })
	row("RSS MB (per conn B)", func(r ScaleRun) string {
		return fmt.Sprintf("%.1f (%.0f)", float64(r.RSSBytes)/1e6, r.RSSPerConnBytes)
	})
	row("live heap MB (per conn B)", func(r ScaleRun) string {
		return fmt.Sprintf("%.1f (%.0f)", float64(r.HeapBytes)/1e6, r.HeapPerConnBytes)
	})
	row("idle CPU µs per conn per s", func(r ScaleRun) string { return fmt.Sprintf("%.2f", r.IdleCPUPerConnUs) })
	row("closed while idle", func(r ScaleRun) string { return fmt.Sprint(r.ClosedDuringIdle) })
	if res.Active > 0 {
		row("bulk Gbit/s", func(r ScaleRun) string { return fmt.Sprintf("%.3f", r.ThroughputGbps) })
		row("CPU cores: concentrator / CPEs", func(r ScaleRun) string {
			return fmt.Sprintf("%.2f / %.2f", r.ThroughputCPUUtil, r.GeneratorCPUUtil)
		})
	}
	for _, r := range res.Runs {
		for reason, n := range r.Failures {
			fmt.Fprintf(&b, "  GOMAXPROCS=%d: %d failed: %s\n", r.GOMAXPROCS, n, reason)
		}
		if s := r.Soak; s != nil {
			fmt.Fprintf(&b, "  GOMAXPROCS=%d soak %.0f s: RSS %+.1f %%, heap %+.1f %%, %d closed; flat: %v (%s)\n",
				r.GOMAXPROCS, s.Seconds, s.Growth.RSSPct, s.Growth.HeapPct, s.Closed, s.Flat, s.Rule)
		}
	}
	if res.ThroughputRatio > 0 {
		fmt.Fprintf(&b, "  aggregate throughput, last setting / first: %.2f\n", res.ThroughputRatio)
	}
	return b.String()
}
