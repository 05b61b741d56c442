// SPDX-License-Identifier: MIT

package daemon

import (
	"net/netip"
	"testing"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/mpdccp"
)

// A concentrator's engines get CI prefixes naming their shard and, with
// [tuning] server_id, the concentrator above it; a CI built from a
// prefix reads back as that shard and server.
func TestShardEngineCIPrefix(t *testing.T) {
	for _, c := range []struct {
		shards, server int
		wantBits       uint8
	}{
		{1, -1, 0}, // a lone, unsharded concentrator: random CIs
		{2, -1, 1},
		{1, 3, 4},
		{4, 9, 6},
	} {
		cfg := &config.Config{}
		cfg.Connection.Role = config.RoleServer
		cfg.Tuning.Shards, cfg.Tuning.ServerID, cfg.Tuning.HasServerID = c.shards, max(c.server, 0), c.server >= 0
		l := ciLayout(cfg)
		steer := newSteer(cfg, l)
		if (steer != nil) != (c.shards > 1) {
			t.Errorf("%+v: steering %v", c, steer != nil)
		}
		for s := 0; s < c.shards; s++ {
			ec := shardEngine(mpdccp.Config{}, l, steer, s)
			if ec.CIPrefixBits != c.wantBits {
				t.Fatalf("%+v shard %d: %d prefix bits, want %d", c, s, ec.CIPrefixBits, c.wantBits)
			}
			if (ec.Indexed != nil) != (steer != nil) {
				t.Errorf("%+v shard %d: index hook set %v", c, s, ec.Indexed != nil)
			}
			if c.wantBits == 0 {
				continue
			}
			ci := ec.CIPrefix<<(32-ec.CIPrefixBits) | 0x1234&(1<<(32-ec.CIPrefixBits)-1)
			if got := l.Shard(ci); got != s {
				t.Errorf("%+v: CI %#x names shard %d, want %d", c, ci, got, s)
			}
			if c.server >= 0 && l.ServerOf(ci) != uint32(c.server) {
				t.Errorf("%+v: CI %#x names server %d, want %d", c, ci, l.ServerOf(ci), c.server)
			}
		}
	}
	// A client never gets a server id, whatever the struct holds.
	cfg := &config.Config{}
	cfg.Connection.Role = config.RoleClient
	cfg.Tuning.ServerID, cfg.Tuning.HasServerID = 5, true
	if l := ciLayout(cfg); l.ServerBits != 0 || l.ShardBits != 0 {
		t.Errorf("client layout %+v", l)
	}
}

// [tuning] join_port_base gives a CPE's engine the hook that sends joins
// to the port of the concentrator its CI names.
func TestJoinPortBase(t *testing.T) {
	cfg := &config.Config{}
	cfg.Connection.Role = config.RoleClient
	ec, err := engineConfig(cfg, 1500)
	if err != nil || ec.JoinRemote != nil {
		t.Fatalf("no join_port_base: hook set %v (%v)", ec.JoinRemote != nil, err)
	}
	cfg.Tuning.JoinPortBase = 6600
	if ec, err = engineConfig(cfg, 1500); err != nil || ec.JoinRemote == nil {
		t.Fatalf("join_port_base 6600: no hook (%v)", err)
	}
	r := netip.MustParseAddrPort("192.0.2.1:6511")
	for _, c := range []struct {
		ci   uint32
		want uint16
	}{{0x0123_4567, 6600}, {0x3fff_ffff, 6603}, {0xf000_0000, 6615}} {
		if got := ec.JoinRemote(c.ci, r); got != netip.AddrPortFrom(r.Addr(), c.want) {
			t.Errorf("CI %#08x: join to %v, want port %d", c.ci, got, c.want)
		}
	}
}
