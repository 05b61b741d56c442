// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// WebConfig is web-like load as in the L4S experiments: flows arrive as a
// Poisson process and their sizes follow a bounded Pareto distribution.
type WebConfig struct {
	Rate    float64 // flows per second
	Alpha   float64 // default 0.9
	MinSize int     // default 1 KB
	MaxSize int     // default 1 MB
	CC      string
	Port    int // default 5400
	Seed    uint64
}

// FCTBucket summarises flow completion times of one size class.
type FCTBucket struct {
	Label  string  `json:"label"`
	Flows  int     `json:"flows"`
	Failed int     `json:"failed"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// WebResult holds per-flow completion times by size bucket.
type WebResult struct {
	Flows  int `json:"flows"`
	Failed int `json:"failed"`
	// Unfinished flows were still running when the run ended; they are
	// neither completions nor failures.
	Unfinished int         `json:"unfinished"`
	Buckets    []FCTBucket `json:"buckets"`
	Err        string      `json:"error,omitempty"`
}

// BoundedPareto draws a size from the bounded Pareto distribution.
func BoundedPareto(r *rand.Rand, alpha, lo, hi float64) float64 {
	u := r.Float64()
	la := math.Pow(lo, alpha)
	ha := math.Pow(hi, alpha)
	return math.Pow(-(u*ha-u*la-ha)/(ha*la), -1/alpha)
}

// BoundedParetoMean is the mean of BoundedPareto(alpha, lo, hi), to turn
// a load (bit/s) into a flow arrival rate.
func BoundedParetoMean(alpha, lo, hi float64) float64 {
	if alpha == 1 {
		return lo * hi / (hi - lo) * math.Log(hi/lo)
	}
	la := math.Pow(lo, alpha)
	return la / (1 - math.Pow(lo/hi, alpha)) * alpha / (alpha - 1) * (1/math.Pow(lo, alpha-1) - 1/math.Pow(hi, alpha-1))
}

// RunWeb runs short flows until ctx ends; each flow asks the server for n
// bytes and measures connect-to-last-byte time.
func RunWeb(ctx context.Context, env Env, cfg WebConfig) (WebResult, error) {
	if cfg.Alpha == 0 {
		cfg.Alpha = 0.9
	}
	if cfg.MinSize == 0 {
		cfg.MinSize = 1000
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 1000000
	}
	if cfg.Port == 0 {
		cfg.Port = 5400
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 10
	}
	ln, err := env.listenTCP(ctx, cfg.Port, cfg.CC)
	if err != nil {
		return WebResult{Err: err.Error()}, err
	}
	defer ln.Close()
	go acceptWeb(ln)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x77656221))
	type flow struct {
		size int
		fct  time.Duration
		ok   bool
		cut  bool
	}
	var (
		mu    sync.Mutex
		flows []flow
		wg    sync.WaitGroup
	)
	next := mono.Now()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * 1e9))
		wait := next.Sub(mono.Now())
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
		size := int(BoundedPareto(rng, cfg.Alpha, float64(cfg.MinSize), float64(cfg.MaxSize)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := mono.Now()
			ok := fetch(ctx, env, cfg.Port, cfg.CC, size)
			mu.Lock()
			flows = append(flows, flow{size, mono.Now().Sub(start), ok, !ok && ended(ctx)})
			mu.Unlock()
		}()
	}
	ln.Close()
	wg.Wait()
	res := WebResult{}
	for _, f := range flows {
		if f.cut {
			res.Unfinished++
		}
	}
	buckets := []struct {
		label  string
		lo, hi int
	}{{"<=10KB", 0, 10000}, {"10-100KB", 10001, 100000}, {">100KB", 100001, math.MaxInt}}
	for _, b := range buckets {
		fb := FCTBucket{Label: b.label}
		var ms []float64
		for _, f := range flows {
			if f.size < b.lo || f.size > b.hi || f.cut {
				continue
			}
			if !f.ok {
				fb.Failed++
				continue
			}
			ms = append(ms, float64(f.fct)/1e6)
		}
		slices.Sort(ms)
		fb.Flows = len(ms)
		fb.P50ms, fb.P99ms = Q(ms, .5), Q(ms, .99)
		for _, v := range ms {
			fb.MeanMs += v / float64(len(ms))
		}
		res.Flows += fb.Flows
		res.Failed += fb.Failed
		res.Buckets = append(res.Buckets, fb)
	}
	return res, nil
}

// ended reports whether the run behind ctx is over: ctx is done, or its
// deadline has passed. A flow that fails at the run's end fails on the
// deadline itself (a dial's or read's deadline is the context's), a
// moment before ctx.Err() reports it; judged by ctx.Err() alone, dials
// started in the run's last milliseconds counted as failed flows (one or
// two in about one web-load run in four: "i/o timeout" 6-17 ms after
// the dial began).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// webGrace is how long a web flow may run on after the run's end.
const webGrace = 10 * time.Second

// fetch opens a fresh connection, asks the server for size bytes and reads
// them to the end: what a web client's request costs, handshake included.
func fetch(ctx context.Context, env Env, port int, cc string, size int) bool {
	c, err := env.dialTCP(ctx, port, cc)
	if err != nil {
		return false
	}
	defer c.Close()
	// A flow still running when the run ends may finish within
	// webGrace; one that stalled is cut then.
	defer bindToContext(ctx, c, webGrace)()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], uint64(size))
	if _, err := c.Write(req[:]); err != nil {
		return false
	}
	n, err := io.Copy(io.Discard, c)
	return err == nil && n == int64(size)
}

// acceptWeb answers each connection ln accepts with serveWeb, until ln
// is closed.
func acceptWeb(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serveWeb(c)
	}
}

func serveWeb(c net.Conn) {
	defer c.Close()
	var req [8]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint64(req[:])
	if n > 1<<30 {
		return
	}
	buf := make([]byte, 32<<10)
	for n > 0 {
		k := min(uint64(len(buf)), n)
		w, err := c.Write(buf[:k])
		if err != nil {
			return
		}
		n -= uint64(w)
	}
}
