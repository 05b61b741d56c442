// SPDX-License-Identifier: MIT

package pathmgr

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp"
)

func clientConfig(paths []PathSpec) Config {
	return Config{Paths: paths, Settings: repairSettings(), OSEvents: true}
}

func newTwoPathWorld(t *testing.T, seed int64) *world {
	w := newWorld(t, worldConfig{seed: seed, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(twoPaths()),
		srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	return w
}

// The manager dials over the first path and joins the others.
func TestDialAndJoin(t *testing.T) {
	w := newTwoPathWorld(t, 1)
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	if n := w.count(0, EventDial); n != 1 {
		t.Errorf("%d dials", n)
	}
	if w.cliMgr.Conn().SchedulerName() != "rr" || w.cliMgr.Conn().ReordererName() != "equalize" {
		t.Errorf("connection runs %s/%s", w.cliMgr.Conn().SchedulerName(), w.cliMgr.Conn().ReordererName())
	}
	var names []string
	for _, ev := range w.events[0] {
		if ev.Kind == EventPathUp {
			names = append(names, ev.Path)
		}
	}
	if len(names) != 2 || names[0] != "dsl" || names[1] != "lte" {
		t.Errorf("path-up events name %v", names)
	}
	_ = mpdccp.Open
}

// A concentrator that crashes and comes back (losing every connection) is
// reached again by itself: the CPE's probes get a Reset, the manager
// redials, and traffic flows within a few seconds of its return. A longer
// outage closes the connection by its idle timeout; redials then follow
// the capped backoff.
func TestServerRestart(t *testing.T) {
	for _, down := range []time.Duration{5 * time.Second, 45 * time.Second} {
		t.Run(down.String(), func(t *testing.T) {
			w := newTwoPathWorld(t, 2)
			if w.until(5*time.Second, w.allOpen(2)) == 0 {
				t.Fatalf("paths not open:\n%s", w.eventLog(0))
			}
			first := w.cliMgr.Conn()
			w.sendTraffic(0, 200, 10*time.Minute)
			w.run(2 * time.Second)
			w.serverDown = true
			w.run(down)
			w.serverDown = false
			back := w.sim.Now()
			w.startServer()
			got := w.until(30*time.Second, func() bool {
				return w.firstDeliveryAfter(1, back) != 0
			})
			if got == 0 || got.Sub(back) > 5*time.Second {
				t.Fatalf("traffic flows %v after the concentrator is back, want within 5 s:\n%s", got.Sub(back), w.eventLog(0))
			}
			if w.until(5*time.Second, w.allOpen(2)) == 0 {
				t.Fatalf("not every path joined again:\n%s", w.eventLog(0))
			}
			if w.cliMgr.Conn() == first {
				t.Error("still the old connection")
			}
			t.Logf("traffic flows %v after the concentrator is back; %d dials", got.Sub(back), w.count(0, EventDial))
		})
	}
}

// A path dead at boot does not keep the tunnel down: the next attempt
// goes over the other path, and the dead one joins once it works.
func TestDeadFirstPathAtBoot(t *testing.T) {
	w := newWorld(t, worldConfig{seed: 3, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(twoPaths()),
		srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.ifs["dsl0"].blackhole = true
	w.start()
	open := w.until(10*time.Second, func() bool { c, _ := w.openPaths(); return c == 1 })
	if open == 0 || time.Duration(open) > 5*time.Second {
		t.Fatalf("no connection within 5 s with the first path dead:\n%s", w.eventLog(0))
	}
	w.run(60 * time.Second)
	// Join attempts on the dead path follow the capped backoff: about one
	// per (attempt timeout + max backoff), not thousands.
	joins := w.count(0, EventJoin)
	if joins < 10 || joins > 40 {
		t.Errorf("%d join attempts in 60 s", joins)
	}
	w.ifs["dsl0"].blackhole = false
	back := w.sim.Now()
	at := w.until(10*time.Second, w.allOpen(2))
	if at == 0 || at.Sub(back) > 5*time.Second {
		t.Fatalf("dead path joined %v after it works:\n%s", at.Sub(back), w.eventLog(0))
	}
}

// pathsCarrying reports which client paths sent data packets since the
// last call (by name).
type dataMeter struct {
	w    *world
	last map[int]uint64
}

func (d *dataMeter) carrying() map[string]bool {
	out := map[string]bool{}
	c := d.w.cliMgr.Conn()
	if c == nil {
		return out
	}
	if d.last == nil {
		d.last = map[int]uint64{}
	}
	for _, p := range c.Stats().Paths {
		if p.ID < 0 {
			continue
		}
		if p.DataOut > d.last[p.ID] {
			out[d.w.cliMgr.PathName(p.ID)] = true
		}
		d.last[p.ID] = p.DataOut
	}
	return out
}

// A silent blackhole of one of two paths loses no traffic: the path is
// suspected, what it held goes on the other path, and it carries data
// again soon after it returns.
func TestSilentBlackhole(t *testing.T) {
	w := newTwoPathWorld(t, 4)
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	tr := w.sendTraffic(0, 1000, 40*time.Second)
	w.run(10 * time.Second)
	hole := w.sim.Now()
	w.ifs["lte0"].blackhole = true
	w.run(20 * time.Second)
	w.ifs["lte0"].blackhole = false
	back := w.sim.Now()
	dm := &dataMeter{w: w}
	dm.carrying()
	inUse := w.until(5*time.Second, func() bool { return dm.carrying()["lte"] })
	w.run(15 * time.Second)
	lost := 0
	for i := range tr.next {
		if w.delivered[1][i] == 0 {
			lost++
		}
	}
	gap := w.gap(1, hole.Add(-time.Second), hole.Add(2*time.Second))
	t.Logf("%d of %d lost; largest gap around the blackhole %v; lte in use %v after its return", lost, tr.next, gap, inUse.Sub(back))
	if lost != 0 {
		t.Errorf("%d packets lost:\n%s", lost, w.eventLog(0))
	}
	if gap > 150*time.Millisecond {
		t.Errorf("delivery gap %v", gap)
	}
	if inUse == 0 || inUse.Sub(back) > time.Second {
		t.Errorf("lte in use %v after it returned:\n%s\nserver:\n%s", inUse.Sub(back), w.eventLog(0), w.eventLog(1))
	}
}

// A path that follows its device's address: when the address changes,
// the socket is bound to the new one, the path joins again, and the
// connection survives.
func TestAddressChange(t *testing.T) {
	paths := twoPaths()
	paths[1].Local = netip.AddrPort{} // lte follows lte0
	w := newWorld(t, worldConfig{seed: 5, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(paths),
		srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	conn := w.cliMgr.Conn()
	w.sendTraffic(0, 500, time.Minute)
	w.run(2 * time.Second)
	f := w.ifs["lte0"]
	old, fresh := f.addrs[0], netip.MustParseAddr("10.0.1.77")
	now := w.sim.Now()
	f.addrs = nil
	w.cliMgr.HandleAddr(now, AddrEvent{Link: "lte0", Addr: old})
	w.service(0)
	if c, _ := w.openPaths(); c != 1 {
		t.Errorf("%d open paths with lte's address gone", c)
	}
	w.run(500 * time.Millisecond)
	f.addrs = []netip.Addr{fresh}
	changed := w.sim.Now()
	w.cliMgr.HandleAddr(changed, AddrEvent{Link: "lte0", Addr: fresh, Added: true})
	w.service(0)
	at := w.until(5*time.Second, w.allOpen(2))
	if at == 0 || at.Sub(changed) > 2*time.Second {
		t.Fatalf("lte back %v after the new address:\n%s", at.Sub(changed), w.eventLog(0))
	}
	if w.cliMgr.Conn() != conn {
		t.Error("the connection did not survive the address change")
	}
	var bound bool
	for _, in := range conn.PathInfos(nil) {
		if in.ID == 1 && in.LocalAddr.Addr() == fresh && in.Open {
			bound = true
		}
	}
	if !bound {
		t.Errorf("lte not joined from %v: %+v", fresh, conn.PathInfos(nil))
	}
	// The concentrator dropped the old subflow at once (MP_REMOVEADDR).
	if _, s := w.openPaths(); s != 2 {
		t.Errorf("concentrator has %d healthy paths", s)
	}
	srvPaths := 0
	for _, in := range w.srv.Conns()[0].PathInfos(nil) {
		if !in.Closed {
			srvPaths++
		}
	}
	if srvPaths != 2 {
		t.Errorf("concentrator holds %d subflows, want 2:\n%s", srvPaths, w.eventLog(1))
	}
	if w.count(0, EventRebind) == 0 {
		t.Error("no rebind event")
	}
	t.Logf("lte back %v after its new address", at.Sub(changed))
}

// Link down moves the path's traffic to the other path at once; link up
// brings the path back.
func TestLinkDownUp(t *testing.T) {
	w := newTwoPathWorld(t, 6)
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	tr := w.sendTraffic(0, 1000, 30*time.Second)
	w.run(3 * time.Second)
	down := w.sim.Now()
	w.ifs["lte0"].up = false
	w.cliMgr.HandleLink(down, LinkEvent{Name: "lte0", Up: false})
	w.service(0)
	if w.count(0, EventPathSuspect) == 0 {
		t.Errorf("lte not suspected at link down:\n%s", w.eventLog(0))
	}
	w.run(5 * time.Second)
	w.ifs["lte0"].up = true
	up := w.sim.Now()
	w.cliMgr.HandleLink(up, LinkEvent{Name: "lte0", Up: true})
	w.service(0)
	dm := &dataMeter{w: w}
	dm.carrying()
	inUse := w.until(5*time.Second, func() bool { return dm.carrying()["lte"] })
	w.run(25 * time.Second)
	lost := 0
	for i := range tr.next {
		if w.delivered[1][i] == 0 {
			lost++
		}
	}
	t.Logf("lte in use %v after link up; %d of %d lost", inUse.Sub(up), lost, tr.next)
	if inUse == 0 || inUse.Sub(up) > 2*time.Second {
		t.Errorf("lte in use %v after link up:\n%s", inUse.Sub(up), w.eventLog(0))
	}
	if lost != 0 {
		t.Errorf("%d lost", lost)
	}
}

// After an outage long enough for both ends' probes to run past each
// other's sequence window, the path still comes back (by a new join).
func TestLongOutageRejoins(t *testing.T) {
	w := newTwoPathWorld(t, 7)
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	w.sendTraffic(0, 200, 10*time.Minute)
	w.run(2 * time.Second)
	w.ifs["lte0"].blackhole = true
	w.run(3 * time.Minute)
	w.ifs["lte0"].blackhole = false
	back := w.sim.Now()
	at := w.until(10*time.Second, w.allOpen(2))
	if at == 0 || at.Sub(back) > 3*time.Second {
		t.Fatalf("lte back %v after a 3-minute outage:\n%s", at.Sub(back), w.eventLog(0))
	}
	// The concentrator holds no stale subflow for long.
	w.run(2 * time.Minute)
	n := 0
	for _, in := range w.srv.Conns()[0].PathInfos(nil) {
		if !in.Closed {
			n++
		}
	}
	if n != 2 {
		t.Errorf("concentrator holds %d subflows:\n%s", n, w.eventLog(1))
	}
	t.Logf("lte back %v after a 3-minute outage", at.Sub(back))
}

// A concentrator advertises its second address; a CPE path whose
// configured remote stops answering joins the advertised one.
func TestFailoverToAdvertisedAddress(t *testing.T) {
	second := netip.MustParseAddr("10.9.1.1")
	w := newWorld(t, worldConfig{seed: 8, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(twoPaths()),
		srv:  []netip.Addr{netip.MustParseAddr("10.9.0.1"), second},
		srvM: Config{Settings: repairSettings(), Advertise: []netip.AddrPort{netip.AddrPortFrom(second, srvPort)}},
		eng:  repairEngine()})
	w.start()
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
	w.run(3 * time.Second)
	if w.count(0, EventPeerAddr) != 1 {
		t.Fatalf("no advertised address:\n%s", w.eventLog(0))
	}
	// The first address becomes unreachable: the concentrator's uplink
	// behind it died.
	w.srvAddr = []netip.Addr{second}
	lost := w.sim.Now()
	at := w.until(60*time.Second, func() bool {
		c := w.cliMgr.Conn()
		if c == nil || c.State() != mpdccp.Open {
			return false
		}
		n := 0
		for _, in := range c.PathInfos(nil) {
			if in.Open && !in.Failed && !in.Suspect && in.Remote.Addr() == second {
				n++
			}
		}
		return n == 2
	})
	// Suspected at once, given up after 2 s, joined in a round trip.
	if at == 0 || at.Sub(lost) > 8*time.Second {
		t.Fatalf("paths on the advertised address %v after the first became unreachable:\n%s", at.Sub(lost), w.eventLog(0))
	}
	t.Logf("both paths on the advertised address %v after the first became unreachable", at.Sub(lost))
}
