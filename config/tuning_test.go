// SPDX-License-Identifier: MIT

package config

import "testing"

const shardBase = "[connection]\nrole = \"server\"\nsecurity = \"none\"\n[[listen]]\naddress = \"0.0.0.0:6511\"\n"

func TestTuningShards(t *testing.T) {
	cfg, err := Load(writeFile(t, "s.toml", shardBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tuning.Shards != 0 {
		t.Errorf("default shards %d, want 0 (GOMAXPROCS)", cfg.Tuning.Shards)
	}
	cfg, err = Load(writeFile(t, "s.toml", shardBase+"[tuning]\nshards = 4\n"))
	if err != nil || cfg.Tuning.Shards != 4 {
		t.Fatalf("shards = 4: %v, %+v", err, cfg)
	}
	assertFirstErrors(t, []struct{ text, want string }{
		{shardBase + "[tuning]\nshards = 300\n", "s.toml:7: tuning.shards: 300 out of range 0..256"},
		{shardBase + "[tuning]\nshards = -1\n", "s.toml:7: tuning.shards: -1 out of range 0..256"},
		{shardBase + "[tuning]\nshards = \"two\"\n", "s.toml:7: tuning.shards: wrong type: got string, want integer"},
		{shardBase + "[tuning]\nshard = 2\n", "s.toml:7: tuning.shard: unknown key"},
		{"[connection]\nrole = \"client\"\nsecurity = \"none\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n[tuning]\nshards = 2\n",
			"s.toml:8: tuning.shards: a client has one connection and one owner; shards is for a concentrator (role = \"server\")"},
	})
}

func TestTuningServerID(t *testing.T) {
	cfg, err := Load(writeFile(t, "s.toml", shardBase))
	if err != nil || cfg.Tuning.HasServerID {
		t.Fatalf("default server_id: %v, %+v, want none", err, cfg.Tuning)
	}
	cfg, err = Load(writeFile(t, "s.toml", shardBase+"[tuning]\nserver_id = 0\n"))
	if err != nil || !cfg.Tuning.HasServerID || cfg.Tuning.ServerID != 0 {
		t.Fatalf("server_id = 0: %v, %+v", err, cfg.Tuning)
	}
	assertFirstErrors(t, []struct{ text, want string }{
		{shardBase + "[tuning]\nserver_id = 16\n", "s.toml:7: tuning.server_id: 16 out of range 0..15"},
		{shardBase + "[tuning]\nserver_id = -1\n", "s.toml:7: tuning.server_id: -1 out of range 0..15"},
		{"[connection]\nrole = \"client\"\nsecurity = \"none\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n[tuning]\nserver_id = 1\n",
			"s.toml:8: tuning.server_id: server_id numbers a concentrator behind a load balancer (role = \"server\")"},
	})
}

func TestTuningJoinPortBase(t *testing.T) {
	const cpe = "[connection]\nrole = \"client\"\nsecurity = \"none\"\n[[path]]\nname = \"a\"\nremote = \"192.0.2.1\"\n[tuning]\n"
	cfg, err := Load(writeFile(t, "s.toml", cpe))
	if err != nil || cfg.Tuning.JoinPortBase != 0 {
		t.Fatalf("default join_port_base: %v, %+v, want 0", err, cfg.Tuning)
	}
	cfg, err = Load(writeFile(t, "s.toml", cpe+"join_port_base = 6600\n"))
	if err != nil || cfg.Tuning.JoinPortBase != 6600 {
		t.Fatalf("join_port_base = 6600: %v, %+v", err, cfg.Tuning)
	}
	assertFirstErrors(t, []struct{ text, want string }{
		{cpe + "join_port_base = 65530\n", "s.toml:8: tuning.join_port_base: 65530 out of range 1..65520"},
		{cpe + "join_port_base = 0\n", "s.toml:8: tuning.join_port_base: 0 out of range 1..65520"},
		{shardBase + "[tuning]\njoin_port_base = 6600\n",
			"s.toml:7: tuning.join_port_base: join_port_base tells a CPE (role = \"client\") where its joins go; a concentrator listens on its port with a [[listen]]"},
	})
}
