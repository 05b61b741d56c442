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
	// MPTCP is what the kernel says about each sending MPTCP socket at
	// the end of the run: really MPTCP or fallen back, and the subflows.
	MPTCP []MPTCPConnInfo `json:",omitempty"`
	Err   string          `json:",omitempty"`
}

// RunBulk runs the transfer until ctx ends.
func RunBulk(ctx context.Context, env Env, cfg BulkConfig) (BulkResult, error) {
	if cfg.Streams <= 0 {
		cfg.Streams = 1
	}
	if cfg.Port == 0 {
		cfg.Port = 5201
	}
	b := &bulkRun{cfg: cfg, res: BulkResult{Bins: Bins{Start: env.Start}}}
	senderNS := env.Cli
	if cfg.Down {
		senderNS = env.Srv
	}
	dsack0, rto0 := tcpExt(senderNS, "TCPDSACKRecv"), tcpExt(senderNS, "TCPTimeouts")
	ln, err := env.listenTCP(ctx, cfg.Port, cfg.CC)
	if err != nil {
		return b.res, err
	}
	defer ln.Close()

	b.wg.Add(1)
	go b.accept(ln)
	start := mono.Now()
	dialErr := b.dial(ctx, env)
	<-ctx.Done()
	end := mono.Now()
	b.stop(env.MPTCP)
	ln.Close()
	b.wg.Wait()
	res := b.res
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

// bulkRun is one bulk transfer's connections and what they received.
type bulkRun struct {
	cfg BulkConfig
	wg  sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	res     BulkResult
	conns   []net.Conn
	senders []net.Conn
	closed  bool // the run ended
}

func (b *bulkRun) record(n int) {
	now := mono.Now()
	b.mu.Lock()
	b.res.Bytes += uint64(n)
	b.res.Bins.add(now, n)
	b.mu.Unlock()
}

// sink reads c until it closes.
func (b *bulkRun) sink(c net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			b.record(n)
		}
		if err != nil {
			return
		}
	}
}

// source writes to c until it closes.
func (b *bulkRun) source(c net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// add keeps c and starts its reader or writer; sending tells which.
func (b *bulkRun) add(c net.Conn, sending bool) bool {
	b.mu.Lock()
	if b.closed {
		// Opened after the run ended: nobody would close it.
		b.mu.Unlock()
		c.Close()
		return false
	}
	b.conns = append(b.conns, c)
	if sending {
		b.senders = append(b.senders, c)
	}
	b.mu.Unlock()
	b.wg.Add(1)
	if sending {
		go b.source(c)
	} else {
		go b.sink(c)
	}
	return true
}

// accept takes the streams on the server side.
func (b *bulkRun) accept(ln net.Listener) {
	defer b.wg.Done()
	for i := 0; i < b.cfg.Streams; i++ {
		c, err := ln.Accept()
		if err != nil || !b.add(c, b.cfg.Down) {
			return
		}
	}
}

// dial opens the streams from the client side.
func (b *bulkRun) dial(ctx context.Context, env Env) error {
	for i := 0; i < b.cfg.Streams; i++ {
		c, err := env.dialTCP(ctx, b.cfg.Port, b.cfg.CC)
		if err != nil {
			return err
		}
		b.add(c, !b.cfg.Down)
	}
	return nil
}

// stop reads the senders' retransmissions (and MPTCP state) and closes
// every stream.
func (b *bulkRun) stop(mptcp bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.res.Retrans, b.res.MPTCP = senderStats(b.senders, mptcp)
	for _, c := range b.conns {
		c.Close()
	}
	b.closed = true
}

// senderStats sums the senders' retransmissions: over every subflow for
// MPTCP sockets (whose TCP_INFO describes only the first subflow), and
// inspects MPTCP sockets.
func senderStats(senders []net.Conn, mptcp bool) (uint32, []MPTCPConnInfo) {
	var n uint32
	var infos []MPTCPConnInfo
	for _, c := range senders {
		if !mptcp {
			n += retrans(c)
			continue
		}
		info := InspectMPTCP(c)
		infos = append(infos, info)
		if len(info.SubflowStats) > 0 {
			n += info.Retrans()
		} else {
			n += retrans(c)
		}
	}
	return n, infos
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
