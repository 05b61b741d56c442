// SPDX-License-Identifier: MIT

package mpdccp

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
)

// natPipe joins a client and a server through a NAT: the client sends from
// private addresses, the server sees public ones (and answers them), and
// the server's socket may be wildcard-bound (it does not know its own
// address). Nothing rewrites the DCCP checksum, as with a real NAT.
type natPipe struct {
	ep       [2]*Endpoint
	conn     *Conn
	now      mono.Time
	public   [2]netip.AddrPort // what the server sees of client path i
	wildcard bool
	corrupt  func(side int, b []byte) // mangles datagrams in flight, if set
	got      [2]int                   // inner packets delivered per side
	buf      []byte
}

func (n *natPipe) to(side int) netip.Addr {
	if side == sideServer && n.wildcard {
		return netip.IPv4Unspecified()
	}
	if side == sideServer {
		return srvAddr.Addr()
	}
	return netip.Addr{} // unused: the client's own is per path
}

func (n *natPipe) step() {
	for moved := true; moved; {
		moved = false
		for side := 0; side < 2; side++ {
			e, peer := n.ep[side], n.ep[1-side]
			if pumpOut(e, n.now, n.buf, func(t Transmit, dg []byte) {
				b := append([]byte(nil), dg...)
				if n.corrupt != nil {
					n.corrupt(side, b)
				}
				if side == sideClient {
					peer.HandleDatagram(n.now, 0, n.public[t.Local], n.to(sideServer), b, 0)
					return
				}
				for i, pub := range n.public {
					if pub == t.Remote {
						peer.HandleDatagram(n.now, i, srvAddr, cliAddr(i).Addr(), b, 0)
					}
				}
			}) {
				moved = true
			}
			n.got[side] += drainDelivered(e, n.now, n.buf, nil)
		}
	}
}

func (n *natPipe) run(d time.Duration) {
	for end := n.now.Add(d); n.now < end; n.now = n.now.Add(time.Millisecond) {
		n.step()
	}
}

