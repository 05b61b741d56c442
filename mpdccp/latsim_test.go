// SPDX-License-Identifier: MIT

package mpdccp

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// latencyResult is what a cell's latency run measured.
type latencyResult struct {
	ping              []time.Duration // round trips of a 10/s ping
	short10, short100 []time.Duration // completion of 10 KB and 100 KB transfers
}

// runLatency measures, over the cell's first n paths, a ping's round trip
// and the completion times of short transfers (SYN, SYN-ACK, request,
// response; server to client), alone or beside a bulk CUBIC download.
func runLatency(t testing.TB, cell simCell, n int, bulk bool, dur time.Duration) latencyResult {
	return runLatencyWith(t, cell, n, bulk, dur, Config{})
}

// runLatencyWith is runLatency with cfg's settings over the defaults.
func runLatencyWith(t testing.TB, cell simCell, n int, bulk bool, dur time.Duration, cfg Config) latencyResult {
	cfg.CCID, cfg.Retransmit = "bbr", true
	if cfg.AQM == nil {
		cfg.AQM = defaultAQM()
	}
	h := newHarness(t, harnessConfig{seed: 11, links: cell.links(n), cli: cfg, srv: cfg})
	var flows []*innerTCP
	var res latencyResult
	pingSent := map[uint32]mono.Time{}
	h.onDeliver = func(side int, c *Conn, b []byte) {
		if len(b) >= 28 && b[9] == 1 {
			id := binary.BigEndian.Uint32(b[24:])
			if side == sideServer {
				// Echo it back (an ICMP echo reply).
				r := append([]byte(nil), b...)
				copy(r[12:16], b[16:20])
				copy(r[16:20], b[12:16])
				h.serverConn().Send(h.sim.Now(), r)
				h.service(sideServer)
			} else {
				res.ping = append(res.ping, h.sim.Now().Sub(pingSent[id]))
			}
			return
		}
		routeInner(flows, side, b)
	}
	c := h.dial(n)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n }) {
		t.Fatalf("%s: not open", cell.name)
	}
	start := h.sim.Now()
	if bulk {
		f := newInnerTCP(h, sideServer, 5201, 1400)
		flows = append(flows, f)
		f.start(start.Add(dur))
		h.run(5 * time.Second) // the bulk flow settles first
	}
	// Pings: 10 per second.
	var ping func()
	var pid uint32
	end := h.sim.Now().Add(dur)
	ping = func() {
		p := make([]byte, 64)
		p[0], p[9] = 0x45, 1
		copy(p[12:], []byte{10, 1, 0, 1})
		copy(p[16:], []byte{10, 2, 0, 9})
		p[20] = 8
		binary.BigEndian.PutUint16(p[24:], uint16(pid))
		pingSent[pid] = h.sim.Now()
		binary.BigEndian.PutUint32(p[24:], pid)
		pid++
		c.Send(h.sim.Now(), p)
		h.service(sideClient)
		if h.sim.Now() < end {
			h.sim.After(100*time.Millisecond, ping)
		}
	}
	ping()
	// Short transfers alternating 10 KB and 100 KB (8 and 74 segments).
	alternate := func(i int) int {
		if i%2 == 1 {
			return 8
		}
		return 74
	}
	transfersUntil(h, &flows, end, alternate, func(segs int, d time.Duration) {
		if segs == 8 {
			res.short10 = append(res.short10, d)
		} else {
			res.short100 = append(res.short100, d)
		}
	})
	h.run(dur + 2*time.Second)
	return res
}

func p50(s []time.Duration) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return quantileDur(append([]time.Duration(nil), s...), 0.5)
}

func p99(s []time.Duration) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return quantileDur(append([]time.Duration(nil), s...), 0.99)
}

// TestSimLatencyReport prints ping and short-transfer latency through
// the tunnel on both paths and on the fast path alone, idle and beside a
// bulk download (go test -run SimLatencyReport -v).
func TestSimLatencyReport(t *testing.T) {
	reportOnly(t)
	cells := []simCell{simCells[0], simCells[1], simCells[3]}
	fmt.Printf("%-24s %-5s %-7s %9s %9s %9s %9s %9s\n", "cell", "bulk", "paths", "ping p50", "ping p99", "10KB p50", "100KB p50", "100KB p99")
	for _, cell := range cells {
		for _, bulk := range []bool{false, true} {
			for _, n := range []int{1, 2} {
				r := runLatency(t, cell, n, bulk, 10*time.Second)
				fmt.Printf("%-24s %-5v %-7d %9v %9v %9v %9v %9v\n", cell.name, bulk, n, p50(r.ping).Round(100*time.Microsecond),
					p99(r.ping).Round(100*time.Microsecond), p50(r.short10).Round(100*time.Microsecond),
					p50(r.short100).Round(100*time.Microsecond), p99(r.short100).Round(100*time.Microsecond))
			}
		}
	}
}

// runTransfers measures the completion times of transfers of segs
// 1360-byte segments, one at a time on fresh flows with 200 ms between
// them, over the cell's first n paths of an otherwise idle tunnel.
func runTransfers(t testing.TB, cell simCell, n, segs int, dur time.Duration) []time.Duration {
	cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
	h := newHarness(t, harnessConfig{seed: 11, links: cell.links(n), cli: cfg, srv: cfg})
	var flows []*innerTCP
	var done []time.Duration
	h.onDeliver = func(side int, c *Conn, b []byte) { routeInner(flows, side, b) }
	c := h.dial(n)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == n && h.openPaths(h.serverConn()) == n }) {
		t.Fatalf("%s: not open", cell.name)
	}
	transfersUntil(h, &flows, h.sim.Now().Add(dur), func(int) int { return segs }, func(_ int, d time.Duration) {
		done = append(done, d)
	})
	h.run(dur + 5*time.Second)
	return done
}

// TestSimTransferReport prints the completion of 100 KB, 300 KB and 1 MB
// transfers on an idle tunnel over both paths and over the fast path
// alone (go test -run SimTransferReport -v).
func TestSimTransferReport(t *testing.T) {
	reportOnly(t)
	fmt.Printf("%-24s %-7s %10s %10s %10s\n", "cell", "paths", "100KB p50", "300KB p50", "1MB p50")
	for _, cell := range []simCell{simCells[0], simCells[3], simCells[5], simCells[7]} {
		for _, n := range []int{1, 2} {
			fmt.Printf("%-24s %-7d", cell.name, n)
			for _, segs := range []int{74, 221, 736} {
				fmt.Printf(" %10v", p50(runTransfers(t, cell, n, segs, 8*time.Second)).Round(100*time.Microsecond))
			}
			fmt.Println()
		}
	}
}

// transfersUntil runs server-to-client transfers one at a time until end,
// 200 ms apart, each on a fresh port (a fresh flow): the i-th of segs(i)
// 1360-byte segments; done gets each one's size and completion time.
func transfersUntil(h *harness, flows *[]*innerTCP, end mono.Time, segs func(i int) int, done func(segs int, d time.Duration)) {
	i := 0
	var next func()
	next = func() {
		if h.sim.Now() >= end {
			return
		}
		i++
		n := segs(i)
		f := newInnerTCP(h, sideServer, uint16(6000+i), 1400)
		*flows = append(*flows, f)
		began := h.sim.Now()
		f.startTransfer(n, func(now mono.Time) {
			done(n, now.Sub(began))
			h.sim.After(200*time.Millisecond, next)
		})
	}
	next()
}
