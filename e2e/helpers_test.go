// SPDX-License-Identifier: MIT

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/netns"
)

// requireRoot skips tests that need namespaces, TUN and tc.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces, TUN devices and tc (CI runs as root)")
	}
}

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (CI installs it: .ci/run)", tool)
		}
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds mptund, mptun and mptun-lab once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "mptun-e2e-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "github.com/mptun/mptun/cmd/mptund", "github.com/mptun/mptun/cmd/mptun",
			"github.com/mptun/mptun/cmd/mptun-lab")
		// Without cgo, as `make build`: only then can mptund drop its
		// capabilities on every thread.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// topology is two namespaces joined by veth paths.
type topology struct {
	cpe, srv *netns.NS
}

func newTopology(t *testing.T, ctx context.Context) *topology {
	t.Helper()
	cpe, err := netns.Add(ctx, netns.UniqueName("cpe"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpe.Delete() })
	srv, err := netns.Add(ctx, netns.UniqueName("srv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Delete() })
	return &topology{cpe: cpe, srv: srv}
}

// addPath adds veth "p<i>" in both namespaces, subnet 10.77.<i+1>.0/24
// (.1 cpe, .2 srv), shaped with tbf at rate Mbit/s in both directions
// (0 = unshaped).
func (tp *topology) addPath(t *testing.T, ctx context.Context, i int, rateMbit int) (cpeAddr, srvAddr string) {
	t.Helper()
	dev := fmt.Sprintf("p%d", i)
	if err := netns.AddVeth(ctx, tp.cpe, dev, tp.srv, dev); err != nil {
		t.Fatal(err)
	}
	cpeAddr, srvAddr = fmt.Sprintf("10.77.%d.1", i+1), fmt.Sprintf("10.77.%d.2", i+1)
	must(t, tp.cpe.IP(ctx, "addr", "add", cpeAddr+"/24", "dev", dev))
	must(t, tp.srv.IP(ctx, "addr", "add", srvAddr+"/24", "dev", dev))
	if rateMbit > 0 {
		for _, ns := range []*netns.NS{tp.cpe, tp.srv} {
			// A 20 ms buffer at the path rate, as a modest access link.
			_, err := ns.Output(ctx, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
				"rate", fmt.Sprintf("%dmbit", rateMbit), "burst", "32kb", "latency", "20ms")
			must(t, err)
		}
	}
	return cpeAddr, srvAddr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// shippedOverride, when set, edits a shipped config before the
// substitutions (security_test.go runs the same configs in plain mode).
var shippedOverride func(name, text string) string

// Lines that plain mode removes from the shipped configs.
var (
	regexpKeyLine = regexp.MustCompile(`(?m)^private_key = .*\n`)
	regexpPeer    = regexp.MustCompile(`(?m)^\[\[peer\]\]\npublic_key = .*\nallowed_ips = .*\n`)
)

// shippedConfig returns configs/NAME.toml with the given substitutions.
func shippedConfig(t *testing.T, name string, subst map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "configs", name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if shippedOverride != nil {
		s = shippedOverride(name, s)
	}
	for old, new := range subst {
		if !strings.Contains(s, old) {
			t.Fatalf("configs/%s.toml has no %q to substitute", name, old)
		}
		s = strings.ReplaceAll(s, old, new)
	}
	return s
}

// daemonProc is a running mptund.
type daemonProc struct {
	cmd    *exec.Cmd
	socket string
	config string // the config file it runs
	log    *bytes.Buffer
	done   chan error
}

func startDaemon(t *testing.T, ctx context.Context, ns *netns.NS, cfgText, name string) *daemonProc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, name+".toml")
	must(t, os.WriteFile(cfgPath, []byte(cfgText), 0o600))
	cmd := ns.Command(ctx, filepath.Join(binaries(t), "mptund"), "-c", cfgPath)
	d := &daemonProc{cmd: cmd, config: cfgPath, log: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	must(t, cmd.Start())
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, d.log.String())
		}
	})
	return d
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemonProc) stop() error {
	if d.cmd.ProcessState != nil {
		return nil
	}
	// `ip netns exec` execs the daemon in place, so the pid is mptund's.
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		return err
	case <-time.After(5 * time.Second):
		d.cmd.Cancel()
		return <-d.done
	}
}

func status(t *testing.T, socket string) control.Status {
	t.Helper()
	var st control.Status
	if err := control.Call(socket, "status", nil, &st); err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// waitOpen waits until the daemon at socket has a connection with n open paths.
func waitOpen(t *testing.T, socket string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var st control.Status
		if control.Call(socket, "status", nil, &st) == nil && len(st.Conns) == 1 && st.Conns[0].State == "open" &&
			st.Conns[0].OpenPaths() >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no connection with %d open paths after %v", n, timeout)
}

// iperfResult is the part of iperf3 -J we read.
type iperfResult struct {
	End struct {
		SumSent struct {
			Bytes       float64 `json:"bytes"`
			BitsPerSec  float64 `json:"bits_per_second"`
			Retransmits int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			BitsPerSec float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// iperf runs an iperf3 server in srvNS and a client in cliNS against addr
// and returns the receiver's goodput in Mbit/s. wrap prefixes the commands
// (e.g. mptcpize run).
func iperf(t *testing.T, ctx context.Context, srvNS, cliNS *netns.NS, addr string, secs int, wrap []string, extra ...string) (float64, int) {
	t.Helper()
	port := strconv.Itoa(5300 + int(time.Now().UnixNano()%500))
	srvArgs := append(append([]string{}, wrap...), "iperf3", "-s", "-1", "-p", port)
	srvCmd := srvNS.Command(ctx, srvArgs[0], srvArgs[1:]...)
	var srvOut bytes.Buffer
	srvCmd.Stdout, srvCmd.Stderr = &srvOut, &srvOut
	must(t, srvCmd.Start())
	defer func() {
		srvCmd.Cancel()
		srvCmd.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	args := append(append([]string{}, wrap...), "iperf3", "-c", addr, "-p", port, "-t", strconv.Itoa(secs), "-J", "-C", "cubic")
	args = append(args, extra...)
	out, err := cliNS.Output(ctx, args[0], args[1:]...)
	var r iperfResult
	if jerr := json.Unmarshal(out, &r); jerr != nil || err != nil || r.Error != "" {
		t.Fatalf("iperf3 %v: %v %v %s\nserver: %s", args, err, jerr, r.Error, srvOut.String())
	}
	return r.End.SumReceived.BitsPerSec / 1e6, r.End.SumSent.Retransmits
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
