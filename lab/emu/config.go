// SPDX-License-Identifier: MIT

// Package emu is the lab's link emulator: a transparent layer-2 link per
// path, bridged by AF_PACKET sockets in a middle namespace, with a drop-tail
// (or CoDel) queue, serialization at a rate or a Mahimahi trace, propagation
// delay, jitter, loss, duplication, reordering, blackholes and schedules.
//
// Pipe is the sans-I/O model of one direction; Link is the I/O shell.
package emu

import (
	"fmt"
	"time"

	"github.com/mptun/mptun/internal/lossmodel"
)

// GilbertElliott is the two-state bursty loss model (internal/lossmodel).
type GilbertElliott = lossmodel.GilbertElliott

// CoDel configures the CoDel AQM (RFC 8289, internal/codel) on the
// bottleneck queue.
type CoDel struct {
	Target   time.Duration // default codel.DefaultTarget, 5 ms
	Interval time.Duration // default codel.DefaultInterval, 100 ms
}

// Config is one direction of a path. The zero value is a perfect link.
type Config struct {
	Rate         float64 // bits per second on the wire (layer-2 frames); 0 = unlimited
	Trace        *Trace  // Mahimahi delivery opportunities; overrides Rate
	TraceScale   float64 // multiplies the trace's capacity; 0 means 1
	QueueBytes   int     // drop-tail limit in bytes, counting the frame in service; 0 = unlimited
	QueuePackets int     // drop-tail limit in frames; 0 = unlimited
	CoDel        *CoDel  // optional AQM instead of pure drop-tail (limits still apply)

	Delay  time.Duration // propagation delay, not counted against the queue
	Jitter time.Duration // extra uniform delay in [0, Jitter]; FIFO kept unless Reorder > 0

	Loss      float64         // Bernoulli loss probability
	GE        *GilbertElliott // bursty loss, applied in addition to Loss
	Duplicate float64         // probability that a frame is delivered twice
	Reorder   float64         // probability that a frame is held ReorderExtra longer and overtaken
	// ReorderExtra is the extra hold of a reordered frame; default max(Delay/2, 1 ms).
	ReorderExtra time.Duration

	Blackhole bool // silently drop everything, including frames in flight
}

// Validate checks ranges.
func (c *Config) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", c.Loss}, {"duplicate", c.Duplicate}, {"reorder", c.Reorder}} {
		if p.v < 0 || p.v > 1 {
			return fmt.Errorf("%s %v: not a probability", p.name, p.v)
		}
	}
	if c.Rate < 0 || c.QueueBytes < 0 || c.QueuePackets < 0 || c.Delay < 0 || c.Jitter < 0 || c.TraceScale < 0 {
		return fmt.Errorf("negative rate, queue, delay, jitter or trace scale")
	}
	if g := c.GE; g != nil {
		if err := g.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// serialization returns how long size bytes occupy a link of rate bit/s.
func serialization(size int, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(size) * 8 * 1e9 / rate)
}
