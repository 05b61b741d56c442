// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mptun/mptun/lab/topo"
)

// Events for the self-healing scenarios: a client address that changes,
// a tunnel server that is restarted, and events that repeat (a flapping
// path).

// ServerRestarter is implemented by tunnel peers whose server can be
// restarted mid-run (mptun).
type ServerRestarter interface {
	// RestartServer stops the server process with sig, waits down, and
	// starts it again with the same config.
	RestartServer(ctx context.Context, sig syscall.Signal, down time.Duration) error
}

// TunnelController is implemented by tunnel peers that can be changed
// while they run (mptun): side is "client", "server" or "both"/"".
type TunnelController interface {
	// Set is a runtime change over the control socket (`mptun set`).
	Set(ctx context.Context, side string, params map[string]string) error
	// Reload edits the config file ("table.key" = value) and sends SIGHUP.
	Reload(ctx context.Context, side string, params map[string]string) error
	// RestartClient restarts the client daemon: the server sees a new
	// connection, opened after whatever was changed.
	RestartClient(ctx context.Context, sig syscall.Signal, down time.Duration) error
}

// expandEvents turns repeating events (every, until) into their
// occurrences up to end, in time order.
func expandEvents(evs []EventConf, end Duration) []EventConf {
	var out []EventConf
	for _, e := range evs {
		if e.Every <= 0 {
			out = append(out, e)
			continue
		}
		until := e.Until
		if until <= 0 || until > end {
			until = end
		}
		for at := e.At; at < until; at += e.Every {
			o := e
			o.At, o.Every, o.Until = at, 0, 0
			out = append(out, o)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// readdressCount numbers the addresses readdress hands out per path.
var readdressCount = map[string]int{}

// readdress replaces the client's address on path i by another one of the
// same subnet (or e.Address), optionally leaving the path without an
// address for e.Down, and keeps the lab's routing working: the source
// rule of the path and the server's neighbour entry follow the address.
func readdress(ctx context.Context, tb *topo.Testbed, i int, e EventConf) error {
	p := tb.Paths[i]
	cur, err := clientAddr(ctx, tb, i)
	if err != nil {
		return err
	}
	next := netip.Addr{}
	if e.Address != "" {
		next = netip.MustParseAddr(e.Address)
	} else {
		key := tb.Cli.Name + "/" + p.Dev
		readdressCount[key]++
		next = netip.AddrFrom4([4]byte{10, 100, byte(i), byte(100 + readdressCount[key])})
		if next == cur {
			next = netip.AddrFrom4([4]byte{10, 100, byte(i), byte(200 + readdressCount[key])})
		}
	}
	if err := tb.Cli.IP(ctx, "addr", "del", cur.String()+"/24", "dev", p.Dev); err != nil {
		return err
	}
	if e.Down > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.Down.D()):
		}
	}
	table := strconv.Itoa(100 + i)
	for _, c := range [][]string{
		{"addr", "add", next.String() + "/24", "dev", p.Dev},
		{"rule", "add", "from", next.String(), "table", table},
		{"route", "replace", "default", "via", p.SrvAddr.String(), "dev", p.Dev, "table", table},
	} {
		if err := tb.Cli.IP(ctx, c...); err != nil {
			return err
		}
	}
	mac, err := tb.Cli.Output(ctx, "cat", "/sys/class/net/"+p.Dev+"/address")
	if err != nil {
		return err
	}
	return tb.Srv.IP(ctx, "neigh", "replace", next.String(), "lladdr", strings.TrimSpace(string(mac)), "dev", p.Dev, "nud", "permanent")
}

// clientAddr is the client's current IPv4 address on path i.
func clientAddr(ctx context.Context, tb *topo.Testbed, i int) (netip.Addr, error) {
	out, err := tb.Cli.Output(ctx, "ip", "-4", "-o", "addr", "show", "dev", tb.Paths[i].Dev)
	if err != nil {
		return netip.Addr{}, err
	}
	f := strings.Fields(string(out))
	for k := 0; k+1 < len(f); k++ {
		if f[k] == "inet" {
			if pf, err := netip.ParsePrefix(f[k+1]); err == nil {
				return pf.Addr(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("path %s: no IPv4 address on %s", tb.Paths[i].Spec.Name, tb.Paths[i].Dev)
}

// tunnelEvent carries out tunnel_set, tunnel_reload and restart_client.
func tunnelEvent(ctx context.Context, pr PeerRunner, e EventConf) error {
	tc, ok := pr.(TunnelController)
	if !ok {
		return fmt.Errorf("%s: this peer cannot be changed while it runs", e.Action)
	}
	switch e.Action {
	case "tunnel_set":
		return tc.Set(ctx, e.Side, e.Params)
	case "tunnel_reload":
		return tc.Reload(ctx, e.Side, e.Params)
	}
	sig := syscall.SIGTERM
	if e.Signal == "kill" {
		sig = syscall.SIGKILL
	}
	return tc.RestartClient(ctx, sig, e.Down.D())
}

func restartServer(ctx context.Context, pr PeerRunner, e EventConf) error {
	rs, ok := pr.(ServerRestarter)
	if !ok {
		return fmt.Errorf("restart_server: this peer has no server to restart")
	}
	sig := syscall.SIGKILL
	if e.Signal == "term" {
		sig = syscall.SIGTERM
	}
	return rs.RestartServer(ctx, sig, e.Down.D())
}
