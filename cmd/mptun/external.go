// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// labProgram runs `mptun lab ...` and `mptun bench ...`. The lab and the
// benchmarks need plots, wireguard-go and the daemon's packages, which
// the CLI must not carry, so they live in their own executable that mptun
// runs with the same arguments (as git runs git-NAME).
const labProgram = "mptun-lab"

// findProgram looks for name next to the running executable, then in PATH.
func findProgram(name string) (string, error) {
	self, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	where := "the mptun executable"
	if self != "" {
		where = filepath.Dir(self)
	}
	return "", fmt.Errorf("%s not found in %s nor in $PATH: it runs the lab and the benchmarks; build it with `make build` (bin/%s) or install it with `make install`",
		name, where, name)
}

// runExternal runs prog args... with our standard streams and returns its
// exit status. Ctrl-C reaches the child directly (same process group); a
// SIGTERM or SIGINT sent to mptun alone is passed on, so the lab can tear
// its namespaces down before exiting.
func runExternal(prog string, args []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(prog, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "mptun: %v\n", err)
		return 1
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(stderr, "mptun: %s: %v\n", prog, err)
	return 1
}

// labCommand runs `mptun lab|bench args...` in mptun-lab.
func labCommand(cmd string, args []string, asJSON bool, stdout, stderr io.Writer) int {
	prog, err := findProgram(labProgram)
	if err != nil {
		fmt.Fprintf(stderr, "mptun %s: %v\n", cmd, err)
		return 1
	}
	full := append([]string{cmd}, args...)
	if asJSON {
		full = append(full, "--json")
	}
	return runExternal(prog, full, stdout, stderr)
}
