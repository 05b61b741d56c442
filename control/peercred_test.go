// SPDX-License-Identifier: MIT

package control

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRestrictedMethods(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	srv, err := Listen(path, Handlers{"status": func(json.RawMessage) (any, error) { return "up", nil }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var seen Cred
	srv.HandleWithCred("set", func(c Cred, _ json.RawMessage) (any, error) { seen = c; return "done", nil }, true)
	go srv.Serve()

	// A real caller (this process) passes and is identified.
	var got string
	if err := Call(path, "set", nil, &got); err != nil || got != "done" {
		t.Fatalf("set by the owner: %q %v", got, err)
	}
	if !seen.Known || seen.UID != uint32(os.Getuid()) || seen.PID != uint32(os.Getpid()) {
		t.Fatalf("caller %+v, want uid %d pid %d", seen, os.Getuid(), os.Getpid())
	}
	// Anyone else is refused restricted methods.
	stranger := Cred{UID: 4242424, GID: 4242424, PID: 1 << 30, Known: true}
	if os.Getuid() == 4242424 {
		t.Skip("runs as the stranger's uid")
	}
	if err := srv.authorize("set", stranger); err == nil || !strings.Contains(err.Error(), "permission denied for uid 4242424") {
		t.Fatalf("stranger: %v", err)
	}
	if err := srv.authorize("set", Cred{}); err == nil {
		t.Fatal("unknown caller allowed")
	}
	if err := srv.authorize("set", Cred{UID: 0, Known: true}); err != nil {
		t.Fatalf("root refused: %v", err)
	}
	// Unrestricted methods need no check.
	if err := Call(path, "status", nil, &got); err != nil || got != "up" {
		t.Fatalf("status: %q %v", got, err)
	}
}
