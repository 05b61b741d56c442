// SPDX-License-Identifier: MIT

package datapath

import (
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/mptun/mptun/mpdccp/wire"
)

// CILayout is how a concentrator's Connection Identifiers name the owner
// of a connection: the top ServerBits bits are the concentrator (Server,
// for scale-out behind a load balancer), the next ShardBits the owner
// goroutine, the rest random. A join carries the CI as its token, so the
// first datagram of a CPE's second path finds its connection's owner.
type CILayout struct {
	ServerBits, ShardBits uint8
	Server                uint32
}

// MaxShards bounds the owners of a sharded data path.
const MaxShards = 256

// ShardBitsFor is the CI bits n shards need.
func ShardBitsFor(n int) uint8 { return uint8(bits.Len(uint(max(n, 1) - 1))) }

// Prefix is the CI prefix (value and length in bits) of shard s's
// connections, for mpdccp.Config.CIPrefix/CIPrefixBits.
func (l CILayout) Prefix(shard int) (uint32, uint8) {
	return l.Server<<l.ShardBits | uint32(shard), l.ServerBits + l.ShardBits
}

// Shard is the owner a CI names.
func (l CILayout) Shard(ci uint32) int {
	if l.ShardBits == 0 {
		return 0
	}
	return int(ci >> (32 - l.ServerBits - l.ShardBits) & (1<<l.ShardBits - 1))
}

// ServerOf is the concentrator a CI names.
func (l CILayout) ServerOf(ci uint32) uint32 {
	if l.ServerBits == 0 {
		return 0
	}
	return ci >> (32 - l.ServerBits)
}

// Steer keeps the owners' subflows in the steering tables of a sharded
// data path's socket readers. The owners (engines) report each subflow
// they start or stop matching through Indexer hooks; every reader keeps
// a private table (plain map reads: no lock, no allocation per datagram)
// and takes the updates queued for it once per batch. A reader takes
// them after its read returned, so a subflow reported before its first
// reply left is known before the answer to that reply arrives.
type Steer struct {
	layout  CILayout
	shards  int
	mu      sync.Mutex // guards readers (registration)
	readers []*steerQueue
}

// NewSteer returns the steering of shards owners with CIs laid out as l.
func NewSteer(shards int, l CILayout) *Steer {
	return &Steer{layout: l, shards: max(shards, 1)}
}

// Layout is the CI layout the owners' engines use.
func (st *Steer) Layout() CILayout { return st.layout }

// Shards is the number of owners.
func (st *Steer) Shards() int { return st.shards }

// Indexer is shard s's mpdccp.Config.Indexed hook.
func (st *Steer) Indexer(s int) func(remote netip.AddrPort, peerPort uint16, up bool) {
	return func(remote netip.AddrPort, peerPort uint16, up bool) {
		u := steerUpdate{key: keyOf(remote, peerPort), shard: uint8(s), up: up}
		st.mu.Lock()
		readers := st.readers
		st.mu.Unlock()
		for _, q := range readers {
			q.push(u)
		}
	}
}

// newTable registers a reader and returns its table.
func (st *Steer) newTable() *steerTable {
	t := &steerTable{st: st, subflows: make(map[steerKey]uint8), ports: make(map[uint32]int32)}
	st.mu.Lock()
	st.readers = append(st.readers, &t.q)
	st.mu.Unlock()
	return t
}

type steerKey struct {
	addr     [16]byte
	port     uint16
	peerPort uint16 // the peer's DCCP port
}

func keyOf(remote netip.AddrPort, peerPort uint16) steerKey {
	return steerKey{addr: remote.Addr().As16(), port: remote.Port(), peerPort: peerPort}
}

type steerUpdate struct {
	key   steerKey
	shard uint8
	up    bool
}

// steerQueue holds the updates a reader has not taken yet.
type steerQueue struct {
	mu      sync.Mutex
	pending []steerUpdate
	spare   []steerUpdate
	has     atomic.Bool
}

func (q *steerQueue) push(u steerUpdate) {
	q.mu.Lock()
	q.pending = append(q.pending, u)
	q.has.Store(true)
	q.mu.Unlock()
}

// steerTable is one reader's view: subflow → shard, and per peer DCCP
// port and shard the number of subflows (a datagram from an unknown
// address may be a subflow whose NAT binding changed).
type steerTable struct {
	st       *Steer
	q        steerQueue
	subflows map[steerKey]uint8
	ports    map[uint32]int32 // peerPort<<8 | shard → subflows
	pkt      wire.Packet
	mp       wire.MPOption
}