func newNATPipe(t *testing.T, wildcard bool) *natPipe {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	n := &natPipe{buf: make([]byte, 2048), wildcard: wildcard, public: [2]netip.AddrPort{
		netip.MustParseAddrPort("203.0.113.9:61001"), netip.MustParseAddrPort("203.0.113.9:61002")}}
	var err error
	// Round robin, so that every subflow carries data through the NAT.
	if n.ep[0], err = NewEndpoint(Config{Role: Client, Rand: netsim.RandReader(rng), Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	if n.ep[1], err = NewEndpoint(Config{Role: Server, Rand: netsim.RandReader(rng), Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	if n.conn, err = n.ep[0].Dial(0, directPaths(2)); err != nil {
		t.Fatal(err)
	}
	n.run(200 * time.Millisecond)
	if n.conn.State() != Open || len(n.ep[1].Conns()) != 1 || n.ep[1].Conns()[0].Stats().Paths[1].State != "open" {
		t.Fatalf("connection through the NAT did not open (server drops %v)", n.ep[1].Stats().Dropped)
	}
	return n
}

func innerPacket(i int) []byte {
	p := make([]byte, 200)
	p[0], p[9] = 0x45, 17
	p[2], p[3] = 0, 200
	p[100] = byte(i)
	return p
}

// sendBoth sends count inner packets each way, 2 ms apart.
func (n *natPipe) sendBoth(srvConn *Conn, count int) {
	for i := 0; i < count; i++ {
		n.conn.Send(n.now, innerPacket(i))
		srvConn.Send(n.now, innerPacket(i))
		n.run(2 * time.Millisecond)
	}
}

func (n *natPipe) exchange(t *testing.T, count int) {
	t.Helper()
	srvConn := n.ep[1].Conns()[0]
	before := n.got
	n.sendBoth(srvConn, count)
	n.run(500 * time.Millisecond)
	if n.got[0]-before[0] != count || n.got[1]-before[1] != count {
		t.Fatalf("delivered %d to the client and %d to the server of %d each", n.got[0]-before[0], n.got[1]-before[1], count)
	}
}

// TestChecksumAcrossNAT: each end fills the DCCP checksum for the addresses
// it knows; the other sees other addresses. The subflows learn the NAT's
// residual in their handshakes, data flows both ways, and a datagram
// damaged in flight is still caught by the DCCP checksum.
func TestChecksumAcrossNAT(t *testing.T) {
	for _, wildcard := range []bool{false, true} {
		n := newNATPipe(t, wildcard)
		n.exchange(t, 50)
		srv := n.ep[1].Stats()
		if srv.Dropped[DropChecksum] != 0 || n.ep[0].Stats().Dropped[DropChecksum] != 0 {
			t.Fatalf("wildcard %v: intact datagrams dropped for their checksum: server %v", wildcard, srv.Dropped)
		}
		// Every other datagram gets a bit flipped past the generic header,
		// within what its checksum covers: the ends agreed on coverage of
		// the header and options (the UDP checksum guards the rest).
		rng := rand.New(rand.NewPCG(1, uint64(len(n.buf))))
		flips := 0
		n.corrupt = func(side int, b []byte) {
			cov, ok := wire.Coverage(b)
			if rng.IntN(2) == 0 && ok && cov > 16 {
				b[16+rng.IntN(cov-16)] ^= 1 << rng.IntN(8)
				flips++
			}
		}
		srvConn := n.ep[1].Conns()[0]
		before := n.got
		n.sendBoth(srvConn, 40)
		n.corrupt = nil
		n.run(time.Second)
		drops := n.ep[1].Stats().Dropped[DropChecksum] + n.ep[0].Stats().Dropped[DropChecksum]
		if flips == 0 || drops != uint64(flips) {
			t.Fatalf("wildcard %v: %d datagrams damaged, %d dropped for their checksum", wildcard, flips, drops)
		}
		if n.got[0]-before[0] > 40 || n.got[1]-before[1] > 40 {
			t.Fatalf("wildcard %v: more packets delivered than sent", wildcard)
		}
		n.exchange(t, 20) // still working
	}
}

// TestChecksumNATRebinding: the NAT moves the client to a new public
// address, which changes the residual both ends see. The server moves its
// subflows (rebind) and the client adopts the new residual once
// residualRepeats packets in a row show it; the packets before are lost,
// as are those the server still sent to the old address.
func TestChecksumNATRebinding(t *testing.T) {
	n := newNATPipe(t, false)
	n.exchange(t, 10)
	n.public[0] = netip.MustParseAddrPort("203.0.113.77:62000")
	n.public[1] = netip.MustParseAddrPort("203.0.113.77:62001")
	srvConn := n.ep[1].Conns()[0]
	before := n.got
	n.sendBoth(srvConn, 30)
	n.run(500 * time.Millisecond)
	for _, p := range srvConn.Stats().Paths {
		if p.Remote.Addr() != netip.MustParseAddr("203.0.113.77") {
			t.Fatalf("server path %d still at %v", p.ID, p.Remote)
		}
	}
	if d := n.ep[1].Stats().Dropped[DropChecksum]; d != 0 {
		t.Fatalf("server dropped %d datagrams for their checksum", d)
	}
	lostUp, lostDown := 30-(n.got[1]-before[1]), 30-(n.got[0]-before[0])
	perPath := residualRepeats - 1
	if lostUp > 2*perPath || lostDown > 4*perPath || n.ep[0].Stats().Dropped[DropChecksum] == 0 {
		t.Fatalf("lost %d to the server (at most %d), %d to the client (at most %d); client checksum drops %d",
			lostUp, 2*perPath, lostDown, 4*perPath, n.ep[0].Stats().Dropped[DropChecksum])
	}
	n.exchange(t, 20) // settled
}

// TestChecksumSentForAddresses: what the engine sends carries the RFC 4340
// checksum for the outer addresses it knows, so a capture verifies without
// any rewriting, and Transmit names the source address it used.
func TestChecksumSentForAddresses(t *testing.T) {
	cli := negEndpoint(t, Client, "ccid2")
	if _, err := cli.Dial(0, []PathConfig{{Remote: negSrv, LocalAddr: negCli}}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	tx, ok := cli.PollTransmit(0, buf)
	if !ok || tx.Src != negCli.Addr() {
		t.Fatalf("transmit %+v", tx)
	}
	if !wire.VerifyChecksum(buf[:tx.N], negCli.Addr(), negSrv.Addr()) {
		t.Fatal("Request checksum is not RFC 4340's for the outer addresses")
	}
}

// TestChecksumCoverageNegotiated: both ends announce a Minimum Checksum
// Coverage of 1 (RFC 4340 §9.2.1) and then checksum their data packets over
// the header and options alone. An end whose peer does not announce it (an
// older mptun, another DCCP stack: here the client's announcement is cut
// out in flight) keeps full coverage towards it, and data flows both ways.
func TestChecksumCoverageNegotiated(t *testing.T) {
	for _, announce := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(7, 8))
		var ep [2]*Endpoint
		var err error
		if ep[0], err = NewEndpoint(Config{Role: Client, Rand: netsim.RandReader(rng)}); err != nil {
			t.Fatal(err)
		}
		if ep[1], err = NewEndpoint(Config{Role: Server, Rand: netsim.RandReader(rng)}); err != nil {
			t.Fatal(err)
		}
		conn, err := ep[0].Dial(0, directPaths(1))
		if err != nil {
			t.Fatal(err)
		}
		var now mono.Time
		buf, dbuf := make([]byte, 2048), make([]byte, 2048)
		var cov [2][2]int // per sending side: data packets with CsCov 0, 1
		var got [2]int
		step := func() {
			for moved := true; moved; {
				moved = false
				for side := 0; side < 2; side++ {
					moved = pumpOut(ep[side], now, buf, func(tr Transmit, dg []byte) {
						if side == 0 && !announce && stripMinCsCov(t, dg) {
							wire.SetChecksum(dg, cliAddr(tr.Local).Addr(), srvAddr.Addr())
						}
						var p wire.Packet
						if wire.Parse(dg, &p) == nil && len(p.Payload) > 0 {
							cov[side][min(int(p.CsCov), 1)]++
						}
						handOver(ep[1-side], now, side, tr, dg, 0)
					}) || moved
					got[side] += drainDelivered(ep[side], now, dbuf, nil)
				}
			}
		}
		for i := 0; i < 100 && conn.State() != Open; i++ {
			step()
			now = now.Add(time.Millisecond)
		}
		if conn.State() != Open || len(ep[1].Conns()) != 1 {
			t.Fatalf("announce %v: not open", announce)
		}
		for i := 0; i < 50; i++ {
			conn.Send(now, innerPacket(i))
			ep[1].Conns()[0].Send(now, innerPacket(i))
			step()
			now = now.Add(time.Millisecond)
		}
		for i := 0; i < 500; i++ {
			step()
			now = now.Add(time.Millisecond)
		}
		if got[0] != 50 || got[1] != 50 {
			t.Fatalf("announce %v: delivered %d to the client, %d to the server, of 50 each", announce, got[0], got[1])
		}
		for side := 0; side < 2; side++ {
			if d := ep[side].Stats().Dropped[DropChecksum]; d != 0 {
				t.Fatalf("announce %v: side %d dropped %d packets for their checksum", announce, side, d)
			}
		}
		// The client always heard the server's announcement.
		if cov[0][0] != 0 || cov[0][1] == 0 {
			t.Errorf("announce %v: client sent %d data packets fully covered, %d over the header", announce, cov[0][0], cov[0][1])
		}
		if announce && (cov[1][0] != 0 || cov[1][1] == 0) {
			t.Errorf("server sent %d data packets fully covered, %d over the header", cov[1][0], cov[1][1])
		}
		if got := ep[1].Conns()[0].Stats().Paths[0].HeaderChecksum; got != announce {
			t.Errorf("announce %v: the server reports a header-only checksum: %v", announce, got)
		}
		if !announce && (cov[1][1] != 0 || cov[1][0] == 0) {
			t.Errorf("unannounced: server sent %d data packets over the header alone to a peer that accepts only full coverage (%d full)", cov[1][1], cov[1][0])
		}
	}
}

// stripMinCsCov overwrites every Change L(Minimum Checksum Coverage) in the
// DCCP packet dg with padding; it reports whether it found one.
func stripMinCsCov(t *testing.T, dg []byte) bool {
	var p wire.Packet
	if err := wire.Parse(dg, &p); err != nil {
		t.Fatal(err)
	}
	found := false
	opts := p.Options
	for i := 0; i < len(opts); {
		if opts[i] < 32 { // one-byte options
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			t.Fatalf("malformed options %x", opts)
		}
		n := int(opts[i+1])
		if opts[i] == wire.OptChangeL && n > 2 && opts[i+2] == wire.FeatMinCsCov {
			clear(opts[i : i+n])
			found = true
		}
		i += n
	}
	return found
}
