// SPDX-License-Identifier: MIT

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mptun/mptun/internal/netns"
)

// webPort is the status page's port inside the CPE's namespace (a port
// alone: the daemon listens on loopback).
const webPort = "9512"

// browser starts headless Chromium (Debian's package) with a fresh profile
// inside ns, so that the page is at the address the operator on that host
// would open. chromedp talks to it over a pipe, which `ip netns exec` keeps.
func browser(t *testing.T, ctx context.Context, ns *netns.NS) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("needs chromium (scripts/deps.sh installs it)")
	}
	wrapper := filepath.Join(t.TempDir(), "chromium-in-"+ns.Name)
	must(t, os.WriteFile(wrapper, []byte("#!/bin/sh\nexec ip netns exec "+ns.Name+" "+chromium+" \"$@\"\n"), 0o755))
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(wrapper),
		chromedp.Headless,
		chromedp.NoSandbox, // root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	return bctx
}

// pageView is what the test reads off the page.
type pageView struct {
	Polls   int `json:"polls"`
	Summary string
	Conn    string
	Paths   []struct {
		Name, State, RTT string
		RX, TX           float64
	}
	// Pixels of each path's colour on the throughput chart.
	Ink map[string]int
}

const readPage = `(() => {
  const v = {polls: +document.getElementById('live').dataset.polls, summary: document.getElementById('summary').textContent,
    conn: (document.querySelector('[data-field=conn-state]') || {}).textContent || '', paths: [], ink: {}};
  for (const tr of document.querySelectorAll('tr.path')) {
    const f = n => tr.querySelector('[data-field=' + n + ']').textContent;
    v.paths.push({Name: tr.dataset.path, State: f('state'), RTT: f('rtt'), RX: parseFloat(f('rx')) || 0, TX: parseFloat(f('tx')) || 0});
  }
  const c = document.getElementById('rate-chart'), g = c.getContext('2d');
  const px = g.getImageData(0, 0, c.width, c.height).data;
  for (const tr of document.querySelectorAll('tr.path')) {
    const m = tr.querySelector('.swatch').style.background.match(/\d+/g).map(Number);
    let n = 0;
    for (let i = 0; i < px.length; i += 4) {
      if (Math.abs(px[i] - m[0]) < 24 && Math.abs(px[i+1] - m[1]) < 24 && Math.abs(px[i+2] - m[2]) < 24 && px[i+3] > 200) n++;
    }
    v.ink[tr.dataset.path] = n;
  }
  return v;
})()`

// TestStatusPageInBrowser runs the tunnel with [web] listen on the CPE,
// opens the page in headless Chromium during a download through the
// tunnel and checks that it shows both paths open, both carrying traffic,
// a chart with both paths drawn, and that it keeps updating. A screenshot
// is left in the test's artifact directory.
func TestStatusPageInBrowser(t *testing.T) {
	requireRoot(t)
	requireTools(t, "iperf3", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	// Different rates, so that the chart's lines do not cover each other.
	a0, b0 := tp.addPath(t, ctx, 0, 10)
	a1, b1 := tp.addPath(t, ctx, 1, 25)
	startTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}}, map[string]string{
		"only on a trusted network.\nlisten = \"\"": "only on a trusted network.\nlisten = \"" + webPort + "\"",
	})
	url := "http://127.0.0.1:" + webPort + "/"
	bctx := browser(t, ctx, tp.cpe)

	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible("tr.path")); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}

	// Downloads through the tunnel (concentrator to CPE) for the page to show.
	srvCmd := tp.cpe.Command(ctx, "iperf3", "-s", "-1", "-p", "5201")
	must(t, srvCmd.Start())
	defer func() { srvCmd.Cancel(); srvCmd.Wait() }()
	time.Sleep(300 * time.Millisecond)
	// Four flows, as a household's traffic: one flow may stay on one path
	// (the flow scheduler spreads a flow only when its path holds it back).
	cliCmd := tp.srv.Command(ctx, "iperf3", "-c", "10.99.0.2", "-p", "5201", "-t", "30", "-P", "4", "-C", "cubic")
	var iperfOut bytes.Buffer
	cliCmd.Stdout, cliCmd.Stderr = &iperfOut, &iperfOut
	must(t, cliCmd.Start())
	defer func() { cliCmd.Cancel(); cliCmd.Wait() }()

	read := func() pageView {
		t.Helper()
		raw, err := chromedp.Run(bctx, chromedp.Evaluate[json.RawMessage](readPage))
		if err != nil {
			t.Fatalf("read page: %v", err)
		}
		var v pageView
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("page view %s: %v", raw, err)
		}
		return v
	}
	// Wait for the download to show on both paths and the chart to carry
	// several seconds of it.
	var first pageView
	deadline := time.Now().Add(20 * time.Second)
	for {
		first = read()
		ok := len(first.Paths) == 2 && first.Polls >= 6
		for _, p := range first.Paths {
			ok = ok && p.State == "open" && p.RX > 1 && first.Ink[p.Name] > 40
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("page after 20 s: %+v\niperf3: %s", first, iperfOut.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	names := map[string]bool{}
	for _, p := range first.Paths {
		names[p.Name] = true
		if rtt, err := strconv.ParseFloat(p.RTT, 64); err != nil || rtt <= 0 || rtt > 1000 {
			t.Errorf("path %s RTT %q ms", p.Name, p.RTT)
		}
	}
	if !names["dsl"] || !names["lte"] {
		t.Errorf("paths on the page %v, want dsl and lte", names)
	}
	if first.Conn != "open" {
		t.Errorf("connection state %q", first.Conn)
	}
	time.Sleep(3 * time.Second)
	second := read()
	if second.Polls < first.Polls+2 {
		t.Errorf("page polled %d then %d times 3 s later: not updating", first.Polls, second.Polls)
	}
	// The page's content follows the daemon: the uptime in the summary at
	// least (rates of saturated paths may read the same twice).
	changed := second.Summary != first.Summary
	for i := range second.Paths {
		changed = changed || second.Paths[i] != first.Paths[i]
	}
	if !changed {
		t.Errorf("page did not change in 3 s: %q %+v then %q %+v", first.Summary, first.Paths, second.Summary, second.Paths)
	}
	t.Logf("page: %s; conn %s; paths %+v; chart ink %v; %d polls", second.Summary, second.Conn, second.Paths, second.Ink, second.Polls)

	png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "status-page.png")
	must(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
