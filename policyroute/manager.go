// SPDX-License-Identifier: MIT

package policyroute

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Options tune a Manager.
type Options struct {
	// NetNS is the path of the network namespace to manage (e.g.
	// /run/netns/NAME); empty: the caller's.
	NetNS string
	Log   *slog.Logger
	// Resync is the period of a full check besides the change events
	// (default 30 s): a missed event or an operator's `ip rule flush`
	// is repaired within it.
	Resync time.Duration
}

// settle is how long a burst of netlink changes (an interface coming up
// adds its address and routes one by one) is collected before a sync.
const settle = 100 * time.Millisecond

// Manager keeps the paths' rules and routes installed.
type Manager struct {
	paths  []Path
	tables map[int]bool
	log    *slog.Logger
	resync time.Duration

	h  *netlink.Handle
	ns *netns.NsHandle

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex // serialises Sync and Close
	closed bool
	notes  []string // last logged
}

// Start installs the paths' rules and routes (removing stale ones a
// previous run left in the same tables) and keeps them in step with the
// interfaces until Close. An error means netlink itself failed (e.g. no
// CAP_NET_ADMIN); a path whose interface is missing is only logged.
func Start(paths []Path, opt Options) (*Manager, error) {
	m := &Manager{paths: paths, tables: map[int]bool{}, log: opt.Log, resync: opt.Resync,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.resync <= 0 {
		m.resync = 30 * time.Second
	}
	for _, p := range paths {
		m.tables[p.Table] = true
	}
	var err error
	if opt.NetNS != "" {
		ns, err := netns.GetFromPath(opt.NetNS)
		if err != nil {
			return nil, fmt.Errorf("policy routing: namespace %s: %w", opt.NetNS, err)
		}
		m.ns = &ns
		m.h, err = netlink.NewHandleAt(ns)
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("policy routing: netlink: %w", err)
		}
	} else if m.h, err = netlink.NewHandle(); err != nil {
		return nil, fmt.Errorf("policy routing: netlink: %w", err)
	}
	if err := m.Sync(); err != nil {
		m.h.Close()
		return nil, err
	}
	if err := m.subscribe(); err != nil {
		m.log.Warn("policy routing: no interface events; checking every resync period only", "every", m.resync, "err", err)
	}
	m.wg.Add(1)
	go m.loop()
	return m, nil
}

// subscribe turns interface, address and route changes into kicks.
func (m *Manager) subscribe() error {
	onErr := func(err error) { m.log.Debug("policy routing: netlink subscription", "err", err) }
	var nsh *netns.NsHandle
	if m.ns != nil {
		nsh = m.ns
	}
	links := make(chan netlink.LinkUpdate, 16)
	addrs := make(chan netlink.AddrUpdate, 16)
	routes := make(chan netlink.RouteUpdate, 16)
	err := errors.Join(
		netlink.LinkSubscribeWithOptions(links, m.done, netlink.LinkSubscribeOptions{Namespace: nsh, ErrorCallback: onErr}),
		netlink.AddrSubscribeWithOptions(addrs, m.done, netlink.AddrSubscribeOptions{Namespace: nsh, ErrorCallback: onErr}),
		netlink.RouteSubscribeWithOptions(routes, m.done, netlink.RouteSubscribeOptions{Namespace: nsh, ErrorCallback: onErr}))
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.done:
				return
			case _, ok := <-links:
				if !ok {
					links = nil
				}
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
				}
			case u, ok := <-routes:
				if !ok {
					routes = nil
				} else if u.Protocol == Protocol {
					continue // our own change
				}
			}
			select {
			case m.kick <- struct{}{}:
			default:
			}
		}
	}()
	return err
}

func (m *Manager) loop() {
	defer m.wg.Done()
	t := time.NewTicker(m.resync)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		case <-m.kick:
			select {
			case <-m.done:
				return
			case <-time.After(settle):
			}
		}
		if err := m.Sync(); err != nil {
			m.log.Warn("policy routing", "err", err)
		}
	}
}

// Sync makes the installed rules and routes match the plan for the
// current interfaces.
func (m *Manager) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	view, err := m.view()
	if err != nil {
		return err
	}
	rules, routes, notes := Plan(m.paths, view)
	if !slices.Equal(notes, m.notes) {
		for _, n := range notes {
			m.log.Warn("policy routing: " + n)
		}
		m.notes = notes
	}
	return m.apply(rules, routes)
}

// SetPaths replaces the paths (a reloaded config) and syncs: entries of
// paths or tables that went away are removed.
func (m *Manager) SetPaths(paths []Path) error {
	m.mu.Lock()
	m.paths = paths
	for _, p := range paths {
		m.tables[p.Table] = true // old tables stay for this sync, to be emptied
	}
	m.mu.Unlock()
	err := m.Sync()
	m.mu.Lock()
	m.tables = map[int]bool{}
	for _, p := range paths {
		m.tables[p.Table] = true
	}
	m.mu.Unlock()
	return err
}

// Close stops following changes and removes everything installed.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	err := m.apply(nil, nil)
	m.mu.Unlock()
	m.wg.Wait()
	m.h.Close()
	if m.ns != nil {
		m.ns.Close()
	}
	return err
}

