// SPDX-License-Identifier: MIT

package scenario_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab"
	"github.com/mptun/mptun/lab/report"
	"github.com/mptun/mptun/lab/scenario"
)

// The runner starts the wireguard-go peer as `SELF lab wgpeer`; the test
// binary plays SELF.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "lab" {
		os.Exit(lab.Main(os.Args[2:]))
	}
	scenario.SelfCommand = func() (string, []string, error) { return os.Args[0], []string{"lab"}, nil }
	if len(os.Args) > 1 && os.Args[1] == "child-run" {
		// A runner to be killed by TestSIGKILLLeavesNothing.
		scenario.RunWith(context.Background(), os.Args[2], os.Args[3], scenario.Options{Progress: io.Discard})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("../../configs/lab/*.toml")
	more, _ := filepath.Glob("../../configs/lab/*/*.toml")
	files = append(files, more...)
	if len(files) < 6 {
		t.Fatalf("only %d shipped scenarios", len(files))
	}
	for _, f := range files {
		sc, err := scenario.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(sc.PathSpecs()) != len(sc.Paths) {
			t.Errorf("%s: path specs", f)
		}
	}
}

func TestParseErrors(t *testing.T) {
	base := "name = \"x\"\nduration = \"5s\"\n[[path]]\nname = \"a\"\nrate = \"10mbit\"\n"
	assertParseErrors(t, []struct{ text, want string }{
		{base + "bogus = 1\n", "unknown keys: path.bogus"},
		{"peers = [\"quic\"]\n" + base, "peers"},
		{strings.Replace(base, "10mbit", "ten", 1), "rate"},
		{base + "[[event]]\nat = \"1s\"\npath = \"b\"\naction = \"blackhole\"\n", "no such path"},
		{base + "[[event]]\nat = \"1s\"\npath = \"a\"\naction = \"explode\"\n", "action"},
		{base + "[[event]]\nat = \"9s\"\npath = \"a\"\naction = \"restore\"\n", "after the end"},
		{"duration = \"5s\"\n[[path]]\nname = \"a\"\n", "name: missing"},
	})
}

