// SPDX-License-Identifier: MIT

package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The versions the package test builds: the second upgrades the first.
const (
	debOld = "0.0~pkgtest1"
	debNew = "0.0~pkgtest2"
)

// buildDebs runs scripts/deb.sh (what `make deb` runs) for amd64 at
// version into dir and returns the mptun and mptun-lab package files.
func buildDebs(t *testing.T, dir, version string) (core, lab string) {
	t.Helper()
	cmd := exec.Command("../scripts/deb.sh", "amd64")
	cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/deb.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/deb.sh amd64 (VERSION=%s):\n%s", version, out)
	core = filepath.Join(dir, "mptun_"+version+"_amd64.deb")
	lab = filepath.Join(dir, "mptun-lab_"+version+"_amd64.deb")
	for _, f := range []string{core, lab} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("package not built: %v", err)
		}
	}
	return core, lab
}

// dpkgEnv runs dpkg and other commands the way an operator's host would,
// except that /run is a private tmpfs holding /run/systemd/system (so the
// maintainer scripts take their systemd branch) and systemctl is a stand-in
// that logs its arguments: the test host has no systemd running.
type dpkgEnv struct {
	t        *testing.T
	fakeBin  string
	sysctlLg string
}

func newDpkgEnv(t *testing.T) *dpkgEnv {
	dir := t.TempDir()
	e := &dpkgEnv{t: t, fakeBin: filepath.Join(dir, "bin"), sysctlLg: filepath.Join(dir, "systemctl.log")}
	must(t, os.MkdirAll(e.fakeBin, 0o755))
	script := "#!/bin/sh\necho \"$*\" >>" + e.sysctlLg + "\n"
	must(t, os.WriteFile(filepath.Join(e.fakeBin, "systemctl"), []byte(script), 0o755))
	return e
}

// run runs a shell command line in the private /run and returns its output.
func (e *dpkgEnv) run(line string) (string, error) {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec",
		"mount -t tmpfs mptun-pkgtest /run && mkdir -p /run/systemd/system && "+line)
	cmd.Env = append(os.Environ(), "PATH="+e.fakeBin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *dpkgEnv) must(line string) string {
	e.t.Helper()
	out, err := e.run(line)
	if err != nil {
		e.t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return out
}

// systemctl returns and clears what the maintainer scripts asked systemctl.
func (e *dpkgEnv) systemctl() string {
	b, _ := os.ReadFile(e.sysctlLg)
	os.Remove(e.sysctlLg)
	return strings.TrimSpace(string(b))
}

func installedVersion(t *testing.T, pkg string) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status} ${Version}", pkg).Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	if len(f) != 4 || f[2] != "installed" {
		return ""
	}
	return f[3]
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestDebInstallUpgradePurge builds the amd64 packages twice (two
// versions), installs the first with dpkg on this host, checks the files,
// the unit and `mptund -check` on the shipped examples, upgrades with an
// operator's config in /etc/mptun (kept byte for byte), removes (config
// kept) and purges (everything gone).
func TestDebInstallUpgradePurge(t *testing.T) {
	requireRoot(t)
	requireTools(t, "dpkg", "dpkg-deb", "dpkg-query", "unshare", "systemd-analyze")
	for _, p := range []string{"mptun", "mptun-lab"} {
		if v := installedVersion(t, p); v != "" {
			t.Fatalf("package %s %s is already installed on this host; this test installs and purges it: `dpkg --purge mptun-lab mptun` first", p, v)
		}
	}
	for _, d := range []string{"/etc/mptun", "/var/log/mptun"} {
		if exists(d) {
			t.Fatalf("%s exists on this host; the test's purge would delete it: move it away first", d)
		}
	}
	dist := t.TempDir()
	oldCore, oldLab := buildDebs(t, filepath.Join(dist, "old"), debOld)
	newCore, newLab := buildDebs(t, filepath.Join(dist, "new"), debNew)

	e := newDpkgEnv(t)
	t.Cleanup(func() {
		if installedVersion(t, "mptun") != "" || installedVersion(t, "mptun-lab") != "" {
			out, err := e.run("dpkg --purge mptun-lab mptun")
			if err != nil {
				t.Errorf("cleanup purge: %v\n%s", err, out)
			}
		}
		// They did not exist before the test (checked above).
		os.RemoveAll("/etc/mptun")
		os.RemoveAll("/var/log/mptun")
	})

	// Install.
	e.must("dpkg -i " + oldCore + " " + oldLab)
	if v := installedVersion(t, "mptun"); v != debOld {
		t.Fatalf("installed mptun version %q, want %q", v, debOld)
	}
	if got := e.systemctl(); got != "daemon-reload" {
		t.Errorf("postinst on install asked systemctl %q, want daemon-reload", got)
	}
	checkInstalledFiles(t, e, debOld)

	// An operator's configs: one from the shipped example, checked by the
	// installed daemon, and a file the package knows nothing about.
	must(t, copyFile("/usr/share/doc/mptun/examples/cpe.toml", "/etc/mptun/cpe.toml", 0o600))
	if out, err := exec.Command("/usr/bin/mptund", "-check", "-c", "/etc/mptun/cpe.toml").CombinedOutput(); err != nil {
		t.Fatalf("mptund -check /etc/mptun/cpe.toml: %v\n%s", err, out)
	}
	must(t, os.WriteFile("/etc/mptun/notes.txt", []byte("operator notes\n"), 0o600))
	before := readTree(t, "/etc/mptun")
	must(t, os.MkdirAll("/var/log/mptun", 0o755))
	must(t, os.WriteFile("/var/log/mptun/trace.pcap", []byte("x"), 0o600))

	// Upgrade: configs untouched, running instances restarted.
	e.must("dpkg -i " + newCore + " " + newLab)
	if v := installedVersion(t, "mptun"); v != debNew {
		t.Fatalf("after upgrade mptun is %q, want %q", v, debNew)
	}
	if v := installedVersion(t, "mptun-lab"); v != debNew {
		t.Fatalf("after upgrade mptun-lab is %q, want %q", v, debNew)
	}
	if got := e.systemctl(); got != "daemon-reload\ntry-restart mptund@*.service" {
		t.Errorf("postinst on upgrade asked systemctl %q, want daemon-reload then try-restart mptund@*.service", got)
	}
	if after := readTree(t, "/etc/mptun"); !equalTree(before, after) {
		t.Errorf("upgrade changed /etc/mptun: before %v, after %v", keys(before), keys(after))
	}
	checkInstalledFiles(t, e, debNew)

	// Remove: binaries gone, configs kept.
	e.must("dpkg --remove mptun-lab mptun")
	if got := e.systemctl(); got != "stop mptund@*.service\ndaemon-reload" {
		t.Errorf("remove asked systemctl %q, want stop mptund@*.service then daemon-reload", got)
	}
	for _, f := range []string{"/usr/bin/mptund", "/usr/bin/mptun", "/usr/bin/mptun-lab", "/lib/systemd/system/mptund@.service"} {
		if exists(f) {
			t.Errorf("%s still there after dpkg --remove", f)
		}
	}
	if after := readTree(t, "/etc/mptun"); !equalTree(before, after) {
		t.Errorf("remove changed /etc/mptun: before %v, after %v", keys(before), keys(after))
	}

	// Purge: nothing of mptun left.
	e.must("dpkg --purge mptun-lab mptun")
	if got := e.systemctl(); got != "daemon-reload" {
		t.Errorf("purge asked systemctl %q, want daemon-reload", got)
	}
	for _, f := range []string{"/etc/mptun", "/var/log/mptun", "/usr/share/doc/mptun", "/usr/share/doc/mptun-lab", "/usr/share/mptun-lab"} {
		if exists(f) {
			t.Errorf("%s still there after purge", f)
		}
	}
	for _, p := range []string{"mptun", "mptun-lab"} {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Abbrev}", p).CombinedOutput(); err == nil && strings.TrimSpace(string(out)) != "" && !strings.HasPrefix(string(out), "un") && !strings.HasPrefix(string(out), "pn") {
			t.Errorf("dpkg still knows %s after purge: %q", p, out)
		}
	}
}

