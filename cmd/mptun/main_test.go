// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
)

// The CLI links the control package only: not the daemon, nor the lab's
// and metrics' heavy dependencies.
func TestDepsAreControlOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	var sawControl bool
	for _, d := range deps {
		if d == "github.com/mptun/mptun/control" {
			sawControl = true
		}
		for _, bad := range []string{"github.com/mptun/mptun/daemon", "github.com/mptun/mptun/lab", "github.com/mptun/mptun/bench",
			"prometheus", "gonum", "wireguard"} {
			if strings.Contains(d, bad) {
				t.Errorf("cmd/mptun depends on %s", d)
			}
		}
	}
	if !sawControl {
		t.Errorf("cmd/mptun does not depend on control: %v", deps)
	}
}

// status asks the control socket and prints the contract's fields; the
// JSON form is the daemon's answer as is.
func TestStatusOverTheContract(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "m.sock")
	want := control.Status{APIVersion: control.APIVersion, Role: "client", Tunnel: "mpt9", InnerMTU: 1400,
		Conns: []control.ConnStatus{{State: "open", Scheduler: "rr", Reorderer: "equalize",
			Reorder: control.ReorderStats{InOrder: 7, HoldHist: make([]uint64, 14)},
			Paths:   []control.PathStatus{{ID: 1, Name: "dsl", State: "open", CCID: "bbr", RTTms: 12.5}}}},
		Dropped: map[string]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		control.Serve(ctx, sock, control.Handlers{control.MethodStatus: func(json.RawMessage) (any, error) { return want, nil }}, nil)
	}()
	defer func() { cancel(); wg.Wait() }()
	waitSocket(t, sock)

	var out, errb bytes.Buffer
	if code := run([]string{"-s", sock, "status", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errb.String())
	}
	var got control.Status
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != control.APIVersion || got.Tunnel != "mpt9" || got.Conns[0].Paths[0].RTTms != 12.5 ||
		got.Conns[0].Reorder.InOrder != 7 {
		t.Errorf("status --json gave %+v", got)
	}
	if !strings.Contains(out.String(), `"api_version": 1`) || !strings.Contains(out.String(), `"InOrder": 7`) {
		t.Errorf("JSON keys changed:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"-s", sock, "status"}, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	for _, s := range []string{"client mpt9", "scheduler rr", "dsl", "12.5"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("status output lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "API version") {
		t.Errorf("version warning with matching versions:\n%s", out.String())
	}
}

func waitSocket(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}

// build compiles the named commands into dir.
func build(t *testing.T, dir string, pkgs ...string) {
	t.Helper()
	args := append([]string{"build", "-o", dir + "/"}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// `mptun lab|bench` runs mptun-lab found next to mptun, passes the
// arguments and --json on, and returns its exit status; without mptun-lab
// it says what is missing.
func TestLabDispatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs; skipped with -short")
	}
	dir := t.TempDir()
	build(t, dir, "github.com/mptun/mptun/cmd/mptun", "github.com/mptun/mptun/cmd/mptun-lab")
	mptun := filepath.Join(dir, "mptun")
	env := append(os.Environ(), "PATH=/nonexistent")
	runMptun := func(bin string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}

	out, errs, code := runMptun(mptun, "lab", "peers")
	if code != 0 || !strings.Contains(out, "mptun") || !strings.Contains(out, "wireguard-go") {
		t.Errorf("mptun lab peers: exit %d, out %q, err %q", code, out, errs)
	}
	_, errs, code = runMptun(mptun, "lab", "frobnicate")
	if code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("mptun lab frobnicate: exit %d (want the lab's 2), err %q", code, errs)
	}
	_, errs, code = runMptun(mptun, "--json", "bench")
	if code != 2 || !strings.Contains(errs, "usage: mptun bench throughput") {
		t.Errorf("mptun bench: exit %d, err %q", code, errs)
	}

	// mptun alone, nothing in PATH.
	lone := t.TempDir()
	b, err := os.ReadFile(mptun)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lone, "mptun"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, errs, code = runMptun(filepath.Join(lone, "mptun"), "lab", "peers")
	if code != 1 || !strings.Contains(errs, "mptun-lab not found") || !strings.Contains(errs, "make build") {
		t.Errorf("without mptun-lab: exit %d, err %q", code, errs)
	}
	// ... then found in PATH.
	env = append(os.Environ(), "PATH="+dir)
	out, errs, code = runMptun(filepath.Join(lone, "mptun"), "lab", "peers")
	if code != 0 || !strings.Contains(out, "wireguard-go") {
		t.Errorf("mptun-lab in PATH: exit %d, out %q, err %q", code, out, errs)
	}
}
