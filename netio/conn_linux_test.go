// SPDX-License-Identifier: MIT

package netio

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openPair(t testing.TB, network string, cfg SocketConfig) (a, b *Conn) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	if network == "udp6" {
		lo = netip.IPv6Loopback()
	}
	cfg.Network = network
	cfg.Local = netip.AddrPortFrom(lo, 0)
	var err error
	if a, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func newMsgs(n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// readN reads until n messages arrived or the deadline passes.
func readN(t testing.TB, c *Conn, n, size int) []Message {
	t.Helper()
	c.udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.udp.SetReadDeadline(time.Time{})
	var out []Message
	for len(out) < n {
		msgs := newMsgs(n-len(out), size)
		got, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, msgs[:got]...)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		for _, offload := range []bool{false, true} {
			name := network + "/plain"
			if offload {
				name = network + "/gso-gro"
			}
			t.Run(name, func(t *testing.T) {
				a, b := openPair(t, network, SocketConfig{DisableGSO: !offload, DisableGRO: !offload})
				if offload && (!a.GSO() || !b.GRO()) {
					t.Skip("kernel has no UDP GSO/GRO (needs Linux >= 5.0)")
				}
				const n = 40
				msgs := newMsgs(n, 1500)
				for i := range msgs {
					size := 1200
					if i == n-1 {
						size = 700 // a short tail still fits the GSO run
					}
					for j := range size {
						msgs[i].Buf[j] = byte(i + j)
					}
					msgs[i].N = size
					msgs[i].Addr = b.LocalAddr()
					msgs[i].TOS = 0xb8 | uint8(i%4) // DSCP EF with every ECN codepoint
				}
				// Equal TOS is needed to coalesce: make runs of 10.
				for i := range msgs {
					msgs[i].TOS = 0xb8 | uint8(i/10)
				}
				sent, err := a.WriteBatch(msgs)
				if err != nil || sent != n {
					t.Fatalf("WriteBatch = %d, %v", sent, err)
				}
				got := readN(t, b, n, 1500)
				for i, m := range got {
					if m.N != msgs[i].N || !bytes.Equal(m.Buf[:m.N], msgs[i].Buf[:msgs[i].N]) {
						t.Fatalf("message %d: got %d bytes, want %d (or content differs)", i, m.N, msgs[i].N)
					}
					if m.TOS != msgs[i].TOS {
						t.Errorf("message %d: TOS %#x, want %#x", i, m.TOS, msgs[i].TOS)
					}
					if m.Addr != a.LocalAddr() {
						t.Errorf("message %d: from %v, want %v", i, m.Addr, a.LocalAddr())
					}
				}
				st := a.Stats()
				if offload && st.GSOSends == 0 {
					t.Errorf("GSO on but no GSO sends: %+v", st)
				}
				if !offload && st.GSOSends != 0 {
					t.Errorf("GSO off but %d GSO sends", st.GSOSends)
				}
				if offload && b.Stats().GROReads == 0 {
					t.Errorf("GRO on but no coalesced reads: %+v", b.Stats())
				}
			})
		}
	}
}

