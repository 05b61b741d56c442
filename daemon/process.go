// SPDX-License-Identifier: MIT

package daemon

import (
	"runtime"
	"runtime/metrics"

	"github.com/mptun/mptun/control"
)

// processStatus is the daemon's footprint: goroutines and heap, with the
// heap the last collection kept (what a load test divides by
// connections), after a collection now when gc is set.
func processStatus(gc bool) control.ProcessStatus {
	if gc {
		runtime.GC()
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	ps := control.ProcessStatus{Goroutines: runtime.NumGoroutine(), HeapBytes: mem.HeapAlloc, SysBytes: mem.Sys, GCs: mem.NumGC}
	if live[0].Value.Kind() == metrics.KindUint64 {
		ps.HeapLiveBytes = live[0].Value.Uint64()
	}
	return ps
}
