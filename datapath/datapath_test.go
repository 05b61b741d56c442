// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/ecn"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/tun"
)

// side is one end of a loopback tunnel: in-memory TUN, real UDP socket.
type side struct {
	dev *tun.ChannelDevice
	ep  *mpdccp.Endpoint
	dp  *Datapath
}

func newSide(t *testing.T, role mpdccp.Role, wrap func(*netio.Conn) Socket) (*side, *netio.Conn) {
	t.Helper()
	sock, err := netio.Open(netio.SocketConfig{Local: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	ep, err := mpdccp.NewEndpoint(mpdccp.Config{Role: role, Reorderer: "fixed", ECN: true})
	if err != nil {
		t.Fatal(err)
	}
	var dpSock Socket = sock
	if wrap != nil {
		dpSock = wrap(sock)
	}
	s := &side{dev: tun.NewChannel("t", 1400, 16), ep: ep}
	s.dp, err = New(Config{Endpoint: ep, Device: s.dev, Sockets: []Socket{dpSock}, InnerMTU: 1300,
		InnerAddrs: []netip.Addr{netip.MustParseAddr("10.99.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	return s, sock
}

// startPair runs a client and a server data path over loopback UDP and
// waits for the connection to open.
func startPair(t *testing.T) (cli, srv *side) { return startPairWrapped(t, nil) }

// startPairWrapped is startPair with the server's socket wrapped.
func startPairWrapped(t *testing.T, wrapSrv func(*netio.Conn) Socket) (cli, srv *side) {
	t.Helper()
	srv, srvSock := newSide(t, mpdccp.Server, wrapSrv)
	cli, cliSock := newSide(t, mpdccp.Client, nil)
	if _, err := cli.ep.Dial(mono.Now(), []mpdccp.PathConfig{{ID: 0, Local: 0, LocalAddr: cliSock.LocalAddr(),
		Remote: srvSock.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, s := range []*side{srv, cli} {
		go func() { s.dp.Run(ctx, 200*time.Millisecond); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		srvSock.Close()
		cliSock.Close()
		cli.dev.Close()
		srv.dev.Close()
	})
	waitOpen(t, cli)
	return cli, srv
}

// waitOpen waits until s's endpoint has one open connection.
func waitOpen(t *testing.T, s *side) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		open := false
		if err := s.dp.Do(context.Background(), func(now mono.Time, ep *mpdccp.Endpoint) {
			open = len(ep.Conns()) == 1 && ep.Conns()[0].State() == mpdccp.Open
		}); err != nil {
			t.Fatal(err)
		}
		if open {
			return
		}
	}
	t.Fatal("connection did not open over loopback")
}

// ipv4UDP is an ECT(0) inner packet numbered id.
func ipv4UDP(id uint32, size int, df bool) []byte { return ipv4UDPECN(id, size, df, ecn.ECT0) }

// ipv4UDPECN is an inner packet numbered id with the ECN field v.
func ipv4UDPECN(id uint32, size int, df bool, v uint8) []byte {
	p := make([]byte, size)
	p[0], p[1] = 0x45, v
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	if df {
		p[6] = 0x40
	}
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{10, 0, 0, 1})
	copy(p[16:], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^inetSum(p[:20], 0))
	binary.BigEndian.PutUint32(p[28:], id)
	return p
}

func TestLoopbackTunnelDeliversInOrder(t *testing.T) {
	cli, srv := startPair(t)
	const n = 3000
	go func() {
		for i := uint32(0); i < n; i++ {
			cli.dev.Inbound <- ipv4UDP(i, 1000, false)
			if i%50 == 49 {
				time.Sleep(time.Millisecond) // about 400 Mbit/s offered
			}
		}
	}()
	// Every packet is delivered once, in order, or counted as dropped at
	// the sender's queue; nothing else is lost on loopback.
	var got, next uint32
	timeout := time.After(10 * time.Second)
	for got+uint32(cli.dp.Stats.DroppedQueueFull.Load()) < n {
		select {
		case p := <-srv.dev.Outbound:
			id := binary.BigEndian.Uint32(p[28:])
			if id < next {
				t.Fatalf("packet %d delivered after %d", id, next-1)
			}
			if len(p) != 1000 {
				t.Fatalf("packet %d is %d bytes", id, len(p))
			}
			next = id + 1
			got++
		case <-timeout:
			t.Fatalf("%d delivered + %d dropped at the queue of %d", got, cli.dp.Stats.DroppedQueueFull.Load(), n)
		}
	}
	if got < n/2 {
		t.Errorf("only %d of %d delivered", got, n)
	}
	t.Logf("%d delivered, %d dropped at the send queue; %d datagrams in %d sendmmsg calls",
		got, cli.dp.Stats.DroppedQueueFull.Load(), cli.dp.Stats.UDPWritten.Load(), cli.dp.Stats.UDPSendCalls.Load())
}

func TestLoopbackTooBigGetsICMP(t *testing.T) {
	cli, _ := startPair(t)
	cli.dev.Inbound <- ipv4UDP(1, 1400, true) // above the 1300-byte inner MTU, DF set
	select {
	case p := <-cli.dev.Outbound:
		if p[9] != 1 || p[20] != 3 || p[21] != 4 || binary.BigEndian.Uint16(p[26:]) != 1300 {
			t.Fatalf("not ICMP fragmentation-needed with MTU 1300: % x", p[:28])
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no ICMP back for a too-big packet")
	}
	if cli.dp.Stats.DroppedTooBig.Load() != 1 {
		t.Errorf("too-big drops = %d", cli.dp.Stats.DroppedTooBig.Load())
	}
}

// The engine is driven by whichever goroutine has input (readers, timer,
// Run for control calls), one at a time: control calls during traffic
// see a consistent engine (the race detector checks the exclusion), and
// once Run returned no reader drives it any more.
func TestControlCallsDuringTrafficAndAfterRun(t *testing.T) {
	srv, srvSock := newSide(t, mpdccp.Server, nil)
	cli, cliSock := newSide(t, mpdccp.Client, nil)
	defer func() {
		srvSock.Close()
		cliSock.Close()
		cli.dev.Close()
		srv.dev.Close()
	}()
	if _, err := cli.ep.Dial(mono.Now(), []mpdccp.PathConfig{{ID: 0, Local: 0, LocalAddr: cliSock.LocalAddr(),
		Remote: srvSock.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	go srv.dp.Run(srvCtx, 100*time.Millisecond)
	cliCtx, stopCli := context.WithCancel(context.Background())
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.dp.Run(cliCtx, 100*time.Millisecond) }()
	// Traffic starts once the connection is open: before, the send queue
	// may drop every packet as full on a loaded machine, and the test
	// would see no packet sent.
	waitOpen(t, cli)

	const n = 2000
	go func() {
		for i := uint32(0); i < n; i++ {
			cli.dev.Inbound <- ipv4UDP(i, 1000, false)
		}
	}()
	var calls, sent int
	var got uint32
	timeout := time.After(10 * time.Second)
	for got+uint32(cli.dp.Stats.DroppedQueueFull.Load()) < n {
		select {
		case <-srv.dev.Outbound:
			got++
		case <-timeout:
			t.Fatalf("%d of %d delivered", got, n)
		default:
			err := cli.dp.Do(context.Background(), func(now mono.Time, ep *mpdccp.Endpoint) {
				for _, c := range ep.Conns() {
					sent = int(c.Stats().SentPackets)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			calls++
		}
	}
	if calls == 0 || sent == 0 {
		t.Fatalf("%d control calls, last saw %d packets sent", calls, sent)
	}

	stopCli()
	select {
	case err := <-cliDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	read := cli.dp.Stats.TUNRead.Load()
	select {
	case cli.dev.Inbound <- ipv4UDP(n, 1000, false): // a reader may take it; the engine must not
	case <-time.After(time.Second):
	}
	time.Sleep(100 * time.Millisecond)
	if r := cli.dp.Stats.TUNRead.Load(); r != read {
		t.Fatalf("%d packets fed to the engine after Run returned", r-read)
	}
}
