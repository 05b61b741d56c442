// SPDX-License-Identifier: MIT

// Package topo builds the lab's testbed: a client and a server namespace
// joined by N emulated layer-2 paths through a middle namespace:
//
//	cli:pI ── emu:cI [emu.Link] emu:sI ── srv:pI      (10.100.I.1 ⇄ 10.100.I.2)
//
// The middle namespace has no addresses and forwarding off, so the emulator is
// the only thing that moves frames between the two sides.
package topo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/emu"
)

// PathSpec is one path: Up is client→server, Down server→client.
type PathSpec struct {
	Name     string
	Up, Down emu.Config
}

// Path is a built path.
type Path struct {
	Spec             PathSpec
	Index            int
	Dev              string // device name, the same in cli and srv
	CliAddr, SrvAddr netip.Addr
	Link             *emu.Link // AB = up, BA = down
}

// Testbed is the set of namespaces and links of one run.
type Testbed struct {
	Cli, Srv, Emu *netns.NS
	Paths         []*Path
	Start         mono.Time
}

// Options tune Build.
type Options struct {
	Seed uint64
	// Log, if set, returns per-direction packet log writers for path i.
	Log func(i int, dir emu.Dir) io.Writer
}

// Addr returns the address of side (1 client, 2 server) on path i.
func Addr(i, side int) netip.Addr { return netip.AddrFrom4([4]byte{10, 100, byte(i), byte(side)}) }

func mac(i, side int) string { return fmt.Sprintf("02:6d:70:%02x:%02x:%02x", i, side, 0) }

// Build creates the namespaces, veths, addresses, routes and emulators.
// On error everything already built is torn down.
func Build(ctx context.Context, specs []PathSpec, opt Options) (tb *Testbed, err error) {
	if len(specs) == 0 || len(specs) > 200 {
		return nil, fmt.Errorf("topo: %d paths: want 1..200", len(specs))
	}
	tb = &Testbed{}
	defer func() {
		if err != nil {
			tb.Close()
			tb = nil
		}
	}()
	for _, role := range []struct {
		p    **netns.NS
		name string
	}{{&tb.Cli, "cli"}, {&tb.Emu, "emu"}, {&tb.Srv, "srv"}} {
		ns, err := netns.Add(ctx, netns.UniqueName(role.name))
		if err != nil {
			return tb, err
		}
		*role.p = ns
	}
	for _, ns := range []*netns.NS{tb.Cli, tb.Emu, tb.Srv} {
		for _, kv := range [][2]string{
			{"net.ipv6.conf.all.disable_ipv6", "1"}, {"net.ipv6.conf.default.disable_ipv6", "1"},
			{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"},
		} {
			if err := ns.Sysctl(ctx, kv[0], kv[1]); err != nil {
				return tb, err
			}
		}
	}
	if err := tb.Emu.Sysctl(ctx, "net.ipv4.ip_forward", "0"); err != nil {
		return tb, err
	}
	for i, s := range specs {
		p := &Path{Spec: s, Index: i, Dev: "p" + strconv.Itoa(i), CliAddr: Addr(i, 1), SrvAddr: Addr(i, 2)}
		cdev, sdev := "c"+strconv.Itoa(i), "s"+strconv.Itoa(i)
		if err := netns.AddVeth(ctx, tb.Cli, p.Dev, tb.Emu, cdev); err != nil {
			return tb, err
		}
		if err := netns.AddVeth(ctx, tb.Srv, p.Dev, tb.Emu, sdev); err != nil {
			return tb, err
		}
		for _, side := range []struct {
			ns         *netns.NS
			self, peer int
			addr, nb   netip.Addr
		}{{tb.Cli, 1, 2, p.CliAddr, p.SrvAddr}, {tb.Srv, 2, 1, p.SrvAddr, p.CliAddr}} {
			cmds := [][]string{
				{"link", "set", p.Dev, "address", mac(i, side.self)},
				{"addr", "add", side.addr.String() + "/24", "dev", p.Dev},
				// Static neighbours: no ARP round trip at the start of a run.
				{"neigh", "replace", side.nb.String(), "lladdr", mac(i, side.peer), "dev", p.Dev, "nud", "permanent"},
			}
			for _, c := range cmds {
				if err := side.ns.IP(ctx, c...); err != nil {
					return tb, err
				}
			}
		}
		// Source routing on the client: traffic from path i's address
		// leaves on path i whatever its destination (MPTCP subflows
		// towards the server's first address). The server answers by
		// destination, which is already per path.
		table := strconv.Itoa(100 + i)
		if err := tb.Cli.IP(ctx, "rule", "add", "from", p.CliAddr.String(), "table", table); err != nil {
			return tb, err
		}
		if err := tb.Cli.IP(ctx, "route", "add", "default", "via", p.SrvAddr.String(), "dev", p.Dev, "table", table); err != nil {
			return tb, err
		}
		// When the device goes down its route vanishes; without this the
		// lookup would fall through to the main table and leave by
		// another path instead of failing.
		if err := tb.Cli.IP(ctx, "route", "add", "unreachable", "default", "metric", "4096", "table", table); err != nil {
			return tb, err
		}
		tb.Paths = append(tb.Paths, p)
	}
	tb.Start = mono.Now()
	for _, p := range tb.Paths {
		eo := emu.Options{Start: tb.Start, Seed: opt.Seed + uint64(p.Index)*2}
		if opt.Log != nil {
			eo.Log = [2]io.Writer{opt.Log(p.Index, emu.AB), opt.Log(p.Index, emu.BA)}
		}
		l, err := emu.Start(tb.Emu, "c"+strconv.Itoa(p.Index), "s"+strconv.Itoa(p.Index), p.Spec.Up, p.Spec.Down, eo)
		if err != nil {
			return tb, fmt.Errorf("path %s: %w", p.Spec.Name, err)
		}
		p.Link = l
	}
	return tb, nil
}

// Close stops the emulators and deletes the namespaces (and with them every
// veth and the processes inside). Safe to call more than once.
func (tb *Testbed) Close() error {
	var errs []error
	for _, p := range tb.Paths {
		if p.Link != nil {
			errs = append(errs, p.Link.Close())
		}
	}
	for _, ns := range []*netns.NS{tb.Cli, tb.Srv, tb.Emu} {
		if ns != nil {
			errs = append(errs, ns.Delete())
		}
	}
	return errors.Join(errs...)
}

// SetCarrier takes path i's client-side device down or up (carrier loss
// that the sender notices at once, unlike a blackhole).
func (tb *Testbed) SetCarrier(ctx context.Context, i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	p := tb.Paths[i]
	if err := tb.Cli.IP(ctx, "link", "set", p.Dev, state); err != nil {
		return err
	}
	if up {
		// Routes through the device vanished with it.
		table := strconv.Itoa(100 + i)
		_ = tb.Cli.IP(ctx, "route", "replace", "default", "via", p.SrvAddr.String(), "dev", p.Dev, "table", table)
		_ = tb.Cli.IP(ctx, "neigh", "replace", p.SrvAddr.String(), "lladdr", mac(i, 2), "dev", p.Dev, "nud", "permanent")
	}
	return nil
}
