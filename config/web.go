// SPDX-License-Identifier: MIT

package config

import (
	"net"
	"net/netip"
	"strconv"
)

// Web is the read-only status page.
type Web struct {
	// Listen is host:port; empty: off. A port alone in the file means
	// loopback, so turning the page on never exposes it by accident.
	Listen string
}

// WebLoopback is the host a [web] listen without one gets.
const WebLoopback = "127.0.0.1"

type rawWeb struct {
	Listen string `toml:"listen"`
}

// web checks [web]: listen is "", a port ("9512" or ":9512", loopback),
// or an IP address or "localhost" with a port.
func (c *checker) web(raw *rawConfig, cfg *Config) {
	l := raw.Web.Listen
	if l == "" {
		return
	}
	a := top("web.listen")
	hostport := l
	if _, err := strconv.ParseUint(l, 10, 16); err == nil {
		hostport = ":" + l
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		c.errf(a, "invalid listen address %q: want a port (loopback), or host:port", l)
		return
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		c.errf(a, "invalid port %q: want 1..65535", port)
		return
	}
	switch {
	case host == "":
		host = WebLoopback
	case host == "localhost":
	default:
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			c.errf(a, "invalid host %q: want an IP address or localhost", host)
			return
		}
	}
	cfg.Web.Listen = net.JoinHostPort(host, port)
	if cfg.Web.Listen == cfg.Metrics.Listen {
		c.errf(a, "%s is also metrics.listen", cfg.Web.Listen)
	}
}
