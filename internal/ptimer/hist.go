// SPDX-License-Identifier: MIT

package ptimer

import (
	"fmt"
	"sync"
	"time"
)

// histBuckets covers 0..4095 µs at 1 µs resolution; larger values go to the
// last bucket and Max keeps the exact worst case.
const histBuckets = 4096

// Histogram records durations at microsecond resolution without allocating.
// It is safe for concurrent use.
type Histogram struct {
	mu     sync.Mutex
	n      uint64
	sum    time.Duration
	max    time.Duration
	bucket [histBuckets]uint32
}

// Add records one sample; negative samples count as zero.
func (h *Histogram) Add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := int(d / time.Microsecond)
	if i >= histBuckets {
		i = histBuckets - 1
	}
	h.mu.Lock()
	h.n++
	h.sum += d
	if d > h.max {
		h.max = d
	}
	h.bucket[i]++
	h.mu.Unlock()
}

// Count returns the number of samples.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Quantile returns the q-quantile (0..1), rounded up to the bucket's upper edge.
func (h *Histogram) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	target := uint64(q*float64(h.n) + 0.5)
	if target < 1 {
		target = 1
	}
	var c uint64
	for i, b := range h.bucket {
		c += uint64(b)
		if c >= target {
			if i == histBuckets-1 {
				return h.max
			}
			return time.Duration(i+1) * time.Microsecond
		}
	}
	return h.max
}

// Max returns the largest sample.
func (h *Histogram) Max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// Reset clears the histogram.
func (h *Histogram) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n, h.sum, h.max = 0, 0, 0
	h.bucket = [histBuckets]uint32{}
}

// String summarises the histogram as "n=… p50=… p99=… max=…".
func (h *Histogram) String() string {
	return fmt.Sprintf("n=%d p50=%v p99=%v p99.9=%v max=%v", h.Count(), h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999), h.Max())
}
