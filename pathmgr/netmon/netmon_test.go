// SPDX-License-Identifier: MIT

package netmon

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/pathmgr"
)

// collector gathers events from the watcher's goroutine.
type collector struct{ ch chan any }

func (c *collector) wait(t *testing.T, want func(any) bool, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-c.ch:
			if want(ev) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within 5 s", what)
		}
	}
}

// In a fresh namespace: the current state first, then link down/up,
// address removal and addition, and route changes, as the path manager's
// event values.
func TestWatchNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (CI runs as root)")
	}
	ctx := context.Background()
	ns, err := netns.Add(ctx, netns.UniqueName("netmon"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Delete()
	// No dummy driver here: a veth pair, both ends up (carrier).
	for _, c := range [][]string{{"link", "add", "wwan0", "type", "veth", "peer", "name", "wwan0p"},
		{"link", "set", "wwan0p", "up"}, {"link", "set", "wwan0", "up"},
		{"addr", "add", "100.64.0.2/24", "dev", "wwan0"}} {
		if err := ns.IP(ctx, c...); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := Snapshot(Options{NetNS: ns.Path()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(snap, any(pathmgr.LinkEvent{Name: "wwan0", Up: true})) ||
		!slices.Contains(snap, any(pathmgr.AddrEvent{Link: "wwan0", Addr: netip.MustParseAddr("100.64.0.2"), Added: true})) {
		t.Fatalf("snapshot %v", snap)
	}
	c := &collector{ch: make(chan any, 256)}
	w, err := Watch(Options{NetNS: ns.Path(), OnError: func(err error) { t.Log(err) }}, func(ev any) { c.ch <- ev })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c.wait(t, func(ev any) bool { return ev == any(pathmgr.LinkEvent{Name: "wwan0", Up: true}) }, "initial link")

	steps := []struct {
		cmd  []string
		want any
	}{
		{[]string{"link", "set", "wwan0", "down"}, pathmgr.LinkEvent{Name: "wwan0", Up: false}},
		{[]string{"link", "set", "wwan0", "up"}, pathmgr.LinkEvent{Name: "wwan0", Up: true}},
		// Carrier loss: the other end goes down.
		{[]string{"link", "set", "wwan0p", "down"}, pathmgr.LinkEvent{Name: "wwan0", Up: false}},
		{[]string{"link", "set", "wwan0p", "up"}, pathmgr.LinkEvent{Name: "wwan0", Up: true}},
		{[]string{"addr", "del", "100.64.0.2/24", "dev", "wwan0"}, pathmgr.AddrEvent{Link: "wwan0", Addr: netip.MustParseAddr("100.64.0.2")}},
		{[]string{"addr", "add", "100.64.7.9/24", "dev", "wwan0"}, pathmgr.AddrEvent{Link: "wwan0", Addr: netip.MustParseAddr("100.64.7.9"), Added: true}},
		{[]string{"route", "add", "198.51.100.0/24", "dev", "wwan0"}, pathmgr.RouteEvent{Link: "wwan0", Dst: netip.MustParsePrefix("198.51.100.0/24"), Added: true}},
		{[]string{"route", "del", "198.51.100.0/24", "dev", "wwan0"}, pathmgr.RouteEvent{Link: "wwan0", Dst: netip.MustParsePrefix("198.51.100.0/24")}},
		{[]string{"link", "del", "wwan0"}, pathmgr.LinkEvent{Name: "wwan0", Up: false}},
	}
	for _, s := range steps {
		if err := ns.IP(ctx, s.cmd...); err != nil {
			t.Fatal(err)
		}
		c.wait(t, func(ev any) bool { return ev == s.want }, "event after ip "+s.cmd[0]+" "+s.cmd[1])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
