// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/noise"
)

// secKeys are a client's and a server's key pairs for tests.
type secKeys struct {
	cli, srv, cliPub, srvPub noise.Key
}

func newSecKeys(seed uint64) secKeys {
	rnd := seededReader{rand.New(rand.NewPCG(seed, 77))}
	var k secKeys
	k.cli, _ = noise.GeneratePrivateKey(rnd)
	k.srv, _ = noise.GeneratePrivateKey(rnd)
	k.cliPub, _ = noise.PublicKey(k.cli)
	k.srvPub, _ = noise.PublicKey(k.srv)
	return k
}

var innerNet = netip.MustParsePrefix("10.99.0.0/24")

// secureConfigs sets up both ends of a harness in secure mode: the client
// may source 10.99.0.0/24, the server anything.
func secureConfigs(k secKeys, hc *harnessConfig) {
	clock := time.Unix(1700000000, 0)
	wall := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	hc.cli.Security = &Security{PrivateKey: k.cli, WallClock: wall,
		Peers: []Peer{{PublicKey: k.srvPub, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}}
	hc.srv.Security = &Security{PrivateKey: k.srv,
		Peers: []Peer{{PublicKey: k.cliPub, AllowedIPs: []netip.Prefix{innerNet}}}}
}

// innerPkt is an IPv4 packet from src of n bytes whose payload repeats mark.
func innerPkt(src string, n int, mark byte) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	p[2], p[3] = byte(n>>8), byte(n)
	p[8], p[9] = 64, 17
	copy(p[12:16], netip.MustParseAddr(src).AsSlice())
	copy(p[16:20], netip.MustParseAddr("10.99.0.1").AsSlice())
	for i := 20; i < n; i++ {
		p[i] = mark
	}
	return p
}

func newSecureHarness(t *testing.T, seed int64, nPaths int, edit func(*harnessConfig)) (*harness, *Conn) {
	t.Helper()
	var links []netsim.LinkConfig
	for range nPaths {
		links = append(links, link(20e6, 10*time.Millisecond, 0))
	}
	hc := harnessConfig{seed: seed, links: links}
	secureConfigs(newSecKeys(uint64(seed)), &hc)
	if edit != nil {
		edit(&hc)
	}
	h := newHarness(t, hc)
	c := h.dial(nPaths)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == nPaths && h.openPaths(h.serverConn()) == nPaths }) {
		t.Fatalf("secure connection not open: client %v\n%s\nclient %+v\nserver %+v", c.State(), h.dumpEvents(), h.ep[0].Stats(), h.ep[1].Stats())
	}
	return h, c
}

func TestSecureTransferNoPlaintext(t *testing.T) {
	h, c := newSecureHarness(t, 1, 2, nil)
	delivered := 0
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer && bytes.Equal(b, innerPkt("10.99.0.2", 600, 0xab)) {
			delivered++
		}
	}
	leaked := 0
	needle := bytes.Repeat([]byte{0xab}, 32)
	h.tap = func(side, path int, b []byte) bool {
		if bytes.Contains(b, needle) {
			leaked++
		}
		return true
	}
	for range 200 {
		c.Send(h.sim.Now(), innerPkt("10.99.0.2", 600, 0xab))
		h.service(sideClient)
		h.run(time.Millisecond)
	}
	h.run(time.Second)
	if delivered != 200 || leaked != 0 {
		t.Fatalf("delivered %d of 200, %d datagrams with plaintext", delivered, leaked)
	}
	sc := h.serverConn()
	if sc.PeerKey() != newSecKeys(1).cliPub || c.PeerKey() != newSecKeys(1).srvPub || c.AEAD() == "" || c.AEAD() != sc.AEAD() {
		t.Fatalf("peer keys / AEAD: %v %v %q %q", sc.PeerKey(), c.PeerKey(), c.AEAD(), sc.AEAD())
	}
	if sc.keys.secure == nil || sc.keys.secure.hmacPeer != c.keys.secure.hmacOwn || sc.keys.secure.closeOwn != c.keys.secure.closePeer {
		t.Fatal("derived HMAC/close keys differ between the ends")
	}
	t.Logf("AEAD %s; server drops %v", c.AEAD(), h.ep[1].Stats().Dropped)
}
