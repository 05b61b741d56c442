// SPDX-License-Identifier: MIT

package scenario

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate is a bit rate in bit/s, written "16mbit", "16Mbit/s", "30M",
// "1.5Gbit", "800k" or a plain number of bit/s.
type Rate float64

// UnmarshalTOML accepts a string or a number.
func (r *Rate) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("rate %d: negative", x)
		}
		*r = Rate(x)
		return nil
	case float64:
		if x < 0 || x != x {
			return fmt.Errorf("rate %v: not a rate", x)
		}
		*r = Rate(x)
		return nil
	case string:
		f, err := ParseRate(x)
		*r = Rate(f)
		return err
	}
	return fmt.Errorf("rate: want a string like \"16mbit\" or a number, got %T", v)
}

// ParseRate parses a bit rate.
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "/s")
	t = strings.TrimSuffix(t, "ps")
	t = strings.TrimSuffix(t, "bit")
	t = strings.TrimSuffix(t, "b")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1e3, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1e6, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1e9, t[:len(t)-1]
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("rate %q: want e.g. \"16mbit\", \"800k\", \"1.5Gbit\"", s)
	}
	return f * mult, nil
}

// Size is a byte count, written "64KB", "1.5MB", "64KiB", "9000" or a number.
type Size int

// UnmarshalTOML accepts a string or a number.
func (z *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("size %d: negative", x)
		}
		*z = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		*z = Size(n)
		return err
	}
	return fmt.Errorf("size: want a string like \"64KB\" or a number, got %T", v)
}

// ParseSize parses a byte count (KB = 1000, KiB = 1024).
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range []struct {
		suf string
		m   float64
	}{{"KiB", 1024}, {"MiB", 1 << 20}, {"KB", 1e3}, {"kB", 1e3}, {"MB", 1e6}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			mult, t = u.m, strings.TrimSpace(strings.TrimSuffix(t, u.suf))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f >= 0) || f*mult > math.MaxInt32 {
		return 0, fmt.Errorf("size %q: want e.g. \"64KB\", \"1MB\", \"9000\"", s)
	}
	return int(f * mult), nil
}

// Duration is a time.Duration written as "150ms", "20s".
type Duration time.Duration

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q: negative", b)
	}
	*d = Duration(v)
	return nil
}

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
