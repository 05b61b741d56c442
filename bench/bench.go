// SPDX-License-Identifier: MIT

// Package bench runs mptun's benchmarks against its peers on this machine:
// `mptun bench throughput` (one unimpaired path, mptun vs wireguard-go) and
// the lab-based `aggregate` and `handover` comparisons with kernel MPTCP.
// Everything runs in network namespaces this package creates and removes.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/netns"
)

// Tools locates the executables a benchmark starts.
type Tools struct {
	Mptund string // the daemon
	Self   string // the mptun CLI (runs `lab wgpeer`)
}

// FindTools looks for mptund next to the running executable, then in PATH.
func FindTools() (Tools, error) {
	self, err := os.Executable()
	if err != nil {
		return Tools{}, err
	}
	t := Tools{Self: self, Mptund: filepath.Join(filepath.Dir(self), "mptund")}
	if _, err := os.Stat(t.Mptund); err != nil {
		p, lerr := exec.LookPath("mptund")
		if lerr != nil {
			return Tools{}, fmt.Errorf("mptund not found next to %s nor in PATH (run `make build`)", self)
		}
		t.Mptund = p
	}
	return t, nil
}

// proc is a started process in a namespace.
type proc struct {
	cmd  *exec.Cmd
	log  bytes.Buffer
	done chan error
}

func start(ctx context.Context, ns *netns.NS, stdin string, name string, args ...string) (*proc, error) {
	p := &proc{done: make(chan error, 1)}
	p.cmd = ns.Command(ctx, name, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if stdin != "" {
		p.cmd.Stdin = strings.NewReader(stdin)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// stop asks the process to exit (SIGTERM), then kills it.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// cpuSeconds is the user+system CPU time the process has used so far.
func (p *proc) cpuSeconds() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// iperfRun runs iperf3 TCP (cubic) from cli to addr for secs seconds and
// returns the receiver's goodput in bit/s, bytes received and retransmits.
func iperfRun(ctx context.Context, srv, cli *netns.NS, addr string, secs int, wrap ...string) (bps, bytes float64, retr int, err error) {
	port := "5299"
	sargs := append(append([]string{}, wrap...), "iperf3", "-s", "-1", "-p", port)
	s, err := start(ctx, srv, "", sargs[0], sargs[1:]...)
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.stop()
	time.Sleep(300 * time.Millisecond)
	args := append(append([]string{}, wrap...), "iperf3", "-c", addr, "-p", port, "-t", strconv.Itoa(secs), "-J", "-C", "cubic")
	out, err := cli.Output(ctx, args[0], args[1:]...)
	var r struct {
		End struct {
			SumSent struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes      float64 `json:"bytes"`
				BitsPerSec float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil || r.Error != "" || err != nil {
		return 0, 0, 0, fmt.Errorf("iperf3 to %s: %v %v %s", addr, err, jerr, r.Error)
	}
	return r.End.SumReceived.BitsPerSec, r.End.SumReceived.Bytes, r.End.SumSent.Retransmits, nil
}

// waitTunnel waits until the mptund at socket reports an open connection.
func waitTunnel(socket string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var st control.Status
		if control.Call(socket, "status", nil, &st) == nil && len(st.Conns) > 0 && st.Conns[0].State == "open" {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("tunnel not open after %v (socket %s)", timeout, socket)
}

func firstLines(b *bytes.Buffer, n int) string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() && len(out) < n {
		out = append(out, sc.Text())
	}
	return strings.Join(out, "\n")
}
