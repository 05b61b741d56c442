// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

// A scripted peer: packets built option by option from RFC 4340/9897, to
// play an implementation that is not mptun (one that knows only CCID 2).

var (
	negCli = netip.MustParseAddrPort("192.0.2.10:40000")
	negSrv = netip.MustParseAddrPort("198.51.100.20:6511")
)

// feats collects the feature options of a packet: (option type, feature) →
// values.
func feats(t *testing.T, b []byte) (wire.Packet, map[[2]uint8][]byte, []wire.MPOption) {
	t.Helper()
	var p wire.Packet
	if err := wire.Parse(b, &p); err != nil {
		t.Fatalf("parse: %v", err)
	}
	m := map[[2]uint8][]byte{}
	var mps []wire.MPOption
	it := wire.NewOptionIter(p.Options)
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		switch {
		case o.Type >= wire.OptChangeL && o.Type <= wire.OptConfirmR:
			f, vals, err := wire.ParseFeature(o.Data)
			if err != nil {
				t.Fatalf("feature option %d: %v", o.Type, err)
			}
			m[[2]uint8{o.Type, f}] = append([]byte(nil), vals...)
		case o.Type == wire.OptMultipath:
			var mo wire.MPOption
			if err := wire.ParseMP(o.Data, &mo); err != nil {
				t.Fatal(err)
			}
			mps = append(mps, mo)
		}
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return p, m, mps
}

// build makes one packet from src to dst with the given options.
func build(t *testing.T, src, dst netip.AddrPort, h wire.Header, opts func(b *wire.Builder)) []byte {
	t.Helper()
	buf := make([]byte, 512)
	var b wire.Builder
	if err := b.Begin(buf, &h); err != nil {
		t.Fatal(err)
	}
	opts(&b)
	n, err := b.Finish(nil)
	if err != nil {
		t.Fatal(err)
	}
	wire.SetChecksum(buf[:n], src.Addr(), dst.Addr())
	return buf[:n]
}

func poll(t *testing.T, e *Endpoint, now mono.Time) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	tx, ok := e.PollTransmit(now, buf)
	if !ok {
		t.Fatal("nothing to send")
	}
	return buf[:tx.N]
}

// negDial makes a client running cc dial the scripted server over one path.
func negDial(t *testing.T, cc string) (*Endpoint, *Conn) {
	t.Helper()
	cli := negEndpoint(t, Client, cc)
	c, err := cli.Dial(0, []PathConfig{{Remote: negSrv, LocalAddr: negCli}})
	if err != nil {
		t.Fatal(err)
	}
	return cli, c
}

// responseTo is the header of the scripted server's Response to req.
func responseTo(req wire.Packet) wire.Header {
	return wire.Header{SrcPort: req.DstPort, DstPort: req.SrcPort, Type: wire.TypeResponse,
		Seq: 5000, Ack: req.Seq, ServiceCode: req.ServiceCode}
}

