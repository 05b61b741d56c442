// SPDX-License-Identifier: MIT

package mpdccp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
)

// A server's connection identifiers carry its CI prefix, so the token of
// every join names the owner; the Indexed hook follows the subflows the
// endpoint matches, exactly once each way.
func TestCIPrefixAndIndexHook(t *testing.T) {
	type key struct {
		remote netip.AddrPort
		port   uint16
	}
	live := map[key]int{}
	var ups, downs int
	hc := harnessConfig{seed: 5, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0), link(20e6, 20*time.Millisecond, 0)}}
	hc.srv.CIPrefix, hc.srv.CIPrefixBits = 0x5a, 8
	hc.srv.Indexed = func(r netip.AddrPort, p uint16, up bool) {
		k := key{r, p}
		if up {
			live[k]++
			ups++
		} else {
			live[k]--
			downs++
		}
		if live[k] < 0 || live[k] > 1 {
			t.Errorf("subflow %v/%d indexed %d times", r, p, live[k])
		}
	}
	h := newHarness(t, hc)
	c := h.dial(2)
	if !h.runUntil(5*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatal("no two-path connection")
	}
	srv := h.serverConn()
	if srv.ID()>>24 != 0x5a {
		t.Errorf("server CI %#08x lacks the prefix 0x5a", srv.ID())
	}
	if c.peerCI != srv.ID() {
		t.Errorf("the client's joins carry %#08x, the server's CI is %#08x", c.peerCI, srv.ID())
	}
	if ups != 2 || downs != 0 {
		t.Errorf("%d up and %d down events for two subflows", ups, downs)
	}
	c.Close(h.sim.Now())
	h.service(sideClient)
	h.runUntil(5*time.Second, func() bool { return len(h.ep[1].Conns()) == 0 })
	if downs != ups {
		t.Errorf("%d subflows indexed, %d removed after the close", ups, downs)
	}
	for k, n := range live {
		if n != 0 {
			t.Errorf("subflow %v still indexed after the close", k)
		}
	}
}

func TestCIPrefixValidated(t *testing.T) {
	for _, c := range []Config{{CIPrefix: 1}, {CIPrefix: 4, CIPrefixBits: 2}, {CIPrefixBits: 25}} {
		if _, err := NewEndpoint(c); err == nil {
			t.Errorf("prefix %#x/%d accepted", c.CIPrefix, c.CIPrefixBits)
		}
	}
	if _, err := NewEndpoint(Config{CIPrefix: 3, CIPrefixBits: 2}); err != nil {
		t.Error(err)
	}
}
