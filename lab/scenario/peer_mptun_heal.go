// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/topo"
)

// serverProc is how the mptun peer starts its server again.
type serverProc struct {
	ns        *netns.NS
	bin, file string
	dir       string
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
	if len(m.procs) == 0 || m.server.bin == "" {
		return fmt.Errorf("mptun: no server running")
	}
	old := m.procs[0]
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
	s := &m.server
	s.restarts++
	log := filepath.Join(s.dir, fmt.Sprintf("mptund-server-%d.log", s.restarts+1))
	p, err := startProc(s.ns, log, s.bin, "-c", s.file)
	if err != nil {
		return err
	}
	m.procs[0] = p
	return nil
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
		if control.Call(sock, "status", nil, &st) != nil {
			continue
		}
		tm.Process[role] = append(tm.Process[role], report.ProcessSample{TimeS: mono.Now().Sub(start).Seconds(),
			Goroutines: st.Process.Goroutines, HeapBytes: st.Process.HeapBytes})
	}
}
