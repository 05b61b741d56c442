// SPDX-License-Identifier: MIT

package netio

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// A socket bound to the wildcard address learns which of the host's
// addresses each datagram was sent to, and answers from that address:
// 127.0.0.1 and 127.0.0.2 are both the host's (loopback is a /8).
func TestWildcardAnswersFromAskedAddress(t *testing.T) {
	for _, gro := range []bool{false, true} {
		srv, err := Open(SocketConfig{Local: netip.MustParseAddrPort("0.0.0.0:0"), DisableGRO: !gro})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		port := srv.LocalAddr().Port()
		cli, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		for _, to := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.1"} {
			dst := netip.AddrPortFrom(netip.MustParseAddr(to), port)
			for range 3 {
				if _, err := cli.WriteToUDPAddrPort([]byte("hello"), dst); err != nil {
					t.Fatal(err)
				}
			}
			in := readN(t, srv, 3, 1500)
			out := make([]Message, len(in))
			for i, m := range in {
				if m.Local != dst.Addr() {
					t.Errorf("gro=%v: datagram to %v reported as sent to %v", gro, dst, m.Local)
				}
				out[i] = Message{Buf: m.Buf, N: m.N, Addr: m.Addr, Local: m.Local}
			}
			if _, err := srv.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			for range out {
				_, from, err := cli.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatal(err)
				}
				if from != dst {
					t.Errorf("gro=%v: asked %v, answered from %v", gro, dst, from)
				}
			}
		}
	}
}

// A socket bound to one address reports nothing and sends as bound.
func TestBoundSocketNoLocal(t *testing.T) {
	a, b := openPair(t, "udp4", SocketConfig{})
	out := newMsgs(1, 100)
	out[0].N, out[0].Addr, out[0].Local = 10, b.LocalAddr(), netip.MustParseAddr("127.0.0.9")
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	in := readN(t, b, 1, 100)
	if in[0].Local.IsValid() || in[0].Addr != a.LocalAddr() {
		t.Errorf("bound socket: local %v, from %v (want none, %v)", in[0].Local, in[0].Addr, a.LocalAddr())
	}
}

func TestWildcardZeroAllocs(t *testing.T) {
	srv, err := Open(SocketConfig{Local: netip.MustParseAddrPort("0.0.0.0:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := Open(SocketConfig{Local: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const n = 32
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), srv.LocalAddr().Port())
	out := newMsgs(n, 1500)
	for i := range out {
		out[i].N, out[i].Addr = 1200, dst
	}
	in := newMsgs(n, 1500)
	back := newMsgs(n, 1500)
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := cli.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			k, err := srv.ReadBatch(in[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		for i := range in {
			back[i].N, back[i].Addr, back[i].Local = in[i].N, in[i].Addr, in[i].Local
		}
		if _, err := srv.WriteBatch(back); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			k, err := cli.ReadBatch(in[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per round trip through a wildcard socket", allocs)
	}
	if in[0].Addr != dst {
		t.Errorf("answer from %v, want %v", in[0].Addr, dst)
	}
}

func TestWildcardLocalIPv6(t *testing.T) {
	srv, err := Open(SocketConfig{Local: netip.AddrPortFrom(netip.IPv6Unspecified(), 0)})
	if err != nil {
		t.Skipf("no IPv6: %v", err)
	}
	defer srv.Close()
	cli, err := Open(SocketConfig{Local: netip.AddrPortFrom(netip.IPv6Loopback(), 0)})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer cli.Close()
	out := newMsgs(1, 100)
	out[0].N, out[0].Addr = 10, netip.AddrPortFrom(netip.IPv6Loopback(), srv.LocalAddr().Port())
	if _, err := cli.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	in := readN(t, srv, 1, 100)
	if in[0].Local != netip.IPv6Loopback() {
		t.Fatalf("local %v, want ::1", in[0].Local)
	}
	in[0].Buf = in[0].Buf[:cap(in[0].Buf)]
	if _, err := srv.WriteBatch(in); err != nil {
		t.Fatal(err)
	}
	back := readN(t, cli, 1, 100)
	if back[0].Addr != out[0].Addr {
		t.Errorf("answer from %v", back[0].Addr)
	}
}
