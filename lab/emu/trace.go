// SPDX-License-Identifier: MIT

package emu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// TraceMTU is the bytes one Mahimahi delivery opportunity releases.
const TraceMTU = 1500

// maxTraceMs bounds a timestamp (about 24 days) so times cannot overflow.
const maxTraceMs = 1 << 31

// Trace is a Mahimahi link trace: each entry is a millisecond offset at which
// TraceMTU bytes may leave the queue; the trace repeats with period Period.
type Trace struct {
	Opps   []time.Duration // non-decreasing
	Period time.Duration   // last timestamp, at least 1 ms
}

// ParseTrace reads the Mahimahi format: one integer millisecond per line.
func ParseTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	t := &Trace{}
	line := 0
	var last int64 = -1
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 || ms > maxTraceMs {
			return nil, fmt.Errorf("trace line %d: %q: not a millisecond count (0..%d)", line, s, int64(maxTraceMs))
		}
		if ms < last {
			return nil, fmt.Errorf("trace line %d: %d ms goes back in time (previous %d)", line, ms, last)
		}
		last = ms
		t.Opps = append(t.Opps, time.Duration(ms)*time.Millisecond)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if len(t.Opps) == 0 {
		return nil, fmt.Errorf("trace: no delivery opportunities")
	}
	t.Period = t.Opps[len(t.Opps)-1]
	if t.Period < time.Millisecond {
		t.Period = time.Millisecond
	}
	return t, nil
}

// LoadTrace reads a trace file.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	t, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// MeanRate is the trace's average capacity in bit/s.
func (t *Trace) MeanRate() float64 {
	return float64(len(t.Opps)) * TraceMTU * 8 / t.Period.Seconds()
}

// opp returns the time of opportunity number i (counting across repeats).
func (t *Trace) opp(i int64) time.Duration {
	n := int64(len(t.Opps))
	return time.Duration(i/n)*t.Period + t.Opps[i%n]
}

// firstAtOrAfter returns the index of the first opportunity at or after d.
// Offsets lie in [0, Period], so the answer may sit in the previous repeat.
func (t *Trace) firstAtOrAfter(d time.Duration) int64 {
	n := int64(len(t.Opps))
	for r := max(int64(d/t.Period)-1, 0); ; r++ {
		rem := d - time.Duration(r)*t.Period
		lo, hi := 0, len(t.Opps)
		for lo < hi {
			m := (lo + hi) / 2
			if t.Opps[m] < rem {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo < len(t.Opps) {
			return r*n + int64(lo)
		}
	}
}