func negEndpoint(t *testing.T, role Role, cc string) *Endpoint {
	t.Helper()
	e, err := NewEndpoint(Config{Role: role, CCID: cc, Rand: netsim.RandReader(rand.New(rand.NewPCG(11, 12)))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestCCIDPreferenceLists(t *testing.T) {
	for _, c := range []struct {
		cc   string
		want []byte
	}{
		{"bbr", []byte{248, 2}}, // BBR, then RFC 4341 for peers that know only that
		{"ccid2", []byte{2}},
		{"none", []byte{249}}, // never CCID 2: none is not RFC 4341
	} {
		cli, _ := negDial(t, c.cc)
		_, f, _ := feats(t, poll(t, cli, 0))
		if got := f[[2]uint8{wire.OptChangeL, wire.FeatCCID}]; !bytes.Equal(got, c.want) {
			t.Errorf("%s offers Change L(CCID, %v), want %v", c.cc, got, c.want)
		}
		if got := f[[2]uint8{wire.OptChangeR, wire.FeatMultipath}]; !bytes.Equal(got, []byte{0}) {
			t.Errorf("%s: Change R(MP_CAPABLE, %v)", c.cc, got)
		}
	}
}

// TestCCIDPeerConfirms2AsServer: mptun dials with bbr a server that knows
// only CCID 2. The server confirms 2 (RFC 4340 §6.3.1: nothing in common
// with a 2-only list but 2), so the subflow must run ccid2; the connection
// opens.
func TestCCIDPeerConfirms2AsServer(t *testing.T) {
	cli, c := negDial(t, "bbr")
	req, _, mps := feats(t, poll(t, cli, 0))
	var key []byte
	for _, m := range mps {
		if m.Type == wire.MPKey {
			key = m.Keys
		}
	}
	if key == nil || key[0] != wire.KeyTypePlain {
		t.Fatalf("Request MP_KEY %x", key)
	}
	peerKey := []byte{0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58}
	resp := build(t, negSrv, negCli, responseTo(req), func(b *wire.Builder) {
		b.Feature(wire.OptConfirmR, wire.FeatCCID, 2, 2)          // your CCID: 2; I know only 2
		b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0, 0)     // MP_CAPABLE version 0
		b.Feature(wire.OptConfirmL, wire.FeatSendAckVector, 1, 1) // I send Ack Vectors
		b.Feature(wire.OptChangeL, wire.FeatCCID, 2)              // my CCID: 2
		b.MP(&wire.MPOption{Type: wire.MPKey, Token: 0x0badcafe, Keys: append([]byte{wire.KeyTypePlain}, peerKey...)})
	})
	cli.HandleDatagram(1e6, 0, negSrv, negCli.Addr(), resp, 0)
	if got := c.Stats().Paths[0].CCID; got != "ccid2" {
		t.Fatalf("subflow runs %q after the peer confirmed CCID 2, want ccid2", got)
	}
	ack, f, _ := feats(t, poll(t, cli, 2e6))
	if ack.Type != wire.TypeAck {
		t.Fatalf("client sent %v, want Ack", ack.Type)
	}
	// The server's own CCID: 2 is confirmed with our list of known CCIDs.
	if got := f[[2]uint8{wire.OptConfirmR, wire.FeatCCID}]; len(got) < 2 || got[0] != 2 || !bytes.Contains(got[1:], []byte{2}) {
		t.Fatalf("Confirm R(CCID, %v), want 2 then a list with 2", got)
	}
	final := build(t, negSrv, negCli, wire.Header{SrcPort: req.DstPort, DstPort: req.SrcPort, Type: wire.TypeAck,
		Seq: 5001, Ack: ack.Seq}, func(b *wire.Builder) {})
	cli.HandleDatagram(3e6, 0, negSrv, negCli.Addr(), final, 0)
	if c.State() != Open {
		t.Fatalf("connection %v after the 4-way handshake", c.State())
	}
	if got := c.Stats().Paths[0].CCID; got != "ccid2" {
		t.Fatalf("open subflow runs %q", got)
	}
}

// TestCCIDPeerConfirms2AsClient: a client that knows only CCID 2 dials an
// mptun server running bbr. The server offers 248, 2; the client confirms
// 2; the server's subflow then runs ccid2. The server's Response also
// carries the MP_CAPABLE Confirm L with the server's list.
func TestCCIDPeerConfirms2AsClient(t *testing.T) {
	srv := negEndpoint(t, Server, "bbr")
	peerKey := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	req := build(t, negCli, negSrv, wire.Header{SrcPort: 40000, DstPort: 6511, Type: wire.TypeRequest, Seq: 100,
		ServiceCode: srv.cfg.ServiceCode}, func(b *wire.Builder) {
		b.Feature(wire.OptChangeR, wire.FeatMultipath, 0)
		b.Feature(wire.OptChangeL, wire.FeatCCID, 2) // I send with CCID 2 only
		b.Feature(wire.OptChangeR, wire.FeatSendAckVector, 1)
		b.MP(&wire.MPOption{Type: wire.MPKey, Token: 0x01020304, Keys: append([]byte{wire.KeyTypePlain}, peerKey...)})
	})
	srv.HandleDatagram(0, 0, negCli, negSrv.Addr(), req, 0)
	resp, f, _ := feats(t, poll(t, srv, 1e6))
	if resp.Type != wire.TypeResponse {
		t.Fatalf("server sent %v", resp.Type)
	}
	if got := f[[2]uint8{wire.OptChangeL, wire.FeatCCID}]; !bytes.Equal(got, []byte{248, 2}) {
		t.Errorf("server offers Change L(CCID, %v), want [248 2]", got)
	}
	if got := f[[2]uint8{wire.OptConfirmR, wire.FeatCCID}]; len(got) == 0 || got[0] != 2 {
		t.Errorf("server confirms the client's CCID as %v, want 2 first", got)
	}
	if got := f[[2]uint8{wire.OptConfirmL, wire.FeatMultipath}]; !bytes.Equal(got, []byte{0, 0}) {
		t.Errorf("Confirm L(MP_CAPABLE, %v), want the chosen version 0 then the list [0]", got)
	}
	ack := build(t, negCli, negSrv, wire.Header{SrcPort: 40000, DstPort: 6511, Type: wire.TypeAck, Seq: 101,
		Ack: resp.Seq}, func(b *wire.Builder) {
		b.Feature(wire.OptConfirmR, wire.FeatCCID, 2, 2) // nothing in common but 2
	})
	srv.HandleDatagram(2e6, 0, negCli, negSrv.Addr(), ack, 0)
	conns := srv.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d server connections", len(conns))
	}
	if got := conns[0].Stats().Paths[0].CCID; got != "ccid2" {
		t.Fatalf("server subflow runs %q after the client confirmed CCID 2, want ccid2", got)
	}
}

// TestCCIDConfirmNotOffered: a Confirm R naming a CCID we did not offer
// (and not the default) fails the negotiation: Reset, option error.
func TestCCIDConfirmNotOffered(t *testing.T) {
	cli, c := negDial(t, "bbr")
	req, _, _ := feats(t, poll(t, cli, 0))
	resp := build(t, negSrv, negCli, responseTo(req), func(b *wire.Builder) {
		b.Feature(wire.OptConfirmR, wire.FeatCCID, 3, 3) // TFRC: not offered
		b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0, 0)
		b.MP(&wire.MPOption{Type: wire.MPKey, Token: 7, Keys: append([]byte{wire.KeyTypePlain}, 1, 2, 3, 4, 5, 6, 7, 8)})
	})
	cli.HandleDatagram(1e6, 0, negSrv, negCli.Addr(), resp, 0)
	rst, _, _ := feats(t, poll(t, cli, 2e6))
	if rst.Type != wire.TypeReset || rst.ResetCode != wire.ResetOptionError {
		t.Fatalf("client sent %v code %v, want Reset option-error", rst.Type, rst.ResetCode)
	}
	if c.State() == Open {
		t.Fatal("connection opened on a CCID nobody offered")
	}
}

