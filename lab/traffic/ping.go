// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mptun/mptun/internal/inetsum"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
)

// PingConfig is an ICMP echo series from one namespace, like ping(8).
type PingConfig struct {
	Src      netip.Addr    // optional source address (selects the path by source routing)
	Dst      netip.Addr    // target
	Count    int           // default 20
	Interval time.Duration // default 20 ms
	Timeout  time.Duration // how long to wait for the last reply; default 2 s
	Size     int           // payload bytes, at least 16; default 56 as ping(8)
}

// RTTStats summarises round-trip times in milliseconds.
type RTTStats struct {
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	Min      float64 `json:"min_ms"`
	P10      float64 `json:"p10_ms"`
	P50      float64 `json:"p50_ms"`
	P90      float64 `json:"p90_ms"`
	Max      float64 `json:"max_ms"`
	// Samples are the round-trip times in the order sent (lost ones are
	// absent).
	Samples []float64 `json:"samples_ms,omitempty"`
}

// NewRTTStats summarises samples (ms) out of sent.
func NewRTTStats(sent int, samples []float64) RTTStats {
	s := RTTStats{Sent: sent, Received: len(samples), Samples: samples}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	s.Min, s.P10, s.P50, s.P90, s.Max = Q(sorted, 0), Q(sorted, .1), Q(sorted, .5), Q(sorted, .9), Q(sorted, 1)
	return s
}

var pingID atomic.Uint32

// RunPing sends Count echo requests Interval apart from inside ns and times
// the replies (user-space send to user-space receive, as ping(8) without
// kernel timestamps). It needs a raw socket (root).
func RunPing(ctx context.Context, ns *netns.NS, cfg PingConfig) (RTTStats, error) {
	if cfg.Count <= 0 {
		cfg.Count = 20
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Size < 16 {
		cfg.Size = 56
	}
	laddr := "0.0.0.0"
	if cfg.Src.IsValid() {
		laddr = cfg.Src.String()
	}
	var c net.PacketConn
	if err := ns.Do(func() (err error) {
		c, err = net.ListenPacket("ip4:icmp", laddr)
		return err
	}); err != nil {
		return RTTStats{}, fmt.Errorf("ping: %w", err)
	}
	defer c.Close()
	// Distinct identifiers: several series may run in one namespace, and
	// a raw socket sees every ICMP message.
	id := uint16(pingID.Add(1)) ^ uint16(mono.Now())
	rtt := make([]float64, cfg.Count)
	for i := range rtt {
		rtt[i] = -1
	}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			now := mono.Now()
			if err != nil {
				return
			}
			seq, sent, ok := parseEchoReply(buf[:n], id)
			if !ok || int(seq) >= cfg.Count {
				continue
			}
			mu.Lock()
			if rtt[seq] < 0 {
				rtt[seq] = float64(now-sent) / 1e6
			}
			mu.Unlock()
		}
	}()
	dst := &net.IPAddr{IP: cfg.Dst.AsSlice()}
	msg := make([]byte, 8+cfg.Size)
	var sendErr error
	sent := 0
	for seq := 0; seq < cfg.Count && ctx.Err() == nil; seq++ {
		if seq > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.Interval):
			}
		}
		echoRequest(msg, id, uint16(seq), mono.Now())
		if _, err := c.WriteTo(msg, dst); err != nil {
			sendErr = err // a path without a route counts as loss
		}
		sent++
	}
	// Wait for stragglers, but not longer than needed.
	deadline := time.Now().Add(cfg.Timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		mu.Lock()
		all := !slices.Contains(rtt[:sent], -1)
		mu.Unlock()
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	<-done
	var got []float64
	for _, v := range rtt[:sent] {
		if v >= 0 {
			got = append(got, v)
		}
	}
	s := NewRTTStats(sent, got)
	if s.Received == 0 {
		return s, errors.Join(fmt.Errorf("ping %v: no reply to %d requests", cfg.Dst, sent), sendErr)
	}
	return s, nil
}

// echoRequest writes an ICMP echo request carrying the send time.
func echoRequest(b []byte, id, seq uint16, now mono.Time) {
	clear(b)
	b[0] = 8 // echo request
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	binary.BigEndian.PutUint64(b[8:], uint64(now))
	binary.BigEndian.PutUint16(b[2:], inetsum.Checksum(b))
}

// parseEchoReply returns the sequence number and send time of an echo reply
// with identifier id. b starts at the ICMP header (the raw socket strips the
// IPv4 header).
func parseEchoReply(b []byte, id uint16) (seq uint16, sent mono.Time, ok bool) {
	if len(b) < 16 || b[0] != 0 || b[1] != 0 || binary.BigEndian.Uint16(b[4:]) != id {
		return 0, 0, false
	}
	if inetsum.Checksum(b) != 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(b[6:]), mono.Time(binary.BigEndian.Uint64(b[8:])), true
}
