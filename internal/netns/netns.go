// SPDX-License-Identifier: MIT

// Package netns creates and tears down the network namespaces and veth pairs
// of the lab. Every namespace is named Prefix-<pid>-<n>-<role>, so the
// leftovers of a crashed run can be found and removed (CleanupStale).
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace this package creates.
const Prefix = "mptl"

const runDir = "/run/netns"

var counter atomic.Uint64

// UniqueName returns a fresh namespace name for role, carrying the pid.
func UniqueName(role string) string {
	return fmt.Sprintf("%s-%d-%d-%s", Prefix, os.Getpid(), counter.Add(1), role)
}

// NS is a named network namespace (a bind mount under /run/netns).
type NS struct {
	Name string
}

// Add creates the namespace name and brings its loopback up.
func Add(ctx context.Context, name string) (*NS, error) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("netns %s: add: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	ns := &NS{Name: name}
	if err := ns.IP(ctx, "link", "set", "lo", "up"); err != nil {
		ns.Delete()
		return nil, err
	}
	return ns, nil
}

// Path is the namespace's file, for setns.
func (n *NS) Path() string { return filepath.Join(runDir, n.Name) }

// IP runs `ip -n NAME args...`.
func (n *NS) IP(ctx context.Context, args ...string) error {
	_, err := n.Output(ctx, "ip", args...)
	return err
}

// Output runs a command inside the namespace and returns its stdout.
func (n *NS) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := n.Command(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("netns %s: %s %s: %w: %s", n.Name, name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Command returns a command that runs inside the namespace via `ip netns
// exec`. The child is killed if this process dies (Pdeathsig) and gets its own
// process group so that a group kill reaches its children too.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// Do runs fn on an OS thread that has entered the namespace. Sockets created
// by fn stay in the namespace after Do returns and may be used from any
// goroutine.
func (n *NS) Do(fn func() error) error {
	return Do(n.Path(), fn)
}

// Do runs fn with the calling thread in the network namespace at path.
func Do(path string, fn func() error) error {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: open %s: %w", path, err)
	}
	defer unix.Close(target)
	var (
		wg     sync.WaitGroup
		result error
	)
	wg.Add(1)
	// A fresh goroutine, so the caller's thread is never switched. If the
	// namespace cannot be restored, the goroutine exits still locked and the
	// runtime destroys the thread instead of reusing it.
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			result = fmt.Errorf("netns: open own namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			result = fmt.Errorf("netns: setns %s: %w", path, err)
			return
		}
		result = fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			return
		}
		runtime.UnlockOSThread()
	}()
	wg.Wait()
	return result
}

// Pids lists the processes inside the namespace.
func (n *NS) Pids() []int {
	out, err := exec.Command("ip", "netns", "pids", n.Name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// Delete kills every process in the namespace and removes it. Deleting the
// namespace destroys the veth ends inside it (and their peers). Idempotent.
func (n *NS) Delete() error {
	if _, err := os.Stat(n.Path()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, p := range n.Pids() {
		if p != os.Getpid() {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		if _, serr := os.Stat(n.Path()); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("netns %s: delete: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// List returns the names of all namespaces carrying Prefix.
func List() []string {
	ents, _ := os.ReadDir(runDir)
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), Prefix+"-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// OwnerPid returns the pid encoded in a namespace name, or 0.
func OwnerPid(name string) int {
	parts := strings.SplitN(name, "-", 4)
	if len(parts) < 3 || parts[0] != Prefix {
		return 0
	}
	p, _ := strconv.Atoi(parts[1])
	return p
}

// CleanupStale deletes namespaces whose owning process is gone (a crashed or
// killed lab run) and returns their names.
func CleanupStale() ([]string, error) {
	var removed []string
	var errs []error
	for _, name := range List() {
		pid := OwnerPid(name)
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // owner still alive (or pid reused: leave it)
		}
		if err := (&NS{Name: name}).Delete(); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// CleanupPid deletes every namespace created by process pid.
func CleanupPid(pid int) error {
	var errs []error
	for _, name := range List() {
		if OwnerPid(name) == pid {
			errs = append(errs, (&NS{Name: name}).Delete())
		}
	}
	return errors.Join(errs...)
}

// AddVeth creates a veth pair with one end (aDev) in a and the other (bDev)
// in b, both up, with offloads off.
func AddVeth(ctx context.Context, a *NS, aDev string, b *NS, bDev string) error {
	if out, err := exec.CommandContext(ctx, "ip", "link", "add", aDev, "netns", a.Name, "type", "veth",
		"peer", "name", bDev, "netns", b.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("veth %s/%s-%s/%s: %w: %s", a.Name, aDev, b.Name, bDev, err, strings.TrimSpace(string(out)))
	}
	for _, e := range []struct {
		ns  *NS
		dev string
	}{{a, aDev}, {b, bDev}} {
		if err := DisableOffloads(ctx, e.ns, e.dev); err != nil {
			return err
		}
		if err := e.ns.IP(ctx, "link", "set", e.dev, "up"); err != nil {
			return err
		}
	}
	return nil
}

// DisableOffloads turns off segmentation and checksum offloads on dev, so
// every frame on the wire is at most one MTU and byte counts are true.
func DisableOffloads(ctx context.Context, ns *NS, dev string) error {
	_, err := ns.Output(ctx, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off")
	return err
}

// Sysctl sets a sysctl inside the namespace (key in dotted form).
func (n *NS) Sysctl(ctx context.Context, key, value string) error {
	_, err := n.Output(ctx, "sysctl", "-q", "-w", key+"="+value)
	return err
}
