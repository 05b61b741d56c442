// SPDX-License-Identifier: MIT

package report

import (
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// The sampler starts before the traffic (idle RTT and short transfers come
// first); results.json must give its samples against the traffic's start.
func TestAlignCountsSampleTimesFromTheTrafficStart(t *testing.T) {
	start := mono.Time(100 * time.Second)
	m := &TunnelMetrics{
		TimesS:       []float64{0, 1, 4},
		First:        start.Add(-3 * time.Second),
		ProcessStart: start.Add(-3500 * time.Millisecond),
		Process:      map[string][]ProcessSample{"sender": {{TimeS: 0}, {TimeS: 5}}},
	}
	m.Align(start)
	for i, want := range []float64{-3, -2, 1} {
		if got := m.TimesS[i]; !near(got, want) {
			t.Errorf("TimesS[%d] = %v, want %v", i, got, want)
		}
	}
	for i, want := range []float64{-3.5, 1.5} {
		if got := m.Process["sender"][i].TimeS; !near(got, want) {
			t.Errorf("process TimeS[%d] = %v, want %v", i, got, want)
		}
	}
	// Aligned once: a second call (a report rewritten) must not shift again.
	m.Align(start.Add(time.Second))
	if !near(m.TimesS[0], -3) || !near(m.Process["sender"][0].TimeS, -3.5) {
		t.Errorf("second Align shifted again: %v, %v", m.TimesS[0], m.Process["sender"][0].TimeS)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