// update applies the queued updates; one lock per batch, and only when
// there are any.
func (t *steerTable) update() {
	if !t.q.has.Load() {
		return
	}
	t.q.mu.Lock()
	ups := t.q.pending
	t.q.pending, t.q.spare = t.q.spare[:0], nil
	t.q.has.Store(false)
	t.q.mu.Unlock()
	for _, u := range ups {
		pk := uint32(u.key.peerPort)<<8 | uint32(u.shard)
		if u.up {
			t.subflows[u.key] = u.shard
			t.ports[pk]++
			continue
		}
		if s, ok := t.subflows[u.key]; ok && s == u.shard {
			delete(t.subflows, u.key)
		}
		if t.ports[pk]--; t.ports[pk] <= 0 {
			delete(t.ports, pk)
		}
	}
	t.q.mu.Lock()
	if t.q.spare == nil {
		t.q.spare = ups[:0]
	}
	t.q.mu.Unlock()
}

// shardFor picks the owner of a datagram: the shard of its subflow; for a
// Request that joins, the shard its token names; for a first Request, a
// hash of the source (its retransmissions and cookie exchange land on
// the same owner). A datagram from an unknown address whose DCCP ports
// several shards use returns -1: the caller offers it to each of them.
func (t *steerTable) shardFor(dg []byte, from netip.AddrPort) int {
	n := t.st.shards
	if n == 1 {
		return 0
	}
	if len(dg) < 4 {
		return hashShard(from, n)
	}
	peerPort := uint16(dg[0])<<8 | uint16(dg[1])
	if s, ok := t.subflows[keyOf(from, peerPort)]; ok {
		return int(s)
	}
	if typ, ok := wire.PeekType(dg); ok && typ == wire.TypeRequest {
		if token, ok := t.joinToken(dg); ok {
			if s := t.st.layout.Shard(token); s < n {
				return s
			}
		}
		return hashShard(from, n)
	}
	found, owner := 0, 0
	for s := 0; s < n; s++ {
		if t.ports[uint32(peerPort)<<8|uint32(s)] > 0 {
			found++
			owner = s
		}
	}
	switch found {
	case 0:
		return hashShard(from, n) // nobody's: that owner answers as for any stray
	case 1:
		return owner
	}
	return -1
}

// candidates lists the shards with subflows on dg's peer DCCP port.
func (t *steerTable) candidates(dg []byte, out []int) []int {
	peerPort := uint16(dg[0])<<8 | uint16(dg[1])
	for s := 0; s < t.st.shards; s++ {
		if t.ports[uint32(peerPort)<<8|uint32(s)] > 0 {
			out = append(out, s)
		}
	}
	return out
}

// joinToken returns the token of a Request's MP_JOIN.
func (t *steerTable) joinToken(dg []byte) (uint32, bool) {
	if wire.Parse(dg, &t.pkt) != nil {
		return 0, false
	}
	it := wire.NewOptionIter(t.pkt.Options)
	for {
		o, ok := it.Next()
		if !ok {
			return 0, false
		}
		if o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &t.mp) == nil && t.mp.Type == wire.MPJoin {
			return t.mp.Token, true
		}
	}
}

// JoinAtServer is a CPE's mpdccp.Config.JoinRemote behind a balancer in
// front of several concentrators: a join goes to port base + the
// concentrator's server id, the top serverBits bits of its CI, at the
// address the path dials (docs/scale-out.md).
func JoinAtServer(base uint16, serverBits uint8) func(peerCI uint32, remote netip.AddrPort) netip.AddrPort {
	return func(peerCI uint32, remote netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(remote.Addr(), base+uint16(peerCI>>(32-serverBits)))
	}
}

// SourceShard is the owner, among n, of a first Request from from (the
// concentrator's choice for a new connection; benchmarks use it to put
// their active CPEs on distinct owners).
func SourceShard(from netip.AddrPort, n int) int { return hashShard(from, max(n, 1)) }

// hashShard spreads sources over n shards: the address and port mixed
// (murmur3's finalizer), then scaled to n.
func hashShard(from netip.AddrPort, n int) int {
	a := from.Addr().As16()
	h := uint64(from.Port())
	for i := 0; i < 16; i += 8 {
		h ^= uint64(a[i])<<56 | uint64(a[i+1])<<48 | uint64(a[i+2])<<40 | uint64(a[i+3])<<32 |
			uint64(a[i+4])<<24 | uint64(a[i+5])<<16 | uint64(a[i+6])<<8 | uint64(a[i+7])
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
	}
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}