func TestUnits(t *testing.T) {
	for s, want := range map[string]float64{"16mbit": 16e6, "16Mbit/s": 16e6, "30M": 30e6, "1.5Gbit": 1.5e9, "800k": 800e3, "9600": 9600} {
		if got, err := scenario.ParseRate(s); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"nan", "inf", "-1M", "x"} {
		if _, err := scenario.ParseRate(s); err == nil {
			t.Errorf("ParseRate(%q) accepted", s)
		}
	}
	for s, want := range map[string]int{"64KB": 64000, "64KiB": 65536, "1.5MB": 1500000, "9000": 9000} {
		if got, err := scenario.ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v", s, got, err)
		}
	}
	sc, err := scenario.Parse([]byte("name = \"x\"\nduration = \"5s\"\n[[path]]\nname = \"a\"\nrate = \"8mbit\"\nrtt = \"50ms\"\nup_rate = \"1mbit\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := sc.PathSpecs()[0]
	if s.Up.Rate != 1e6 || s.Down.Rate != 8e6 || s.Down.Delay != 25*time.Millisecond || s.Down.QueueBytes != 50000 {
		t.Errorf("spec %+v / %+v", s.Up, s.Down)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
}

// twoPathScenario is a scenario with seed 3 on the tests' test bed: path
// a 10 Mbit/s with a 10 ms RTT, path b 20 Mbit/s with 40 ms (the tests'
// RTT and capacity bounds follow from it); tables are its traffic and
// event tables.
func twoPathScenario(name, duration, peers, tables string) string {
	return fmt.Sprintf(`
name = %q
duration = %q
seed = 3
peers = %s
[[path]]
name = "a"
rate = "10mbit"
rtt = "10ms"
[[path]]
name = "b"
rate = "20mbit"
rtt = "40ms"
`, name, duration, peers) + tables
}

var shortScenario = twoPathScenario("short", "4s", `["none", "mptcp"]`, `[traffic.bulk]
cc = "cubic"
[traffic.probe]
pps = 200
[[event]]
at = "2s"
path = "b"
action = "blackhole"
`)

// runScenario runs the scenario text with its report in out.
func runScenario(t *testing.T, text, out string) *report.Results {
	t.Helper()
	res, err := scenario.RunWith(context.Background(), writeScenario(t, text), out, scenario.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// assertParseErrors checks that each text is refused with an error that
// mentions its want.
func assertParseErrors(t *testing.T, cases []struct{ text, want string }) {
	t.Helper()
	for _, tc := range cases {
		_, err := scenario.Parse([]byte(tc.text))
		if err == nil {
			t.Errorf("accepted:\n%s", tc.text)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q, want it to mention %q", err, tc.want)
		}
	}
}

func writeScenario(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "s.toml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// leftovers lists namespaces of pid and its processes' children.
func assertNothingLeft(t *testing.T, pid int) {
	t.Helper()
	for _, n := range netns.List() {
		if netns.OwnerPid(n) == pid {
			t.Errorf("namespace %s left behind", n)
		}
	}
	out, _ := exec.Command("ps", "-o", "pid=,comm=", "--ppid", strconv.Itoa(pid)).Output()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.Contains(l, "ps") {
			t.Errorf("child process left behind: %s", l)
		}
	}
}

func TestRunWritesReport(t *testing.T) {
	needRoot(t)
	out := t.TempDir()
	res := runScenario(t, shortScenario, out)
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Runs) != 2 {
		t.Fatalf("%d runs", len(doc.Runs))
	}
	for _, r := range doc.Runs {
		for _, k := range []string{"peer", "goodput_mbps", "capacity_sum_mbps", "aggregation", "probe"} {
			if _, ok := r[k]; !ok {
				t.Errorf("run %v: no %s", r["peer"], k)
			}
		}
		p := r["probe"].(map[string]any)
		for _, k := range []string{"lost", "max_gap_ms", "ooo_fraction", "owd_ms"} {
			if _, ok := p[k]; !ok {
				t.Errorf("run %v: no probe.%s", r["peer"], k)
			}
		}
		owd := p["owd_ms"].(map[string]any)
		if _, ok := owd["p99"]; !ok {
			t.Errorf("no probe.owd_ms.p99")
		}
	}
	for _, run := range res.Runs {
		if run.Error != "" {
			t.Errorf("%s: %s", run.Peer, run.Error)
		}
		// 2 s of 30 Mbit/s then 2 s of 10: 20 Mbit/s on average.
		if run.CapacitySumMbps < 18 || run.CapacitySumMbps > 22 {
			t.Errorf("%s: capacity sum %.2f, want ≈ 20", run.Peer, run.CapacitySumMbps)
		}
		if run.GoodputMbps <= 1 {
			t.Errorf("%s: goodput %.2f", run.Peer, run.GoodputMbps)
		}
		if len(run.Events) != 1 || run.Events[0].Action != "blackhole" {
			t.Errorf("%s: events %+v", run.Peer, run.Events)
		}
		if _, err := os.Stat(filepath.Join(out, run.Peer, "throughput.png")); err != nil {
			t.Errorf("%s: %v", run.Peer, err)
		}
		if _, err := os.Stat(filepath.Join(out, run.Peer, "probe.csv")); err != nil {
			t.Errorf("%s: %v", run.Peer, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "owd_ccdf.png")); err != nil {
		t.Error(err)
	}
	t.Logf("none %.2f Mbit/s, mptcp %.2f Mbit/s of %.2f", res.Runs[0].GoodputMbps, res.Runs[1].GoodputMbps, res.Runs[1].CapacitySumMbps)
	assertNothingLeft(t, os.Getpid())
}

func TestCancelMidRunLeavesNothing(t *testing.T) {
	needRoot(t)
	long := strings.Replace(shortScenario, `duration = "4s"`, `duration = "60s"`, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(2500 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	_, err := scenario.RunWith(ctx, writeScenario(t, long), t.TempDir(), scenario.Options{Progress: io.Discard})
	if err == nil {
		t.Fatal("cancelled run returned no error")
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("cancelled run took %v to return", d)
	}
	assertNothingLeft(t, os.Getpid())
}

func TestSIGKILLLeavesNothing(t *testing.T) {
	needRoot(t)
	long := strings.Replace(shortScenario, `duration = "4s"`, `duration = "60s"`, 1)
	cmd := exec.Command(os.Args[0], "child-run", writeScenario(t, long), t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Wait until the child is mid-run: its client and server namespaces exist.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		for _, name := range netns.List() {
			if netns.OwnerPid(name) == pid && (strings.HasSuffix(name, "-cli") || strings.HasSuffix(name, "-srv")) {
				n++
			}
		}
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("child never built its testbed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Past the baseline measurement, into the first peer's traffic.
	time.Sleep(3 * time.Second)
	syscall.Kill(pid, syscall.SIGKILL)
	cmd.Wait()
	// The reaper notices its parent is gone, deletes the namespaces (which
	// kills whatever ran inside them) and exits.
	deadline = time.Now().Add(15 * time.Second)
	for {
		var left []string
		for _, name := range netns.List() {
			if netns.OwnerPid(name) == pid {
				left = append(left, "namespace "+name)
			}
		}
		out, _ := exec.Command("ps", "-eo", "pid=,args=").Output()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "child-run") || strings.Contains(l, fmt.Sprintf("reaper %s-%d", netns.Prefix, pid)) {
				left = append(left, "process "+strings.TrimSpace(l))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after SIGKILL of the runner: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestWireguardGoPeer(t *testing.T) {
	needRoot(t)
	sc := strings.Replace(shortScenario, `peers = ["none", "mptcp"]`, `peers = ["wireguard-go"]`, 1)
	sc = strings.Replace(sc, `duration = "4s"`, `duration = "3s"`, 1)
	res := runScenario(t, sc, t.TempDir())
	r := res.Runs[0]
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	// Best path b (20 Mbit/s) is blackholed at 2 s: about 2 s of ≈ 18 Mbit/s.
	if r.GoodputMbps < 5 {
		t.Errorf("wireguard-go goodput %.2f Mbit/s", r.GoodputMbps)
	}
	t.Logf("wireguard-go: %.2f Mbit/s, probe lost %d", r.GoodputMbps, r.Probe.Lost)
	assertNothingLeft(t, os.Getpid())
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(shortScenario))
	f.Add([]byte("name = \"x\"\nduration = \"1s\"\n[[path]]\nname = \"a\"\nqueue = \"64KiB\"\nrate = 5\n"))
	f.Add([]byte("name = \"x\"\nduration = \"1s\"\n[[path]]\nname = \"a\"\n[[event]]\nat = \"0s\"\npath = \"a\"\naction = \"set\"\nloss = 0.5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := scenario.Parse(b)
		if err != nil {
			return
		}
		for _, s := range sc.PathSpecs() {
			if err := s.Up.Validate(); err != nil {
				t.Fatalf("accepted scenario yields invalid path: %v", err)
			}
			if err := s.Down.Validate(); err != nil {
				t.Fatalf("accepted scenario yields invalid path: %v", err)
			}
		}
	})
}
