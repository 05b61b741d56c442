// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// TransferConfig is a series of short downloads, each on a fresh TCP
// connection (handshake, an 8-byte request, the response, the server's
// close), one at a time: what a web client sees for one object.
type TransferConfig struct {
	Sizes  []int         // bytes per transfer; one round fetches each size once
	Repeat int           // rounds; default 5
	Gap    time.Duration // pause between transfers; default 100 ms
	Delay  time.Duration // wait before the first transfer (e.g. for a background flow to ramp up)
	CC     string
	Port   int // default 5410
}

// TransferStats are the completion times of one size, in milliseconds:
// from before connect() to the end of the response (the server's FIN).
type TransferStats struct {
	Bytes  int       `json:"bytes"`
	Done   int       `json:"done"`
	Failed int       `json:"failed"`
	P50ms  float64   `json:"p50_ms"`
	P90ms  float64   `json:"p90_ms"`
	P99ms  float64   `json:"p99_ms"`
	MinMs  float64   `json:"min_ms"`
	MaxMs  float64   `json:"max_ms"`
	Ms     []float64 `json:"samples_ms"` // in the order measured
}

// TransferResult holds one TransferStats per size, in the configured order.
type TransferResult struct {
	Sizes []TransferStats `json:"sizes"`
	Err   string          `json:"error,omitempty"`
}

// Size returns the stats of size bytes, or nil.
func (r *TransferResult) Size(bytes int) *TransferStats {
	if r == nil {
		return nil
	}
	for i := range r.Sizes {
		if r.Sizes[i].Bytes == bytes {
			return &r.Sizes[i]
		}
	}
	return nil
}

// RunTransfers runs the rounds until done or ctx ends; transfers cut by the
// end of ctx are not counted.
func RunTransfers(ctx context.Context, env Env, cfg TransferConfig) (TransferResult, error) {
	if cfg.Repeat <= 0 {
		cfg.Repeat = 5
	}
	if cfg.Gap <= 0 {
		cfg.Gap = 100 * time.Millisecond
	}
	if cfg.Port == 0 {
		cfg.Port = 5410
	}
	res := TransferResult{}
	for _, s := range cfg.Sizes {
		res.Sizes = append(res.Sizes, TransferStats{Bytes: s})
	}
	if len(cfg.Sizes) == 0 {
		return res, fmt.Errorf("transfers: no sizes")
	}
	ln, err := env.listenTCP(ctx, cfg.Port, cfg.CC)
	if err != nil {
		res.Err = err.Error()
		return res, err
	}
	defer ln.Close()
	go acceptWeb(ln)
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if cfg.Delay > 0 && !sleep(cfg.Delay) {
		return res, nil
	}
	for round := 0; round < cfg.Repeat; round++ {
		for i, size := range cfg.Sizes {
			if round+i > 0 && !sleep(cfg.Gap) {
				return finishTransfers(res), nil
			}
			start := mono.Now()
			ok := fetch(ctx, env, cfg.Port, cfg.CC, size)
			ms := float64(mono.Now().Sub(start)) / 1e6
			if ended(ctx) {
				return finishTransfers(res), nil
			}
			st := &res.Sizes[i]
			if !ok {
				st.Failed++
				continue
			}
			st.Ms = append(st.Ms, ms)
		}
	}
	return finishTransfers(res), nil
}

func finishTransfers(r TransferResult) TransferResult {
	for i := range r.Sizes {
		st := &r.Sizes[i]
		sorted := slices.Clone(st.Ms)
		slices.Sort(sorted)
		st.Done = len(sorted)
		st.P50ms, st.P90ms, st.P99ms = Q(sorted, .5), Q(sorted, .9), Q(sorted, .99)
		st.MinMs, st.MaxMs = Q(sorted, 0), Q(sorted, 1)
	}
	return r
}
