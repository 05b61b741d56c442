// SPDX-License-Identifier: MIT

package mpdccp

import (
	"testing"
	"time"
)

// A path dropped and joined again keeps its id; after many rounds neither
// end holds more subflows or larger ids than it needs, and data still
// flows on both paths.
func TestDropAndRejoinKeepsConnectionSmall(t *testing.T) {
	// rr: the default flow scheduler keeps this one "flow" on one path.
	h, c := openHarness(t, 21, 2, harnessConfig{cli: Config{Scheduler: "rr"}, srv: Config{Scheduler: "rr"}})
	pcs := h.pathConfigs()
	for round := range 50 {
		if err := c.DropPath(h.sim.Now(), 1); err != nil {
			t.Fatal(err)
		}
		h.service(sideClient)
		if err := c.JoinPath(h.sim.Now(), pcs[1]); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		h.service(sideClient)
		srv := h.serverConn()
		if !h.runUntil(5*time.Second, func() bool {
			srv.ForgetClosedPaths()
			return h.openPaths(c) == 2 && h.openPaths(srv) == 2
		}) {
			t.Fatalf("round %d: paths not open again\n%s", round, h.dumpEvents())
		}
	}
	c.ForgetClosedPaths()
	srv := h.serverConn()
	srv.ForgetClosedPaths()
	if len(c.subflows) != 2 || len(srv.subflows) != 2 {
		t.Errorf("after 50 rejoins: client %d subflows, server %d", len(c.subflows), len(srv.subflows))
	}
	for _, p := range srv.PathInfos(nil) {
		if p.ID > 3 {
			t.Errorf("server path id %d after 50 rejoins", p.ID)
		}
	}
	ids := map[int]bool{}
	for _, p := range c.PathInfos(nil) {
		ids[p.ID] = true
		if !p.Open {
			t.Errorf("client path %d not open", p.ID)
		}
	}
	if !ids[0] || !ids[1] {
		t.Errorf("client path ids %v, want 0 and 1", ids)
	}
	if n := h.countEvents(sideClient, EventJoinFailed); n != 0 {
		t.Errorf("%d joins failed", n)
	}
	// Both paths carry data.
	snk := h.serverSink()
	src := &source{h: h, c: c, side: sideClient, total: 2000, size: 500, period: time.Millisecond, perTick: 2}
	src.start()
	h.runUntil(10*time.Second, func() bool { return snk.count == 2000 })
	for _, p := range c.Stats().Paths {
		if p.DataOut < 100 {
			t.Errorf("path %d sent %d data packets", p.ID, p.DataOut)
		}
	}
}
