// SPDX-License-Identifier: MIT

package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"github.com/mptun/mptun/lab/topo"
)

// PeerRun is what a peer gets to set itself up on a fresh testbed.
type PeerRun struct {
	Scenario *Scenario
	Testbed  *topo.Testbed
	Dir      string // the peer's output directory (configs, logs)
	Best     int    // index of the best single path
}

// Endpoint tells the generators where to connect for this peer.
type Endpoint struct {
	ServerAddr  netip.Addr // inside the server namespace
	ClientBind  netip.Addr // optional source address in the client namespace
	MPTCP       bool       // stream traffic uses MPTCP sockets
	StreamProbe bool       // the probe runs over a stream (no UDP through this peer)
	Note        string     // printed with the results
}

// PeerRunner is one way of carrying traffic between the client and server
// namespaces: no tunnel, kernel MPTCP, wireguard-go, mptun. Setup runs after
// the testbed is built and before traffic starts; Close runs before the
// testbed is torn down and must stop every process Setup started.
type PeerRunner interface {
	Setup(ctx context.Context, run *PeerRun) (Endpoint, error)
	Close() error
}

// PeerMetrics is implemented by peers that can report their own internals
// after the traffic stops and before Close (mptun: cwnd and reorder hold
// time per path). The value goes into results.json as peer_metrics.
type PeerMetrics interface {
	Metrics(ctx context.Context) (any, error)
}

var (
	peersMu sync.Mutex
	peers   = map[string]func() PeerRunner{}
)

// RegisterPeer makes a peer available to scenarios under name.
func RegisterPeer(name string, f func() PeerRunner) {
	peersMu.Lock()
	defer peersMu.Unlock()
	peers[name] = f
	knownPeers[name] = true
}

// Peers lists the registered peer names.
func Peers() []string {
	peersMu.Lock()
	defer peersMu.Unlock()
	var n []string
	for k := range peers {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func newPeer(name string) (PeerRunner, error) {
	peersMu.Lock()
	defer peersMu.Unlock()
	f := peers[name]
	if f == nil {
		return nil, fmt.Errorf("peer %q: not available", name)
	}
	return f(), nil
}

func init() {
	RegisterPeer("none", func() PeerRunner { return nonePeer{} })
	RegisterPeer("mptcp", func() PeerRunner { return &mptcpPeer{} })
}

// nonePeer sends traffic without a tunnel over the best single path.
type nonePeer struct{}

func (nonePeer) Setup(ctx context.Context, run *PeerRun) (Endpoint, error) {
	p := run.Testbed.Paths[run.Best]
	return Endpoint{ServerAddr: p.SrvAddr, ClientBind: p.CliAddr, Note: "no tunnel, best single path " + p.Spec.Name}, nil
}

func (nonePeer) Close() error { return nil }

// mptcpPeer is the kernel's MPTCP with the in-kernel path manager: the
// initial subflow on the best path and one "subflow" endpoint per other path
// on the client.
type mptcpPeer struct{}

func (*mptcpPeer) Setup(ctx context.Context, run *PeerRun) (Endpoint, error) {
	tb := run.Testbed
	n := len(tb.Paths)
	for _, ns := range []string{"cli", "srv"} {
		target := tb.Cli
		if ns == "srv" {
			target = tb.Srv
		}
		if err := target.Sysctl(ctx, "net.mptcp.enabled", "1"); err != nil {
			return Endpoint{}, fmt.Errorf("mptcp: %w", err)
		}
		lim := fmt.Sprint(min(n+1, 8))
		if err := target.IP(ctx, "mptcp", "limits", "set", "subflow", lim, "add_addr_accepted", lim); err != nil {
			return Endpoint{}, fmt.Errorf("mptcp: %w", err)
		}
	}
	for i, p := range tb.Paths {
		if i == run.Best {
			continue
		}
		if err := tb.Cli.IP(ctx, "mptcp", "endpoint", "add", p.CliAddr.String(), "dev", p.Dev, "subflow"); err != nil {
			return Endpoint{}, fmt.Errorf("mptcp: %w", err)
		}
	}
	best := tb.Paths[run.Best]
	return Endpoint{
		ServerAddr: best.SrvAddr, ClientBind: best.CliAddr, MPTCP: true, StreamProbe: true,
		Note: "kernel MPTCP (Go MPTCP sockets), in-kernel path manager, default scheduler; probe runs over an MPTCP stream",
	}, nil
}

func (*mptcpPeer) Close() error { return nil }

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }
