// SPDX-License-Identifier: MIT

package emu_test

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ptimer"
	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/topo"
)

// Frame overhead of a UDP/IPv4 datagram on Ethernet (no FCS): 14+20+8.
const udpFrameOverhead = 42

func build(t *testing.T, specs ...topo.PathSpec) *topo.Testbed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces, veths and AF_PACKET sockets")
	}
	tb, err := topo.Build(context.Background(), specs, topo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	return tb
}

type rx struct {
	seq      uint64
	sent, at mono.Time
}

// receiver collects datagrams on the server side of path p.
func receiver(t *testing.T, tb *topo.Testbed, p *topo.Path, port int) (*net.UDPConn, func() []rx) {
	t.Helper()
	var c *net.UDPConn
	if err := tb.Srv.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: port})
		if err == nil {
			err = c.SetReadBuffer(8 << 20)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := make([]rx, 0, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			now := mono.Now()
			if err != nil {
				return
			}
			if n < 16 {
				continue
			}
			mu.Lock()
			got = append(got, rx{binary.BigEndian.Uint64(buf), mono.Time(binary.BigEndian.Uint64(buf[8:])), now})
			mu.Unlock()
		}
	}()
	return c, func() []rx {
		c.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// send paces size-byte datagrams (size counts the whole Ethernet frame) at
// rate bit/s from the client side of path p for dur.
func send(t *testing.T, tb *topo.Testbed, p *topo.Path, port, size int, rate float64, dur time.Duration) {
	t.Helper()
	var c *net.UDPConn
	if err := tb.Cli.Do(func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: p.CliAddr.AsSlice()}, &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tm, err := ptimer.New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	buf := make([]byte, size-udpFrameOverhead)
	gap := time.Duration(float64(size) * 8 * 1e9 / rate)
	start := mono.Now()
	var seq uint64
	for {
		now := mono.Now()
		if now.Sub(start) > dur {
			return
		}
		for due := start.Add(time.Duration(seq) * gap); due <= now; due = due.Add(gap) {
			binary.BigEndian.PutUint64(buf, seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(mono.Now()))
			c.Write(buf) // a full qdisc (tbf) refuses some: that is the point
			seq++
		}
		tm.Reset(start.Add(time.Duration(seq) * gap))
		tm.Wait()
	}
}

func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func rateIn(r []rx, size int, from, to mono.Time) float64 {
	n := 0
	for _, x := range r {
		if x.at >= from && x.at < to {
			n++
		}
	}
	return float64(n*size*8) / to.Sub(from).Seconds()
}

// TestRateQueueAndTBF offers 1.2x the rate on two paths of equal rate and
// buffer, one shaped by the emulator and one by the kernel's tbf.
func TestRateQueueAndTBF(t *testing.T) {
	const (
		rate  = 20e6
		queue = 50000
		delay = 5 * time.Millisecond
		size  = 1442
	)
	tb := build(t,
		topo.PathSpec{Name: "emu", Up: emu.Config{Rate: rate, QueueBytes: queue, Delay: delay}, Down: emu.Config{Delay: delay}},
		topo.PathSpec{Name: "tbf", Up: emu.Config{Delay: delay}, Down: emu.Config{Delay: delay}},
	)
	ctx := context.Background()
	if err := tb.Cli.IP(ctx, "link", "set", "p1", "txqueuelen", "10000"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Cli.Output(ctx, "tc", "qdisc", "add", "dev", "p1", "root", "tbf",
		"rate", "20mbit", "burst", "3028", "limit", "50000"); err != nil {
		t.Fatal(err)
	}
	const dur = 3 * time.Second
	var results [2][]rx
	var wg sync.WaitGroup
	start := mono.Now()
	for i, p := range tb.Paths {
		_, collect := receiver(t, tb, p, 9000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(t, tb, p, 9000, size, 1.2*rate, dur)
			time.Sleep(200 * time.Millisecond)
			results[i] = collect()
		}()
	}
	wg.Wait()
	from, to := start.Add(500*time.Millisecond), start.Add(dur)
	bound := time.Duration(float64(queue) * 8 / rate * 1e9)
	var got [2]float64
	var p99 [2]time.Duration
	for i, r := range results {
		got[i] = rateIn(r, size, from, to)
		var owd []time.Duration
		for _, x := range r {
			owd = append(owd, x.at.Sub(x.sent))
		}
		p99[i] = quantile(owd, .99)
		t.Logf("%s: delivered %.3f Mbit/s of %.0f (offered 1.2x), %d frames, one-way delay p50 %v p99 %v max %v (delay %v + buffer/rate %v)",
			tb.Paths[i].Spec.Name, got[i]/1e6, rate/1e6, len(r), quantile(owd, .5), p99[i], quantile(owd, 1), delay, bound)
	}
	if math.Abs(got[0]/rate-1) > 0.02 {
		t.Errorf("emulator delivered %.3f Mbit/s, want %.0f ± 2%%", got[0]/1e6, rate/1e6)
	}
	// The model's bound is checked exactly below (MaxSojourn). On the wire
	// a frame also waits for its own serialization and for wake-ups on a
	// shared 2-core host: the p99 may exceed delay+buffer/rate by 2 ms, or
	// by as much as tbf's does in the same run (host load hits both).
	if limit := max(delay+bound+2*time.Millisecond, p99[1]); p99[0] > limit {
		t.Errorf("p99 one-way delay %v above %v (delay+buffer/rate+2ms, or tbf's p99 %v)", p99[0], limit, p99[1])
	}
	st := tb.Paths[0].Link.Stats(emu.AB)
	t.Logf("emulator: %+v; timer lateness %s", st, tb.Paths[0].Link.TimerLateness(emu.AB))
	if st.MaxSojourn > bound {
		t.Errorf("emulator queue sojourn %v above buffer/rate %v", st.MaxSojourn, bound)
	}
	if st.DroppedQueue == 0 {
		t.Error("emulator queue never overflowed at 1.2x: the bottleneck was elsewhere")
	}
	// The cross-check against tbf needs tbf to have delivered its rate.
	// Its burst is two frames: when the host stalls its watchdog timer for
	// more than 1.2 ms (a VM's steal time; CI saw p99 3.7 ms, max 12 ms),
	// tbf loses that time for good, where the emulator, checked against
	// the rate itself above, catches up. A tbf short of its rate then says
	// nothing about the emulator.
	if math.Abs(got[1]/rate-1) > 0.05 {
		t.Logf("tbf delivered %.3f Mbit/s of %.0f: host timer stalls (emulator's lateness %s); the emulator/tbf ratio is not checked",
			got[1]/1e6, rate/1e6, tb.Paths[0].Link.TimerLateness(emu.AB))
		return
	}
	if r := got[0] / got[1]; math.Abs(r-1) > 0.05 {
		t.Errorf("emulator/tbf delivered rate ratio %.3f, want within 5%%", r)
	}
}

// TestRTT checks the round trip of paths with 0 (baseline), 10, 50 and 200 ms.
func TestRTT(t *testing.T) {
	var specs []topo.PathSpec
	rtts := []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}
	for _, r := range rtts {
		c := emu.Config{Delay: r / 2}
		specs = append(specs, topo.PathSpec{Name: r.String(), Up: c, Down: c})
	}
	tb := build(t, specs...)
	var wg sync.WaitGroup
	samples := make([][]time.Duration, len(rtts))
	for i, p := range tb.Paths {
		var echo, cli *net.UDPConn
		if err := tb.Srv.Do(func() (err error) {
			echo, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: 7})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer echo.Close()
		go func() {
			buf := make([]byte, 64)
			for {
				n, a, err := echo.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				echo.WriteToUDPAddrPort(buf[:n], a)
			}
		}()
		if err := tb.Cli.Do(func() (err error) {
			cli, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: 7})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			cli.SetReadDeadline(time.Now().Add(3 * time.Second))
			for {
				n, err := cli.Read(buf)
				if err != nil || n < 8 {
					return
				}
				samples[i] = append(samples[i], mono.Now().Sub(mono.Time(binary.BigEndian.Uint64(buf))))
				if len(samples[i]) == 200 {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for k := 0; k < 200; k++ {
				binary.BigEndian.PutUint64(buf, uint64(mono.Now()))
				cli.Write(buf)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	// Judge the delay the emulator adds, not the absolute RTT: the stack and
	// the emulator's forwarding cost a machine-dependent baseline (0.02 ms on
	// one machine, 0.3 ms on another), which the zero-delay path measures.
	if len(samples[0]) < 190 {
		t.Fatalf("baseline path: only %d of 200 echoes", len(samples[0]))
	}
	base := quantile(samples[0], .5)
	t.Logf("zero-impairment baseline (emulator + stack, round trip): p50 %v p99 %v",
		base, quantile(samples[0], .99))
	for i, r := range rtts[1:] {
		s := samples[i+1]
		p50, p99 := quantile(s, .5), quantile(s, .99)
		added := p50 - base
		t.Logf("RTT configured %v: n=%d p50 %v p99 %v, added over baseline %v (error %v)", r, len(s), p50, p99, added, added-r)
		if len(s) < 190 {
			t.Errorf("RTT %v: only %d of 200 echoes", r, len(s))
			continue
		}
		if (added - r).Abs() > 500*time.Microsecond {
			t.Errorf("RTT %v: p50 %v is %v over the baseline %v, want %v ± 0.5 ms", r, p50, added, base, r)
		}
	}
}

// TestLossInterval checks that Bernoulli loss falls inside the binomial 95%
// interval.
func TestLossInterval(t *testing.T) {
	const pl, n = 0.05, 4000
	tb := build(t, topo.PathSpec{Name: "lossy", Up: emu.Config{Loss: pl}})
	p := tb.Paths[0]
	_, collect := receiver(t, tb, p, 9001)
	send(t, tb, p, 9001, 200, 200*8*4000, time.Duration(n-1)*250*time.Microsecond)
	time.Sleep(100 * time.Millisecond)
	r := collect()
	st := p.Link.Stats(emu.AB)
	sent := float64(st.InFrames)
	lost := sent - float64(len(r))
	half := 1.96 * math.Sqrt(sent*pl*(1-pl))
	t.Logf("sent %v, lost %v (emulator counted %d), expected %.0f ± %.0f", sent, lost, st.DroppedLoss, sent*pl, half)
	if math.Abs(lost-sent*pl) > half {
		t.Errorf("lost %v of %v, outside %.0f ± %.0f", lost, sent, sent*pl, half)
	}
	if uint64(lost) != st.DroppedLoss {
		t.Errorf("receiver lost %v but emulator dropped %d", lost, st.DroppedLoss)
	}
}
