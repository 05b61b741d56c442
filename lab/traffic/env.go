// SPDX-License-Identifier: MIT

// Package traffic holds the lab's built-in traffic generators: TCP bulk (with
// a chosen congestion control, optionally MPTCP), a sequence-numbered probe
// (one-way delay, loss, reordering, delivery gaps), web-like short flows and
// VoIP-like packets. Both ends run in this process with sockets created
// inside the client and server namespaces, so they share one clock.
package traffic

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
)

// Env says where a generator's two ends live.
type Env struct {
	Cli, Srv   *netns.NS
	ServerAddr netip.Addr // the server listens here (inside Srv)
	ClientBind netip.Addr // optional source address of the client
	MPTCP      bool       // use kernel MPTCP sockets for stream traffic
	Start      mono.Time  // time zero of bins and logs
}

func ccControl(cc string) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if cc == "" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", cc, serr)
		}
		return nil
	}
}

// listenTCP listens inside the server namespace.
func (e *Env) listenTCP(ctx context.Context, port int, cc string) (net.Listener, error) {
	lc := net.ListenConfig{Control: ccControl(cc)}
	lc.SetMultipathTCP(e.MPTCP)
	var ln net.Listener
	err := e.Srv.Do(func() (err error) {
		ln, err = lc.Listen(ctx, "tcp4", netip.AddrPortFrom(e.ServerAddr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %v:%d: %w", e.ServerAddr, port, err)
	}
	return ln, nil
}

// dialTCP connects from the client namespace.
func (e *Env) dialTCP(ctx context.Context, port int, cc string) (net.Conn, error) {
	d := net.Dialer{Control: ccControl(cc), Timeout: 10 * time.Second}
	d.SetMultipathTCP(e.MPTCP)
	if e.ClientBind.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: e.ClientBind.AsSlice()}
	}
	var c net.Conn
	err := e.Cli.Do(func() (err error) {
		c, err = d.DialContext(ctx, "tcp4", netip.AddrPortFrom(e.ServerAddr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %v:%d: %w", e.ServerAddr, port, err)
	}
	return c, nil
}

// bindToContext makes c's blocked reads and writes return grace after ctx
// ends: a connection that stalls (a tunnel or an MPTCP peer that stopped
// delivering) must not hold a run past its end, and the lab waits for
// every generator. Whatever completes within grace still counts. The
// returned stop undoes the binding.
func bindToContext(ctx context.Context, c net.Conn, grace time.Duration) (stop func() bool) {
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Now().Add(grace)) })
}

// Bins counts bytes per interval since a start time.
type Bins struct {
	Start mono.Time
	Width time.Duration
	Bytes []uint64
}

func (b *Bins) add(now mono.Time, n int) {
	if b.Width <= 0 {
		b.Width = 100 * time.Millisecond
	}
	i := int(now.Sub(b.Start) / b.Width)
	if i < 0 {
		i = 0
	}
	for len(b.Bytes) <= i {
		b.Bytes = append(b.Bytes, 0)
	}
	b.Bytes[i] += uint64(n)
}

// Mbps returns the bins as Mbit/s.
func (b *Bins) Mbps() []float64 {
	out := make([]float64, len(b.Bytes))
	for i, v := range b.Bytes {
		out[i] = float64(v) * 8 / b.Width.Seconds() / 1e6
	}
	return out
}
