// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/ptimer"
)

// ProbeConfig is a constant-rate stream of sequence-numbered, timestamped
// packets. Over UDP it measures loss, reordering and delivery gaps; over a
// stream (Stream, e.g. for kernel MPTCP, which carries no UDP) it measures
// delivery delay and gaps of small messages.
type ProbeConfig struct {
	PPS    int  // packets per second; default 1000
	Size   int  // payload bytes, at least 16; default 64
	Port   int  // default 5300
	Down   bool // server sends to client
	Stream bool // use a TCP/MPTCP connection instead of UDP
	// Grace is how long the receiver waits for stragglers after the last
	// send; default 1 s.
	Grace time.Duration
}

// ProbePacket is one probe packet's fate; Recv is 0 if it was lost.
type ProbePacket struct {
	Seq        uint32
	Sent, Recv mono.Time
}

// Quantiles of one-way delay in milliseconds.
type Quantiles struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	P9999 float64 `json:"p99_99"`
	// P99999 needs ≥ 10^5 samples to mean anything (web-load's probe).
	P99999 float64 `json:"p99_999"`
	Max    float64 `json:"max"`
}

// ProbeResult summarises a probe run.
type ProbeResult struct {
	Sent        int       `json:"sent"`
	Received    int       `json:"received"`
	Lost        int       `json:"lost"`
	Duplicates  int       `json:"duplicates"`
	OOOFraction float64   `json:"ooo_fraction"`
	MaxGapMs    float64   `json:"max_gap_ms"`
	MaxGapAtS   float64   `json:"max_gap_at_s"` // start of the largest gap, seconds since Env.Start
	JitterMs    float64   `json:"jitter_ms"`    // RFC 3550 interarrival jitter
	OWDms       Quantiles `json:"owd_ms"`
	Err         string    `json:"error,omitempty"`

	Packets []ProbePacket `json:"-"`
	// OWD holds the sorted delays of received packets (ms), for CDF plots.
	OWD []float64 `json:"-"`
}

type probeLog struct {
	mu      sync.Mutex
	pkts    []ProbePacket
	dups    int
	arrival []uint32 // sequence numbers in arrival order
	arrAt   []mono.Time
}

func (l *probeLog) sent(seq uint32, at mono.Time) {
	l.mu.Lock()
	for int(seq) >= len(l.pkts) {
		l.pkts = append(l.pkts, ProbePacket{Seq: uint32(len(l.pkts))})
	}
	l.pkts[seq].Sent = at
	l.mu.Unlock()
}

func (l *probeLog) received(seq uint32, sent, at mono.Time) {
	l.mu.Lock()
	for int(seq) >= len(l.pkts) {
		l.pkts = append(l.pkts, ProbePacket{Seq: uint32(len(l.pkts))})
	}
	p := &l.pkts[seq]
	if p.Recv != 0 {
		l.dups++
	} else {
		p.Recv = at
		if p.Sent == 0 {
			p.Sent = sent
		}
		l.arrival = append(l.arrival, seq)
		l.arrAt = append(l.arrAt, at)
	}
	l.mu.Unlock()
}

// RunProbe sends until ctx ends, waits Grace for stragglers, and analyses.
func RunProbe(ctx context.Context, env Env, cfg ProbeConfig) (ProbeResult, error) {
	if cfg.PPS <= 0 {
		cfg.PPS = 1000
	}
	if cfg.Size < 16 {
		cfg.Size = 64
	}
	if cfg.Port == 0 {
		cfg.Port = 5300
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Second
	}
	log := &probeLog{pkts: make([]ProbePacket, 0, 1<<16)}
	var err error
	if cfg.Stream {
		err = runStreamProbe(ctx, env, cfg, log)
	} else {
		err = runUDPProbe(ctx, env, cfg, log)
	}
	res := analyse(env, log)
	if err != nil {
		res.Err = err.Error()
	}
	return res, err
}

// pace calls send(seq) at pps until ctx ends.
func pace(ctx context.Context, pps int, send func(seq uint32) error) error {
	tm, err := ptimer.New()
	if err != nil {
		return err
	}
	defer tm.Close()
	gap := time.Second / time.Duration(pps)
	start := mono.Now()
	var seq uint32
	for ctx.Err() == nil {
		now := mono.Now()
		for due := start.Add(time.Duration(seq) * gap); due <= now; due = due.Add(gap) {
			if err := send(seq); err != nil {
				return err
			}
			seq++
		}
		if err := tm.Reset(start.Add(time.Duration(seq) * gap)); err != nil {
			return err
		}
		if _, err := tm.Wait(); err != nil {
			return err
		}
	}
	return nil
}

