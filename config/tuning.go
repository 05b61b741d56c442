// SPDX-License-Identifier: MIT

package config

// Tuning holds performance knobs that change no behaviour on the wire.
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
}

// ServerIDBits is how many CI bits [tuning] server_id takes (16
// concentrators behind one balancer).
const ServerIDBits = 4

// MaxShards bounds [tuning] shards.
const MaxShards = 256

type rawTuning struct {
	Shards   *int64 `toml:"shards"`
	ServerID *int64 `toml:"server_id"`
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
}
