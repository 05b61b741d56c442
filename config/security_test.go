// SPDX-License-Identifier: MIT

package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testPriv = "SHjZi8rBK0Qy3bgJxFp0rhEfwQl3Z9GhRTH5kg2Pa2Q="
	testPub  = "TlGBobKrUIvbGuUzcwgXtw6qKqVnNt9y06mifGQxW3A=" // of testPriv
	peerPub  = "TyqZ+Tz6RpR1dYJ2S+eLgkIDBB5/RVXNuLgsgWJojE4="
)

const secBase = `[connection]
role = "client"
private_key = "` + testPriv + `"

[[path]]
name = "dsl"
remote = "198.51.100.1"

[[peer]]
public_key = "` + peerPub + `"
allowed_ips = ["0.0.0.0/0", "::/0"]
`

// assertFirstErrors checks that each text's first error is its want.
func assertFirstErrors(t *testing.T, cases []struct{ text, want string }) {
	t.Helper()
	for _, c := range cases {
		if got := firstError(t, c.text); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

func firstError(t *testing.T, text string) string {
	t.Helper()
	_, err := Load(writeFile(t, "s.toml", text))
	if err == nil {
		return ""
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("not an ErrorList: %v", err)
	}
	return list[0].Error()
}

func TestSecurityConfig(t *testing.T) {
	cfg, err := Load(writeFile(t, "s.toml", secBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Connection.Security != SecurityNoise || cfg.Connection.PrivateKey.String() != testPriv ||
		len(cfg.Peers) != 1 || cfg.Peers[0].PublicKey.String() != peerPub || len(cfg.Peers[0].AllowedIPs) != 2 ||
		cfg.Peers[0].AllowedIPs[1] != netip.MustParsePrefix("::/0") {
		t.Fatalf("%+v %+v", cfg.Connection, cfg.Peers)
	}
	for _, tt := range []struct{ name, text, want string }{
		{"no keys", "[connection]\nrole = \"client\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n",
			"s.toml: peer: secure mode needs [[peer]] sections with public_key and allowed_ips"},
		{"no private key", strings.Replace(secBase, "private_key = \""+testPriv+"\"\n", "", 1),
			"s.toml:1: connection.private_key: missing: set private_key or private_key_file (`mptun genkey`), or security = \"none\" for an unauthenticated, unencrypted tunnel"},
		{"downgrade to none with keys", strings.Replace(secBase, "role = \"client\"\n", "role = \"client\"\nsecurity = \"none\"\n", 1),
			"s.toml:3: connection.security: \"none\" (plain RFC 9897) with keys or [[peer]] configured: remove the keys or the \"none\""},
		{"unknown mode", strings.Replace(secBase, "role = \"client\"\n", "role = \"client\"\nsecurity = \"tls\"\n", 1),
			"s.toml:3: connection.security: invalid value \"tls\": want \"noise\", \"none\""},
		{"bad key", strings.Replace(secBase, testPriv, "notbase64!", 1), "s.toml:3: connection.private_key: key is not base64: illegal base64 data at input byte 9"},
		{"short key", strings.Replace(secBase, peerPub, "AAAA", 1), "s.toml:10: peer[0].public_key: key has 3 bytes, want 32"},
		{"own key as peer", strings.Replace(secBase, peerPub, testPub, 1), "s.toml:10: peer[0].public_key: this is the local key's own public key"},
		{"no allowed ips", strings.Replace(secBase, "allowed_ips = [\"0.0.0.0/0\", \"::/0\"]\n", "", 1),
			"s.toml:9: peer[0].allowed_ips: missing: the inner prefixes this peer may send from (e.g. [\"10.99.0.2/32\"])"},
		{"host bits", strings.Replace(secBase, "0.0.0.0/0", "10.0.0.1/8", 1), "s.toml:11: peer[0].allowed_ips: prefix \"10.0.0.1/8\" has host bits set; did you mean \"10.0.0.0/8\"?"},
		{"two peers on a client", secBase + "[[peer]]\npublic_key = \"" + testPub + "\"\nallowed_ips = [\"10.1.0.0/16\"]\n",
			"s.toml:12: peer[1]: a client has exactly one [[peer]] (the concentrator), not 2"},
		{"unknown peer key", secBase + "endpoint = \"x\"\n", "s.toml:12: peer[0].endpoint: unknown key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstError(t, tt.text); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestSecurityKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "cpe.key")
	writeAt(t, keyPath, testPriv+"\n")
	text := strings.Replace(secBase, "private_key = \""+testPriv+"\"", "private_key_file = \"cpe.key\"", 1)
	cfgPath := filepath.Join(dir, "cpe.toml")
	writeAt(t, cfgPath, text)
	cfg, err := Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Connection.PrivateKey.String() != testPriv {
		t.Fatalf("key %v", cfg.Connection.PrivateKey)
	}
	writeAt(t, cfgPath, strings.Replace(text, "cpe.key", "missing.key", 1))
	if _, err := Load(cfgPath); err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), "connection.private_key_file") {
		t.Fatalf("missing key file: %v", err)
	}
}

func TestServerPeersDisjoint(t *testing.T) {
	text := `[connection]
role = "server"
private_key = "` + testPriv + `"
[[listen]]
address = "0.0.0.0"
[[peer]]
public_key = "` + peerPub + `"
allowed_ips = ["10.99.0.2/32"]
[[peer]]
public_key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
allowed_ips = ["10.99.0.2/32"]
`
	if got, want := firstError(t, text), "s.toml:11: peer[1].allowed_ips: 10.99.0.2/32 is also peer[0]'s"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func writeAt(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
