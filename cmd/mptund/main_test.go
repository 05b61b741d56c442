// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each broken config makes mptund -check exit 2 with a file:line:key error;
// the shipped examples pass.
func TestCheckExitCodes(t *testing.T) {
	cpe, err := os.ReadFile("../../configs/cpe.toml")
	if err != nil {
		t.Fatal(err)
	}
	base := string(cpe)
	tests := []struct {
		name, text, want string
	}{
		{"unknown key", strings.Replace(base, "[tunnel]\n", "[tunnel]\ncolour = 1\n", 1), "bad.toml:10: tunnel.colour: unknown key"},
		{"bad ccid", strings.Replace(base, `ccid = "bbr"`, `ccid = "reno"`, 1), `connection.ccid: unknown`},
		{"bad scheduler", strings.Replace(base, `scheduler = "flow"`, `scheduler = "fastest"`, 1), `connection.scheduler: unknown`},
		{"bad remote", strings.Replace(base, `remote = "198.51.100.1:6511"`, `remote = "nowhere"`, 1), `path.dsl.remote: invalid address`},
		{"wrong type", strings.Replace(base, `send_queue = 1024`, `send_queue = "big"`, 1), `connection.send_queue: wrong type`},
		{"no keys", strings.Replace(base, "\nprivate_key = ", "\n# private_key = ", 1), `connection.private_key: missing`},
		{"downgrade to none with keys", strings.Replace(base, `security = "noise"`, `security = "none"`, 1), `connection.security: "none" (plain RFC 9897) with keys`},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "bad.toml")
			if err := os.WriteFile(p, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := run([]string{"-check", "-c", p}, &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) || !strings.Contains(errb.String(), "bad.toml:") {
				t.Errorf("stderr %q does not name %q", errb.String(), tt.want)
			}
		})
	}
	for _, f := range []string{"cpe", "concentrator"} {
		var out, errb bytes.Buffer
		if code := run([]string{"-check", "-c", "../../configs/" + f + ".toml"}, &out, &errb); code != 0 {
			t.Errorf("%s.toml: exit %d: %s", f, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-nope"}, &out, &errb); code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}
}

// security = "none" passes -check alone, with a warning.
func TestCheckSecurityNoneWarns(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plain.toml")
	text := "[connection]\nrole = \"client\"\nsecurity = \"none\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-check", "-c", p}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "warning: security = \"none\"") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
