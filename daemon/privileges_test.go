// SPDX-License-Identifier: MIT

package daemon

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/mpdccp/noise"
)

func TestCaptureFileNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	me := control.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Known: true}
	name := filepath.Join(dir, "a.pcap")
	f, err := openCaptureFile(name, me)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if _, err := openCaptureFile(name, me); err == nil {
		t.Fatal("an existing file was opened again")
	}
	target := filepath.Join(dir, "precious")
	os.WriteFile(target, []byte("keep"), 0o600)
	link := filepath.Join(dir, "link.pcap")
	os.Symlink(target, link)
	if _, err := openCaptureFile(link, me); err == nil {
		t.Fatal("a symlink was followed")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("the symlink's target changed")
	}
	if _, err := openCaptureFile(filepath.Join(dir, "x.pcap"), control.Cred{}); err == nil {
		t.Fatal("unknown caller allowed")
	}
	// Someone else may not create files in a directory that is not theirs.
	other := control.Cred{UID: 4242424, GID: 4242424, Known: true}
	if _, err := openCaptureFile(filepath.Join(dir, "y.pcap"), other); err == nil || !strings.Contains(err.Error(), "may only capture") {
		t.Fatalf("other uid: %v", err)
	}
}

func TestSameSecurity(t *testing.T) {
	k, _ := noise.ParseKey("SHjZi8rBK0Qy3bgJxFp0rhEfwQl3Z9GhRTH5kg2Pa2Q=")
	mk := func() *config.Config {
		c := &config.Config{}
		c.Connection.Security, c.Connection.PrivateKey = config.SecurityNoise, k
		c.Peers = []config.Peer{{PublicKey: noise.Key{1}, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
		return c
	}
	a, b := mk(), mk()
	if !sameSecurity(a, b) {
		t.Fatal("equal configs differ")
	}
	b.Peers[0].AllowedIPs[0] = netip.MustParsePrefix("10.1.0.0/16")
	if sameSecurity(a, b) {
		t.Fatal("a changed allowed IP went unnoticed")
	}
	b = mk()
	b.Connection.PrivateKey = noise.Key{2}
	if sameSecurity(a, b) {
		t.Fatal("a new private key went unnoticed")
	}
}
