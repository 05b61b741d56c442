// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

// proc is a long-running helper (daemon, tunnel peer) inside a namespace.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// startProc starts name args... inside ns with output going to logPath.
func startProc(ns *netns.NS, logPath string, name string, args ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Not tied to the run's context: stop() ends it in order (SIGTERM
	// first, so a daemon can say goodbye), and Pdeathsig covers crashes.
	cmd := ns.Command(context.Background(), name, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: filepath.Base(name), cmd: cmd, log: lf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) error {
	if p == nil {
		return nil
	}
	defer p.log.Close()
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
}

// waitUDPEcho sends to addr from inside ns until an echo server answers;
// the route to addr may only appear once a tunnel device is up.
func waitUDPEcho(ctx context.Context, ns *netns.NS, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 16)
	var last error
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var c net.Conn
		if err := ns.Do(func() (err error) {
			c, err = net.Dial("udp4", addr)
			return err
		}); err != nil {
			last = err
			time.Sleep(200 * time.Millisecond)
			continue
		}
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Read(buf)
		c.Close()
		if err == nil && n == 4 {
			return nil
		}
		last = err
	}
	return fmt.Errorf("no answer from %s through the tunnel within %v (last error: %v)", addr, timeout, last)
}

// udpEcho answers datagrams on addr inside ns until closed.
func udpEcho(ns *netns.NS, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	if err := ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 64)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], a)
		}
	}()
	return pc, nil
}

// findBinary looks for name in explicit, next to this executable, in ./bin
// and in $PATH.
func findBinary(explicit, name string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), name); isExec(p) {
			return p, nil
		}
	}
	if p, err := filepath.Abs(filepath.Join("bin", name)); err == nil && isExec(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found (next to this program, in ./bin or $PATH): run `make build`", name)
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
