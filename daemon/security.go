// SPDX-License-Identifier: MIT

package daemon

import (
	"log/slog"
	"net/netip"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/mpdccp"
)

// engineSecurity turns the config's keys and peers into the engine's
// secure mode; nil (with a loud warning) for security = "none".
func engineSecurity(cfg *config.Config, log *slog.Logger) *mpdccp.Security {
	if cfg.Connection.Security == config.SecurityNone {
		log.Warn("SECURITY IS OFF: security = \"none\" runs plain RFC 9897 MP-DCCP — anyone who reaches this port can connect, " +
			"inject inner packets and read, reset or hijack the tunnel. Use it only for interop tests and captures; " +
			"set private_key and [[peer]] sections for a real tunnel.")
		return nil
	}
	sec := &mpdccp.Security{PrivateKey: cfg.Connection.PrivateKey}
	for _, p := range cfg.Peers {
		sec.Peers = append(sec.Peers, mpdccp.Peer{PublicKey: p.PublicKey, PresharedKey: p.PresharedKey,
			AllowedIPs: append([]netip.Prefix(nil), p.AllowedIPs...)})
	}
	return sec
}

// sameSecurity reports whether two configs have the same security
// settings (keys and peers change only with a restart).
func sameSecurity(a, b *config.Config) bool {
	if a.Connection.Security != b.Connection.Security || a.Connection.PrivateKey != b.Connection.PrivateKey ||
		len(a.Peers) != len(b.Peers) {
		return false
	}
	for i := range a.Peers {
		p, q := a.Peers[i], b.Peers[i]
		if p.PublicKey != q.PublicKey || p.PresharedKey != q.PresharedKey || len(p.AllowedIPs) != len(q.AllowedIPs) {
			return false
		}
		for j := range p.AllowedIPs {
			if p.AllowedIPs[j] != q.AllowedIPs[j] {
				return false
			}
		}
	}
	return true
}
