// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/lab/emu"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/topo"
	"github.com/mptun/mptun/lab/traffic"
)

// measureBaseline times UDP echoes over one unimpaired emulated path: the
// delay the emulator itself adds (both directions) plus the kernel stacks.
func measureBaseline(ctx context.Context) (report.Baseline, error) {
	var b report.Baseline
	tb, err := topo.Build(ctx, []topo.PathSpec{{Name: "baseline"}}, topo.Options{Seed: 1})
	if err != nil {
		return b, err
	}
	defer tb.Close()
	p := tb.Paths[0]
	var srv, cli *net.UDPConn
	if err := tb.Srv.Do(func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: 7})
		return err
	}); err != nil {
		return b, err
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, a, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			srv.WriteToUDPAddrPort(buf[:n], a)
		}
	}()
	if err := tb.Cli.Do(func() (err error) {
		cli, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.SrvAddr.AsSlice(), Port: 7})
		return err
	}); err != nil {
		return b, err
	}
	defer cli.Close()
	var rtts []float64
	buf := make([]byte, 64)
	for i := 0; i < 300 && ctx.Err() == nil; i++ {
		binary.BigEndian.PutUint64(buf, uint64(mono.Now()))
		if _, err := cli.Write(buf[:8]); err != nil {
			return b, fmt.Errorf("baseline: %w", err)
		}
		cli.SetReadDeadline(time.Now().Add(time.Second))
		n, err := cli.Read(buf)
		if err != nil || n < 8 {
			continue
		}
		rtts = append(rtts, float64(mono.Now()-mono.Time(binary.BigEndian.Uint64(buf)))/1e6)
		time.Sleep(2 * time.Millisecond)
	}
	slices.Sort(rtts)
	b.Samples = len(rtts)
	b.RTTP50ms, b.RTTP99ms, b.RTTMaxms = traffic.Q(rtts, .5), traffic.Q(rtts, .99), traffic.Q(rtts, 1)
	lat := p.Link.TimerLateness(emu.AB)
	b.TimerP50us = float64(lat.Quantile(.5)) / 1e3
	b.TimerP99us = float64(lat.Quantile(.99)) / 1e3
	if b.Samples < 250 {
		return b, fmt.Errorf("baseline: only %d of 300 echoes came back", b.Samples)
	}
	return b, nil
}
