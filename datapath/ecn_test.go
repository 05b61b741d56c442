// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/ecn"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
)

// bottleneck wraps the server's real socket: it records the outer ECN
// field the kernel reports for each datagram carrying an inner packet
// (over 500 bytes here) and can rewrite it, as an ECN-marking router on
// the way would.
type bottleneck struct {
	*netio.Conn
	mu    sync.Mutex
	seen  map[uint8]int
	mark  int // rewrite this many more data datagrams' field to CE
	marks int
}

func (b *bottleneck) ReadBatch(msgs []netio.Message) (int, error) {
	n, err := b.Conn.ReadBatch(msgs)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < n; i++ {
		if msgs[i].N < 500 {
			continue
		}
		b.seen[msgs[i].TOS&3]++
		if b.mark > 0 {
			b.mark--
			b.marks++
			msgs[i].TOS |= ecn.CE
		}
	}
	return n, err
}

func (b *bottleneck) outer() map[uint8]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[uint8]int{}
	for k, v := range b.seen {
		m[k] = v
		delete(b.seen, k)
	}
	return m
}

func (b *bottleneck) setMark(n int) {
	b.mu.Lock()
	b.mark = n
	b.mu.Unlock()
}

func startECNPair(t *testing.T) (cli, srv *side, bn *bottleneck) {
	bn = &bottleneck{seen: map[uint8]int{}}
	cli, srv = startPairWrapped(t, func(c *netio.Conn) Socket { bn.Conn = c; return bn })
	return cli, srv, bn
}

// receive collects n inner packets from dev, or what came within wait.
func receive(s *side, n int, wait time.Duration) [][]byte {
	var got [][]byte
	timeout := time.After(wait)
	for len(got) < n {
		select {
		case p := <-s.dev.Outbound:
			got = append(got, p)
		case <-timeout:
			return got
		}
	}
	return got
}

func senderECNMarks(t *testing.T, cli *side) uint64 {
	var marks uint64
	if err := cli.dp.Do(context.Background(), func(now mono.Time, ep *mpdccp.Endpoint) {
		marks = ep.Conns()[0].Stats().Paths[0].CC.ECNMarks
	}); err != nil {
		t.Fatal(err)
	}
	return marks
}

// The outer header of a data datagram carries its inner packet's ECN
// field, as the kernel reports it on the far socket: ECT(0) inside, ECT(0)
// outside; Not-ECT inside, Not-ECT outside (RFC 6040 §4.1).
func TestOuterECNCopiesInner(t *testing.T) {
	cli, srv, bn := startECNPair(t)
	for _, v := range []uint8{ecn.NotECT, ecn.ECT0, ecn.ECT1} {
		bn.outer()
		for i := uint32(0); i < 20; i++ {
			cli.dev.Inbound <- ipv4UDPECN(i, 1000, false, v)
		}
		if got := receive(srv, 20, 5*time.Second); len(got) != 20 {
			t.Fatalf("inner ECN %d: %d of 20 delivered", v, len(got))
		}
		if seen := bn.outer(); seen[v] != 20 || len(seen) != 1 {
			t.Errorf("inner ECN %d: outer fields %v, want all %d", v, seen, v)
		}
	}
}

// Outer CE: the subflow records it (the sender's controller counts ECN
// marks), then an ECT inner packet leaves the tunnel marked CE with a
// valid header checksum and a Not-ECT one is dropped (RFC 6040 §4.2).
func TestOuterCEMarksOrDropsInner(t *testing.T) {
	cli, srv, bn := startECNPair(t)
	before := senderECNMarks(t, cli)
	bn.setMark(10)
	for i := uint32(0); i < 10; i++ {
		cli.dev.Inbound <- ipv4UDPECN(i, 1000, false, ecn.ECT0)
	}
	got := receive(srv, 10, 5*time.Second)
	if len(got) != 10 {
		t.Fatalf("%d of 10 ECT(0) packets delivered", len(got))
	}
	for _, p := range got {
		if v, _ := ecn.Get(p); v != ecn.CE || ^inetSum(p[:20], 0) != 0 {
			t.Fatalf("delivered with ECN %d, header checksum %#x", v, ^inetSum(p[:20], 0))
		}
	}

	bn.setMark(5)
	for i := uint32(100); i < 120; i++ {
		cli.dev.Inbound <- ipv4UDPECN(i, 1000, false, ecn.NotECT)
	}
	got = receive(srv, 15, 5*time.Second)
	got = append(got, receive(srv, 1, 300*time.Millisecond)...) // nothing more
	if len(got) != 15 {
		t.Fatalf("%d of 20 Not-ECT packets delivered, want the 15 not marked", len(got))
	}
	for _, p := range got {
		if id := binary.BigEndian.Uint32(p[28:]); id < 105 {
			t.Errorf("packet %d, marked CE over Not-ECT, was delivered", id)
		}
	}
	var dropped uint64
	srv.dp.Do(context.Background(), func(now mono.Time, ep *mpdccp.Endpoint) { dropped = ep.Stats().InnerECNDropped })
	if dropped != 5 {
		t.Errorf("engine dropped %d inner packets, want 5", dropped)
	}
	deadline := time.Now().Add(3 * time.Second)
	for senderECNMarks(t, cli) < before+15 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if m := senderECNMarks(t, cli) - before; m < 15 {
		t.Errorf("the sender's controller counted %d ECN marks of the 15", m)
	}
}
