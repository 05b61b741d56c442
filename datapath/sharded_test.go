// SPDX-License-Identifier: MIT

package datapath

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/netio"
	"github.com/mptun/mptun/tun"
)

// shardedServer is a secure concentrator data path with n owners on one
// loopback port, and its CPEs' keys.
type shardedServer struct {
	dev     *tun.ChannelDevice
	dp      *Datapath
	addr    netip.AddrPort
	pub     noise.Key
	cpeKeys []noise.Key
	layout  CILayout
	socks   []*netio.Conn
	hooks   []*countingHook // one per owner, as the daemon's path managers
}

// countingHook counts the engine events its owner hands it and checks
// that they come from that owner's engine.
type countingHook struct {
	ep    *mpdccp.Endpoint
	opens atomic.Int32
	wrong atomic.Int32
}

func (h *countingHook) HandleEngineEvent(now mono.Time, ev mpdccp.Event) {
	if ev.Kind == mpdccp.EventConnOpen {
		h.opens.Add(1)
		if ev.Conn != nil && !slices.Contains(h.ep.Conns(), ev.Conn) {
			h.wrong.Add(1)
		}
	}
}
func (h *countingHook) Deadline() mono.Time       { return mono.Never }
func (h *countingHook) HandleTimer(now mono.Time) {}
func (h *countingHook) Stop(now mono.Time)        {}

// cpeInner is CPE i's inner address (its allowed IPs).
func cpeInner(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 98, byte(i >> 8), byte(i + 1)}) }

func newShardedServer(t *testing.T, shards, cpes int) *shardedServer {
	t.Helper()
	s := &shardedServer{dev: tun.NewChannel("srv", 1400, 16)}
	key, _ := noise.GeneratePrivateKey(rand.Reader)
	s.pub, _ = noise.PublicKey(key)
	sec := &mpdccp.Security{PrivateKey: key}
	var routes []PeerRoute
	for i := 0; i < cpes; i++ {
		k, _ := noise.GeneratePrivateKey(rand.Reader)
		pub, _ := noise.PublicKey(k)
		s.cpeKeys = append(s.cpeKeys, k)
		allowed := []netip.Prefix{netip.PrefixFrom(cpeInner(i), 32)}
		sec.Peers = append(sec.Peers, mpdccp.Peer{PublicKey: pub, AllowedIPs: allowed})
		routes = append(routes, PeerRoute{Key: pub, AllowedIPs: allowed})
	}
	s.layout = CILayout{ShardBits: ShardBitsFor(shards)}
	steer := NewSteer(shards, s.layout)
	sh := &Sharding{Steer: steer, Peers: routes}
	var first Shard
	for i := 0; i < shards; i++ {
		prefix, bits := s.layout.Prefix(i)
		ep, err := mpdccp.NewEndpoint(mpdccp.Config{Role: mpdccp.Server, Security: sec, ECN: true,
			CIPrefix: prefix, CIPrefixBits: bits, Indexed: steer.Indexer(i)})
		if err != nil {
			t.Fatal(err)
		}
		local := netip.MustParseAddrPort("127.0.0.1:0")
		if i > 0 {
			local = s.addr
		}
		sock, err := netio.Open(netio.SocketConfig{Local: local, ReusePort: true})
		if err != nil {
			t.Fatal(err)
		}
		s.socks = append(s.socks, sock)
		s.addr = sock.LocalAddr()
		h := &countingHook{ep: ep}
		s.hooks = append(s.hooks, h)
		if i == 0 {
			first = Shard{Endpoint: ep, Sockets: []Socket{sock}, Hook: h}
		} else {
			sh.Shards = append(sh.Shards, Shard{Endpoint: ep, Sockets: []Socket{sock}, Hook: h})
		}
	}
	var err error
	s.dp, err = New(Config{Endpoint: first.Endpoint, Sockets: first.Sockets, Device: s.dev, InnerMTU: 1300,
		InnerAddrs: []netip.Addr{netip.MustParseAddr("10.98.255.254")}, Sharding: sh, Hook: first.Hook})
	if err != nil {
		t.Fatal(err)
	}
	if s.dp.Shards() != shards {
		t.Fatalf("%d shards, want %d", s.dp.Shards(), shards)
	}
	return s
}

