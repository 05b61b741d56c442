// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWebListen(t *testing.T) {
	tests := []struct {
		listen string // the TOML value, quoted; "" leaves [web] out
		want   string // Config.Web.Listen
		err    string // the first error, exactly
	}{
		{"", "", ""},
		{`""`, "", ""},
		{`"9512"`, "127.0.0.1:9512", ""},
		{`":9512"`, "127.0.0.1:9512", ""},
		{`"localhost:9512"`, "localhost:9512", ""},
		{`"[::1]:9512"`, "[::1]:9512", ""},
		{`"192.0.2.2:80"`, "192.0.2.2:80", ""},
		{`"0.0.0.0:9512"`, "0.0.0.0:9512", ""},
		{`"[::]:9512"`, "[::]:9512", ""},
		{`"0"`, "", `web.listen: invalid port "0": want 1..65535`},
		{`"127.0.0.1:70000"`, "", `web.listen: invalid port "70000": want 1..65535`},
		{`"127.0.0.1"`, "", `web.listen: invalid listen address "127.0.0.1": want a port (loopback), or host:port`},
		{`"::1"`, "", `web.listen: invalid listen address "::1": want a port (loopback), or host:port`},
		{`"gateway.example:9512"`, "", `web.listen: invalid host "gateway.example": want an IP address or localhost`},
		{`"[fe80::1%eth0]:9512"`, "", `web.listen: invalid host "fe80::1%eth0": want an IP address or localhost`},
		{`9512`, "", `web.listen: wrong type: got integer, want string`},
		{`"127.0.0.1:9511"`, "", `web.listen: 127.0.0.1:9511 is also metrics.listen`},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			text := base + "[metrics]\nlisten = \"127.0.0.1:9511\"\n"
			if tt.listen != "" {
				text += "[web]\nlisten = " + tt.listen + "\n"
			}
			cfg, err := Load(writeFile(t, "x.toml", text))
			if tt.err != "" {
				// The error is on the line of [web]'s listen, the last one.
				line := strings.Count(text[:strings.LastIndex(text, "\nlisten =")+1], "\n") + 1
				want := fmt.Sprintf("x.toml:%d: %s", line, tt.err)
				var list ErrorList
				if !errors.As(err, &list) || list[0].Error() != want {
					t.Fatalf("got %v\nwant %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Web.Listen != tt.want {
				t.Errorf("web.listen %q, want %q", cfg.Web.Listen, tt.want)
			}
		})
	}
	if err := func() error { _, err := Load(writeFile(t, "x.toml", base+"[web]\nport = 1\n")); return err }(); err == nil ||
		!strings.HasSuffix(err.Error(), `: web.port: unknown key`) {
		t.Errorf("unknown [web] key: %v", err)
	}
}

// The shipped configs document [web] and leave it off.
func TestShippedConfigsWebOff(t *testing.T) {
	for _, name := range []string{"cpe.toml", "concentrator.toml"} {
		cfg, err := Load(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Web.Listen != "" {
			t.Errorf("%s: web.listen %q, want off", name, cfg.Web.Listen)
		}
		raw, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		_, sect, _ := strings.Cut(string(raw), "\n[web]\n")
		sect, _, _ = strings.Cut(sect, "\n[")
		if !strings.Contains(sect, "\nlisten = \"\"\n") {
			t.Errorf("%s: no [web] section with listen = \"\"", name)
		}
	}
}
