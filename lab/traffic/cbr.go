// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// UDPIPOverhead is what IPv4 and UDP headers add to a datagram's payload.
const UDPIPOverhead = 28

// CBRConfig is a constant-bit-rate UDP flow of sequence-numbered,
// timestamped datagrams (the probe's format at a higher rate).
type CBRConfig struct {
	// RateBps is the offered rate counted in IP bytes (payload + 28), so
	// it can be compared with a path's rate before link and tunnel
	// headers.
	RateBps float64
	Size    int  // payload bytes; default 1200
	Down    bool // server sends to client
	Port    int  // default 5320
	Grace   time.Duration
}

// PPS is the packet rate that offers RateBps.
func (c CBRConfig) PPS() int {
	size := c.Size
	if size <= 0 {
		size = 1200
	}
	return max(1, int(math.Round(c.RateBps/8/float64(size+UDPIPOverhead))))
}

// CBRResult is what the receiver saw.
type CBRResult struct {
	OfferedMbps float64 `json:"offered_mbps"` // IP bytes actually sent per second
	GoodputMbps float64 `json:"goodput_mbps"` // payload received per second
	Size        int     `json:"size"`
	Sent        int     `json:"sent"`
	Received    int     `json:"received"`
	// Delivered is Received / Sent; LossFraction is 1 − Delivered.
	Delivered    float64   `json:"delivered"`
	LossFraction float64   `json:"loss_fraction"`
	OOOFraction  float64   `json:"ooo_fraction"` // arrivals below the highest sequence number seen
	Duplicates   int       `json:"duplicates"`
	MaxGapMs     float64   `json:"max_gap_ms"`
	JitterMs     float64   `json:"jitter_ms"`
	OWDms        Quantiles `json:"owd_ms"`
	Err          string    `json:"error,omitempty"`
}

// RunCBR sends until ctx ends, waits Grace for stragglers and analyses.
func RunCBR(ctx context.Context, env Env, cfg CBRConfig) (CBRResult, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1200
	}
	if cfg.Size < 16 || cfg.Size > 65000 {
		return CBRResult{}, fmt.Errorf("cbr: size %d out of 16..65000", cfg.Size)
	}
	if cfg.Port == 0 {
		cfg.Port = 5320
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Second
	}
	log := &probeLog{pkts: make([]ProbePacket, 0, 1<<16)}
	pps := cfg.PPS()
	err := runUDPProbe(ctx, env, ProbeConfig{PPS: pps, Size: cfg.Size, Port: cfg.Port, Down: cfg.Down, Grace: cfg.Grace}, log)
	p := analyse(env, log)
	// Rates over the sending interval (first to last send, plus one
	// packet's slot), not the wall time around it.
	var first, last mono.Time
	for _, pk := range p.Packets {
		if pk.Sent != 0 {
			if first == 0 {
				first = pk.Sent
			}
			last = max(last, pk.Sent)
		}
	}
	sendTime := last.Sub(first) + time.Second/time.Duration(pps)
	r := CBRResult{Size: cfg.Size, Sent: p.Sent, Received: p.Received, OOOFraction: p.OOOFraction,
		Duplicates: p.Duplicates, MaxGapMs: p.MaxGapMs, JitterMs: p.JitterMs, OWDms: p.OWDms}
	if sendTime > 0 {
		r.OfferedMbps = float64(p.Sent*(cfg.Size+UDPIPOverhead)) * 8 / sendTime.Seconds() / 1e6
		r.GoodputMbps = float64(p.Received*cfg.Size) * 8 / sendTime.Seconds() / 1e6
	}
	if p.Sent > 0 {
		r.Delivered = float64(p.Received) / float64(p.Sent)
		r.LossFraction = 1 - r.Delivered
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r, err
}
