// SPDX-License-Identifier: MIT

// Package netmon watches the kernel's interfaces, addresses and routes
// over rtnetlink (github.com/vishvananda/netlink) and reports changes as
// the path manager's plain event values (pathmgr.LinkEvent, AddrEvent,
// RouteEvent). It is the only part of path management that talks to the
// kernel; pathmgr itself is tested without it.
package netmon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/pathmgr"
)

// Options tune a Watcher.
type Options struct {
	// NetNS is the path of a network namespace to watch (e.g.
	// /run/netns/NAME); empty: the caller's.
	NetNS string
	// OnError gets subscription errors (the watcher keeps going where it
	// can); nil ignores them.
	OnError func(error)
}

// Watcher reports interface, address and route changes to a callback,
// from its own goroutine, one event at a time.
type Watcher struct {
	done   chan struct{}
	wg     sync.WaitGroup
	h      *netlink.Handle
	ns     *netns.NsHandle
	fn     func(ev any)
	onErr  func(error)
	names  map[int]string // link index → name
	state  map[int]bool   // link index → up
	closed sync.Once
}

// up is the link's operational state as a path sees it: administratively
// up with carrier (interfaces that report no state, like TUN devices,
// count as up).
func up(a *netlink.LinkAttrs) bool {
	if a.Flags&net.FlagUp == 0 {
		return false
	}
	return a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown
}

// Snapshot lists the current links and their addresses as events.
func Snapshot(opt Options) ([]any, error) {
	h, ns, err := handle(opt.NetNS)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if ns != nil {
		defer ns.Close()
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netmon: links: %w", err)
	}
	var evs []any
	for _, l := range links {
		a := l.Attrs()
		evs = append(evs, pathmgr.LinkEvent{Name: a.Name, Up: up(a)})
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("netmon: addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok {
				evs = append(evs, pathmgr.AddrEvent{Link: a.Name, Addr: ip.Unmap(), Added: true})
			}
		}
	}
	return evs, nil
}

func handle(path string) (*netlink.Handle, *netns.NsHandle, error) {
	if path == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, nil, fmt.Errorf("netmon: %w", err)
		}
		return h, nil, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("netmon: namespace %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("netmon: namespace %s: %w", path, err)
	}
	return h, &ns, nil
}

// Watch subscribes to link, address and route changes and calls fn with
// a pathmgr.LinkEvent, AddrEvent or RouteEvent for each; the current
// links and addresses are reported first. fn runs in the watcher's
// goroutine and may block (the daemon hands events to its owner
// goroutine). Close stops it.
func Watch(opt Options, fn func(ev any)) (*Watcher, error) {
	h, ns, err := handle(opt.NetNS)
	if err != nil {
		return nil, err
	}
	w := &Watcher{done: make(chan struct{}), h: h, ns: ns, fn: fn, onErr: opt.OnError,
		names: map[int]string{}, state: map[int]bool{}}
	if w.onErr == nil {
		w.onErr = func(error) {}
	}
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	errCb := func(err error) {
		select {
		case <-w.done:
			return // closing: the subscriptions' sockets report that
		default:
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			w.onErr(err)
		}
	}
	nsh := ns
	if nsh == nil {
		none := netns.None()
		nsh = &none
	}
	errs := []error{
		netlink.LinkSubscribeWithOptions(links, w.done, netlink.LinkSubscribeOptions{Namespace: nsh, ListExisting: true, ErrorCallback: errCb}),
		netlink.AddrSubscribeWithOptions(addrs, w.done, netlink.AddrSubscribeOptions{Namespace: nsh, ListExisting: true, ErrorCallback: errCb}),
		netlink.RouteSubscribeWithOptions(routes, w.done, netlink.RouteSubscribeOptions{Namespace: nsh, ErrorCallback: errCb}),
	}
	if err := errors.Join(errs...); err != nil {
		w.Close()
		return nil, fmt.Errorf("netmon: subscribe: %w", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.loop(links, addrs, routes)
	}()
	return w, nil
}

// Close stops the watcher and waits for its goroutine.
func (w *Watcher) Close() error {
	w.closed.Do(func() {
		close(w.done)
		w.wg.Wait()
		w.h.Close()
		if w.ns != nil {
			w.ns.Close()
		}
	})
	return nil
}

func (w *Watcher) loop(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate, routes chan netlink.RouteUpdate) {
	for {
		select {
		case <-w.done:
			return
		case u, ok := <-links:
			if !ok {
				return
			}
			w.link(u)
		case u, ok := <-addrs:
			if !ok {
				return
			}
			w.addr(u)
		case u, ok := <-routes:
			if !ok {
				return
			}
			w.route(u)
		}
	}
}

func (w *Watcher) link(u netlink.LinkUpdate) {
	a := u.Attrs()
	if a == nil {
		return
	}
	isUp := up(a) && u.Header.Type != unix.RTM_DELLINK
	if old, ok := w.names[a.Index]; ok && old != a.Name {
		w.fn(pathmgr.LinkEvent{Name: old, Up: false}) // renamed
	}
	if u.Header.Type == unix.RTM_DELLINK {
		delete(w.names, a.Index)
		delete(w.state, a.Index)
	} else {
		w.names[a.Index] = a.Name
	}
	if was, ok := w.state[a.Index]; ok && was == isUp {
		return
	}
	if u.Header.Type != unix.RTM_DELLINK {
		w.state[a.Index] = isUp
	}
	w.fn(pathmgr.LinkEvent{Name: a.Name, Up: isUp})
}

// name resolves a link index, asking the kernel for links it has not
// reported yet.
func (w *Watcher) name(index int) string {
	if n, ok := w.names[index]; ok {
		return n
	}
	l, err := w.h.LinkByIndex(index)
	if err != nil {
		return ""
	}
	w.names[index] = l.Attrs().Name
	return l.Attrs().Name
}

func (w *Watcher) addr(u netlink.AddrUpdate) {
	ip, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	name := w.name(u.LinkIndex)
	if !ok || name == "" {
		return
	}
	w.fn(pathmgr.AddrEvent{Link: name, Addr: ip.Unmap(), Added: u.NewAddr})
}

func (w *Watcher) route(u netlink.RouteUpdate) {
	name := w.name(u.LinkIndex)
	if name == "" {
		return
	}
	var dst netip.Prefix
	if u.Dst != nil {
		if ip, ok := netip.AddrFromSlice(u.Dst.IP); ok {
			ones, _ := u.Dst.Mask.Size()
			dst = netip.PrefixFrom(ip.Unmap(), ones)
		}
	}
	w.fn(pathmgr.RouteEvent{Link: name, Dst: dst, Added: u.Type == unix.RTM_NEWROUTE})
}
