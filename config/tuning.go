// SPDX-License-Identifier: MIT

package config

// Tuning holds performance knobs and the scale-out settings
// (docs/scale-out.md).
type Tuning struct {
	// Shards is how many owner goroutines a concentrator runs its
	// connections on (each with its engine and its SO_REUSEPORT sockets);
	// 0 means GOMAXPROCS. A client has one connection: always 1.
	Shards int
	// ServerID, when HasServerID, is this concentrator's number among
	// those behind one load balancer (docs/scale-out.md): the top
	// ServerIDBits bits of every connection identifier it assigns.
	ServerID    int
	HasServerID bool
	// JoinPortBase, when not 0, makes a CPE send the joins of its other
	// paths to port JoinPortBase + the concentrator's server id (read
	// from its CI) at the path's remote address: behind a balancer that
	// maps each such port to its concentrator.
	JoinPortBase uint16
}

// ServerIDBits is how many CI bits [tuning] server_id takes (16
// concentrators behind one balancer).
const ServerIDBits = 4

// MaxShards bounds [tuning] shards.
const MaxShards = 256

type rawTuning struct {
	Shards       *int64 `toml:"shards"`
	ServerID     *int64 `toml:"server_id"`
	JoinPortBase *int64 `toml:"join_port_base"`
}

func (c *checker) tuning(raw *rawConfig, cfg *Config) {
	a := top("tuning.shards")
	cfg.Tuning.Shards = int(c.intIn(a, raw.Tuning.Shards, 0, 0, MaxShards))
	if cfg.Tuning.Shards > 1 && cfg.Connection.Role == RoleClient {
		c.errf(a, "a client has one connection and one owner; shards is for a concentrator (role = \"server\")")
	}
	a = top("tuning.server_id")
	cfg.Tuning.ServerID = int(c.intIn(a, raw.Tuning.ServerID, 0, 0, 1<<ServerIDBits-1))
	cfg.Tuning.HasServerID = raw.Tuning.ServerID != nil
	if cfg.Tuning.HasServerID && cfg.Connection.Role == RoleClient {
		c.errf(a, "server_id numbers a concentrator behind a load balancer (role = \"server\")")
	}
	a = top("tuning.join_port_base")
	cfg.Tuning.JoinPortBase = uint16(c.intIn(a, raw.Tuning.JoinPortBase, 0, 1, 65535-(1<<ServerIDBits-1)))
	if raw.Tuning.JoinPortBase != nil && cfg.Connection.Role == RoleServer {
		c.errf(a, "join_port_base tells a CPE (role = \"client\") where its joins go; a concentrator listens on its port with a [[listen]]")
	}
}
