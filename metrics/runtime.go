// SPDX-License-Identifier: MIT

package metrics

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WriteRuntime writes the process's own metrics: mptun_build_info, the
// Go runtime's goroutines and heap, and the process's CPU time, resident
// memory and open files (as Prometheus' Go and process collectors name
// them).
func WriteRuntime(w io.Writer, version string) error {
	t := newTextWriter(w)
	t.header(namespace+"_build_info", "Build information; the value is always 1.", gauge)
	t.sample(namespace+"_build_info", 1, "go", runtime.Version(), "version", version)
	t.single("go_goroutines", "Number of goroutines that currently exist.", gauge, float64(runtime.NumGoroutine()))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.single("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use.", gauge, float64(ms.HeapInuse))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		t.single("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", counter, cpu.Seconds())
	}
	if rss, ok := residentBytes(); ok {
		t.single("process_resident_memory_bytes", "Resident memory size in bytes.", gauge, float64(rss))
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		t.single("process_open_fds", "Number of open file descriptors.", gauge, float64(len(fds)))
	}
	return t.flush()
}

// residentBytes reads the resident set size from /proc/self/statm.
func residentBytes() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}
