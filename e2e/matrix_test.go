// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

// matrixDoc is the part of results.json the tests read.
type matrixDoc struct {
	Interrupted bool `json:"interrupted"`
	Host        struct {
		Kernel string `json:"kernel"`
	} `json:"host"`
	Cells []struct {
		Name          string   `json:"name"`
		Traffic       string   `json:"traffic"`
		MptunVsBest   *float64 `json:"mptun_vs_best"`
		MptunVsMPTCP  *float64 `json:"mptun_vs_mptcp"`
		MPTCPVerified *bool    `json:"mptcp_verified"`
		FastPathRTT   float64  `json:"fast_path_rtt_ms"`
		Error         string   `json:"error"`
		Peers         []struct {
			Peer      string   `json:"peer"`
			Goodput   float64  `json:"goodput_mbps"`
			Short10K  *float64 `json:"short_10kb_p50_ms"`
			Delivered *float64 `json:"udp_delivered"`
			Error     string   `json:"error"`
		} `json:"peers"`
		Targets []struct {
			ID   string `json:"id"`
			Pass bool   `json:"pass"`
		} `json:"targets"`
	} `json:"cells"`
	Summary struct {
		Cells int            `json:"cells"`
		Total map[string]int `json:"total"`
	} `json:"summary"`
}

// labPids follows the processes that own the lab's namespaces: `mptun
// bench` runs the mptun-lab program as its child, which names the
// namespaces after its own pid. stop returns every pid seen.
func labPids(pid int) (stop func() map[int]bool) {
	seen := map[int]bool{pid: true}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		for {
			for _, c := range childPids(pid) {
				mu.Lock()
				seen[c] = true
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() map[int]bool {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func childPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// labNamespaces lists the namespaces owned by pids.
func labNamespaces(pids map[int]bool) []string {
	var out []string
	for _, n := range netns.List() {
		if pids[netns.OwnerPid(n)] {
			out = append(out, n)
		}
	}
	return out
}

func assertNoNamespaces(t *testing.T, pids map[int]bool) {
	t.Helper()
	if left := labNamespaces(pids); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if len(pids) < 2 {
		t.Errorf("never saw the lab program (pids %v): the check proves nothing", pids)
	}
}

// TestBenchMatrixTiny runs `mptun bench matrix` on two cells (one TCP, one
// UDP) for a few seconds and checks its output files, the MPTCP
// verification and that nothing is left behind.
func TestBenchMatrixTiny(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ethtool")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "matrix")
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "mptun"), "bench", "matrix",
		"--cells", "r2-8+35-l0-cubic-down,r2-8+35-l2-udp-down", "--seconds", "3", "--out", out, "--json")
	var stderr, stdoutB strings.Builder
	cmd.Stderr, cmd.Stdout = &stderr, &stdoutB
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopWatch := labPids(cmd.Process.Pid)
	err := cmd.Wait()
	pids := stopWatch()
	if err != nil {
		t.Fatalf("mptun bench matrix: %v\n%s", err, stderr.String())
	}
	stdout := []byte(stdoutB.String())
	t.Logf("progress:\n%s", stderr.String())
	if !strings.Contains(stderr.String(), "[2/2") || !strings.Contains(stderr.String(), "ETA") {
		t.Errorf("no progress display on stderr")
	}
	var doc matrixDoc
	if err := json.Unmarshal(stdout, &doc); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fileDoc matrixDoc
	if err := json.Unmarshal(b, &fileDoc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 2 || len(fileDoc.Cells) != 2 || doc.Host.Kernel == "" || doc.Interrupted || doc.Summary.Cells != 2 {
		t.Fatalf("results: %+v", doc)
	}
	for _, c := range doc.Cells {
		if c.Error != "" {
			t.Errorf("%s: %s", c.Name, c.Error)
		}
		want := 3
		if c.Traffic == "udp" {
			want = 2 // no MPTCP for UDP
		}
		if len(c.Peers) != want {
			t.Fatalf("%s: %d peers", c.Name, len(c.Peers))
		}
		for _, p := range c.Peers {
			if p.Error != "" || p.Goodput <= 1 || p.Short10K == nil {
				t.Errorf("%s/%s: %+v", c.Name, p.Peer, p)
			}
			if c.Traffic == "udp" && (p.Delivered == nil || *p.Delivered < 0.5) {
				t.Errorf("%s/%s: delivered %v", c.Name, p.Peer, p.Delivered)
			}
		}
		if c.MptunVsBest == nil || len(c.Targets) < 5 || c.FastPathRTT < 16 || c.FastPathRTT > 20 {
			t.Errorf("%s: vs best %v, %d targets, fast path rtt %v", c.Name, c.MptunVsBest, len(c.Targets), c.FastPathRTT)
		}
		if c.Traffic != "udp" && (c.MPTCPVerified == nil || !*c.MPTCPVerified || c.MptunVsMPTCP == nil) {
			t.Errorf("%s: MPTCP verified %v, vs mptcp %v", c.Name, c.MPTCPVerified, c.MptunVsMPTCP)
		}
		for _, f := range []string{"scenario.toml", "lab.log", "results.json", "none/throughput.png"} {
			if _, err := os.Stat(filepath.Join(out, "cells", c.Name, f)); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
		}
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][0] != "cell" {
		t.Errorf("csv: %v %v", rows, err)
	}
	for _, png := range []string{"heatmap_mptun_vs_best.png", "heatmap_mptun_vs_mptcp.png"} {
		if st, err := os.Stat(filepath.Join(out, png)); err != nil || st.Size() < 2000 {
			t.Errorf("%s: %v", png, err)
		}
	}
	assertNoNamespaces(t, pids)
}

// TestBenchMatrixInterrupt sends SIGINT mid-run: the command stops, says so
// in results.json, exits 130 and leaves no namespace behind.
func TestBenchMatrixInterrupt(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ethtool")
	out := filepath.Join(t.TempDir(), "matrix")
	cmd := exec.Command(filepath.Join(binaries(t), "mptun"), "bench", "matrix", "--cells", "r2-8+35-l0-cubic-down", "--seconds", "30", "--out", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopWatch := labPids(cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Second)
	for running := false; !running; {
		for _, n := range netns.List() {
			o := netns.OwnerPid(n)
			running = running || (o != cmd.Process.Pid && containsPid(childPids(cmd.Process.Pid), o) && strings.HasSuffix(n, "-cli"))
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the matrix never built a testbed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(6 * time.Second) // past the emulator baseline, into a peer's traffic
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Errorf("exit: %v, want status 130", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("still running 30 s after SIGINT")
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc matrixDoc
	if err := json.Unmarshal(b, &doc); err != nil || !doc.Interrupted {
		t.Errorf("results.json after SIGINT: interrupted %v, %v", doc.Interrupted, err)
	}
	assertNoNamespaces(t, stopWatch())
}

func containsPid(pids []int, p int) bool {
	for _, q := range pids {
		if q == p {
			return true
		}
	}
	return false
}
