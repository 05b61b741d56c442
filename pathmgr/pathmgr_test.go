// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netsim"

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

// srvSubflows counts the subflows of the concentrator's first connection
// that are not closed.
func (w *world) srvSubflows() int {
	n := 0
	for _, in := range w.srv.Conns()[0].PathInfos(nil) {
		if !in.Closed {
			n++
		}
	}
	return n
}

// requireOpen waits up to 5 s for n open paths and ends the test
// without them.
func (w *world) requireOpen(n int) {
	w.t.Helper()
	if w.until(5*time.Second, w.allOpen(n)) == 0 {
		w.t.Fatalf("paths not open:\n%s", w.eventLog(0))
	}
}

// The manager dials over the first path and joins the others.
func TestDialAndJoin(t *testing.T) {
	w := newTwoPathWorld(t, 1)
	w.requireOpen(2)
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
	for _, tc := range []struct {
		secure bool
		down   time.Duration
	}{{false, 5 * time.Second}, {false, 45 * time.Second}, {true, 5 * time.Second}, {true, 45 * time.Second}} {
		name := "plain-" + tc.down.String()
		if tc.secure {
			// No Reset from the new concentrator is believed: the
			// client finds out with a fresh connection beside the
			// silent one (peercheck.go).
			name = "secure-" + tc.down.String()
		}
		down := tc.down
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, worldConfig{seed: 2, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(twoPaths()),
				srvM: Config{Settings: repairSettings()}, eng: repairEngine(), secure: tc.secure})
			w.start()
			w.requireOpen(2)
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
			if tc.secure && !strings.Contains(w.eventLog(0), "trying a fresh connection") {
				t.Errorf("no fresh connection beside the silent one:\n%s", w.eventLog(0))
			}
			if testing.Verbose() {
				t.Logf("%s", w.eventLog(0))
			}
			if n := len(w.cli.Conns()); n != 1 {
				t.Errorf("client holds %d connections", n)
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

// until runs in steps of window until exactly the paths in want carried
// data during a whole step, and returns when that step began (0: never
// within limit).
func (d *dataMeter) until(limit, window time.Duration, want ...string) mono.Time {
	d.carrying()
	for end := d.w.sim.Now().Add(limit); d.w.sim.Now() < end; {
		from := d.w.sim.Now()
		d.w.run(window)
		got := d.carrying()
		ok := len(got) == len(want)
		for _, name := range want {
			ok = ok && got[name]
		}
		if ok {
			return from
		}
	}
	return 0
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
	w.requireOpen(2)
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
	lost := tr.lost()
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
	w.requireOpen(2)
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
	srvPaths := w.srvSubflows()
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
	w.requireOpen(2)
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
	lost := tr.lost()
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
	w.requireOpen(2)
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
	n := w.srvSubflows()
	if n != 2 {
		t.Errorf("concentrator holds %d subflows:\n%s", n, w.eventLog(1))
	}
	t.Logf("lte back %v after a 3-minute outage", at.Sub(back))
}

// Every path silent for 20 s while the concentrator lives (the CPE's
// networks were all out): the tunnel carries traffic again within a few
// seconds, over the old connection or a fresh one the concentrator
// accepted in its place, never both; fresh connection attempts during the
// outage follow the backoff.
func TestEveryPathSilent(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("secure=%v", secure), func(t *testing.T) {
			w := newWorld(t, worldConfig{seed: 11, ifs: []string{"dsl0", "lte0"}, cli: clientConfig(twoPaths()),
				srvM: Config{Settings: repairSettings()}, eng: repairEngine(), secure: secure})
			w.start()
			w.requireOpen(2)
			w.sendTraffic(0, 200, 10*time.Minute)
			w.run(2 * time.Second)
			dials := w.count(0, EventDial)
			for _, f := range w.ifs {
				f.blackhole = true
			}
			w.run(20 * time.Second)
			tries := w.count(0, EventDial) - dials
			for _, f := range w.ifs {
				f.blackhole = false
			}
			back := w.sim.Now()
			got := w.until(10*time.Second, func() bool { return w.firstDeliveryAfter(1, back) != 0 })
			if got == 0 || got.Sub(back) > 3*time.Second {
				t.Fatalf("traffic flows %v after the outage, want within 3 s:\n%s", got.Sub(back), w.eventLog(0))
			}
			if w.until(5*time.Second, w.allOpen(2)) == 0 {
				t.Fatalf("not every path open again:\n%s", w.eventLog(0))
			}
			w.run(10 * time.Second)
			if n, m := len(w.cli.Conns()), len(w.srv.Conns()); n != 1 || m != 1 {
				t.Errorf("connections: client %d, concentrator %d", n, m)
			}
			// 17 s of silence (after the 3 s path timeout), attempts of 2 s
			// with backoff up to 2 s between them: at most about 6.
			if tries < 2 || tries > 8 {
				t.Errorf("%d fresh connection attempts during a 20 s outage", tries)
			}
			if testing.Verbose() {
				t.Logf("%s", w.eventLog(0))
			}
			t.Logf("traffic %v after the outage; %d fresh connection attempts during it", got.Sub(back), tries)
		})
	}
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
	w.requireOpen(2)
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

// Runtime changes on a concentrator reach the open connections and the
// ones opened afterwards, with loss repair intact: the reorderer keeps
// holding gaps for the repair.
func TestSettingsReachFutureConnections(t *testing.T) {
	lossy := netsim.LinkConfig{Rate: 20e6, Delay: 10 * time.Millisecond, Queue: 128 * 1024, Loss: 0.02}
	w := newWorld(t, worldConfig{seed: 9, ifs: []string{"dsl0", "lte0"}, link: lossy, cli: clientConfig(twoPaths()),
		srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	w.requireOpen(2)
	now := w.sim.Now()
	if err := w.srvMgr.Set(now, Request{Reorderer: "fixed", Hold: 150 * time.Millisecond, Scheduler: "srtt"}); err != nil {
		t.Fatal(err)
	}
	if err := w.srvMgr.Set(now, Request{Reorderer: "nosuch"}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown reorderer: %v", err)
	}
	if s := w.srvMgr.Settings(); s.Reorderer != "fixed" || s.Scheduler != "srtt" {
		t.Errorf("a refused change changed the settings: %+v", s)
	}
	old := w.srv.Conns()[0]
	if old.ReordererName() != "fixed" || old.SchedulerName() != "srtt" {
		t.Errorf("open connection runs %s/%s", old.SchedulerName(), old.ReordererName())
	}
	// The CPE reconnects: a new connection on the concentrator.
	w.cliMgr.connLost(w.sim.Now(), "test")
	w.service(0)
	if w.until(5*time.Second, func() bool {
		c, _ := w.openPaths()
		return c == 2 && len(w.srv.Conns()) == 1 && w.srv.Conns()[0] != old
	}) == 0 {
		t.Fatalf("no new connection:\n%s", w.eventLog(0))
	}
	nc := w.srv.Conns()[0]
	if nc.ReordererName() != "fixed" || nc.SchedulerName() != "srtt" {
		t.Errorf("new connection runs %s/%s, want srtt/fixed", nc.SchedulerName(), nc.ReordererName())
	}
	es := w.srv.Settings()
	if es.Reorder.HoldGaps || es.Reorder.NoEarlyLoss || es.Reorder.MaxHold != 150*time.Millisecond || !es.Retransmit {
		t.Errorf("engine defaults lost repair: %+v", es)
	}
	// Repair works on the new connection: every packet the lossy path
	// dropped arrives (server → CPE).
	tr := w.sendTraffic(1, 1000, 10*time.Second)
	w.run(12 * time.Second)
	lost := tr.lost()
	st := nc.Stats()
	rep := st.Repaired
	t.Logf("%d of %d lost, %d repaired; paths %v %v/%v %v %v/%v", lost, tr.next, rep, st.Paths[0].Remote, st.Paths[0].DataOut, st.Paths[0].CC.PacketsLost, st.Paths[1].Remote, st.Paths[1].DataOut, st.Paths[1].CC.PacketsLost)
	if rep < 50 || lost > int(rep)/10+5 {
		t.Errorf("%d of %d lost with %d repaired", lost, tr.next, rep)
	}
}

// A priority set at runtime sticks to the path across a reconnection.
func TestPrioSticks(t *testing.T) {
	w := newTwoPathWorld(t, 10)
	w.requireOpen(2)
	one := uint8(1)
	if err := w.cliMgr.Set(w.sim.Now(), Request{Path: "lte", Prio: &one}); err != nil {
		t.Fatal(err)
	}
	if err := w.cliMgr.Set(w.sim.Now(), Request{Path: "wifi", Prio: &one}); err == nil {
		t.Error("unknown path accepted")
	}
	w.run(time.Second)
	prio := func() (uint8, uint8) {
		var cli, srv uint8
		for _, in := range w.cliMgr.Conn().PathInfos(nil) {
			if in.ID == 1 {
				cli = in.Prio
			}
		}
		for _, in := range w.srv.Conns()[0].PathInfos(nil) {
			if in.Remote.Addr() == ifAddr(1) {
				srv = in.Prio
			}
		}
		return cli, srv
	}
	if c, s := prio(); c != 1 || s != 1 {
		t.Errorf("lte prio %d at the CPE, %d at the concentrator", c, s)
	}
	w.cliMgr.connLost(w.sim.Now(), "test")
	w.service(0)
	w.until(5*time.Second, w.allOpen(2))
	w.run(time.Second)
	if c, s := prio(); c != 1 || s != 1 {
		t.Errorf("after reconnecting: lte prio %d at the CPE, %d at the concentrator", c, s)
	}
}

// Active-backup sends on the preferred path only; when it fails the
// backup carries the traffic at once, and traffic returns to the
// preferred path after it has been healthy for the hold time.
func TestActiveBackup(t *testing.T) {
	set := repairSettings()
	set.Mode = ModeActiveBackup
	set.Switch.Hold = 2 * time.Second
	cfg := clientConfig(twoPaths())
	cfg.Settings = set
	w := newWorld(t, worldConfig{seed: 11, ifs: []string{"dsl0", "lte0"}, cli: cfg, srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	w.requireOpen(2)
	tr := w.sendTraffic(0, 1000, time.Minute)
	dm := &dataMeter{w: w}
	w.run(2 * time.Second)
	dm.carrying()
	w.run(2 * time.Second)
	if got := dm.carrying(); !got["dsl"] || got["lte"] {
		t.Errorf("carrying %v, want dsl only", got)
	}
	w.ifs["dsl0"].blackhole = true
	w.run(2 * time.Second)
	dm.carrying()
	w.run(2 * time.Second)
	if got := dm.carrying(); got["dsl"] || !got["lte"] {
		t.Errorf("with dsl dead carrying %v, want lte only:\n%s", got, w.eventLog(0))
	}
	w.ifs["dsl0"].blackhole = false
	back := w.sim.Now()
	w.run(time.Second)
	if got := dm.carrying(); !got["lte"] {
		t.Errorf("moved back before the hold time: carrying %v", got)
	}
	at := dm.until(10*time.Second, 250*time.Millisecond, "dsl")
	if at == 0 || at.Sub(back) > 5*time.Second {
		t.Errorf("back on dsl %v after it returned:\n%s", at.Sub(back), w.eventLog(0))
	}
	w.run(tr.stop.Sub(w.sim.Now()) + 2*time.Second)
	lost := tr.lost()
	if lost != 0 {
		var at []string
		for i := range tr.next {
			if w.delivered[1][i] == 0 && len(at) < 20 {
				at = append(at, fmt.Sprintf("%d@%.3fs", i, time.Duration(tr.sent[i]).Seconds()))
			}
		}
		t.Errorf("%d of %d lost: %v\n%s", lost, tr.next, at, w.eventLog(0))
	}
	if w.count(0, EventModeSwitch) < 3 {
		t.Errorf("mode switches:\n%s", w.eventLog(0))
	}
}

// Switch mode (WiFi/LTE): the preferred path's RTT rises above the high
// threshold, traffic moves to the other path; it moves back only after
// the RTT fell below the low threshold for the hold time.
func TestSwitchMode(t *testing.T) {
	set := repairSettings()
	set.Mode = ModeSwitch
	set.Switch = SwitchConfig{RTTHigh: 80 * time.Millisecond, RTTLow: 50 * time.Millisecond, LossHigh: 0.05, Hold: 2 * time.Second}
	paths := twoPaths()
	paths[0].Name, paths[1].Name = "wifi", "lte"
	paths[0].Prio, paths[1].Prio = 4, 3
	cfg := clientConfig(paths)
	cfg.Settings = set
	links := map[string]netsim.LinkConfig{
		"dsl0": {Rate: 10e6, Delay: 5 * time.Millisecond, Queue: 64 * 1024},
		"lte0": {Rate: 10e6, Delay: 25 * time.Millisecond, Queue: 64 * 1024},
	}
	w := newWorld(t, worldConfig{seed: 12, ifs: []string{"dsl0", "lte0"}, links: links, cli: cfg, srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	w.requireOpen(2)
	w.sendTraffic(0, 500, 2*time.Minute)
	dm := &dataMeter{w: w}
	w.run(3 * time.Second)
	dm.carrying()
	w.run(time.Second)
	if got := dm.carrying(); !got["wifi"] || got["lte"] {
		t.Errorf("carrying %v, want wifi only", got)
	}
	setDelay := func(name string, d time.Duration) {
		f := w.ifs[name]
		for _, l := range []*netsim.Link{f.upLink, f.downLink} {
			lc := l.Config()
			lc.Delay = d
			l.SetConfig(lc)
		}
	}
	setDelay("dsl0", 60*time.Millisecond) // wifi RTT 120 ms
	slow := w.sim.Now()
	at := dm.until(10*time.Second, 250*time.Millisecond, "lte")
	if at == 0 || at.Sub(slow) > 3*time.Second {
		t.Fatalf("on lte %v after wifi's RTT rose:\n%s", at.Sub(slow), w.eventLog(0))
	}
	// 70 ms RTT: below high, above low: stays on lte (hysteresis).
	setDelay("dsl0", 35*time.Millisecond)
	w.run(8 * time.Second)
	if g := dm.carrying(); !g["lte"] || g["wifi"] {
		t.Errorf("between the thresholds carrying %v, want lte", g)
	}
	setDelay("dsl0", 5*time.Millisecond)
	good := w.sim.Now()
	at = dm.until(15*time.Second, 250*time.Millisecond, "wifi")
	if at == 0 || at.Sub(good) < 2*time.Second || at.Sub(good) > 5*time.Second {
		t.Errorf("back on wifi %v after its RTT recovered (hold 2 s):\n%s", at.Sub(good), w.eventLog(0))
	}
	t.Logf("back on wifi %v after its RTT recovered", at.Sub(good))
}

// A path flapping every 2 s for 5 minutes: the connection survives, no
// state grows on either end, and the path is in use between flaps.
func TestFlappingPath(t *testing.T) {
	w := newTwoPathWorld(t, 13)
	w.requireOpen(2)
	conn := w.cliMgr.Conn()
	tr := w.sendTraffic(0, 500, 5*time.Minute+10*time.Second)
	dm := &dataMeter{w: w}
	usedWhileUp := 0
	flaps := 0
	maxCli, maxSrv, maxID := 0, 0, 0
	for end := w.sim.Now().Add(5 * time.Minute); w.sim.Now() < end; flaps++ {
		w.run(2 * time.Second)
		if dm.carrying()["lte"] {
			usedWhileUp++
		}
		up := flaps%2 == 1
		w.ifs["lte0"].up = up
		w.cliMgr.HandleLink(w.sim.Now(), LinkEvent{Name: "lte0", Up: up})
		w.service(0)
		maxCli = max(maxCli, len(w.cliMgr.Conn().PathInfos(nil)))
		if cs := w.srv.Conns(); len(cs) == 1 {
			for _, in := range cs[0].PathInfos(nil) {
				maxID = max(maxID, in.ID)
			}
			maxSrv = max(maxSrv, len(cs[0].PathInfos(nil)))
		}
	}
	w.ifs["lte0"].up = true
	w.cliMgr.HandleLink(w.sim.Now(), LinkEvent{Name: "lte0", Up: true})
	w.service(0)
	w.run(15 * time.Second)
	lost := tr.lost()
	t.Logf("%d flaps: lte used in %d of %d up periods; at most %d/%d subflows (CPE/concentrator), concentrator path id ≤ %d; %d of %d lost",
		flaps, usedWhileUp, flaps/2, maxCli, maxSrv, maxID, lost, tr.next)
	if w.cliMgr.Conn() != conn {
		t.Error("the connection did not survive")
	}
	if maxCli > 3 || maxSrv > 3 || maxID > 4 {
		t.Errorf("state grew: %d subflows at the CPE, %d at the concentrator, path id %d", maxCli, maxSrv, maxID)
	}
	if usedWhileUp < flaps/2-2 {
		t.Errorf("lte used in only %d of %d up periods:\n%s", usedWhileUp, flaps/2, w.eventLog(0))
	}
	if c, s := w.openPaths(); c != 2 || s != 2 {
		t.Errorf("after flapping %d/%d paths open", c, s)
	}
	if lost != 0 {
		t.Errorf("%d lost", lost)
	}
}

// A reload adds, removes and changes paths while the connection runs.
func TestReconfigure(t *testing.T) {
	w := newWorld(t, worldConfig{seed: 14, ifs: []string{"dsl0", "lte0", "wifi0"}, cli: clientConfig(twoPaths()),
		srvM: Config{Settings: repairSettings()}, eng: repairEngine()})
	w.start()
	w.requireOpen(2)
	conn := w.cliMgr.Conn()
	specs := twoPaths()
	wifi := PathSpec{Name: "wifi", Device: "wifi0", Remote: specs[0].Remote, Prio: 3, Weight: 1}
	bad := append(append([]PathSpec{}, specs...), PathSpec{Name: "dsl", Remote: specs[0].Remote})
	if err := w.cliMgr.Reconfigure(w.sim.Now(), bad); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate path accepted: %v", err)
	}
	// lte goes, wifi comes (it follows wifi0's address), dsl gets prio 2.
	specs[0].Prio = 2
	if err := w.cliMgr.Reconfigure(w.sim.Now(), []PathSpec{specs[0], wifi}); err != nil {
		t.Fatal(err)
	}
	w.service(0)
	if w.until(5*time.Second, w.allOpen(2)) == 0 {
		t.Fatalf("after the reload:\n%s", w.eventLog(0))
	}
	w.run(time.Second)
	ids := map[string]int{}
	for _, ps := range w.cliMgr.Paths() {
		ids[ps.Name] = ps.ID
	}
	if len(ids) != 2 || ids["dsl"] != 0 || ids["wifi"] != 1 {
		t.Errorf("paths %v", ids)
	}
	for _, in := range conn.PathInfos(nil) {
		if in.Closed {
			continue
		}
		if in.ID == 0 && in.Prio != 2 {
			t.Errorf("dsl prio %d", in.Prio)
		}
		if in.ID == 1 && in.LocalAddr.Addr() != ifAddr(2) {
			t.Errorf("path 1 from %v, want wifi's %v", in.LocalAddr, ifAddr(2))
		}
	}
	if w.cliMgr.Conn() != conn {
		t.Error("the connection did not survive the reload")
	}
	n := w.srvSubflows()
	if n != 2 {
		t.Errorf("concentrator holds %d subflows:\n%s", n, w.eventLog(1))
	}
}

// The data path asks the manager for its deadline after every batch: it
// must not allocate.
func TestDeadlineDoesNotAllocate(t *testing.T) {
	w := newTwoPathWorld(t, 15)
	w.requireOpen(2)
	w.cliMgr.Deadline()
	if n := testing.AllocsPerRun(100, func() { w.cliMgr.Deadline(); w.srvMgr.Deadline() }); n != 0 {
		t.Errorf("%.1f allocations per Deadline", n)
	}
}

// A stopped manager (the daemon is closing) neither redials nor joins.
func TestStopEndsRedial(t *testing.T) {
	w := newTwoPathWorld(t, 16)
	w.requireOpen(2)
	now := w.sim.Now()
	w.cliMgr.Stop(now)
	w.cliMgr.Conn().Close(now)
	w.service(0)
	w.run(30 * time.Second)
	if w.count(0, EventDial) != 1 || w.cliMgr.Conn() != nil || len(w.cli.Conns()) != 0 {
		t.Errorf("after Stop: %d dials, connection %v:\n%s", w.count(0, EventDial), w.cliMgr.Conn(), w.eventLog(0))
	}
}
