// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/tun"
)

// recHook records engine events; it runs under the owner's lock.
type recHook struct {
	mu     sync.Mutex
	events []mpdccp.EventKind
	timers int
	next   mono.Time
}

func (h *recHook) HandleEngineEvent(now mono.Time, ev mpdccp.Event) {
	h.mu.Lock()
	h.events = append(h.events, ev.Kind)
	h.mu.Unlock()
}
func (h *recHook) Deadline() mono.Time { return h.next }
func (h *recHook) HandleTimer(now mono.Time) {
	h.mu.Lock()
	h.timers++
	h.next = now.Add(50 * time.Millisecond)
	h.mu.Unlock()
}

func (h *recHook) Stop(mono.Time) {}

func (h *recHook) has(k mpdccp.EventKind) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e == k {
			return true
		}
	}
	return false
}

// Sockets come and go while the data path runs (a path manager binds a
// path again when its address changes): a client that starts without
// any, adds two, replaces one, and keeps delivering; the hook sees the
// engine's events and gets its timer.
func TestSocketsAddedAndReplacedWhileRunning(t *testing.T) {
	srv, srvSock := newSide(t, mpdccp.Server, nil)
	// rr: the default flow scheduler keeps the one test flow on one path.
	ep, err := mpdccp.NewEndpoint(mpdccp.Config{Role: mpdccp.Client, Scheduler: "rr", Reorderer: "fixed"})
	if err != nil {
		t.Fatal(err)
	}
	hook := &recHook{}
	dev := tun.NewChannel("c", 1400, 16)
	cli, err := New(Config{Endpoint: ep, Device: dev, InnerMTU: 1300, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, dp := range []*Datapath{srv.dp, cli} {
		go func() { dp.Run(ctx, 200*time.Millisecond); done <- struct{}{} }()
	}
	defer func() {
		cancel()
		<-done
		<-done
		srvSock.Close()
		dev.Close()
		srv.dev.Close()
	}()
	open := func() *netio.Conn {
		s, err := netio.Open(netio.SocketConfig{Local: netip.MustParseAddrPort("127.0.0.1:0")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	do := func(fn func(now mono.Time, ep *mpdccp.Endpoint)) {
		if err := cli.Do(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
	a, b := open(), open()
	var conn *mpdccp.Conn
	do(func(now mono.Time, ep *mpdccp.Endpoint) {
		ia, ib := cli.AddSocket(a), cli.AddSocket(b)
		if ia != 0 || ib != 1 {
			t.Errorf("socket indexes %d, %d", ia, ib)
		}
		conn, err = ep.Dial(now, []mpdccp.PathConfig{
			{ID: 0, Local: ia, LocalAddr: a.LocalAddr(), Remote: srvSock.LocalAddr()},
			{ID: 1, Local: ib, LocalAddr: b.LocalAddr(), Remote: srvSock.LocalAddr()}})
	})
	if err != nil {
		t.Fatal(err)
	}
	waitOpen := func(n int) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			k := 0
			do(func(mono.Time, *mpdccp.Endpoint) {
				for _, in := range conn.PathInfos(nil) {
					if in.Open {
						k++
					}
				}
			})
			if k == n {
				return
			}
		}
		t.Fatalf("%d paths not open", n)
	}
	waitOpen(2)
	if !hook.has(mpdccp.EventConnOpen) || !hook.has(mpdccp.EventPathUp) {
		t.Errorf("hook saw %v", hook.events)
	}
	// Rebind path 1: a new socket takes index 1 again.
	c := open()
	do(func(now mono.Time, ep *mpdccp.Endpoint) {
		conn.DropPath(now, 1)
		if err := cli.RemoveSocket(1); err != nil {
			t.Error(err)
		}
		if i := cli.AddSocket(c); i != 1 {
			t.Errorf("new socket got index %d", i)
		}
		if err := conn.JoinPath(now, mpdccp.PathConfig{ID: 1, Local: 1, LocalAddr: c.LocalAddr(), Remote: srvSock.LocalAddr()}); err != nil {
			t.Error(err)
		}
	})
	waitOpen(2)
	const n = 200
	go func() {
		for i := uint32(0); i < n; i++ {
			dev.Inbound <- ipv4UDP(i, 500, false)
		}
	}()
	got := 0
	for timeout := time.After(5 * time.Second); got < n; got++ {
		select {
		case p := <-srv.dev.Outbound:
			_ = binary.BigEndian.Uint32(p[28:])
		case <-timeout:
			t.Fatalf("%d of %d delivered after the rebind", got, n)
		}
	}
	var sent uint64
	do(func(mono.Time, *mpdccp.Endpoint) {
		for _, p := range conn.Stats().Paths {
			if p.ID == 1 {
				sent = p.DataOut
			}
		}
	})
	if sent == 0 {
		t.Error("no data on the rebound path")
	}
	hook.mu.Lock()
	timers := hook.timers
	hook.mu.Unlock()
	if timers == 0 {
		t.Error("hook timer never ran")
	}
}
