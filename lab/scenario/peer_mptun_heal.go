// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/topo"
)

// sideProc is how the mptun peer restarts, reconfigures and talks to one
// of its daemons.
type sideProc struct {
	name      string // "server" or "client"
	idx       int    // in MptunPeer.procs
	ns        *netns.NS
	bin, file string
	dir, sock string
	restarts  int
}

// remoteOf is the server address a client path talks to: its own path's,
// or the one of tunnel.remote_path.
func remoteOf(run *PeerRun, p *topo.Path) string {
	if rp := run.Scenario.Tunnel.RemotePath; rp != "" {
		if i := run.Scenario.PathIndex(rp); i >= 0 {
			return run.Testbed.Paths[i].SrvAddr.String()
		}
	}
	return p.SrvAddr.String()
}

// RestartServer implements ServerRestarter: the server mptund is killed
// (a crash) or terminated (it closes its connections), stays down for
// down, and starts again with the same config; the client is left alone
// and must find its way back.
func (m *MptunPeer) RestartServer(ctx context.Context, sig syscall.Signal, down time.Duration) error {
	return m.restart(ctx, "server", sig, down)
}

// RestartClient implements TunnelController: the client daemon is
// stopped and started again, so the server gets a new connection.
func (m *MptunPeer) RestartClient(ctx context.Context, sig syscall.Signal, down time.Duration) error {
	return m.restart(ctx, "client", sig, down)
}

func (m *MptunPeer) restart(ctx context.Context, side string, sig syscall.Signal, down time.Duration) error {
	s := m.sides[side]
	if s == nil {
		return fmt.Errorf("mptun: no %s running", side)
	}
	old := m.procs[s.idx]
	pid := old.cmd.Process.Pid
	_ = syscall.Kill(-pid, sig)
	select {
	case <-old.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-old.done
	}
	old.log.Close()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	s.restarts++
	log := filepath.Join(s.dir, fmt.Sprintf("mptund-%s-%d.log", side, s.restarts+1))
	p, err := startProc(s.ns, log, s.bin, "-c", s.file)
	if err != nil {
		return err
	}
	m.procs[s.idx] = p
	return nil
}

// sidesOf lists the daemons an event addresses ("client", "server", both).
func (m *MptunPeer) sidesOf(side string) []*sideProc {
	var out []*sideProc
	for _, name := range []string{"server", "client"} {
		if (side == "" || side == "both" || side == name) && m.sides[name] != nil {
			out = append(out, m.sides[name])
		}
	}
	return out
}

// Set implements TunnelController: `mptun set` over the control socket.
// params are the set request's fields (scheduler, reorderer, hold, mode,
// path_name, prio).
func (m *MptunPeer) Set(ctx context.Context, side string, params map[string]string) error {
	var req control.SetRequest
	for k, v := range params {
		switch k {
		case "scheduler":
			req.Scheduler = v
		case "reorderer":
			req.Reorderer = v
		case "hold":
			req.Hold = v
		case "mode":
			req.Mode = v
		case "path_name":
			req.PathName = v
		case "prio":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return fmt.Errorf("prio %q: %w", v, err)
			}
			p := uint8(n)
			req.Prio = &p
		default:
			return fmt.Errorf("tunnel_set: unknown parameter %q", k)
		}
	}
	for _, s := range m.sidesOf(side) {
		if err := control.CallContext(ctx, s.sock, control.MethodSet, req, nil); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

var tableRE = regexp.MustCompile(`^\[+([^\]]+)\]+\s*$`)

// Reload implements TunnelController: each "table.key" of params is set
// in the daemon's config file (a string unless it is a number or a
// boolean), and the daemon gets SIGHUP.
func (m *MptunPeer) Reload(ctx context.Context, side string, params map[string]string) error {
	for _, s := range m.sidesOf(side) {
		b, err := os.ReadFile(s.file)
		if err != nil {
			return err
		}
		text := string(b)
		keys := make([]string, 0, len(params))
		for k := range params {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if text, err = setKey(text, k, tomlValue(params[k])); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if err := os.WriteFile(s.file, []byte(text), 0o644); err != nil {
			return err
		}
		if err := m.procs[s.idx].cmd.Process.Signal(syscall.SIGHUP); err != nil {
			return fmt.Errorf("%s: SIGHUP: %w", s.name, err)
		}
	}
	return nil
}

func tomlValue(v string) string {
	if v == "true" || v == "false" {
		return v
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	return strconv.Quote(v)
}

// setKey sets table.key = value in a config text: the key's line in its
// table is replaced, or the key is added at the table's start.
func setKey(text, dotted, value string) (string, error) {
	i := strings.LastIndex(dotted, ".")
	if i < 0 {
		return "", fmt.Errorf("reload key %q: want table.key", dotted)
	}
	table, key := dotted[:i], dotted[i+1:]
	lines := strings.Split(text, "\n")
	in, at := false, -1
	for n, l := range lines {
		if mt := tableRE.FindStringSubmatch(strings.TrimSpace(l)); mt != nil {
			in = mt[1] == table && !strings.HasPrefix(strings.TrimSpace(l), "[[")
			if in {
				at = n
			}
			continue
		}
		if in && strings.HasPrefix(strings.TrimSpace(l), key+" ") || in && strings.HasPrefix(strings.TrimSpace(l), key+"=") {
			lines[n] = key + " = " + value
			return strings.Join(lines, "\n"), nil
		}
	}
	if at < 0 {
		return "", fmt.Errorf("reload key %q: no table [%s]", dotted, table)
	}
	lines = slices.Insert(lines, at+1, key+" = "+value)
	return strings.Join(lines, "\n"), nil
}

// processEvery is how often the daemons' goroutines and heap are sampled.
const processEvery = 5 * time.Second

// sampleProcess records each daemon's footprint; socks maps a role
// ("sender", "receiver") to its control socket.
func sampleProcess(tm *report.TunnelMetrics, start mono.Time, socks map[string]string) {
	if tm.Process == nil {
		tm.Process = map[string][]report.ProcessSample{}
	}
	for role, sock := range socks {
		var st control.Status
		if control.Call(sock, control.MethodStatus, nil, &st) != nil {
			continue
		}
		tm.Process[role] = append(tm.Process[role], report.ProcessSample{TimeS: mono.Now().Sub(start).Seconds(),
			Goroutines: st.Process.Goroutines, HeapBytes: st.Process.HeapBytes, HeapLiveBytes: st.Process.HeapLiveBytes})
	}
}

// finalState records what each daemon's first connection runs at the end.
func finalState(tm *report.TunnelMetrics, socks map[string]string) {
	tm.Final = map[string]report.ConnSettings{}
	tm.Status = map[string]any{}
	for role, sock := range socks {
		var st control.Status
		if control.Call(sock, control.MethodStatus, nil, &st) != nil || len(st.Conns) == 0 {
			continue
		}
		tm.Status[role] = st
		c := st.Conns[0]
		cs := report.ConnSettings{Scheduler: c.Scheduler, Reorderer: c.Reorderer, HoldMs: c.ReorderHoldMs,
			Repair: c.Repair, Repaired: c.Repaired, GapsSkipped: c.Reorder.GapsSkipped, GapsLate: c.Reorder.GapsLateArrive,
			Mode: st.Mode, Conns: len(st.Conns)}
		for _, p := range c.Paths {
			cs.Prio = append(cs.Prio, report.PathPrio{Path: p.Name, ID: p.ID, Prio: p.Prio})
		}
		tm.Final[role] = cs
	}
}
