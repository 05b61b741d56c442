// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/noise"
)

// innerRoutes tells a sharded data path's TUN reader which owner holds the
// connection an inner packet goes to. In secure mode the configuration
// maps a destination to a peer (its allowed IPs, longest prefix first)
// and the owners' connection events map a peer to the owner of its open
// connection (an atomic per peer). In plain mode the owners report the
// inner sources they learn, queued for the reader like Steer's updates.
type innerRoutes struct {
	sealed bool
	lens   []int // prefix lengths in byLen, longest first; IPv6 as 1000+bits
	byLen  map[int]map[netip.Prefix]int32
	keys   map[noise.Key]int32
	shard  []atomic.Int32 // by peer: owner of its open connection, -1 none

	mu    sync.Mutex  // guards owner
	owner []peerOwner // by peer

	// Plain mode.
	learnt map[netip.Addr]uint8 // the TUN reader's
	q      struct {
		sync.Mutex
		pending []learnt
	}
	has atomic.Bool
}

type peerOwner struct {
	shard int
	ci    uint32
	set   bool
}

type learnt struct {
	src   netip.Addr
	shard uint8
}

func newInnerRoutes(peers []PeerRoute) *innerRoutes {
	r := &innerRoutes{sealed: len(peers) > 0, byLen: map[int]map[netip.Prefix]int32{},
		keys: map[noise.Key]int32{}, shard: make([]atomic.Int32, len(peers)),
		owner: make([]peerOwner, len(peers)), learnt: map[netip.Addr]uint8{}}
	for i, p := range peers {
		r.keys[p.Key] = int32(i)
		r.shard[i].Store(-1)
		for _, pf := range p.AllowedIPs {
			pf = pf.Masked()
			l := pf.Bits()
			if pf.Addr().Is6() {
				l += 1000
			}
			if r.byLen[l] == nil {
				r.byLen[l] = map[netip.Prefix]int32{}
				r.lens = append(r.lens, l)
			}
			r.byLen[l][pf] = int32(i)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(r.lens)))
	return r
}

// peerOf is the peer whose allowed IPs hold dst, or -1.
func (r *innerRoutes) peerOf(dst netip.Addr) int32 {
	dst = dst.Unmap()
	for _, l := range r.lens {
		bits, v6 := l, false
		if l >= 1000 {
			bits, v6 = l-1000, true
		}
		if dst.Is6() != v6 {
			continue
		}
		pf, err := dst.Prefix(bits)
		if err != nil {
			continue
		}
		if p, ok := r.byLen[l][pf]; ok {
			return p
		}
	}
	return -1
}

// shardOf is the owner of the connection an inner packet goes to, or -1.
func (r *innerRoutes) shardOf(pkt []byte) int {
	dst, ok := innerAddr(pkt, false)
	if !ok {
		return -1
	}
	if r.sealed {
		p := r.peerOf(dst)
		if p < 0 {
			return -1
		}
		return int(r.shard[p].Load())
	}
	if s, ok := r.learnt[dst]; ok {
		return int(s)
	}
	return -1
}

// connEvent follows connections opening and closing in shard s. A peer's
// new connection replaces its older one; when that lives in another
// owner, it is aborted there (within an owner the engine does it).
func (r *innerRoutes) connEvent(d *Datapath, s int, ev mpdccp.Event) {
	if !r.sealed || ev.Conn == nil || (ev.Kind != mpdccp.EventConnOpen && ev.Kind != mpdccp.EventConnClosed) {
		return
	}
	p, ok := r.keys[ev.Conn.PeerKey()]
	if !ok {
		return
	}
	ci := ev.Conn.ID()
	r.mu.Lock()
	prev := r.owner[p]
	if ev.Kind == mpdccp.EventConnOpen {
		r.owner[p] = peerOwner{shard: s, ci: ci, set: true}
		r.shard[p].Store(int32(s))
	} else if prev.set && prev.shard == s && prev.ci == ci {
		r.owner[p] = peerOwner{}
		r.shard[p].Store(-1)
	}
	r.mu.Unlock()
	if ev.Kind == mpdccp.EventConnOpen && prev.set && prev.shard != s {
		go abortConn(d.shards[prev.shard], prev.ci)
	}
}

// abortConn aborts connection ci in shard d, from outside its goroutine.
func abortConn(d *Datapath, ci uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		for _, c := range ep.Conns() {
			if c.ID() == ci && c.State() != mpdccp.Closed {
				c.Abort(now)
			}
		}
	})
}

// learn records, in plain mode, that inner source src is behind a
// connection of shard s.
func (r *innerRoutes) learn(src netip.Addr, s int) {
	r.q.Lock()
	r.q.pending = append(r.q.pending, learnt{src, uint8(s)})
	r.has.Store(true)
	r.q.Unlock()
}

// update applies the learnt sources to the TUN reader's table.
func (r *innerRoutes) update() {
	if !r.has.Load() {
		return
	}
	r.q.Lock()
	ls := r.q.pending
	r.q.pending = nil
	r.has.Store(false)
	r.q.Unlock()
	for _, l := range ls {
		r.learnt[l.src] = l.shard
	}
}
