// SPDX-License-Identifier: MIT

package mpdccp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

func TestSecureCookieUnderLoad(t *testing.T) {
	hc := harnessConfig{seed: 20, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	secureConfigs(newSecKeys(20), &hc)
	hc.srv.Security.CookieThreshold = -1 // always under load
	h := newHarness(t, hc)
	t0 := h.sim.Now()
	c := h.dial(1)
	if !h.runUntil(5*time.Second, func() bool { return c.State() == Open && h.openPaths(h.serverConn()) == 1 }) {
		t.Fatalf("no connection with cookies: %+v / %+v", h.ep[0].Stats(), h.ep[1].Stats())
	}
	// The cookie is taken and the Request sent again at once: three round
	// trips of 20 ms, not the Request's 1 s retransmission timer.
	if d := h.sim.Now().Sub(t0); d > 200*time.Millisecond {
		t.Errorf("connection with a cookie opened after %v, want a few round trips", d)
	}
	if h.ep[1].Stats().CookieReplies != 1 || h.ep[0].Stats().CookiesTaken != 1 {
		t.Fatalf("cookie replies %d, taken %d", h.ep[1].Stats().CookieReplies, h.ep[0].Stats().CookiesTaken)
	}
	if got := sendInner(h, c, "10.99.0.2", 10); got != 10 {
		t.Fatalf("%d of 10 delivered", got)
	}
}

// dialDropped dials one path with everything the client sends dropped
// (the tap stays) and returns the client's first Request.
func (h *harness) dialDropped() []byte {
	var req []byte
	h.tap = func(side, path int, b []byte) bool {
		if typ, _ := wire.PeekType(b); side == sideClient && typ == wire.TypeRequest && req == nil {
			req = append([]byte(nil), b...)
		}
		return false
	}
	h.dial(1)
	h.run(10 * time.Millisecond)
	return req
}

// captureRequest returns a secure client's first Request (it never
// reaches the server).
func captureRequest(t *testing.T, seed int64) (*harness, []byte) {
	hc := harnessConfig{seed: seed, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	secureConfigs(newSecKeys(uint64(seed)), &hc)
	h := newHarness(t, hc)
	req := h.dialDropped()
	if req == nil {
		t.Fatal("no Request")
	}
	h.tap = nil
	return h, req
}

func spoofedSource(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)}), uint16(1024+i%60000))
}

// TestSecureHandshakeFlood replays a genuine first Request (valid mac1)
// from 5,000 spoofed sources at 1,000 per second, mixed with garbage: the
// server keeps no state for them, does little work (cookies, not DH, once
// loaded), sends back less than it receives and stays bounded.
func TestSecureHandshakeFlood(t *testing.T) {
	h, req := captureRequest(t, 21)
	srv := h.ep[1]
	in0, out0 := srv.Stats().BytesIn, srv.Stats().BytesOut
	buf := make([]byte, 2048)
	for i := 0; i < 5000; i++ {
		now := h.sim.Now()
		b := append(buf[:0], req...)
		if i%4 == 3 { // garbage: a corrupted copy
			b[len(b)/2] ^= 0xff
			wire.SetChecksum(b, spoofedSource(i).Addr(), srvAddr.Addr())
		}
		srv.HandleDatagram(now, 0, spoofedSource(i), srvAddr.Addr(), b, 0)
		for {
			if _, ok := srv.PollTransmit(now, h.buf); !ok {
				break
			}
		}
		h.sim.RunUntil(now.Add(time.Millisecond))
	}
	st := srv.Stats()
	in, out := st.BytesIn-in0, st.BytesOut-out0
	t.Logf("in %d B, out %d B (%.2f×), cookies %d, drops %v, conns %d, limiter %d sources",
		in, out, float64(out)/float64(in), st.CookieReplies, st.Dropped, len(srv.conns), len(srv.limiter.b))
	if float64(out) > 3*float64(in) {
		t.Fatalf("amplification %.2f×", float64(out)/float64(in))
	}
	if len(srv.conns) > 1 || len(srv.stateless) > maxStateless || len(srv.limiter.b) > maxRateSources {
		t.Fatalf("state grew: %d conns, %d queued replies, %d limiter entries", len(srv.conns), len(srv.stateless), len(srv.limiter.b))
	}
	if st.CookieReplies < 3000 {
		t.Fatalf("only %d cookie replies: the flood was not met with cookies", st.CookieReplies)
	}
	if st.Dropped[DropHandshake] < 1000 {
		t.Fatalf("corrupted first messages not counted: %v", st.Dropped)
	}
}

