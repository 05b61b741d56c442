// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mptun/mptun/bench"
)

// TestScaleThousandCPEs is `mptun bench scale` at CI size: 1,000
// in-process CPEs (secure mode, a key and an address each) dial one real
// mptund concentrator at once; every one must connect and stay up
// through the idle phase, the concentrator's status must list all of
// them, and two bulk flows must get through. The figures themselves
// (connect p99, bytes and CPU per connection) are the benchmark's to
// report, not this test's to judge.
func TestScaleThousandCPEs(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("1,000 CPEs take about 30 s")
	}
	bin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := bench.Scale(ctx, bench.Tools{Mptund: filepath.Join(bin, "mptund")}, bench.ScaleOptions{
		Clients: 1000, Active: 2, Idle: 6 * time.Second, Seconds: 3, Log: testLog{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if r.Connected != 1000 || r.Failed != 0 {
		t.Fatalf("%d connected, %d failed: %v", r.Connected, r.Failed, r.Failures)
	}
	if r.ServerConns != 1000 || r.ListedConns != 1000 {
		t.Errorf("the concentrator's status counts %d and lists %d open connections, want 1000", r.ServerConns, r.ListedConns)
	}
	if r.ClosedDuringIdle != 0 {
		t.Errorf("%d connections closed while idle (keepalives should hold them)", r.ClosedDuringIdle)
	}
	if r.ThroughputGbps <= 0 {
		t.Errorf("no bulk traffic reached the concentrator's TUN")
	}
	if r.IdleCPUSeconds <= 0 || r.RSSBytes <= r.RSSBaseBytes || r.HeapBytes <= r.HeapBaseBytes {
		t.Errorf("implausible measurements: idle CPU %.3f s, RSS %d → %d, heap %d → %d",
			r.IdleCPUSeconds, r.RSSBaseBytes, r.RSSBytes, r.HeapBaseBytes, r.HeapBytes)
	}
	t.Logf("connect p50 %.0f ms p99 %.0f ms; %.0f B RSS, %.0f B heap and %.1f µs CPU/s per connection; %.3f Gbit/s",
		r.ConnectP50Ms, r.ConnectP99Ms, r.RSSPerConnBytes, r.HeapPerConnBytes, r.IdleCPUPerConnUs, r.ThroughputGbps)
}

// testLog sends a benchmark's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", p)
	return len(p), nil
}