// shardedCPE is a client data path with one socket per path.
type shardedCPE struct {
	dev   *tun.ChannelDevice
	ep    *mpdccp.Endpoint
	dp    *Datapath
	socks []*netio.Conn
}

func newShardedCPE(t *testing.T, srv *shardedServer, key noise.Key, paths int) *shardedCPE {
	t.Helper()
	ep, err := mpdccp.NewEndpoint(mpdccp.Config{Role: mpdccp.Client, ECN: true, Security: &mpdccp.Security{PrivateKey: key,
		Peers: []mpdccp.Peer{{PublicKey: srv.pub, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &shardedCPE{dev: tun.NewChannel("cpe", 1400, 16), ep: ep}
	var socks []Socket
	var pcs []mpdccp.PathConfig
	for i := 0; i < paths; i++ {
		s, err := netio.Open(netio.SocketConfig{Local: netip.MustParseAddrPort("127.0.0.1:0")})
		if err != nil {
			t.Fatal(err)
		}
		c.socks, socks = append(c.socks, s), append(socks, s)
		pcs = append(pcs, mpdccp.PathConfig{ID: i, Local: i, LocalAddr: s.LocalAddr(), Remote: srv.addr})
	}
	if c.dp, err = New(Config{Endpoint: ep, Device: c.dev, Sockets: socks, InnerMTU: 1300}); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.Dial(mono.Now(), pcs); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *shardedCPE) close() {
	c.dev.Close()
	for _, s := range c.socks {
		s.Close()
	}
}

// run runs a data path until the test ends.
func run(t *testing.T, dp *Datapath, closers ...func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { dp.Run(ctx, 100*time.Millisecond); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		for _, c := range closers {
			c()
		}
	})
}

// serverConns lists the concentrator's open connections: owner, CI, open
// paths and peer key.
type connInfo struct {
	shard int
	ci    uint32
	paths int
	peer  noise.Key
}

func serverConns(t *testing.T, s *shardedServer) []connInfo {
	var out []connInfo
	for i, sd := range s.dp.shards {
		err := sd.Do(context.Background(), func(now mono.Time, ep *mpdccp.Endpoint) {
			for _, c := range ep.Conns() {
				if c.State() != mpdccp.Open {
					continue
				}
				n := 0
				for _, p := range c.Stats().Paths {
					if p.State == "open" {
						n++
					}
				}
				out = append(out, connInfo{i, c.ID(), n, c.PeerKey()})
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// innerTo is an inner IPv4/UDP packet from src to dst carrying id.
func innerTo(src, dst netip.Addr, id uint32) []byte {
	p := ipv4UDP(id, 200, false)
	copy(p[12:16], src.AsSlice())
	copy(p[16:20], dst.AsSlice())
	p[10], p[11] = 0, 0
	binary.BigEndian.PutUint16(p[10:], ^inetSum(p[:20], 0))
	return p
}

// Sixteen two-path CPEs on a concentrator with two owners: connections
// land on both owners, each connection's CI names its owner, every join
// from a CPE's second socket finds its connection's owner, and inner
// packets flow both ways (downstream by the peers' allowed IPs).
func TestShardedConcentrator(t *testing.T) {
	const cpes = 16
	srv := newShardedServer(t, 2, cpes)
	run(t, srv.dp, func() {
		srv.dev.Close()
		for _, s := range srv.socks {
			s.Close()
		}
	})
	var clients []*shardedCPE
	for i := 0; i < cpes; i++ {
		c := newShardedCPE(t, srv, srv.cpeKeys[i], 2)
		clients = append(clients, c)
		run(t, c.dp, c.close)
	}
	waitFor(t, "16 two-path connections", func() bool {
		cs := serverConns(t, srv)
		if len(cs) != cpes {
			return false
		}
		for _, c := range cs {
			if c.paths != 2 {
				return false
			}
		}
		return true
	})
	perShard := map[int]int{}
	for _, c := range serverConns(t, srv) {
		perShard[c.shard]++
		if got := srv.layout.Shard(c.ci); got != c.shard {
			t.Errorf("connection %#08x lives in owner %d, its CI names %d", c.ci, c.shard, got)
		}
	}
	if perShard[0] == 0 || perShard[1] == 0 {
		t.Errorf("connections per owner %v: the first Requests were not spread", perShard)
	}

	// Upstream: every CPE's packets reach the concentrator's TUN.
	const each = 20
	for i, c := range clients {
		for j := 0; j < each; j++ {
			c.dev.Inbound <- innerTo(cpeInner(i), netip.MustParseAddr("10.98.255.254"), uint32(i<<16|j))
		}
	}
	got := map[uint32]bool{}
	for len(got) < cpes*each {
		select {
		case p := <-srv.dev.Outbound:
			got[binary.BigEndian.Uint32(p[28:])] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("upstream: %d of %d packets", len(got), cpes*each)
		}
	}
	// Downstream: the concentrator's TUN reader hands each packet to the
	// owner of its destination's connection.
	for i := range clients {
		for j := 0; j < each; j++ {
			srv.dev.Inbound <- innerTo(netip.MustParseAddr("10.98.255.254"), cpeInner(i), uint32(i<<16|j))
		}
	}
	for i, c := range clients {
		for j := 0; j < each; j++ {
			select {
			case p := <-c.dev.Outbound:
				if id := binary.BigEndian.Uint32(p[28:]); int(id>>16) != i {
					t.Fatalf("CPE %d got CPE %d's packet", i, id>>16)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("downstream: CPE %d got %d of %d packets", i, j, each)
			}
		}
	}
	if n := srv.dp.Stats.DroppedNoRoute.Load(); n != 0 {
		t.Errorf("%d inner packets had no route", n)
	}
	// Each owner's hook (the daemon's path manager) saw its own
	// connections open, and the front still learnt where they live (the
	// downstream packets above arrived).
	opens := 0
	for i, h := range srv.hooks {
		opens += int(h.opens.Load())
		if n := h.wrong.Load(); n != 0 {
			t.Errorf("owner %d's hook got %d events of another owner's connections", i, n)
		}
	}
	if opens != cpes {
		t.Errorf("hooks saw %d connections open, want %d", opens, cpes)
	}
}

// A CPE that reconnects lands on whichever owner its new source hashes
// to; its older connection, held by the other owner, is aborted there,
// and downstream traffic follows the new one.
func TestShardedPeerMovesOwner(t *testing.T) {
	srv := newShardedServer(t, 2, 1)
	run(t, srv.dp, func() {
		srv.dev.Close()
		for _, s := range srv.socks {
			s.Close()
		}
	})
	first := newShardedCPE(t, srv, srv.cpeKeys[0], 1)
	run(t, first.dp, first.close)
	waitFor(t, "the first connection", func() bool { return len(serverConns(t, srv)) == 1 })
	old := serverConns(t, srv)[0]
	// The CPE restarts on another port, one that lands on the other owner.
	var second *shardedCPE
	for tries := 0; ; tries++ {
		c := newShardedCPE(t, srv, srv.cpeKeys[0], 1)
		if hashShard(c.socks[0].LocalAddr(), 2) != old.shard {
			second = c
			break
		}
		c.close()
		if tries > 50 {
			t.Fatal("no source port hashing to the other owner")
		}
	}
	run(t, second.dp, second.close)
	waitFor(t, "the new connection alone", func() bool {
		cs := serverConns(t, srv)
		return len(cs) == 1 && cs[0].shard != old.shard
	})
	srv.dev.Inbound <- innerTo(netip.MustParseAddr("10.98.255.254"), cpeInner(0), 7)
	select {
	case <-second.dev.Outbound:
	case <-time.After(5 * time.Second):
		t.Fatal("downstream did not follow the new connection")
	}
}