// apply adds what is wanted and missing and deletes what is installed and
// no longer wanted. Routes go in before the rules that point at them.
func (m *Manager) apply(rules []Rule, routes []Route) error {
	haveRules, haveRoutes, err := m.installed()
	if err != nil {
		return err
	}
	addRules, delRules := Diff(rules, haveRules)
	addRoutes, delRoutes := Diff(routes, haveRoutes)
	var errs []error
	for _, r := range delRules {
		if err := m.h.RuleDel(nlRule(r)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete rule %s: %w", r, err))
		} else {
			m.log.Info("policy routing: rule removed", "rule", r.String())
		}
	}
	for _, r := range delRoutes {
		if err := m.h.RouteDel(nlRoute(r)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
		}
	}
	for _, r := range addRoutes {
		if err := m.h.RouteReplace(nlRoute(r)); err != nil {
			errs = append(errs, fmt.Errorf("add route %s: %w", r, err))
		}
	}
	for _, r := range addRules {
		if err := m.h.RuleAdd(nlRule(r)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add rule %s: %w", r, err))
		} else {
			m.log.Info("policy routing: rule added", "rule", r.String())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("policy routing: %w", errors.Join(errs...))
	}
	return nil
}

// view reads the paths' interfaces.
func (m *Manager) view() (View, error) {
	v := View{Links: map[string]Link{}}
	for _, p := range m.paths {
		if _, done := v.Links[p.Device]; done {
			continue
		}
		nl, err := m.h.LinkByName(p.Device)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
				continue
			}
			return View{}, fmt.Errorf("policy routing: interface %s: %w", p.Device, err)
		}
		a := nl.Attrs()
		l := Link{Index: a.Index,
			Up:           a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown),
			PointToPoint: a.Flags&net.FlagPointToPoint != 0 || a.RawFlags&unix.IFF_NOARP != 0}
		addrs, err := m.h.AddrList(nl, netlink.FAMILY_ALL)
		if err != nil {
			return View{}, fmt.Errorf("policy routing: addresses of %s: %w", p.Device, err)
		}
		for _, ad := range addrs {
			if pre, ok := prefixOf(ad.IPNet); ok {
				l.Addrs = append(l.Addrs, pre)
			}
		}
		rts, err := m.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: a.Index, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			return View{}, fmt.Errorf("policy routing: routes of %s: %w", p.Device, err)
		}
		for _, r := range rts {
			dst, ok := prefixOf(r.Dst)
			switch {
			case r.Type != unix.RTN_UNICAST:
			case !ok || dst.Bits() == 0:
				gw, _ := netip.AddrFromSlice(r.Gw)
				l.Defaults = append(l.Defaults, Gateway{V6: r.Family == netlink.FAMILY_V6, Via: gw.Unmap(), Metric: r.Priority})
			case r.Gw == nil:
				// IPv4 marks these scope link; IPv6 does not.
				l.OnLink = append(l.OnLink, dst)
			}
		}
		slices.SortStableFunc(l.Defaults, func(a, b Gateway) int { return a.Metric - b.Metric })
		v.Links[p.Device] = l
	}
	return v, nil
}

// installed lists the rules and routes this package put in the paths'
// tables.
func (m *Manager) installed() ([]Rule, []Route, error) {
	var rules []Rule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := m.h.RuleList(fam)
		if err != nil {
			return nil, nil, fmt.Errorf("policy routing: list rules: %w", err)
		}
		for _, r := range list {
			if r.Protocol != Protocol || !m.tables[r.Table] {
				continue
			}
			src, _ := prefixOf(r.Src)
			rules = append(rules, Rule{Priority: r.Priority, Table: r.Table, V6: fam == netlink.FAMILY_V6, Src: src,
				Oif: r.OifName, Mark: r.Mark})
		}
	}
	var routes []Route
	for t := range m.tables {
		list, err := m.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: t}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, nil, fmt.Errorf("policy routing: list table %d: %w", t, err)
		}
		for _, r := range list {
			if r.Protocol != Protocol {
				continue
			}
			v6 := r.Family == netlink.FAMILY_V6
			dst, ok := prefixOf(r.Dst)
			if !ok {
				dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
				if v6 {
					dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
				}
			}
			gw, _ := netip.AddrFromSlice(r.Gw)
			routes = append(routes, Route{Table: r.Table, V6: v6, Link: r.LinkIndex, Dst: dst, Gateway: gw.Unmap()})
		}
	}
	return rules, routes, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func family(v6 bool) int {
	if v6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func nlRule(r Rule) *netlink.Rule {
	n := netlink.NewRule()
	n.Priority, n.Table, n.Family, n.Protocol = r.Priority, r.Table, family(r.V6), Protocol
	switch {
	case r.Src.IsValid():
		n.Src = ipNet(r.Src)
	case r.Oif != "":
		n.OifName = r.Oif
	default:
		n.Mark = r.Mark
	}
	return n
}

func nlRoute(r Route) *netlink.Route {
	n := &netlink.Route{Table: r.Table, LinkIndex: r.Link, Dst: ipNet(r.Dst), Family: family(r.V6),
		Protocol: netlink.RouteProtocol(Protocol), Type: unix.RTN_UNICAST}
	if r.Gateway.IsValid() {
		n.Gw = r.Gateway.AsSlice()
	} else {
		n.Scope = netlink.SCOPE_LINK
	}
	return n
}
