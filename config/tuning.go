// SPDX-License-Identifier: MIT

package config

// Tuning holds performance knobs that change no behaviour on the wire.
type Tuning struct {
	// Shards is how many owner goroutines a concentrator runs its
	// connections on (each with its engine and its SO_REUSEPORT sockets);
	// 0 means GOMAXPROCS. A client has one connection: always 1.
	Shards int
}

// MaxShards bounds [tuning] shards.
const MaxShards = 256

type rawTuning struct {
	Shards *int64 `toml:"shards"`
}

func (c *checker) tuning(raw *rawConfig, cfg *Config) {
	a := top("tuning.shards")
	cfg.Tuning.Shards = int(c.intIn(a, raw.Tuning.Shards, 0, 0, MaxShards))
	if cfg.Tuning.Shards > 1 && cfg.Connection.Role == RoleClient {
		c.errf(a, "a client has one connection and one owner; shards is for a concentrator (role = \"server\")")
	}
}
