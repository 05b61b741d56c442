// SPDX-License-Identifier: MIT

package scenario_test

import (
	"os"
	"testing"

	"github.com/mptun/mptun/lab/scenario"
)

func TestLatencyTablesParseErrors(t *testing.T) {
	base := "name = \"x\"\nduration = \"5s\"\n[[path]]\nname = \"a\"\nrate = \"10mbit\"\n"
	assertParseErrors(t, []struct{ text, want string }{
		{base + "[traffic.udp]\n", "exactly one of rate and load"},
		{base + "[traffic.udp]\nrate = \"5mbit\"\nload = 0.5\n", "exactly one of rate and load"},
		{base + "[traffic.udp]\nload = 3\n", "traffic.udp.load"},
		{base + "[traffic.udp]\nload = 0.8\nsize = 9000\n", "traffic.udp.size"},
		{base + "[traffic.udp]\nload = 0.8\ndirection = \"sideways\"\n", "traffic.udp.direction"},
		{base + "[traffic.udp]\nload = 0.8\nburst = 3\n", "unknown keys: traffic.udp.burst"},
		{"name = \"x\"\nduration = \"5s\"\n[[path]]\nname = \"a\"\n[traffic.udp]\nload = 0.8\n", "no rate"},
		{base + "[traffic.idle]\ntransfers = [\"0\"]\n", "traffic.idle.transfers"},
		{base + "[traffic.idle]\nping_interval = \"10us\"\n", "ping_interval"},
		{base + "[traffic.idle]\ncc = \"vegas\"\n", "traffic.idle.cc"},
		{base + "[traffic.idle]\npings = -1\n", "traffic.idle"},
		{base + "[traffic.transfers]\nrepeat = 3\n", "traffic.transfers.sizes: missing"},
		{base + "[traffic.transfers]\nsizes = [\"1GB\"]\n", "traffic.transfers.sizes"},
		{base + "[traffic.web]\nrate = 5\ncapture = \"yes\"\n", "capture"},
	})
	ok := base + "[traffic.udp]\nload = 0.8\nsize = 1200\n[traffic.idle]\npings = 5\ntransfers = [\"10KB\", \"1MB\"]\nrepeat = 2\n" +
		"[traffic.transfers]\nsizes = [\"10KB\"]\nstart = \"1s\"\n[traffic.web]\nrate = 5\ncapture = true\n"
	if _, err := scenario.Parse([]byte(ok)); err != nil {
		t.Fatal(err)
	}
}

var latencyScenario = twoPathScenario("latency", "3s", `["none", "mptcp"]`, `[traffic.bulk]
cc = "cubic"
[traffic.idle]
pings = 5
ping_interval = "10ms"
transfers = ["10KB"]
repeat = 2
`)

func TestIdlePhaseAndMPTCPCheck(t *testing.T) {
	needRoot(t)
	res := runScenario(t, latencyScenario, t.TempDir())
	for _, r := range res.Runs {
		if r.Error != "" || r.Idle == nil || len(r.Idle.Errors) > 0 {
			t.Fatalf("%s: %s %+v", r.Peer, r.Error, r.Idle)
		}
		i := r.Idle
		if len(i.PathPing) != 2 || i.PathPing[0].RTT.P50 < 10 || i.PathPing[0].RTT.P50 > 12.5 ||
			i.PathPing[1].RTT.P50 < 40 || i.PathPing[1].RTT.P50 > 42.5 {
			t.Errorf("%s: path pings %+v", r.Peer, i.PathPing)
		}
		if i.FastestPathRTT() != i.PathPing[0].RTT.P50 {
			t.Errorf("%s: fastest path rtt %v", r.Peer, i.FastestPathRTT())
		}
		if s := i.Transfer.Size(10000); s == nil || s.Done != 2 {
			t.Errorf("%s: transfers %+v", r.Peer, i.Transfer)
		}
		switch r.Peer {
		case "none": // the best single path is b, 40 ms
			if i.Ping == nil || i.Ping.P50 < 40 || i.Ping.P50 > 42.5 {
				t.Errorf("none: ping %+v", i.Ping)
			}
			if r.MPTCP != nil {
				t.Error("none: an MPTCP check")
			}
		case "mptcp":
			if i.Ping != nil || i.PingNote == "" {
				t.Errorf("mptcp: ICMP through MPTCP? %+v", i)
			}
			if r.MPTCP == nil || !r.MPTCP.Verified || r.MPTCP.Subflows != 2 || len(r.MPTCP.Share) != 2 {
				t.Errorf("mptcp check %+v", r.MPTCP)
			} else {
				t.Logf("mptcp: %s, shares %v, counters %v", r.MPTCP.Detail, r.MPTCP.Share, r.MPTCP.Counters)
			}
			if r.MPTCP != nil && r.MPTCP.Counters["MPJoinSynAckRx"] == 0 {
				t.Errorf("no MP_JOIN SYN-ACK counted on the client: %v", r.MPTCP.Counters)
			}
		}
	}
	assertNothingLeft(t, os.Getpid())
}

var udpWebScenario = twoPathScenario("udp-web", "4s", `["none"]`, `[traffic.udp]
load = 0.4
[traffic.web]
rate = 20
capture = true
[traffic.transfers]
sizes = ["10KB"]
start = "1s"
gap = "50ms"
`)

func TestUDPWebDelayAndTransfers(t *testing.T) {
	needRoot(t)
	out := t.TempDir()
	res := runScenario(t, udpWebScenario, out)
	r := res.Runs[0]
	if r.Error != "" || r.UDP == nil || r.WebOWD == nil || r.Transfers == nil {
		t.Fatalf("%+v", r)
	}
	// 40 % of 30 Mbit/s = 12 Mbit/s on the 20 Mbit/s best path.
	if r.UDP.Delivered < 0.9 || r.UDP.OOOFraction != 0 || r.UDP.OfferedMbps < 11 || r.UDP.OfferedMbps > 13 {
		t.Errorf("udp %+v", r.UDP)
	}
	if r.GoodputMbps != r.UDP.GoodputMbps || r.CapacitySumMbps < 29 || r.CapacitySumMbps > 31 {
		t.Errorf("goodput %.2f (udp %.2f), capacity %.2f", r.GoodputMbps, r.UDP.GoodputMbps, r.CapacitySumMbps)
	}
	// Path b: 20 ms one way plus serialization and the UDP flow's queue.
	w := r.WebOWD
	t.Logf("web owd: %d samples over %d flows, %+v, unmatched %d; %s", w.Samples, w.Flows, w.OWDms, w.Unmatched, w.Devices)
	if w.Err != "" || w.Samples < 50 || w.Flows < 20 || w.OWDms.P50 < 20 || w.OWDms.P50 > 35 || w.Unmatched > w.Samples/100 {
		t.Errorf("web owd %+v", w)
	}
	if s := r.Transfers.Size(10000); s == nil || s.Done < 5 {
		t.Errorf("transfers %+v", r.Transfers)
	}
	if _, err := os.Stat(out + "/web_owd_ccdf.png"); err != nil {
		t.Error(err)
	}
	assertNothingLeft(t, os.Getpid())
}
