// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
)

// BulkConfig is a long-running TCP transfer.
type BulkConfig struct {
	CC      string // congestion control of the inner flow: cubic, bbr, reno
	Down    bool   // server sends to client (a download); else client uploads
	Streams int    // parallel connections; default 1
	Port    int
}

// BulkResult is what the receiver saw.
type BulkResult struct {
	Bytes       uint64
	Duration    time.Duration
	GoodputMbps float64
	Retrans     uint32 // total retransmitted segments reported by the sender
	// DSACKs counts the sender namespace's TcpExtTCPDSACKRecv during the
	// run: retransmissions the receiver reported as duplicates, i.e.
	// spurious ones (reordering mistaken for loss).
	DSACKs uint64
	// Timeouts counts the sender namespace's TcpExtTCPTimeouts during the
	// run: retransmission timeouts (RTO) of the inner flow.
	Timeouts uint64
	Bins     Bins
	Err      string `json:",omitempty"`
}

// RunBulk runs the transfer until ctx ends.
func RunBulk(ctx context.Context, env Env, cfg BulkConfig) (BulkResult, error) {
	if cfg.Streams <= 0 {
		cfg.Streams = 1
	}
	if cfg.Port == 0 {
		cfg.Port = 5201
	}
	res := BulkResult{Bins: Bins{Start: env.Start}}
	senderNS := env.Cli
	if cfg.Down {
		senderNS = env.Srv
	}
	dsack0, rto0 := tcpExt(senderNS, "TCPDSACKRecv"), tcpExt(senderNS, "TCPTimeouts")
	ln, err := env.listenTCP(ctx, cfg.Port, cfg.CC)
	if err != nil {
		return res, err
	}
	defer ln.Close()

	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		conns   []net.Conn
		senders []net.Conn
		closed  bool // the run ended; under mu
		first   mono.Time
	)
	record := func(n int) {
		now := mono.Now()
		mu.Lock()
		if first == 0 {
			first = now
		}
		res.Bytes += uint64(n)
		res.Bins.add(now, n)
		mu.Unlock()
	}
	sink := func(c net.Conn) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				record(n)
			}
			if err != nil {
				return
			}
		}
	}
	source := func(c net.Conn) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() { // accept side
		defer wg.Done()
		for i := 0; i < cfg.Streams; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				// Accepted after the run ended: nobody would close it.
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			if cfg.Down {
				senders = append(senders, c)
			}
			mu.Unlock()
			wg.Add(1)
			if cfg.Down {
				go source(c)
			} else {
				go sink(c)
			}
		}
	}()
	start := mono.Now()
	var dialErr error
	for i := 0; i < cfg.Streams; i++ {
		c, err := env.dialTCP(ctx, cfg.Port, cfg.CC)
		if err != nil {
			dialErr = err
			break
		}
		mu.Lock()
		conns = append(conns, c)
		if !cfg.Down {
			senders = append(senders, c)
		}
		mu.Unlock()
		wg.Add(1)
		if cfg.Down {
			go sink(c)
		} else {
			go source(c)
		}
	}
	<-ctx.Done()
	end := mono.Now()
	mu.Lock()
	for _, c := range senders {
		res.Retrans += retrans(c)
	}
	for _, c := range conns {
		c.Close()
	}
	closed = true
	mu.Unlock()
	ln.Close()
	wg.Wait()
	res.Duration = end.Sub(start)
	if res.Duration > 0 {
		res.GoodputMbps = float64(res.Bytes) * 8 / res.Duration.Seconds() / 1e6
	}
	if dialErr != nil {
		res.Err = dialErr.Error()
	}
	res.DSACKs = tcpExt(senderNS, "TCPDSACKRecv") - dsack0
	res.Timeouts = tcpExt(senderNS, "TCPTimeouts") - rto0
	return res, dialErr
}

// tcpExt reads one TcpExt counter (as nstat shows it) of a namespace.
func tcpExt(ns *netns.NS, name string) uint64 {
	out, err := ns.Output(context.Background(), "cat", "/proc/net/netstat")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, n := range names {
			if n == name && i+1 < len(f) {
				v, _ := strconv.ParseUint(f[i+1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// retrans reads the kernel's retransmission count of a TCP (or MPTCP
// subflow's) socket; 0 if unavailable.
func retrans(c net.Conn) uint32 {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint32
	_ = rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = info.Total_retrans
		}
	})
	return n
}

func readFull(c net.Conn, b []byte) error {
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}
