// SPDX-License-Identifier: MIT

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

const dashboardFile = "../contrib/grafana/mptun.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title, UID  string
	Panels      []dashPanel
	Templating  struct{ List []struct{ Name string } }
	Annotations struct {
		List []struct {
			Expr string
			Name string
		}
	}
}

type dashPanel struct {
	ID      int
	Type    string
	Title   string
	GridPos struct{ H, W, X, Y int }
	Targets []struct {
		Expr  string
		RefID string `json:"refId"`
	}
}

func loadDashboard(t *testing.T) (dashboard, []string) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: not valid JSON: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" { // not Grafana's built-in one
			exprs = append(exprs, a.Expr)
		}
	}
	return d, exprs
}

var metricRef = regexp.MustCompile(`\b(mptun|go|process)_[a-z0-9_]+\b`)

// TestGrafanaDashboard checks the dashboard's structure: valid JSON, unique
// panel ids inside the 24-column grid, a query in every panel, the
// variables its queries use, and a panel for each thing an operator looks
// at (issue 16: paths' rate, RTT, loss, cwnd, reorder hold, repairs,
// events).
func TestGrafanaDashboard(t *testing.T) {
	d, exprs := loadDashboard(t)
	if d.Title == "" || d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("title %q uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	titles := ""
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: grid position %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		titles += strings.ToLower(p.Title) + "|"
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: empty query or refId", p.Title)
			}
		}
	}
	for _, want := range []string{"throughput per path", "round-trip time", "loss per path", "congestion window", "reorder hold",
		"repairs", "path events", "path state"} {
		if !strings.Contains(titles, want) {
			t.Errorf("no panel about %q (titles: %s)", want, titles)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, e := range exprs {
		for _, m := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(e, -1) {
			if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
				t.Errorf("query uses $%s, which is not a dashboard variable: %s", m[1], e)
			}
		}
		if len(metricRef.FindAllString(e, -1)) == 0 {
			t.Errorf("query names no metric: %s", e)
		}
	}
}

// scrapeIn fetches http://127.0.0.1:9511/metrics inside ns and returns
// the sample names with their values (summed over label sets).
func scrapeIn(t *testing.T, ns *netns.NS) map[string]float64 {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = ns.Do(func() error {
				c, err = net.Dial(network, addr)
				return err
			})
			return c, err
		}}}
	resp, err := client.Get("http://127.0.0.1:9511/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", ns.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s: %s", ns.Name, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		out[name] += v
	}
	return out
}

// TestGrafanaMetricsExported runs both daemons with [metrics] listen,
// sends traffic through the tunnel and checks that every metric the
// dashboard queries is in their /metrics output, the per-path ones with
// traffic counted.
func TestGrafanaMetricsExported(t *testing.T) {
	requireRoot(t)
	_, exprs := loadDashboard(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 20)
	a1, b1 := tp.addPath(t, ctx, 1, 20)
	startTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}}, map[string]string{
		"dashboard for them.\nlisten = \"\"": "dashboard for them.\nlisten = \"127.0.0.1:9511\"",
	})
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "50", "-i", "0.02", "-W", "2", "10.99.0.1"); err != nil {
		t.Fatalf("ping through the tunnel: %v\n%s", err, out)
	}
	cpe, srv := scrapeIn(t, tp.cpe), scrapeIn(t, tp.srv)
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			_, inCPE := cpe[name]
			_, inSrv := srv[name]
			if !inCPE || !inSrv {
				t.Errorf("the dashboard queries %s, which mptund does not export (cpe %v, concentrator %v)", name, inCPE, inSrv)
			}
		}
	}
	for _, m := range []map[string]float64{cpe, srv} {
		for _, name := range []string{"mptun_path_rx_bytes_total", "mptun_path_tx_bytes_total", "mptun_path_srtt_seconds",
			"mptun_path_cwnd_packets", "mptun_inner_delivered_bytes_total", "mptun_inner_sent_packets_total"} {
			if m[name] <= 0 {
				t.Errorf("%s = %v after traffic", name, m[name])
			}
		}
		if m["mptun_path_up"] != 2 {
			t.Errorf("mptun_path_up sums to %v, want 2 paths up", m["mptun_path_up"])
		}
	}
	t.Logf("cpe exports %d sample names, concentrator %d", len(cpe), len(srv))
}
