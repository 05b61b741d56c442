// SPDX-License-Identifier: MIT

package daemon

import (
	"fmt"
	"runtime"

	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/netio"
)

// A concentrator runs its connections on several owners (shards): each
// has its own engine, whose connection identifiers carry the shard's
// number, and its own SO_REUSEPORT socket per [[listen]]; the data
// path's readers steer every datagram to its connection's owner.

// shardCount is how many owners cfg asks for: [tuning] shards, by
// default GOMAXPROCS; a client has one.
func shardCount(cfg *config.Config) int {
	if cfg.Connection.Role != config.RoleServer {
		return 1
	}
	n := cfg.Tuning.Shards
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return min(max(n, 1), config.MaxShards)
}

// ciLayout is how cfg's connection identifiers name their owner shard
// and, behind a load balancer, this concentrator ([tuning] server_id).
func ciLayout(cfg *config.Config) datapath.CILayout {
	l := datapath.CILayout{ShardBits: datapath.ShardBitsFor(shardCount(cfg))}
	if cfg.Connection.Role == config.RoleServer && cfg.Tuning.HasServerID {
		l.ServerBits, l.Server = config.ServerIDBits, uint32(cfg.Tuning.ServerID)
	}
	return l
}

// newSteer is the steering of a sharded concentrator, nil otherwise.
func newSteer(cfg *config.Config, l datapath.CILayout) *datapath.Steer {
	n := shardCount(cfg)
	if n == 1 {
		return nil
	}
	return datapath.NewSteer(n, l)
}

// shardEngine is the engine config of shard s: its CI prefix (shard and
// server id) and, when sharded, the hook feeding the steering tables.
func shardEngine(ec mpdccp.Config, l datapath.CILayout, steer *datapath.Steer, s int) mpdccp.Config {
	if l.ServerBits+l.ShardBits > 0 {
		ec.CIPrefix, ec.CIPrefixBits = l.Prefix(s)
	}
	if steer != nil {
		ec.Indexed = steer.Indexer(s)
	}
	return ec
}

// openShards creates the owners after the first (d.ep on d.listen): an
// engine each and a sibling of every listen socket.
func (d *Daemon) openShards(ec mpdccp.Config, steer *datapath.Steer) (*datapath.Sharding, error) {
	if steer == nil {
		return nil, nil
	}
	sh := &datapath.Sharding{Steer: steer}
	for _, p := range d.config().Peers {
		sh.Peers = append(sh.Peers, datapath.PeerRoute{Key: p.PublicKey, AllowedIPs: p.AllowedIPs})
	}
	cfg := d.config()
	off := netio.SocketConfig{DisableGSO: !cfg.Offload.UDPGSO, DisableGRO: !cfg.Offload.UDPGRO, ReusePort: true}
	for s := 1; s < steer.Shards(); s++ {
		ep, err := mpdccp.NewEndpoint(shardEngine(ec, steer.Layout(), steer, s))
		if err != nil {
			return nil, fmt.Errorf("engine (shard %d): %w", s, err)
		}
		shard := datapath.Shard{Endpoint: ep, Hook: managerHook{d, s}}
		for i, l := range cfg.Listen {
			sc := off
			// The first socket's address: its port when the config said 0.
			sc.Local, sc.Device, sc.Fwmark = d.listen[i].LocalAddr(), l.Device, l.Fwmark
			c, err := netio.Open(sc)
			if err != nil {
				return nil, fmt.Errorf("listen %s (shard %d): %w", l.Address, s, err)
			}
			d.shardSocks = append(d.shardSocks, c)
			shard.Sockets = append(shard.Sockets, c)
		}
		sh.Shards = append(sh.Shards, shard)
	}
	return sh, nil
}

// listenFree fails when a listen address is taken. Sharded listen
// sockets share their address (SO_REUSEPORT), so binding them would not
// notice a second concentrator on the same port, and the two would split
// its traffic; a probe socket without SO_REUSEPORT does.
func listenFree(cfg *config.Config) error {
	if shardCount(cfg) == 1 {
		return nil
	}
	for _, l := range cfg.Listen {
		if l.Device != "" || l.Address.Port() == 0 {
			continue
		}
		c, err := netio.Open(netio.SocketConfig{Local: l.Address, DisableGSO: true, DisableGRO: true, BufferSize: 4096})
		if err != nil {
			return fmt.Errorf("listen %s: %w", l.Address, err)
		}
		c.Close()
	}
	return nil
}
