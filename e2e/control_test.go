// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The running tunnel is changed at runtime: by SIGHUP after editing the
// config file, and by `mptun set` over the control socket; bad requests
// are refused with a clear message and change nothing.
func TestRuntimeChanges(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, _, cpe, _ := startTwoPathTunnel(t, ctx)
	scheduler := func() string { return status(t, cpe.socket).Conns[0].Scheduler }
	if got := scheduler(); got != "flow" {
		t.Fatalf("scheduler %q at start, want flow (the shipped config's)", got)
	}

	// SIGHUP re-reads the file.
	b, err := os.ReadFile(cpe.config)
	must(t, err)
	must(t, os.WriteFile(cpe.config, []byte(strings.Replace(string(b), `scheduler = "flow"`, `scheduler = "srtt"`, 1)), 0o600))
	must(t, cpe.cmd.Process.Signal(syscall.SIGHUP))
	deadline := time.Now().Add(5 * time.Second)
	for scheduler() != "srtt" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := scheduler(); got != "srtt" {
		t.Fatalf("scheduler %q after SIGHUP, want srtt", got)
	}

	// The CLI over the control socket.
	mptun := filepath.Join(binaries(t), "mptun")
	if out, err := exec.Command(mptun, "-s", cpe.socket, "set", "scheduler", "otias").CombinedOutput(); err != nil {
		t.Fatalf("mptun set: %v: %s", err, out)
	}
	if got := scheduler(); got != "otias" {
		t.Fatalf("scheduler %q after mptun set, want otias", got)
	}
	out, err := exec.Command(mptun, "-s", cpe.socket, "set", "scheduler", "fastest").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fastest") {
		t.Errorf("unknown scheduler accepted or unclear error: %v: %s", err, out)
	}
	if got := scheduler(); got != "otias" {
		t.Errorf("scheduler %q after a refused change", got)
	}
	// Traffic still flows, and status --json is well-formed.
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Errorf("ping after the changes: %v\n%s", err, out)
	}
	if out, err := exec.Command(mptun, "-s", cpe.socket, "status", "--json").Output(); err != nil || !strings.Contains(string(out), `"scheduler": "otias"`) {
		t.Errorf("status --json: %v\n%s", err, out)
	}
}
