// SPDX-License-Identifier: MIT

package metrics

import (
	"math"
	"sync/atomic"
)

// Histogram counts observations in fixed buckets. Observe is safe for
// concurrent use and does not allocate.
type Histogram struct {
	bounds []float64       // upper bounds, increasing
	counts []atomic.Uint64 // per bucket, the last one for +Inf
	count  atomic.Uint64
	sum    atomic.Uint64 // float64 bits
}

// NewHistogram returns a histogram with the given increasing upper bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
	h.count.Add(1)
}

func (h *Histogram) write(t *textWriter, name, help string) {
	t.header(name, help, histogram)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		t.sample(name+"_bucket", float64(cum), "le", formatValue(b))
	}
	cum += h.counts[len(h.bounds)].Load()
	t.sample(name+"_bucket", float64(cum), "le", "+Inf")
	t.sample(name+"_sum", math.Float64frombits(h.sum.Load()))
	t.sample(name+"_count", float64(cum))
}
