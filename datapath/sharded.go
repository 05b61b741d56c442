// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/tun"
)

// A sharded data path runs a concentrator's connections on several owner
// goroutines (shards), each a Datapath with its own mpdccp.Endpoint, its
// own SO_REUSEPORT sibling of every listen socket (which it sends on),
// its own timer and its own send and delivery batches; crypto and the
// engine's work thus run in parallel. The front reads: one goroutine per
// socket sorts each batch of datagrams by connection owner (Steer), one
// reads the TUN device and sorts packets by the owner of their
// destination's connection; the reader then runs each owner on its part
// of the batch (holding that owner's lock for the round), rather than
// waking an owner goroutine per batch. Datagrams and packets move by
// swapping buffers into the reader's per-owner batches: nothing on the
// packet path allocates, and there is one lock per owner and batch.
// Owners share the TUN device for writing, one batch at a time.

// Sharding configures a sharded data path.
type Sharding struct {
	// Shards are the owners after the first (Config.Endpoint and
	// Config.Sockets): each with its engine and its sockets, one per
	// listen address, in Config.Sockets' order, bound with SO_REUSEPORT.
	Shards []Shard
	// Steer is the table the engines' Indexed hooks (Steer.Indexer) fill.
	Steer *Steer
	// Peers are the secure mode's peers: the front routes an inner
	// destination to the owner holding the connection of the peer whose
	// allowed IPs contain it.
	Peers []PeerRoute
}

// Shard is one owner's engine and sockets.
type Shard struct {
	Endpoint *mpdccp.Endpoint
	Sockets  []Socket
	// Hook, if set, is driven by this owner as Config.Hook is by the
	// first (which takes Config.Hook).
	Hook Hook
}

// PeerRoute is a peer's key and the inner prefixes routed to it.
type PeerRoute struct {
	Key        noise.Key
	AllowedIPs []netip.Prefix
}

// front is the state of a sharded data path's readers.
type front struct {
	steer  *Steer
	routes *innerRoutes
}

func newSharded(cfg Config) (*Datapath, error) {
	sh := cfg.Sharding
	if sh.Steer == nil || sh.Steer.Shards() != len(sh.Shards)+1 {
		return nil, errors.New("datapath: sharding needs a Steer for every shard")
	}
	if len(sh.Shards)+1 > MaxShards {
		return nil, fmt.Errorf("datapath: %d shards, at most %d", len(sh.Shards)+1, MaxShards)
	}
	d := &Datapath{cfg: cfg, ep: cfg.Endpoint, log: cfg.Logger, Stats: new(Stats), fatal: make(chan error, 1),
		front: &front{steer: sh.Steer, routes: newInnerRoutes(sh.Peers)}}
	d.SetCapture(cfg.Capture)
	dev := &sharedDevice{Device: cfg.Device}
	owners := append([]Shard{{Endpoint: cfg.Endpoint, Sockets: cfg.Sockets, Hook: cfg.Hook}}, sh.Shards...)
	for i, o := range owners {
		if o.Endpoint == nil || len(o.Sockets) != len(cfg.Sockets) {
			d.closeShards()
			return nil, fmt.Errorf("datapath: shard %d: an engine and %d sockets are required", i, len(cfg.Sockets))
		}
		sc := cfg
		sc.Sharding, sc.Endpoint, sc.Sockets, sc.Device, sc.Hook = nil, o.Endpoint, o.Sockets, dev, o.Hook
		s, err := New(sc)
		if err != nil {
			d.closeShards()
			return nil, fmt.Errorf("datapath: shard %d: %w", i, err)
		}
		s.Stats, s.fed = d.Stats, true
		s.onEvent = func(ev mpdccp.Event) { d.front.routes.connEvent(d, i, ev) }
		s.learn = func(src netip.Addr) { d.front.routes.learn(src, i) }
		d.shards = append(d.shards, s)
	}
	return d, nil
}

func (d *Datapath) closeShards() {
	for _, s := range d.shards {
		s.timer.Close()
	}
}