func TestTruncatedDropped(t *testing.T) {
	for _, gro := range []bool{false, true} {
		a, b := openPair(t, "udp4", SocketConfig{DisableGRO: !gro})
		msgs := newMsgs(3, 2000)
		for i, size := range []int{100, 1800, 200} {
			msgs[i].N, msgs[i].Addr = size, b.LocalAddr()
			msgs[i].Buf[0] = byte(i)
		}
		if _, err := a.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		got := readN(t, b, 2, 1000)
		if got[0].N != 100 || got[1].N != 200 || got[1].Buf[0] != 2 {
			t.Errorf("gro=%v: got sizes %d, %d", gro, got[0].N, got[1].N)
		}
		if b.Stats().RxTruncated != 1 {
			t.Errorf("gro=%v: RxTruncated = %d, want 1", gro, b.Stats().RxTruncated)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	a, b := openPair(t, "udp4", SocketConfig{})
	msgs := newMsgs(3, 100)
	for i := range msgs {
		msgs[i].N, msgs[i].Addr = 10, b.LocalAddr()
	}
	msgs[1].Addr = netip.MustParseAddrPort("[::1]:9")
	n, err := a.WriteBatch(msgs)
	if err == nil || n != 1 {
		t.Fatalf("WriteBatch = %d, %v; want 1 and a family error", n, err)
	}
	msgs[1].Addr = b.LocalAddr()
	msgs[1].N = 0
	if n, err = a.WriteBatch(msgs[1:]); err == nil || n != 0 {
		t.Fatalf("zero-length WriteBatch = %d, %v; want an error", n, err)
	}
}

func TestSocketOptions(t *testing.T) {
	c, err := Open(SocketConfig{Local: netip.MustParseAddrPort("127.0.0.1:0"), Device: "lo", Fwmark: 42, BufferSize: 4 << 20})
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skip("needs CAP_NET_ADMIN or CAP_NET_RAW for SO_MARK; run as root")
		}
		t.Fatal(err)
	}
	defer c.Close()
	var mark, rcv, snd int
	var dev string
	c.raw.Control(func(fd uintptr) {
		mark, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK)
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		dev, _ = unix.GetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
	})
	if mark != 42 || dev != "lo" {
		t.Errorf("mark %d device %q, want 42 lo", mark, dev)
	}
	// The kernel doubles the value; without CAP_NET_ADMIN it is capped.
	if unix.Geteuid() == 0 && (rcv < 4<<20 || snd < 4<<20) {
		t.Errorf("buffers rcv=%d snd=%d, want >= 4 MiB as root", rcv, snd)
	}
	if err := c.SetFwmark(7); err != nil {
		t.Fatal(err)
	}
	c.raw.Control(func(fd uintptr) { mark, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) })
	if mark != 7 {
		t.Errorf("mark after SetFwmark %d", mark)
	}
	if _, err := Open(SocketConfig{Device: "nonexistent0"}); err == nil {
		t.Error("binding to a missing device succeeded")
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	a, _ := openPair(t, "udp4", SocketConfig{})
	done := make(chan error)
	go func() {
		_, err := a.ReadBatch(newMsgs(4, 100))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("got %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch did not return after Close")
	}
}

func TestZeroAllocs(t *testing.T) {
	for _, gro := range []bool{false, true} {
		a, b := openPair(t, "udp4", SocketConfig{DisableGRO: !gro})
		const n = 32
		out := newMsgs(n, 1500)
		for i := range out {
			out[i].N, out[i].Addr, out[i].TOS = 1200, b.LocalAddr(), 1
		}
		in := newMsgs(n, 1500)
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			for got := 0; got < n; {
				k, err := b.ReadBatch(in)
				if err != nil {
					t.Fatal(err)
				}
				got += k
			}
		})
		if allocs != 0 {
			t.Errorf("gro=%v: %.1f allocations per batch round trip, want 0", gro, allocs)
		}
	}
}

func BenchmarkRoundTrip(b *testing.B) {
	for _, cfg := range []struct {
		name string
		sc   SocketConfig
	}{{"plain", SocketConfig{DisableGSO: true, DisableGRO: true}}, {"gso-gro", SocketConfig{}}} {
		b.Run(cfg.name, func(b *testing.B) {
			tx, rx := openPair(b, "udp4", cfg.sc)
			const n, size = 64, 1400
			out := newMsgs(n, size)
			for i := range out {
				out[i].N, out[i].Addr = size, rx.LocalAddr()
			}
			in := newMsgs(n, 1500)
			b.SetBytes(n * size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tx.WriteBatch(out); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					k, err := rx.ReadBatch(in)
					if err != nil {
						b.Fatal(err)
					}
					got += k
				}
			}
		})
	}
}

// The concentrator example listens on 0.0.0.0:P and [::]:P; that needs
// IPV6_V6ONLY on the IPv6 socket.
func TestDualStackSamePort(t *testing.T) {
	v4, err := Open(SocketConfig{Local: netip.MustParseAddrPort("0.0.0.0:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	v6, err := Open(SocketConfig{Local: netip.AddrPortFrom(netip.IPv6Unspecified(), v4.LocalAddr().Port())})
	if err != nil {
		t.Fatalf("[::]:%d next to 0.0.0.0:%d: %v", v4.LocalAddr().Port(), v4.LocalAddr().Port(), err)
	}
	v6.Close()
}

func TestGSOBrokenKernels(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v657": false, "7.0.0": true, "7.0.3-arch1": true, "7.0-rc1": true,
		"7.1-rc3": true, "7.1-rc5": false, "7.1.0": false, "7.2.1": false, "5.15.0-91-generic": false, "": false,
	} {
		if got := gsoBroken(release); got != want {
			t.Errorf("gsoBroken(%q) = %v, want %v", release, got, want)
		}
	}
}