// TestCCIDBetweenMptuns: two mptun ends keep each half-connection's
// controller: the receiver takes the sender's first choice.
func TestCCIDBetweenMptuns(t *testing.T) {
	for _, c := range []struct{ cli, srv, wantCli, wantSrv string }{
		{"bbr", "ccid2", "bbr", "ccid2"},
		{"none", "bbr", "none", "bbr"},
		{"ccid2", "none", "ccid2", "none"},
	} {
		p := &pipe{buf: make([]byte, 2048), dbuf: make([]byte, 2048)}
		p.ep[0] = negEndpoint(t, Client, c.cli)
		p.ep[1] = negEndpoint(t, Server, c.srv)
		conn, err := p.ep[0].Dial(0, []PathConfig{{ID: 0, LocalAddr: cliAddr(0), Remote: srvAddr},
			{ID: 1, Local: 1, LocalAddr: cliAddr(1), Remote: srvAddr}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			p.step()
			p.now = p.now.Add(1e6)
		}
		if conn.State() != Open || len(p.ep[1].Conns()) != 1 {
			t.Fatalf("%+v: not open", c)
		}
		for _, ps := range conn.Stats().Paths {
			if ps.CCID != c.wantCli {
				t.Errorf("%+v: client path %d runs %s", c, ps.ID, ps.CCID)
			}
		}
		for _, ps := range p.ep[1].Conns()[0].Stats().Paths {
			if ps.CCID != c.wantSrv {
				t.Errorf("%+v: server path %d runs %s", c, ps.ID, ps.CCID)
			}
		}
	}
}

func TestReconcileSP(t *testing.T) {
	for _, c := range []struct {
		server, client []uint8
		want           uint8
		ok             bool
	}{
		{[]uint8{248, 2}, []uint8{2}, 2, true},
		{[]uint8{2}, []uint8{248, 2}, 2, true},
		{[]uint8{248, 2}, []uint8{2, 248}, 248, true}, // the server's order wins
		{[]uint8{249}, []uint8{2}, 0, false},
	} {
		got, ok := reconcileSP(c.server, c.client)
		if got != c.want || ok != c.ok {
			t.Errorf("reconcile(%v, %v) = %d %v", c.server, c.client, got, ok)
		}
	}
	if controllerFor(2, "") != "ccid2" || controllerFor(248, "") != "bbr" || controllerFor(249, "") != "none" {
		t.Errorf("controllers for 2/248/249: %q %q %q", controllerFor(2, ""), controllerFor(248, ""), controllerFor(249, ""))
	}
	if controllerFor(3, "") != "" {
		t.Error("a controller for CCID 3 (TFRC), which mptun does not have")
	}
}

// TestNoMPCapableCloses: a server that answers without confirming
// MP_CAPABLE (plain DCCP) makes the client close with an option error;
// mptun does not carry plain DCCP (RFC 9897's fallback allows closing).
func TestNoMPCapableCloses(t *testing.T) {
	cli, c := negDial(t, "ccid2")
	req, _, _ := feats(t, poll(t, cli, 0))
	resp := build(t, negSrv, negCli, responseTo(req), func(b *wire.Builder) {
		b.Feature(wire.OptConfirmR, wire.FeatCCID, 2, 2)
		b.Feature(wire.OptConfirmL, wire.FeatMultipath) // empty: no version in common
	})
	cli.HandleDatagram(1e6, 0, negSrv, negCli.Addr(), resp, 0)
	rst, _, _ := feats(t, poll(t, cli, 2e6))
	if rst.Type != wire.TypeReset || rst.ResetCode != wire.ResetOptionError {
		t.Fatalf("client sent %v code %v, want Reset option-error", rst.Type, rst.ResetCode)
	}
	if c.State() != Closed {
		t.Fatalf("connection %v, want closed", c.State())
	}
}

// FuzzCCIDNegotiation: whatever a server puts in its Confirm R(CCID) and
// Change L(CCID), the client either refuses (Reset, option error) or runs a
// controller for a CCID it offered or the default 2, and confirms the
// server's CCID with a value it can receive (or 2).
func FuzzCCIDNegotiation(f *testing.F) {
	f.Add([]byte{2, 2}, []byte{2}, uint8(0))
	f.Add([]byte{248, 248, 2}, []byte{248, 2}, uint8(0))
	f.Add([]byte{}, []byte{3, 4}, uint8(1))
	f.Add([]byte{249}, []byte{}, uint8(2))
	f.Fuzz(func(t *testing.T, confirm, change []byte, which uint8) {
		if len(confirm) > 6 || len(change) > 6 {
			return
		}
		cc := []string{"bbr", "ccid2", "none"}[which%3]
		cli, c := negDial(t, cc)
		req, f0, _ := feats(t, poll(t, cli, 0))
		offered := f0[[2]uint8{wire.OptChangeL, wire.FeatCCID}]
		resp := build(t, negSrv, negCli, responseTo(req), func(b *wire.Builder) {
			b.Feature(wire.OptConfirmR, wire.FeatCCID, confirm...)
			if len(change) > 0 {
				b.Feature(wire.OptChangeL, wire.FeatCCID, change...)
			}
			b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0, 0)
			b.MP(&wire.MPOption{Type: wire.MPKey, Token: 9, Keys: append([]byte{wire.KeyTypePlain}, 1, 2, 3, 4, 5, 6, 7, 8)})
		})
		cli.HandleDatagram(1e6, 0, negSrv, negCli.Addr(), resp, 0)
		out, fs, _ := feats(t, poll(t, cli, 2e6))
		if out.Type == wire.TypeReset {
			if out.ResetCode != wire.ResetOptionError {
				t.Fatalf("reset code %v", out.ResetCode)
			}
			return
		}
		ran := c.Stats().Paths[0].CCID
		id := uint8(2)
		if len(confirm) > 0 {
			id = confirm[0]
		}
		if !bytes.Contains(offered, []byte{id}) && id != 2 || controllerFor(id, "") != ran {
			t.Fatalf("offered %v, peer confirmed %v: running %s", offered, confirm, ran)
		}
		if len(change) > 0 {
			got := fs[[2]uint8{wire.OptConfirmR, wire.FeatCCID}]
			if len(got) == 0 || controllerFor(got[0], "") == "" && got[0] != 2 {
				t.Fatalf("server's Change L %v confirmed as %v", change, got)
			}
		}
	})
}
