// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// idleServerBytes runs n two-path clients against one server endpoint,
// has every connection carry some traffic both ways (so that its send
// queue, repair rings and reorder window come into use), lets them idle
// for idle (keepalives keep them open), and returns the server's heap per
// connection: the heap with the server minus the heap without it, after
// the clients are gone.
func idleServerBytes(tb testing.TB, n int, idle time.Duration) float64 {
	k := newConcentratorWith(tb, n, Config{Retransmit: true})
	pkt := innerPacket(1)
	for j := 0; j < 20; j++ {
		for _, c := range k.conns {
			c.Send(k.now, pkt)
		}
		for _, c := range k.srv.Conns() {
			c.Send(k.now, pkt)
		}
		k.pump()
		k.now = k.now.Add(time.Millisecond)
	}
	for t := time.Duration(0); t < idle; t += 100 * time.Millisecond {
		k.pump()
		k.now = k.now.Add(100 * time.Millisecond)
	}
	if got := len(k.srv.Conns()); got != n {
		tb.Fatalf("%d of %d connections still open", got, n)
	}
	srv := k.srv
	k.cls, k.conns, k.srv = nil, nil, nil
	var with, without runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&with)
	runtime.KeepAlive(srv)
	srv = nil
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&without)
	return float64(int64(with.HeapAlloc)-int64(without.HeapAlloc)) / float64(n)
}

// BenchmarkIdleConnMemory reports what an idle connection (a CPE with two
// paths that carried traffic, then idled 10 s) costs the concentrator, at
// 1, 1,000 and 10,000 connections: bytes of heap per connection.
func BenchmarkIdleConnMemory(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.ReportMetric(idleServerBytes(b, n, 10*time.Second), "B/conn")
			}
		})
	}
}

// An idle concentrator connection costs at most 32 KiB (the issue's
// budget for both directions' state of one end).
func TestIdleConnMemory(t *testing.T) {
	if b := idleServerBytes(t, 200, 10*time.Second); b > 32<<10 {
		t.Fatalf("an idle connection costs the concentrator %.0f bytes, want <= %d", b, 32<<10)
	}
}

// An idle connection releases its queues, rings and windows, keeps its
// statistics, and carries traffic again afterwards.
func TestIdleShrinkAndWake(t *testing.T) {
	k := newConcentratorWith(t, 3, Config{Retransmit: true})
	send := func(n int) {
		for j := 0; j < n; j++ {
			for i, c := range k.conns {
				c.Send(k.now, []byte{byte(i), byte(j)})
			}
			for _, c := range k.srv.Conns() {
				c.Send(k.now, innerPacket(1))
			}
			k.pump()
			k.now = k.now.Add(time.Millisecond)
		}
	}
	send(100)
	srv := k.srv.Conns()[0]
	if srv.fq == nil || srv.subflows[0].hist.Repairs() == 0 {
		t.Fatal("a busy connection has no send queue or repair ring")
	}
	enq := srv.Stats().AQM.Enqueued
	for d := time.Duration(0); d < idleShrinkAfter+time.Second; d += 100 * time.Millisecond {
		k.pump()
		k.now = k.now.Add(100 * time.Millisecond)
	}
	if srv.fq != nil || srv.flowOrd != nil {
		t.Error("the send queue outlived the idle spell")
	}
	for _, sf := range srv.subflows {
		if n := sf.hist.Repairs(); n != 0 {
			t.Errorf("path %d: %d repair entries kept", sf.id, n)
		}
		if n := sf.hist.Size(); n > 8 {
			t.Errorf("path %d: sent-packet history of %d records kept", sf.id, n)
		}
	}
	if got := srv.Stats().AQM.Enqueued; got != enq {
		t.Errorf("send queue statistics %d after the idle spell, %d before", got, enq)
	}
	k.got = map[*Conn]map[byte]int{}
	send(100)
	total := 0
	for _, m := range k.got {
		for _, n := range m {
			total += n
		}
	}
	if total != 3*100 {
		t.Fatalf("after the idle spell the server got %d of %d packets", total, 3*100)
	}
	if srv.fq == nil || srv.shrunk {
		t.Fatal("traffic did not bring the send queue back")
	}
}
