// SPDX-License-Identifier: MIT

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
)

// `mptun monitor --json` streams the path events: a path whose interface
// goes down is suspected at once and comes back when the interface does;
// `mptun set prio` by path name shows as a prio event. The same events
// are in the daemon's log with connection, path name and reason. A
// reload that changes a key needing a restart is refused naming it, and
// changes nothing.
func TestMonitorAndReload(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, _, cpe, _ := startTwoPathTunnel(t, ctx)

	mptun := filepath.Join(binaries(t), "mptun")
	mon := exec.CommandContext(ctx, mptun, "-s", cpe.socket, "monitor", "--json", "--status", "-d", "30s")
	out, err := mon.StdoutPipe()
	must(t, err)
	must(t, mon.Start())
	defer mon.Process.Kill()
	events := make(chan control.MonitorEvent, 256)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev control.MonitorEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
	}()
	wait := func(what string, match func(control.MonitorEvent) bool) control.MonitorEvent {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("monitor ended before %s", what)
				}
				if match(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s event within 10 s", what)
			}
		}
	}
	wait("initial state", func(ev control.MonitorEvent) bool { return ev.Kind == "state" && ev.Path == "lte" })

	// The LTE interface (p1) loses carrier: suspected at once.
	must(t, tp.cpe.IP(ctx, "link", "set", "p1", "down"))
	ev := wait("path-suspect", func(ev control.MonitorEvent) bool { return ev.Kind == "path-suspect" && ev.Path == "lte" })
	if ev.Conn == "" || !strings.Contains(ev.Reason, "link p1 down") {
		t.Errorf("suspect event %+v", ev)
	}
	must(t, tp.cpe.IP(ctx, "link", "set", "p1", "up"))
	wait("path back", func(ev control.MonitorEvent) bool {
		return (ev.Kind == "path-recover" || ev.Kind == "path-up") && ev.Path == "lte"
	})
	if out, err := exec.Command(mptun, "-s", cpe.socket, "set", "prio", "lte", "2").CombinedOutput(); err != nil {
		t.Fatalf("set prio lte 2: %v: %s", err, out)
	}
	wait("prio", func(ev control.MonitorEvent) bool { return ev.Kind == "prio" && ev.Path == "lte" })
	if st := status(t, cpe.socket); st.Conns[0].Paths[1].Prio != 2 {
		t.Errorf("lte prio %d after set", st.Conns[0].Paths[1].Prio)
	}

	// A reload touching tunnel.mtu is refused by name; the scheduler
	// change in the same file is not applied either.
	b, err := os.ReadFile(cpe.config)
	must(t, err)
	before := status(t, cpe.socket).Conns[0].Scheduler
	edited := strings.Replace(string(b), "mtu = 0", "mtu = 1300", 1)
	edited = strings.Replace(edited, `scheduler = "`+before+`"`, `scheduler = "srtt"`, 1)
	if before == "srtt" || edited == string(b) || !strings.Contains(edited, `scheduler = "srtt"`) || !strings.Contains(edited, "mtu = 1300") {
		t.Fatalf("cannot edit mtu and scheduler (now %q) in %s", before, cpe.config)
	}
	must(t, os.WriteFile(cpe.config, []byte(edited), 0o600))
	must(t, cpe.cmd.Process.Signal(syscall.SIGHUP))
	time.Sleep(500 * time.Millisecond)
	if got := status(t, cpe.socket).Conns[0].Scheduler; got != before {
		t.Errorf("scheduler %q after a refused reload, want %q", got, before)
	}
	must(t, cpe.stop()) // its log is complete (and no longer written)
	log := cpe.log.String()
	if !strings.Contains(log, "tunnel.mtu") {
		t.Errorf("refused reload does not name tunnel.mtu:\n%s", lastLines(log, 10))
	}
	// The log carries the path events with their connection and path.
	for _, want := range []string{"event=path-suspect", "path=lte", "conn=", `reason="link p1 down`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
}