func runUDPProbe(ctx context.Context, env Env, cfg ProbeConfig, log *probeLog) error {
	var srv, cli *net.UDPConn
	if err := env.Srv.Do(func() (err error) {
		srv, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(env.ServerAddr, uint16(cfg.Port))))
		return err
	}); err != nil {
		return fmt.Errorf("probe: listen: %w", err)
	}
	defer srv.Close()
	var laddr *net.UDPAddr
	if env.ClientBind.IsValid() {
		laddr = &net.UDPAddr{IP: env.ClientBind.AsSlice()}
	}
	if err := env.Cli.Do(func() (err error) {
		cli, err = net.DialUDP("udp4", laddr, net.UDPAddrFromAddrPort(netip.AddrPortFrom(env.ServerAddr, uint16(cfg.Port))))
		return err
	}); err != nil {
		return fmt.Errorf("probe: dial: %w", err)
	}
	defer cli.Close()
	_ = srv.SetReadBuffer(4 << 20)
	_ = cli.SetReadBuffer(4 << 20)

	recvLoop := func(c *net.UDPConn, learned chan<- netip.AddrPort) {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			now := mono.Now()
			if err != nil {
				return
			}
			if n == 1 && learned != nil { // hello from the client
				select {
				case learned <- from:
				default:
				}
				continue
			}
			if n < 16 {
				continue
			}
			log.received(binary.BigEndian.Uint32(buf), mono.Time(binary.BigEndian.Uint64(buf[8:])), now)
		}
	}
	buf := make([]byte, cfg.Size)
	fill := func(seq uint32) mono.Time {
		now := mono.Now()
		binary.BigEndian.PutUint32(buf, seq)
		binary.BigEndian.PutUint64(buf[8:], uint64(now))
		return now
	}
	var send func(seq uint32) error
	if cfg.Down {
		learned := make(chan netip.AddrPort, 1)
		go recvLoop(srv, learned)
		go recvLoop(cli, nil)
		var peer netip.AddrPort
		// The server learns the client's address from hellos; a hello
		// may be lost on a lossy path.
		for !peer.IsValid() {
			cli.Write([]byte{0})
			select {
			case peer = <-learned:
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		send = func(seq uint32) error {
			log.sent(seq, fill(seq))
			srv.WriteToUDPAddrPort(buf, peer) // errors are losses
			return nil
		}
	} else {
		go recvLoop(srv, nil)
		send = func(seq uint32) error {
			log.sent(seq, fill(seq))
			cli.Write(buf)
			return nil
		}
	}
	err := pace(ctx, cfg.PPS, send)
	time.Sleep(cfg.Grace)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func runStreamProbe(ctx context.Context, env Env, cfg ProbeConfig, log *probeLog) error {
	ln, err := env.listenTCP(ctx, cfg.Port, "")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	cc, err := env.dialTCP(ctx, cfg.Port, "")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer cc.Close()
	var sc net.Conn
	select {
	case sc = <-accepted:
	case <-time.After(10 * time.Second):
		return errors.New("probe: accept timed out")
	}
	defer sc.Close()
	from, to := cc, sc
	if cfg.Down {
		from, to = sc, cc
	}
	// The sender stops at the end of the run even when the stream has
	// stalled and its write blocks (kernel MPTCP over trace-driven paths
	// did, and the lab waited for it for good).
	defer bindToContext(ctx, from, 0)()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, cfg.Size)
		for {
			if err := readFull(to, buf); err != nil {
				return
			}
			log.received(binary.BigEndian.Uint32(buf), mono.Time(binary.BigEndian.Uint64(buf[8:])), mono.Now())
		}
	}()
	buf := make([]byte, cfg.Size)
	err = pace(ctx, cfg.PPS, func(seq uint32) error {
		now := mono.Now()
		binary.BigEndian.PutUint32(buf, seq)
		binary.BigEndian.PutUint64(buf[8:], uint64(now))
		log.sent(seq, now)
		_, err := from.Write(buf)
		return err
	})
	select {
	case <-done:
	case <-time.After(cfg.Grace):
	}
	if errors.Is(err, context.Canceled) || ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil // the run ended; a stalled write was cut
	}
	return err
}

func analyse(env Env, l *probeLog) ProbeResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := ProbeResult{Packets: l.pkts, Duplicates: l.dups}
	var owd []float64
	var jitter float64
	var prevTransit float64
	first := true
	for _, p := range l.pkts {
		if p.Sent == 0 {
			continue
		}
		r.Sent++
		if p.Recv == 0 {
			continue
		}
		r.Received++
		transit := float64(p.Recv-p.Sent) / 1e6
		owd = append(owd, transit)
		if !first {
			jitter += (math.Abs(transit-prevTransit) - jitter) / 16
		}
		prevTransit, first = transit, false
	}
	r.Lost = r.Sent - r.Received
	r.JitterMs = jitter
	var highest int64 = -1
	ooo := 0
	for i, s := range l.arrival {
		if int64(s) < highest {
			ooo++
		} else {
			highest = int64(s)
		}
		if i > 0 {
			if g := float64(l.arrAt[i]-l.arrAt[i-1]) / 1e6; g > r.MaxGapMs {
				r.MaxGapMs = g
				r.MaxGapAtS = l.arrAt[i-1].Sub(env.Start).Seconds()
			}
		}
	}
	// A path that dies for good leaves a gap from the last arrival to the
	// end of sending, which counts too.
	if n := len(l.arrAt); n > 0 {
		var lastSent mono.Time
		for _, p := range l.pkts {
			lastSent = max(lastSent, p.Sent)
		}
		if g := float64(lastSent-l.arrAt[n-1]) / 1e6; g > r.MaxGapMs {
			r.MaxGapMs = g
			r.MaxGapAtS = l.arrAt[n-1].Sub(env.Start).Seconds()
		}
	}
	if r.Received > 0 {
		r.OOOFraction = float64(ooo) / float64(r.Received)
	}
	slices.Sort(owd)
	r.OWD = owd
	r.OWDms = Quantiles{P50: Q(owd, .5), P90: Q(owd, .9), P99: Q(owd, .99), P999: Q(owd, .999), P9999: Q(owd, .9999), P99999: Q(owd, .99999), Max: Q(owd, 1)}
	return r
}

// Q returns the q-quantile of sorted xs (nearest rank), 0 if empty.
func Q(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
