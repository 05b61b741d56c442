// SPDX-License-Identifier: MIT

package e2e

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// garbage returns a mix of what an attacker or a broken middlebox sends:
// random bytes, truncated headers, well-formed packets with bad checksums,
// and valid packets for connections that do not exist (including joins
// with unknown tokens).
func garbage(rng *rand.Rand, n int) [][]byte {
	var out [][]byte
	buf := make([]byte, 1500)
	for i := 0; i < n; i++ {
		var b wire.Builder
		switch i % 5 {
		case 0: // random bytes
			p := make([]byte, 1+rng.IntN(1400))
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			out = append(out, p)
		case 1, 2: // valid Data / DataAck for no connection (or truncated)
			typ := wire.TypeData
			if i%5 == 2 {
				typ = wire.TypeDataAck
			}
			h := wire.Header{SrcPort: 40000, DstPort: 6511, Type: typ, Seq: rng.Uint64() & wire.MaxSeq, Ack: rng.Uint64() & wire.MaxSeq}
			b.Begin(buf, &h)
			b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: rng.Uint64() & wire.MaxSeq})
			n, _ := b.Finish(make([]byte, 100))
			wire.SetChecksum(buf[:n], netip.Addr{}, netip.Addr{})
			p := append([]byte(nil), buf[:n]...)
			if i%10 == 1 {
				p = p[:rng.IntN(len(p))] // truncated
			}
			out = append(out, p)
		case 3: // join for an unknown connection
			h := wire.Header{SrcPort: 40001, DstPort: 6511, Type: wire.TypeRequest, Seq: rng.Uint64() & wire.MaxSeq, ServiceCode: 0x6D707475}
			b.Begin(buf, &h)
			b.Feature(wire.OptChangeR, wire.FeatMultipath, 0)
			b.MP(&wire.MPOption{Type: wire.MPJoin, AddrID: 1, Token: rng.Uint32(), Nonce: rng.Uint32()})
			n, _ := b.Finish(nil)
			wire.SetChecksum(buf[:n], netip.Addr{}, netip.Addr{})
			out = append(out, append([]byte(nil), buf[:n]...))
		case 4: // good layout, bad checksum
			h := wire.Header{SrcPort: 40002, DstPort: 6511, Type: wire.TypeAck, Seq: 5, Ack: 7}
			b.Begin(buf, &h)
			n, _ := b.Finish(nil)
			wire.SetChecksum(buf[:n], netip.Addr{}, netip.Addr{})
			buf[6] ^= 0xff
			out = append(out, append([]byte(nil), buf[:n]...))
		}
	}
	return out
}

func TestBadInputFloodKeepsTunnel(t *testing.T) {
	requireRoot(t)
	requireTools(t, "iperf3", "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, paths, cpe, srv := startTwoPathTunnel(t, ctx)

	// Flood the concentrator's port from several source ports while a TCP
	// transfer runs through the tunnel.
	pkts := garbage(rand.New(rand.NewPCG(1, 2)), 20000)
	floodDone := make(chan int, 1)
	err := tp.cpe.Do(func() error {
		var conns []*net.UDPConn
		for i := 0; i < 4; i++ {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(paths[0][1]+":6511")))
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		go func() {
			sent := 0
			for round := 0; round < 5; round++ {
				for i, p := range pkts {
					if _, err := conns[i%len(conns)].Write(p); err == nil {
						sent++
					}
				}
			}
			for _, c := range conns {
				c.Close()
			}
			floodDone <- sent
		}()
		return nil
	})
	must(t, err)
	mbps, _ := iperf(t, ctx, tp.srv, tp.cpe, "10.99.0.1", 3, nil)
	sent := <-floodDone
	if mbps < 50 {
		t.Errorf("tunnel goodput during the flood: %.1f Mbit/s", mbps)
	}
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Errorf("ping after the flood: %v\n%s", err, out)
	}
	st := status(t, srv.socket)
	var dropped uint64
	for _, n := range st.Dropped {
		dropped += n
	}
	t.Logf("flood: %d datagrams sent, concentrator dropped %d (%v), resets sent %d; tunnel %.1f Mbit/s during it",
		sent, dropped, st.Dropped, st.ResetsSent, mbps)
	if dropped == 0 {
		t.Error("no malformed datagram was counted")
	}
	if len(st.Conns) != 1 || st.Conns[0].State != "open" {
		t.Errorf("connection not intact after the flood: %+v", st.Conns)
	}
	_ = cpe
}