func TestSecureRateLimitPerSource(t *testing.T) {
	h, req := captureRequest(t, 22)
	srv := h.ep[1]
	for i := 0; i < 30; i++ {
		// One address, many ports (the limiter counts per address).
		from := netip.AddrPortFrom(cliAddr(0).Addr(), uint16(30000+i))
		srv.HandleDatagram(h.sim.Now(), 0, from, srvAddr.Addr(), append([]byte(nil), req...), 0)
	}
	st := srv.Stats()
	// Burst 5: one accepted, four replays caught by their timestamp after
	// the DH, the other 25 refused before any DH.
	if st.Dropped[DropRateLimited] != 25 || st.Dropped[DropReplay] != 4 || len(srv.conns) != 1 {
		t.Fatalf("drops %v, conns %d", st.Dropped, len(srv.conns))
	}
}

func TestClosedSubflowsFreed(t *testing.T) {
	h, c := newSecureHarness(t, 23, 3, nil)
	if err := c.RemovePath(h.sim.Now(), 2); err != nil {
		t.Fatal(err)
	}
	h.service(sideClient)
	h.run(5 * time.Second)
	if len(c.subflows) != 2 || len(h.serverConn().subflows) != 2 {
		t.Fatalf("subflows after removing one: client %d, server %d", len(c.subflows), len(h.serverConn().subflows))
	}
	if got := sendInner(h, c, "10.99.0.2", 20); got != 20 {
		t.Fatalf("%d of 20 delivered", got)
	}
}

func TestSecureKeyRatchet(t *testing.T) {
	h, c := newSecureHarness(t, 24, 2, func(h *harness) {
		h.ep[0].sec.cfg.RekeyAfter = 50 * time.Millisecond
		h.ep[0].sec.cfg.RekeyAfterPackets = 7
	})
	sf := c.subflows[0]
	first := sf.crypt.tx.secret
	if got := sendInner(h, c, "10.99.0.2", 200); got != 200 {
		t.Fatalf("%d of 200 delivered across key updates (drops %v)", got, h.ep[1].Stats().Dropped)
	}
	if sf.crypt.tx.secret == first {
		t.Fatal("the key never changed")
	}
	ssf := h.serverConn().subflows[0]
	if ssf.crypt.rx.secret != sf.crypt.tx.secret || !ssf.crypt.hasPrev {
		t.Fatal("the receiver did not follow the key updates")
	}
}

// TestSecureJoinsOverLoss: the secure handshake and joins complete over
// lossy paths (lost Requests, Responses, Acks are retransmitted and still
// authenticate), with no authentication failure on the way.
func TestSecureJoinsOverLoss(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		var links []netsim.LinkConfig
		for range 4 {
			links = append(links, link(20e6, 50*time.Millisecond, 0.10))
		}
		hc := harnessConfig{seed: seed, links: links}
		secureConfigs(newSecKeys(uint64(seed)), &hc)
		h := newHarness(t, hc)
		c := h.dial(4)
		if !h.runUntil(60*time.Second, func() bool { return h.openPaths(c) == 4 && h.openPaths(h.serverConn()) == 4 }) {
			t.Fatalf("seed %d: open paths client %d server %d\n%s", seed, h.openPaths(c), h.openPaths(h.serverConn()), h.dumpEvents())
		}
		if got := sendInner(h, c, "10.99.0.2", 100); got < 80 {
			t.Fatalf("seed %d: %d of 100 delivered over 10 %% loss", seed, got)
		}
		for side, e := range h.ep {
			if d := e.Stats().Dropped; d[DropAuth]+d[DropReplay]+d[DropHandshake] != 0 {
				t.Fatalf("seed %d side %d: security drops without an attacker: %v", seed, side, d)
			}
		}
	}
}

// TestPlainRateLimitPerSource: plain mode has no cookies, but a source
// address still gets at most a burst of connections, then 20 a second.
func TestPlainRateLimitPerSource(t *testing.T) {
	hc := harnessConfig{seed: 25, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	h := newHarness(t, hc)
	req := h.dialDropped()
	srv := h.ep[1]
	for i := 0; i < 30; i++ {
		from := netip.AddrPortFrom(cliAddr(0).Addr(), uint16(30000+i))
		srv.HandleDatagram(h.sim.Now(), 0, from, srvAddr.Addr(), append([]byte(nil), req...), 0)
	}
	if n := len(srv.conns); n != 5 || dropped(srv, DropRateLimited) != 25 {
		t.Fatalf("%d connections, drops %v", n, srv.Stats().Dropped)
	}
}