// checkInstalledFiles checks what the packages put on the host.
func checkInstalledFiles(t *testing.T, e *dpkgEnv, version string) {
	t.Helper()
	for _, f := range []string{"/usr/bin/mptund", "/usr/bin/mptun", "/usr/bin/mptun-lab"} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want an executable 0755 file", f, err, st)
		}
	}
	for cmd, want := range map[string]string{
		"/usr/bin/mptund -version": "mptund " + version,
		"/usr/bin/mptun version":   "mptun " + version,
		// mptun finds mptun-lab beside itself.
		"/usr/bin/mptun lab help": "mptun lab run",
	} {
		f := strings.Fields(cmd)
		out, err := exec.Command(f[0], f[1:]...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v: %q, want %q in it", cmd, err, out, want)
		}
	}
	unit, err := os.ReadFile("/lib/systemd/system/mptund@.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/bin/mptund -c /etc/mptun/%i.toml", "ExecStartPre=/usr/bin/mptund -check -c /etc/mptun/%i.toml"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("installed unit lacks %q", want)
		}
	}
	if bytes.Contains(unit, []byte("/usr/local/")) {
		t.Error("installed unit still points into /usr/local")
	}
	// The installed unit, instantiated, is valid for systemd and runs the
	// installed binary.
	dir := t.TempDir()
	inst := filepath.Join(dir, "mptund@pkgtest.service")
	must(t, os.WriteFile(inst, unit, 0o644))
	if out, err := exec.Command("systemd-analyze", "verify", "--man=no", inst).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify installed unit: %v\n%s", err, out)
	}

	st, err := os.Stat("/etc/mptun")
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Errorf("/etc/mptun: %v %v, want a 0750 directory", err, st)
	}
	for _, ex := range []string{"cpe", "concentrator"} {
		f := "/usr/share/doc/mptun/examples/" + ex + ".toml"
		if out, err := exec.Command("/usr/bin/mptund", "-check", "-c", f).CombinedOutput(); err != nil {
			t.Errorf("mptund -check %s: %v\n%s", f, err, out)
		}
	}
	for _, f := range []string{"/usr/share/doc/mptun/copyright", "/usr/share/doc/mptun/README.md", "/usr/share/doc/mptun/deploy.md",
		"/usr/share/mptun-lab/scenarios/demo.toml"} {
		if !exists(f) {
			t.Errorf("%s missing", f)
		}
	}
	out := e.must("dpkg -L mptun")
	for _, want := range []string{"/usr/bin/mptund", "/etc/mptun", "/lib/systemd/system/mptund@.service"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("dpkg -L mptun does not list %s", want)
		}
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// readTree maps each file under dir to its content and mode.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := info.Mode().String()
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		m[p] = v
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return m
}

func equalTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
