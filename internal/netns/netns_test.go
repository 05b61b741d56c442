// SPDX-License-Identifier: MIT

package netns

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
}

func TestOwnerPid(t *testing.T) {
	if got := OwnerPid("mptl-123-4-cli"); got != 123 {
		t.Fatalf("OwnerPid = %d", got)
	}
	if got := OwnerPid("other-123-4-cli"); got != 0 {
		t.Fatalf("OwnerPid(foreign) = %d", got)
	}
	n := UniqueName("x")
	if OwnerPid(n) != os.Getpid() || !strings.HasSuffix(n, "-x") {
		t.Fatalf("UniqueName = %q", n)
	}
}

func TestVethAndDoAndDelete(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	a, err := Add(ctx, UniqueName("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Delete()
	b, err := Add(ctx, UniqueName("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete()
	if err := AddVeth(ctx, a, "va", b, "vb"); err != nil {
		t.Fatal(err)
	}
	if err := a.IP(ctx, "addr", "add", "10.9.0.1/24", "dev", "va"); err != nil {
		t.Fatal(err)
	}
	if err := b.IP(ctx, "addr", "add", "10.9.0.2/24", "dev", "vb"); err != nil {
		t.Fatal(err)
	}
	// A socket created inside b keeps living there.
	var ln net.PacketConn
	if err := b.Do(func() (err error) {
		ln, err = net.ListenPacket("udp4", "10.9.0.2:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.Dial("udp4", ln.LocalAddr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _, err := ln.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	// The calling goroutine's thread is still in the root namespace.
	if _, err := net.InterfaceByName("va"); err == nil {
		t.Fatal("va visible in the root namespace")
	}
	if err := a.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	for _, n := range List() {
		if n == a.Name {
			t.Fatal("namespace still listed after Delete")
		}
	}
}

func TestCleanupStale(t *testing.T) {
	needRoot(t)
	// A namespace whose owner pid cannot exist.
	name := Prefix + "-999999999-1-stale"
	if _, err := Add(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanupStale()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range removed {
		found = found || r == name
	}
	if !found {
		t.Fatalf("stale namespace not removed: %v", removed)
	}
}
