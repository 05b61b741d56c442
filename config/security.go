// SPDX-License-Identifier: MIT

package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/mptun/mptun/mpdccp/noise"
)

type rawPeer struct {
	PublicKey    *string  `toml:"public_key"`
	PresharedKey *string  `toml:"preshared_key"`
	AllowedIPs   []string `toml:"allowed_ips"`
}

// security validates [connection] security, private_key(_file) and the
// [[peer]] sections. Secure mode is the default: a config without keys is
// refused unless it says security = "none", and a config that has keys
// cannot also say "none" (no silent downgrade).
func (c *checker) security(raw *rawConfig, cfg *Config, path string) {
	rc := &raw.Connection
	conn := &cfg.Connection
	conn.Security = deref(rc.Security, SecurityNoise)
	c.oneOf(top("connection.security"), conn.Security, SecurityNoise, SecurityNone)
	hasKey := rc.PrivateKey != nil || rc.PrivateKeyFile != nil
	if conn.Security == SecurityNone {
		if hasKey || len(raw.Peer) > 0 {
			c.errf(top("connection.security"), "\"none\" (plain RFC 9897) with keys or [[peer]] configured: remove the keys or the \"none\"")
		}
		return
	}
	switch {
	case rc.PrivateKey != nil && rc.PrivateKeyFile != nil:
		c.errf(top("connection.private_key_file"), "set private_key or private_key_file, not both")
	case rc.PrivateKey != nil:
		k, err := noise.ParseKey(strings.TrimSpace(*rc.PrivateKey))
		if err != nil {
			c.errf(top("connection.private_key"), "%v", err)
		}
		conn.PrivateKey = k
	case rc.PrivateKeyFile != nil:
		conn.PrivateKey = c.keyFile(*rc.PrivateKeyFile, path)
	default:
		c.errf(top("connection.private_key"), "missing: set private_key or private_key_file (`mptun genkey`), or security = \"none\" for an unauthenticated, unencrypted tunnel")
	}
	seen := map[noise.Key]int{}
	for i, rp := range raw.Peer {
		f := elem("peer", i, "")
		var p Peer
		if rp.PublicKey == nil {
			c.errf(f(""), "missing public_key")
		} else if k, err := noise.ParseKey(strings.TrimSpace(*rp.PublicKey)); err != nil {
			c.errf(f("public_key"), "%v", err)
		} else {
			p.PublicKey = k
			if j, dup := seen[k]; dup {
				c.errf(f("public_key"), "same key as peer[%d]", j)
			}
			seen[k] = i
			if pub, err := noise.PublicKey(conn.PrivateKey); err == nil && !conn.PrivateKey.IsZero() && pub == k {
				c.errf(f("public_key"), "this is the local key's own public key")
			}
		}
		if rp.PresharedKey != nil {
			k, err := noise.ParseKey(strings.TrimSpace(*rp.PresharedKey))
			if err != nil {
				c.errf(f("preshared_key"), "%v", err)
			}
			p.PresharedKey = k
		}
		for _, s := range rp.AllowedIPs {
			pf, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				c.errf(f("allowed_ips"), "invalid prefix %q", s)
				continue
			}
			if pf != pf.Masked() {
				c.errf(f("allowed_ips"), "prefix %q has host bits set; did you mean %q?", s, pf.Masked())
				continue
			}
			p.AllowedIPs = append(p.AllowedIPs, pf)
		}
		if len(p.AllowedIPs) == 0 {
			c.errf(f("allowed_ips"), "missing: the inner prefixes this peer may send from (e.g. [\"10.99.0.2/32\"])")
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	switch {
	case len(raw.Peer) == 0:
		c.errf(top("peer"), "secure mode needs [[peer]] sections with public_key and allowed_ips")
	case conn.Role == RoleClient && len(raw.Peer) != 1:
		c.errf(elem("peer", 1, "")(""), "a client has exactly one [[peer]] (the concentrator), not %d", len(raw.Peer))
	}
	c.overlaps(cfg)
}

// overlaps refuses an allowed IP given to two peers: routing by peer
// would be ambiguous.
func (c *checker) overlaps(cfg *Config) {
	owner := map[netip.Prefix]int{}
	for i, p := range cfg.Peers {
		for _, pf := range p.AllowedIPs {
			if j, dup := owner[pf]; dup && j != i {
				c.errf(elem("peer", i, "")("allowed_ips"), "%s is also peer[%d]'s", pf, j)
			}
			owner[pf] = i
		}
	}
}

// keyFile reads a private key file (relative paths are relative to the
// config file's directory).
func (c *checker) keyFile(name, cfgPath string) noise.Key {
	a := top("connection.private_key_file")
	if !filepath.IsAbs(name) {
		name = filepath.Join(filepath.Dir(cfgPath), name)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		c.errf(a, "%v", err)
		return noise.Key{}
	}
	k, err := noise.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		c.errf(a, "%s: %v", name, err)
	}
	return k
}
