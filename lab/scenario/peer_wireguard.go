// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mptun/mptun/lab/wgpeer"
)

// SelfCommand returns how to run `mptun lab` from this process: the
// wireguard-go peer runs as `SELF lab wgpeer`. Programs that embed the lab
// under another command path replace it; test binaries must set it (and
// dispatch "lab" in TestMain), or a test binary would re-run its tests.
var SelfCommand = func() (string, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	if strings.HasSuffix(self, ".test") {
		return "", nil, fmt.Errorf("%s is a test binary: set scenario.SelfCommand", self)
	}
	return self, []string{"lab"}, nil
}

func init() {
	RegisterPeer("wireguard-go", func() PeerRunner { return &wgPeer{} })
}

// wgPeer is wireguard-go over the best single path.
type wgPeer struct {
	procs []*proc
}

func (w *wgPeer) Setup(ctx context.Context, run *PeerRun) (Endpoint, error) {
	tb := run.Testbed
	best := tb.Paths[run.Best]
	self, pre, err := SelfCommand()
	if err != nil {
		return Endpoint{}, fmt.Errorf("wireguard-go: %w", err)
	}
	srvUAPI, cliUAPI, err := wgpeer.UAPIPair(best.SrvAddr.String(), tunnelServer, tunnelClient)
	if err != nil {
		return Endpoint{}, err
	}
	for _, s := range []struct {
		name, uapi, addr string
		isSrv            bool
	}{{"server", srvUAPI, tunnelServer, true}, {"client", cliUAPI, tunnelClient, false}} {
		ns := tb.Cli
		if s.isSrv {
			ns = tb.Srv
		}
		args := append(append([]string{}, pre...), "wgpeer", "-tun", "wg0")
		lf, err := os.Create(filepath.Join(run.Dir, "wgpeer-"+s.name+".log"))
		if err != nil {
			return Endpoint{}, err
		}
		cmd := ns.Command(context.Background(), self, args...)
		cmd.Stdin = strings.NewReader(s.uapi)
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			lf.Close()
			return Endpoint{}, fmt.Errorf("wireguard-go: start: %w", err)
		}
		p := &proc{name: "wgpeer-" + s.name, cmd: cmd, log: lf, done: make(chan struct{})}
		go func() { p.err = cmd.Wait(); close(p.done) }()
		w.procs = append(w.procs, p)
		// Wait for the device, then address it.
		exited := func() error {
			if done, perr := p.exited(); done {
				return fmt.Errorf("wireguard-go %s exited: %v (see %s)", s.name, perr, lf.Name())
			}
			return nil
		}
		if err := wgpeer.ConfigureDevice(ctx, ns, "wg0", s.addr, exited); err != nil {
			return Endpoint{}, err
		}
	}
	echo, err := udpEcho(tb.Srv, tunnelServer+":7")
	if err != nil {
		return Endpoint{}, err
	}
	defer echo.Close()
	if err := waitUDPEcho(ctx, tb.Cli, tunnelServer+":7", 10*time.Second); err != nil {
		return Endpoint{}, fmt.Errorf("wireguard-go: %w", err)
	}
	return Endpoint{ServerAddr: netipMust(tunnelServer), Note: "wireguard-go (Go module) over the best single path " + best.Spec.Name}, nil
}

func (w *wgPeer) Close() error {
	var errs []error
	for i := len(w.procs) - 1; i >= 0; i-- {
		errs = append(errs, w.procs[i].stop(2*time.Second))
	}
	return errors.Join(errs...)
}
