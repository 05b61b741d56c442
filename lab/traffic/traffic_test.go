// SPDX-License-Identifier: MIT

package traffic_test

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net"
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

// blackhole makes the first path drop everything (on) or carry again
// (off) in the directions given.
func blackhole(tb *topo.Testbed, on bool, dirs ...emu.Dir) {
	for _, d := range dirs {
		tb.Paths[0].Link.Update(d, func(c *emu.Config) { c.Blackhole = on })
	}
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
		blackhole(tb, true, emu.BA)
		time.Sleep(300 * time.Millisecond)
		blackhole(tb, false, emu.BA)
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

// TestStalledStreamEndsWithTheRun: a stream that stops delivering for good
// (the path blackholed both ways) fills its send buffer, and its next
// write blocks; the probe must still end with the run, not when TCP gives
// up on the connection about 15 minutes later, and count what was lost.
func TestStalledStreamEndsWithTheRun(t *testing.T) {
	tb, env := testbed(t, path(20e6, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	time.AfterFunc(300*time.Millisecond, func() { blackhole(tb, true, emu.AB, emu.BA) })
	type result struct {
		r   traffic.ProbeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		// 64-byte packets at 20,000 per second fill the send buffer a
		// blackholed connection cannot drain within the 1.7 s left.
		r, err := traffic.RunProbe(ctx, env, traffic.ProbeConfig{PPS: 20000, Stream: true, Grace: 200 * time.Millisecond})
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		t.Logf("stalled stream probe: sent %d received %d lost %d", res.r.Sent, res.r.Received, res.r.Lost)
		if res.r.Received == 0 || res.r.Lost == 0 {
			t.Errorf("received %d, lost %d: the stream should have delivered, then stalled", res.r.Received, res.r.Lost)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the probe outlived its run by 28 s: a stalled stream held it")
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
	t.Logf("MPTCP bulk over 10+10 Mbit/s: %.2f Mbit/s, %d retrans, %+v", b.GoodputMbps, b.Retrans, b.MPTCP)
	if b.GoodputMbps < 11 {
		t.Errorf("MPTCP goodput %.2f Mbit/s: second subflow unused?", b.GoodputMbps)
	}
	if len(b.MPTCP) != 1 || !b.MPTCP[0].MPTCP || b.MPTCP[0].Subflows != 2 {
		t.Fatalf("MPTCP inspection: %+v", b.MPTCP)
	}
	for _, s := range b.MPTCP[0].SubflowStats {
		if s.BytesAcked < 1e6 || s.Local == "" || s.Remote == "" {
			t.Errorf("subflow %+v carried too little", s)
		}
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

func TestPingRTTAndBlackhole(t *testing.T) {
	tb, env := testbed(t, path(20e6, 10*time.Millisecond))
	ctx := context.Background()
	p := tb.Paths[0]
	r, err := traffic.RunPing(ctx, tb.Cli, traffic.PingConfig{Src: p.CliAddr, Dst: env.ServerAddr, Count: 20, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping: %+v", r)
	if r.Sent != 20 || r.Received != 20 {
		t.Errorf("sent %d received %d", r.Sent, r.Received)
	}
	// 2 × 10 ms of emulated delay plus the emulator's own fraction of a ms.
	if r.P50 < 20 || r.P50 > 25 {
		t.Errorf("rtt p50 %.2f ms, want ≈ 20", r.P50)
	}
	p.Link.Update(emu.AB, func(c *emu.Config) { c.Blackhole = true })
	r, err = traffic.RunPing(ctx, tb.Cli, traffic.PingConfig{Dst: env.ServerAddr, Count: 3, Interval: 10 * time.Millisecond, Timeout: 200 * time.Millisecond})
	if err == nil || r.Received != 0 || r.Sent != 3 {
		t.Errorf("blackholed path: %+v %v", r, err)
	}
}

func TestTransfersCompletionTimes(t *testing.T) {
	_, env := testbed(t, path(20e6, 10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := traffic.RunTransfers(ctx, env, traffic.TransferConfig{Sizes: []int{10000, 100000}, Repeat: 3, Gap: 20 * time.Millisecond, CC: "cubic"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Sizes {
		t.Logf("%d bytes: %+v", s.Bytes, s)
		if s.Done != 3 || s.Failed != 0 || len(s.Ms) != 3 {
			t.Errorf("%d bytes: done %d failed %d", s.Bytes, s.Done, s.Failed)
		}
	}
	// Handshake plus request/response: at least two 20 ms round trips;
	// 10 KB fits the initial window, so not many more.
	if s := r.Size(10000); s.P50ms < 40 || s.P50ms > 100 {
		t.Errorf("10 KB p50 %.1f ms, want 40-100 (≈ 45)", s.P50ms)
	}
	// 100 KB needs a few slow-start rounds more.
	if s := r.Size(100000); s.P50ms < 80 || s.P50ms > 250 {
		t.Errorf("100 KB p50 %.1f ms, want 80-250 (≈ 110)", s.P50ms)
	}
}

func TestCBRDeliveryAndOverload(t *testing.T) {
	// A deep buffer (400 ms) so that a busy machine's scheduling stalls
	// do not overflow it below capacity; the receiver waits 1 s for it to
	// drain.
	c := emu.Config{Rate: 10e6, Delay: 5 * time.Millisecond, QueueBytes: 500000}
	tb, env := testbed(t, topo.PathSpec{Name: "p", Up: c, Down: c})
	link := tb.Paths[0].Link
	run := func(rate float64) traffic.CBRResult {
		before := link.Stats(emu.BA)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := traffic.RunCBR(ctx, env, traffic.CBRConfig{RateBps: rate, Size: 1200, Down: true, Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		after := link.Stats(emu.BA)
		t.Logf("cbr %.0f Mbit/s: %+v", rate/1e6, r)
		// Every datagram is accounted for by the emulator: delivered or
		// dropped there (the server sends nothing else downstream).
		delivered := int(after.DeliveredFrames - before.DeliveredFrames)
		dropped := int(after.DroppedQueue - before.DroppedQueue + after.SocketDrops - before.SocketDrops)
		if r.Received != delivered || r.Sent != delivered+dropped {
			t.Errorf("sent %d received %d; emulator delivered %d dropped %d", r.Sent, r.Received, delivered, dropped)
		}
		if math.Abs(r.Delivered-float64(r.Received)/float64(r.Sent)) > 1e-12 || math.Abs(r.LossFraction+r.Delivered-1) > 1e-12 {
			t.Errorf("fractions %+v", r)
		}
		return r
	}
	r := run(8e6)
	if r.Delivered < 0.95 || r.OOOFraction != 0 || math.Abs(r.OfferedMbps-8) > 0.4 {
		t.Errorf("8 Mbit/s on 10: delivered %.3f ooo %.4f offered %.2f", r.Delivered, r.OOOFraction, r.OfferedMbps)
	}
	// 15 Mbit/s of IP into 10 Mbit/s of frames (14 bytes more each): the
	// link carries 10 × 1228/1242 of IP, 66 % of the offer, plus the 400
	// ms buffer drained after the 2 s: at most about 79 %.
	r = run(15e6)
	if r.Delivered < 0.4 || r.Delivered > 0.82 || math.Abs(r.OfferedMbps-15) > 0.75 {
		t.Errorf("15 Mbit/s on 10: delivered %.3f, want ≈ 0.66 (offered %.2f)", r.Delivered, r.OfferedMbps)
	}
}

func TestCBRSeesReordering(t *testing.T) {
	c := emu.Config{Rate: 20e6, Delay: 5 * time.Millisecond, Jitter: 4 * time.Millisecond, Reorder: 0.001, QueueBytes: 100000}
	_, env := testbed(t, topo.PathSpec{Name: "p", Up: c, Down: c})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := traffic.RunCBR(ctx, env, traffic.CBRConfig{RateBps: 10e6, Down: true, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.OOOFraction < 0.05 {
		t.Errorf("ooo %.4f through 4 ms of reordering jitter at 1 packet/ms", r.OOOFraction)
	}
}

func TestOWDCaptureOnEmulatedPath(t *testing.T) {
	tb, env := testbed(t, path(20e6, 10*time.Millisecond))
	dev := tb.Paths[0].Dev
	cp, err := traffic.StartOWDCapture(traffic.OWDCaptureConfig{SendNS: tb.Srv, SendDevs: []string{dev},
		RecvNS: tb.Cli, RecvDevs: []string{dev}, Port: 5410})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := traffic.RunTransfers(ctx, env, traffic.TransferConfig{Sizes: []int{10000, 300000}, Repeat: 2, Gap: 10 * time.Millisecond, CC: "cubic"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	r := cp.Stop()
	t.Logf("owd: samples %d flows %d sent %d recv %d unmatched %d drops %d %+v %s", r.Samples, r.Flows, r.SentPackets, r.RecvPackets, r.Unmatched, r.KernelDrops, r.OWDms, r.Err)
	// 2 × 10 KB + 2 × 300 KB in 1448-byte segments.
	if r.Flows != 4 || r.Samples < 400 || r.Samples > 480 || r.Unmatched != 0 {
		t.Errorf("flows %d samples %d unmatched %d (transfers %+v)", r.Flows, r.Samples, r.Unmatched, tr.Sizes)
	}
	// 10 ms propagation plus 0.6 ms serialization, plus queueing when
	// slow start overshoots the 20 Mbit/s link (and when a busy machine
	// delays the emulator): never less than the propagation delay.
	if r.OWDms.P50 < 10.5 || r.OWDms.P50 > 50 || r.OWD[0] < 10.5 {
		t.Errorf("owd %+v (min %.2f), want ≈ 11-15 ms at the median", r.OWDms, r.OWD[0])
	}
}

func TestMPTCPInspectSeesFallback(t *testing.T) {
	tb, env := testbed(t, path(20e6, 2*time.Millisecond))
	// A plain TCP listener: the MPTCP client falls back to TCP.
	ln, err := listenPlain(tb, env)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
		}
	}()
	var c net.Conn
	d := net.Dialer{}
	d.SetMultipathTCP(true)
	if err := tb.Cli.Do(func() (err error) {
		c, err = d.Dial("tcp4", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(make([]byte, 100000))
	info := traffic.InspectMPTCP(c)
	t.Logf("%+v", info)
	if info.MPTCP || !info.Fallback || info.Subflows != 1 {
		t.Errorf("fallback not seen: %+v", info)
	}
}

func listenPlain(tb *topo.Testbed, env traffic.Env) (net.Listener, error) {
	var ln net.Listener
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // Go's listeners default to MPTCP
	err := tb.Srv.Do(func() (err error) {
		ln, err = lc.Listen(context.Background(), "tcp4", env.ServerAddr.String()+":5999")
		return err
	})
	return ln, err
}
