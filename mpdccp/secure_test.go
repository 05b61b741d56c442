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
	"github.com/mptun/mptun/mpdccp/wire"
)

// secKeys are a client's and a server's key pairs for tests.
type secKeys struct {
	cli, srv, cliPub, srvPub noise.Key
}

func newSecKeys(seed uint64) secKeys {
	rnd := netsim.RandReader(rand.New(rand.NewPCG(seed, 77)))
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

func newSecureHarness(t *testing.T, seed int64, nPaths int, before func(*harness)) (*harness, *Conn) {
	t.Helper()
	var links []netsim.LinkConfig
	for range nPaths {
		links = append(links, link(20e6, 10*time.Millisecond, 0))
	}
	hc := harnessConfig{seed: seed, links: links}
	secureConfigs(newSecKeys(uint64(seed)), &hc)
	h := newHarness(t, hc)
	if before != nil {
		before(h)
	}
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

// sendInner sends n inner packets from src through the client and runs
// the simulation; it returns how many the server delivered.
func sendInner(h *harness, c *Conn, src string, n int) int {
	got := 0
	h.onDeliver = func(side int, _ *Conn, b []byte) {
		if side == sideServer {
			got++
		}
	}
	for range n {
		c.Send(h.sim.Now(), innerPkt(src, 300, 0x5a))
		h.service(sideClient)
		h.run(time.Millisecond)
	}
	h.run(3 * time.Second)
	return got
}

func dropped(e *Endpoint, r DropReason) uint64 { return e.Stats().Dropped[r] }

func TestSecureTamperedPacketDropped(t *testing.T) {
	h, c := newSecureHarness(t, 2, 1, nil)
	tampered, data := 0, 0
	h.tap = func(side, path int, b []byte) bool {
		if typ, _ := wire.PeekType(b); side == sideClient && typ.HasData() {
			data++
			if data%8 == 4 && tampered < 5 {
				b[len(b)-20] ^= 0x01 // a ciphertext bit; the checksum does not cover it
				tampered++
			}
		}
		return true
	}
	got := sendInner(h, c, "10.99.0.2", 50)
	if tampered != 5 || dropped(h.ep[1], DropAuth) != 5 {
		t.Fatalf("tampered %d, auth drops %d", tampered, dropped(h.ep[1], DropAuth))
	}
	if got != 45 {
		t.Fatalf("delivered %d, want the 45 untouched", got)
	}
}

func TestSecureReplayDropped(t *testing.T) {
	h, c := newSecureHarness(t, 3, 1, nil)
	var captured [][]byte
	h.tap = func(side, path int, b []byte) bool {
		if side == sideClient {
			if typ, _ := wire.PeekType(b); typ.HasData() {
				captured = append(captured, append([]byte(nil), b...))
			}
		}
		return true
	}
	got := sendInner(h, c, "10.99.0.2", 20)
	if got != 20 || len(captured) != 20 {
		t.Fatalf("delivered %d, captured %d", got, len(captured))
	}
	before := h.ep[1].Stats().Dropped
	deliveredBefore := h.serverConn().Stats().DeliveredPackets
	for _, b := range captured {
		h.ep[1].HandleDatagram(h.sim.Now(), 0, cliAddr(0), srvAddr.Addr(), append([]byte(nil), b...), 0)
		h.service(sideServer)
	}
	if n := dropped(h.ep[1], DropReplay) - before[DropReplay]; n != 20 {
		t.Fatalf("replay drops %d, want 20 (drops %v)", n, h.ep[1].Stats().Dropped)
	}
	if h.serverConn().Stats().DeliveredPackets != deliveredBefore {
		t.Fatal("a replayed packet was delivered")
	}
}

func TestSecureForgedJoinRefused(t *testing.T) {
	var joinReq []byte
	h, _ := newSecureHarness(t, 4, 2, func(h *harness) {
		h.tap = func(side, path int, b []byte) bool {
			if typ, _ := wire.PeekType(b); side == sideClient && typ == wire.TypeRequest && path == 1 && joinReq == nil {
				joinReq = append([]byte(nil), b...)
			}
			return true
		}
	})
	sc := h.serverConn()
	subflows := len(sc.subflows)
	// A forged join: the right token (the server's CI is visible on the
	// wire), any nonce, no valid seal.
	buf := make([]byte, 512)
	var b wire.Builder
	hdr := wire.Header{SrcPort: 40999, DstPort: 6511, Type: wire.TypeRequest, Seq: 12345, ServiceCode: h.ep[1].cfg.ServiceCode}
	b.Begin(buf, &hdr)
	b.Feature(wire.OptChangeR, wire.FeatMultipath, 0)
	b.MP(&wire.MPOption{Type: wire.MPJoin, AddrID: 5, Token: sc.localCI, Nonce: 99})
	n, _ := b.Finish(make([]byte, 16)) // a made-up tag
	wire.SetChecksum(buf[:n], cliAddr(7).Addr(), srvAddr.Addr())
	before := dropped(h.ep[1], DropAuth)
	h.ep[1].HandleDatagram(h.sim.Now(), 1, cliAddr(7), srvAddr.Addr(), buf[:n], 0)
	h.service(sideServer)
	if dropped(h.ep[1], DropAuth) != before+1 || len(sc.subflows) != subflows {
		t.Fatalf("forged join: auth drops %d→%d, subflows %d→%d", before, dropped(h.ep[1], DropAuth), subflows, len(sc.subflows))
	}
	// The genuine join Request, played again from another address: its
	// seal is valid, but its nonce was used.
	if joinReq == nil {
		t.Fatal("no join Request captured")
	}
	before = dropped(h.ep[1], DropReplay)
	h.ep[1].HandleDatagram(h.sim.Now(), 1, cliAddr(8), srvAddr.Addr(), joinReq, 0)
	h.service(sideServer)
	if dropped(h.ep[1], DropReplay) != before+1 || len(sc.subflows) != subflows {
		t.Fatalf("replayed join: replay drops %d→%d, subflows %d→%d", before, dropped(h.ep[1], DropReplay), subflows, len(sc.subflows))
	}
	if h.openPaths(sc) != 2 {
		t.Fatalf("open paths %d after the forged joins", h.openPaths(sc))
	}
}

func TestSecureUnknownPeerKey(t *testing.T) {
	hc := harnessConfig{seed: 5, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	secureConfigs(newSecKeys(5), &hc)
	other := newSecKeys(6)
	hc.srv.Security.Peers[0].PublicKey = other.cliPub // the server knows someone else
	h := newHarness(t, hc)
	c := h.dial(1)
	h.run(5 * time.Second)
	if c.State() == Open || len(h.ep[1].Conns()) != 0 {
		t.Fatalf("unknown key got a connection: client %v, server conns %d", c.State(), len(h.ep[1].Conns()))
	}
	if dropped(h.ep[1], DropUnknownPeer) == 0 {
		t.Fatalf("no unknown-peer drop: %v", h.ep[1].Stats().Dropped)
	}
	if h.ep[1].Stats().ResetsSent != 0 || h.unroutable != 0 {
		t.Fatal("the server answered an unknown key")
	}
}

func TestSecureDowngradeRefused(t *testing.T) {
	// A plain RFC 9897 client against a secure server.
	hc := harnessConfig{seed: 7, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	secureConfigs(newSecKeys(7), &hc)
	hc.cli.Security = nil
	h := newHarness(t, hc)
	c := h.dial(1)
	h.run(3 * time.Second)
	if c.State() == Open || len(h.ep[1].Conns()) != 0 || dropped(h.ep[1], DropDowngrade) == 0 {
		t.Fatalf("plain client: state %v, server conns %d, drops %v", c.State(), len(h.ep[1].Conns()), h.ep[1].Stats().Dropped)
	}
	// A secure client against a plain server: the server's refusal (a
	// Reset) is not authenticated, so the client neither opens nor falls
	// back to plain keys.
	hc = harnessConfig{seed: 8, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	secureConfigs(newSecKeys(8), &hc)
	hc.srv.Security = nil
	h = newHarness(t, hc)
	c = h.dial(1)
	h.run(3 * time.Second)
	if c.State() == Open || c.keys.secure != nil || c.keys.ks != nil {
		t.Fatalf("secure client against a plain server: state %v", c.State())
	}
	if dropped(h.ep[0], DropAuth) == 0 {
		t.Fatalf("client drops %v", h.ep[0].Stats().Dropped)
	}
}

func TestSecureInnerSourceChecked(t *testing.T) {
	h, c := newSecureHarness(t, 9, 1, nil)
	if got := sendInner(h, c, "10.98.0.5", 10); got != 0 {
		t.Fatalf("%d packets from another CPE's address delivered", got)
	}
	if n := dropped(h.ep[1], DropInnerSource); n != 10 {
		t.Fatalf("inner-source drops %d, want 10", n)
	}
	if got := sendInner(h, c, "10.99.0.7", 10); got != 10 {
		t.Fatalf("allowed source: %d of 10 delivered", got)
	}
	// Downstream routing follows the allowed IPs, not learnt sources.
	if h.ep[1].RouteInner(netip.MustParseAddr("10.99.0.200")) != h.serverConn() {
		t.Fatal("no route to the peer's allowed IPs")
	}
	if h.ep[1].RouteInner(netip.MustParseAddr("10.98.0.5")) != nil {
		t.Fatal("a route to an address the peer does not own")
	}
}

// spoof builds a packet of type typ for the server's view of the client's
// subflow sf, with in-window numbers (what an on-path attacker can read
// off the wire), a correct checksum and a made-up tag.
func spoof(sf *subflow, typ wire.Type, opts func(*wire.Builder)) []byte {
	buf := make([]byte, 256)
	var b wire.Builder
	h := wire.Header{SrcPort: sf.remotePort, DstPort: sf.localPort, Type: typ, Seq: seqAdd(sf.gsr, 1), Ack: sf.gss,
		ResetCode: wire.ResetAborted}
	b.Begin(buf, &h)
	if opts != nil {
		opts(&b)
	}
	n, _ := b.Finish(make([]byte, sealOverhead))
	wire.SetChecksum(buf[:n], sf.remote.Addr(), srvAddr.Addr())
	return buf[:n]
}

func TestSecureSpoofedControlIgnored(t *testing.T) {
	h, c := newSecureHarness(t, 10, 2, nil)
	sc := h.serverConn()
	sf := sc.subflows[0]
	before := dropped(h.ep[1], DropAuth)
	pkts := [][]byte{
		spoof(sf, wire.TypeReset, nil),
		spoof(sf, wire.TypeSync, nil),
		spoof(sf, wire.TypeAck, func(b *wire.Builder) {
			b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: 1})
			b.MP(&wire.MPOption{Type: wire.MPPrio, Prio: 0})
		}),
		spoof(sf, wire.TypeClose, nil),
	}
	for _, p := range pkts {
		h.ep[1].HandleDatagram(h.sim.Now(), 0, sf.remote, srvAddr.Addr(), p, 0)
		h.service(sideServer)
	}
	if n := dropped(h.ep[1], DropAuth) - before; n != uint64(len(pkts)) {
		t.Fatalf("auth drops %d, want %d", n, len(pkts))
	}
	if sf.state != sfOpen || sf.prio != 3 || sc.State() != Open || sf.syncAckOut {
		t.Fatalf("spoofed control took effect: state %v prio %d conn %v", sf.state, sf.prio, sc.State())
	}
	// A spoofed packet from another address does not move the subflow.
	p := spoof(sf, wire.TypeAck, nil)
	h.ep[1].HandleDatagram(h.sim.Now(), 0, cliAddr(9), srvAddr.Addr(), p, 0)
	if sf.remote != cliAddr(0) {
		t.Fatalf("subflow moved to %v on an unauthenticated packet", sf.remote)
	}
	if got := sendInner(h, c, "10.99.0.2", 10); got != 10 {
		t.Fatalf("after the spoofed packets %d of 10 delivered", got)
	}
}

func TestSecureRebindOnAuthenticatedPacket(t *testing.T) {
	h, c := newSecureHarness(t, 11, 1, nil)
	// NAT rebinding: the client's datagrams now come from another port.
	moved := cliAddr(0)
	moved = netip.AddrPortFrom(moved.Addr(), moved.Port()+1)
	h.paths[0].cli = moved
	if got := sendInner(h, c, "10.99.0.2", 10); got != 10 {
		t.Fatalf("after rebinding %d of 10 delivered", got)
	}
	if sf := h.serverConn().subflows[0]; sf.remote != moved {
		t.Fatalf("subflow at %v, want %v", sf.remote, moved)
	}
}

// TestAddAddrInResponseBeforeKeys is the regression test of a crash: a
// Response carrying MP_ADDADDR + MP_HMAC before the key scheme is set
// dereferenced a nil scheme. Plain mode, where it happened.
func TestAddAddrInResponseBeforeKeys(t *testing.T) {
	hc := harnessConfig{seed: 12, links: []netsim.LinkConfig{link(20e6, 10*time.Millisecond, 0)}}
	h := newHarness(t, hc)
	var req []byte
	h.tap = func(side, path int, b []byte) bool {
		if typ, _ := wire.PeekType(b); side == sideClient && typ == wire.TypeRequest && req == nil {
			req = append([]byte(nil), b...)
		}
		return false // nothing reaches the server
	}
	c := h.dial(1)
	h.run(10 * time.Millisecond)
	var p wire.Packet
	if req == nil || wire.Parse(req, &p) != nil {
		t.Fatal("no Request")
	}
	buf := make([]byte, 512)
	var b wire.Builder
	hdr := wire.Header{SrcPort: p.DstPort, DstPort: p.SrcPort, Type: wire.TypeResponse, Seq: 777, Ack: p.Seq, ServiceCode: p.ServiceCode}
	b.Begin(buf, &hdr)
	b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0)
	b.MP(&wire.MPOption{Type: wire.MPAddAddr, AddrID: 1, Nonce: 5, Addr: netip.MustParseAddr("192.0.2.9")})
	b.MP(&wire.MPOption{Type: wire.MPHMAC, HMAC: make([]byte, wire.HMACSize)})
	n, _ := b.Finish(nil)
	wire.SetChecksum(buf[:n], srvAddr.Addr(), cliAddr(0).Addr())
	h.ep[0].HandleDatagram(h.sim.Now(), 0, srvAddr, cliAddr(0).Addr(), buf[:n], 0) // must not panic
	if dropped(h.ep[0], DropBadHMAC) == 0 {
		t.Fatalf("MP_ADDADDR without keys not counted: %v", h.ep[0].Stats().Dropped)
	}
	if c.State() == Open {
		t.Fatal("a Response without MP_KEY opened the connection")
	}
}

// An oversized datagram with a subflow's ports and a valid sequence
// number from a new address is dropped, not tried for rebinding (the trial
// buffer holds MaxPacket bytes).
func TestSecureOversizedRebindCandidate(t *testing.T) {
	h, _ := newSecureHarness(t, 13, 1, nil)
	sf := h.serverConn().subflows[0]
	p := spoof(sf, wire.TypeAck, nil)
	big := make([]byte, h.ep[1].cfg.MaxPacket+100)
	copy(big, p)
	big[4] = byte(len(p)-sealOverhead) / 4 // header as built; the rest is "payload"
	wire.SetChecksum(big, cliAddr(9).Addr(), srvAddr.Addr())
	h.ep[1].HandleDatagram(h.sim.Now(), 0, cliAddr(9), srvAddr.Addr(), big, 0) // must not panic
	if sf.remote != cliAddr(0) {
		t.Fatal("moved on an oversized datagram")
	}
}