// runSharded starts the front's readers and runs every shard until ctx is
// done (each then closes its connections) or one of them fails.
func (d *Datapath) runSharded(ctx context.Context, closeGrace time.Duration) error {
	readCtx, stopReaders := context.WithCancel(context.Background())
	shardCtx, stopShards := context.WithCancel(ctx)
	defer stopShards()
	for _, s := range d.shards {
		// Before the readers start, so that no early datagram is dropped;
		// each shard's Run arms its timer.
		s.mu.Lock()
		s.running = true
		s.mu.Unlock()
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { defer readers.Done(); d.routineSteerTUN(readCtx) }()
	for _, s := range d.shards {
		for i := range s.cfg.Sockets {
			readers.Add(1)
			go func() { defer readers.Done(); d.routineSteerUDP(readCtx, s.cfg.Sockets[i], i) }()
		}
	}
	defer func() {
		stopReaders()
		// Readers blocked in syscalls return once the caller closes the
		// device and sockets; do not wait for them here.
		go readers.Wait()
	}()
	errs := make(chan error, len(d.shards))
	for _, s := range d.shards {
		go func() { errs <- s.Run(shardCtx, closeGrace) }()
	}
	var first error
	fatal := d.fatal
	for left := len(d.shards); left > 0; {
		select {
		case err := <-errs:
			left--
			if err != nil && first == nil {
				first = err
				stopShards() // one owner failed: the others close too
			}
		case err := <-fatal: // the TUN reader failed
			fatal = nil
			if first == nil {
				first = err
			}
			stopShards()
		}
	}
	return first
}

// doEach runs fn in every owner in turn.
func (d *Datapath) doEach(ctx context.Context, fn func(now mono.Time, ep *mpdccp.Endpoint)) error {
	for _, s := range d.shards {
		if err := s.Do(ctx, fn); err != nil {
			return err
		}
	}
	return nil
}

// shardLateness is the worst shard's timer lateness.
func (d *Datapath) shardLateness() (p50, p99, mx time.Duration) {
	for _, s := range d.shards {
		a, b, c := s.TimerLateness()
		p50, p99, mx = max(p50, a), max(p99, b), max(mx, c)
	}
	return p50, p99, mx
}

// Shards is the number of owners, each an engine behind its own lock (1
// unless sharded).
func (d *Datapath) Shards() int { return max(len(d.shards), 1) }

// routineSteerUDP reads socket sock (index i of its owner's sockets) and
// runs every datagram's owner on it, one batch per owner.
func (d *Datapath) routineSteerUDP(ctx context.Context, sock Socket, i int) {
	t := d.front.steer.newTable()
	read := make([]netio.Message, maxBatch)
	for j := range read {
		read[j].Buf = make([]byte, udpBufSize)
	}
	out := make([]*udpBatch, len(d.shards))
	for s, sh := range d.shards {
		out[s] = newUDPBatch(sh.slots[i])
	}
	var cands []int
	for {
		for j := range read {
			read[j].Buf = read[j].Buf[:cap(read[j].Buf)]
		}
		n, err := sock.ReadBatch(read)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Debug("udp read", "socket", i, "err", err)
			time.Sleep(time.Millisecond)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		t.update() // after the read: see Steer
		for j := 0; j < n; j++ {
			m := &read[j]
			s := t.shardFor(m.Buf[:m.N], m.Addr)
			if s >= 0 {
				d.steerDatagram(out, s, m, false)
				continue
			}
			cands = t.candidates(m.Buf[:m.N], cands[:0])
			for _, s := range cands {
				d.steerDatagram(out, s, m, true)
			}
		}
		for s, b := range out {
			if b.n > 0 {
				d.shards[s].round(nil, b)
				b.n = 0
			}
		}
	}
}

// steerDatagram puts m into shard s's batch (out[s]), by swapping
// buffers, or copying when the datagram goes to several shards.
func (d *Datapath) steerDatagram(out []*udpBatch, s int, m *netio.Message, cp bool) {
	b := out[s]
	slot := &b.msgs[b.n]
	if cp {
		slot.Buf = slot.Buf[:cap(slot.Buf)]
		copy(slot.Buf, m.Buf[:m.N])
	} else {
		slot.Buf, m.Buf = m.Buf, slot.Buf
	}
	slot.N, slot.Addr, slot.TOS, slot.Local = m.N, m.Addr, m.TOS, m.Local
	b.n++
	if b.n == len(b.msgs) {
		d.shards[s].round(nil, b)
		b.n = 0
	}
}

// routineSteerTUN reads the TUN device and runs the owner of every
// packet's destination on it, one batch per owner.
func (d *Datapath) routineSteerTUN(ctx context.Context) {
	dev := d.cfg.Device
	bs := min(max(dev.BatchSize(), 1), maxBatch)
	read := d.newTunBatch(bs)
	out := make([]*tunBatch, len(d.shards))
	for s := range out {
		out[s] = d.newTunBatch(bs)
	}
	r := d.front.routes
	for {
		n, err := dev.Read(read.bufs, read.sizes, tunOffset)
		if err != nil && n == 0 {
			if errors.Is(err, tun.ErrTooManySegments) {
				continue
			}
			if ctx.Err() == nil {
				d.fail(fmt.Errorf("tun read: %w", err))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.update()
		for j := 0; j < n; j++ {
			pkt := read.bufs[j][tunOffset : tunOffset+read.sizes[j]]
			s := r.shardOf(pkt)
			if s < 0 {
				d.Stats.DroppedNoRoute.Add(1)
				continue
			}
			b := out[s]
			b.bufs[b.n], read.bufs[j] = read.bufs[j], b.bufs[b.n]
			b.sizes[b.n] = read.sizes[j]
			b.n++
			if b.n == len(b.bufs) {
				d.shards[s].round(b, nil)
				b.n = 0
			}
		}
		for s, b := range out {
			if b.n > 0 {
				d.shards[s].round(b, nil)
				b.n = 0
			}
		}
	}
}

// sharedDevice lets the owners write to one TUN device, a batch at a
// time (the device's write path keeps offload state); only the front
// reads.
type sharedDevice struct {
	tun.Device
	mu sync.Mutex
}

func (s *sharedDevice) Write(bufs [][]byte, offset int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Device.Write(bufs, offset)
}
