// SPDX-License-Identifier: MIT

package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const daemonPath = "/usr/local/bin/mptund"

// TestVerify runs systemd-analyze verify on an instance of the unit whose
// daemon path points at an existing binary: the real one is not installed
// where tests run. Nothing else in the file is changed.
func TestVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	orig, err := os.ReadFile("mptund@.service")
	if err != nil {
		t.Fatal(err)
	}
	stand, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	stand, _ = filepath.Abs(stand)
	text := strings.ReplaceAll(string(orig), daemonPath, stand)
	if strings.Count(string(orig), daemonPath) != 2 {
		t.Fatalf("want ExecStartPre and ExecStart to run %s", daemonPath)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "mptund@test.service")
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--man=no", unit)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestHardening pins the directives the daemon depends on, so a later edit
// cannot silently drop them.
func TestHardening(t *testing.T) {
	orig, err := os.ReadFile("mptund@.service")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, line := range strings.Split(string(orig), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[k] = v
		}
	}
	for k, want := range map[string]string{
		"Type":                     "notify",
		"ExecStart":                daemonPath + " -c /etc/mptun/%i.toml",
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"CapabilityBoundingSet":    "CAP_NET_ADMIN CAP_NET_RAW",
		"AmbientCapabilities":      "CAP_NET_ADMIN CAP_NET_RAW",
		"DeviceAllow":              "/dev/net/tun rw",
		"DevicePolicy":             "closed",
		"ProtectSystem":            "strict",
		"ProtectHome":              "yes",
		"NoNewPrivileges":          "yes",
		"RuntimeDirectory":         "mptun",
		"SystemCallFilter":         "@system-service",
		"RestrictAddressFamilies":  "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"RestartPreventExitStatus": "2",
	} {
		if set[k] != want {
			t.Errorf("%s=%q, want %q", k, set[k], want)
		}
	}
	if _, ok := set["PrivateDevices"]; ok {
		t.Error("PrivateDevices hides /dev/net/tun")
	}
	if _, ok := set["WatchdogSec"]; !ok {
		t.Error("WatchdogSec missing")
	}
}
