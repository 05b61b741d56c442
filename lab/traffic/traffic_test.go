// SPDX-License-Identifier: MIT

package traffic_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/topo"
	"github.com/mptun/mptun/lab/traffic"
)

func TestBoundedParetoMean(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 400000
	var sum float64
	for i := 0; i < n; i++ {
		x := traffic.BoundedPareto(r, 0.9, 1000, 1e6)
		if x < 1000 || x > 1e6 {
			t.Fatalf("sample %v out of bounds", x)
		}
		sum += x
	}
	// Analytic mean of bounded Pareto(0.9, 1 KB, 1 MB) ≈ 8.98 KB.
	if m := sum / n; math.Abs(m-8980) > 400 {
		t.Fatalf("mean %v, want ≈ 8980", m)
	}
}

func testbed(t *testing.T, specs ...topo.PathSpec) (*topo.Testbed, traffic.Env) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	tb, err := topo.Build(context.Background(), specs, topo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, traffic.Env{Cli: tb.Cli, Srv: tb.Srv, ServerAddr: tb.Paths[0].SrvAddr, Start: tb.Start}
}

func path(rate float64, delay time.Duration) topo.PathSpec {
	c := emu.Config{Rate: rate, Delay: delay, QueueBytes: int(rate / 8 * 2 * delay.Seconds())}
	return topo.PathSpec{Name: "p", Up: c, Down: c}
}

func TestBulkCubicFillsLink(t *testing.T) {
	_, env := testbed(t, path(20e6, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := traffic.RunBulk(ctx, env, traffic.BulkConfig{CC: "cubic", Down: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bulk cubic: %.2f Mbit/s, %d retrans", r.GoodputMbps, r.Retrans)
	// 20 Mbit/s of frames carry ≈ 19 Mbit/s of TCP payload; slow start
	// costs a little of the 3 s.
	if r.GoodputMbps < 16 || r.GoodputMbps > 20 {
		t.Fatalf("goodput %.2f Mbit/s on a 20 Mbit/s link", r.GoodputMbps)
	}
}

func TestBulkRejectsUnknownCC(t *testing.T) {
	_, env := testbed(t, path(20e6, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := traffic.RunBulk(ctx, env, traffic.BulkConfig{CC: "nonexistent-cc"}); err == nil {
		t.Fatal("unknown congestion control accepted")
	}
}

func TestUDPProbeSeesBlackholeGap(t *testing.T) {
	tb, env := testbed(t, path(20e6, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	go func() {
		time.Sleep(500 * time.Millisecond)
		tb.Paths[0].Link.Update(emu.BA, func(c *emu.Config) { c.Blackhole = true })
		time.Sleep(300 * time.Millisecond)
		tb.Paths[0].Link.Update(emu.BA, func(c *emu.Config) { c.Blackhole = false })
	}()
	r, err := traffic.RunProbe(ctx, env, traffic.ProbeConfig{PPS: 1000, Down: true, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: sent %d lost %d max gap %.1f ms ooo %.3f owd %+v", r.Sent, r.Lost, r.MaxGapMs, r.OOOFraction, r.OWDms)
	if r.MaxGapMs < 280 || r.MaxGapMs > 400 {
		t.Errorf("max gap %.1f ms, want ≈ 300", r.MaxGapMs)
	}
	if r.Lost < 250 || r.Lost > 350 {
		t.Errorf("lost %d, want ≈ 300", r.Lost)
	}
	if r.OWDms.P50 < 5 || r.OWDms.P50 > 6.5 {
		t.Errorf("owd p50 %.2f ms, want ≈ 5", r.OWDms.P50)
	}
}

func TestMPTCPStreamProbeAndWeb(t *testing.T) {
	tb, env := testbed(t, path(10e6, 5*time.Millisecond), path(10e6, 20*time.Millisecond))
	ctx := context.Background()
	for _, ns := range []string{"cli", "srv"} {
		n := tb.Cli
		if ns == "srv" {
			n = tb.Srv
		}
		if err := n.IP(ctx, "mptcp", "limits", "set", "subflow", "4", "add_addr_accepted", "4"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Cli.IP(ctx, "mptcp", "endpoint", "add", tb.Paths[1].CliAddr.String(), "dev", tb.Paths[1].Dev, "subflow"); err != nil {
		t.Fatal(err)
	}
	env.MPTCP = true
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	b, err := traffic.RunBulk(cctx, env, traffic.BulkConfig{CC: "cubic", Down: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MPTCP bulk over 10+10 Mbit/s: %.2f Mbit/s", b.GoodputMbps)
	if b.GoodputMbps < 11 {
		t.Errorf("MPTCP goodput %.2f Mbit/s: second subflow unused?", b.GoodputMbps)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	env.MPTCP = false
	w, err := traffic.RunWeb(wctx, env, traffic.WebConfig{Rate: 20, CC: "cubic", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("web: %+v", w)
	if w.Flows < 10 || w.Failed > 0 {
		t.Errorf("web: %d flows, %d failed", w.Flows, w.Failed)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	env.MPTCP = true
	p, err := traffic.RunProbe(pctx, env, traffic.ProbeConfig{PPS: 200, Stream: true, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stream probe: sent %d lost %d max gap %.1f ms owd %+v", p.Sent, p.Lost, p.MaxGapMs, p.OWDms)
	if p.Lost != 0 || p.Received < 150 {
		t.Errorf("stream probe lost %d, received %d", p.Lost, p.Received)
	}
}
