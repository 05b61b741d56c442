// SPDX-License-Identifier: MIT

// Package pathmgr decides which paths and connections exist and with
// which settings; the mpdccp engine carries the decisions out.
//
// It is sans-I/O like the engine: the daemon's owner goroutine (the one
// that owns the mpdccp.Endpoint) feeds it engine events (HandleEngineEvent),
// operating-system events as plain values (HandleLink, HandleAddr,
// HandleRoute), runtime changes (Set, Apply) and the time (Deadline,
// HandleTimer). It opens and closes sockets only through the Sockets
// interface it is given, so tests run it in virtual time over simulated
// paths, without netlink or real sockets.
//
// What it owns:
//   - the path table: name ↔ path id ↔ socket ↔ interface (client);
//   - dialling and redialling with capped exponential backoff, forever,
//     each attempt on the next path (a dead first path cannot keep the
//     tunnel down), and joins retried the same way;
//   - reactions to path failure, resets, interface and address changes
//     (a path named only by its device follows the device's address:
//     its socket is bound again and it re-joins), and to the peer's
//     MP_ADDADDR/MP_REMOVEADDR (a concentrator advertises its other
//     addresses; a CPE fails over to them when its path's own remote does
//     not answer);
//   - modes: aggregate, active-backup, switch (RTT/loss thresholds with
//     hysteresis), carried out with MP_PRIO;
//   - the runtime settings (scheduler, reorderer with its whole config,
//     hold, priorities, controller, timeouts) for the open connections
//     and those opened later, from one place.
//
// The dependency is one-way: daemon → pathmgr → mpdccp. pathmgr has its
// own request (Settings, Request) and event (Event) types.
package pathmgr

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
)

// Role is the endpoint's side.
type Role uint8

const (
	Client Role = iota
	Server
)

// PathSpec is one configured client path.
type PathSpec struct {
	Name string
	// Local is the address to bind. An invalid or unspecified address
	// with Device set follows the device's address (the socket is bound
	// again when it changes); without Device it binds the wildcard.
	Local  netip.AddrPort
	Device string
	Fwmark uint32
	Remote netip.AddrPort
	Prio   uint8 // MP_PRIO: 0 never, 1 standby, 2 secondary, >=3 primary
	Weight int
	CCID   string // "" = the connection's
}

// follows reports whether the path takes its address from its device.
func (p *PathSpec) follows() bool {
	return p.Device != "" && (!p.Local.Addr().IsValid() || p.Local.Addr().IsUnspecified())
}

// v6 reports whether the path speaks IPv6.
func (p *PathSpec) v6() bool {
	a := p.Remote.Addr()
	return a.Is6() && !a.Is4In6()
}

// Config describes what the manager manages. Zero durations get the
// defaults below.
type Config struct {
	Role     Role
	Paths    []PathSpec // client
	Settings Settings
	// Advertise are addresses a server tells each new connection about
	// (MP_ADDADDR), so its CPEs can fail over to them.
	Advertise []netip.AddrPort
	// OSEvents says the shell feeds interface and address events. Without
	// them a path that follows a device binds the wildcard address on it.
	OSEvents bool

	// BackoffMin and BackoffMax bound the exponential backoff between
	// connection and join attempts (default 100 ms and 2 s: a concentrator
	// that comes back is reached again within a few seconds).
	BackoffMin, BackoffMax time.Duration
	// AttemptTimeout is how long one connection or join attempt may take
	// before the next one (default 2 s).
	AttemptTimeout time.Duration
	// RejoinAfter is how long a path may stay failed before its subflow is
	// replaced by a new join (default 30 s).
	RejoinAfter time.Duration
	// StaleAfter is how long a server keeps a failed subflow (default 60 s).
	StaleAfter time.Duration
}

// Defaults.
const (
	DefaultBackoffMin     = 100 * time.Millisecond
	DefaultBackoffMax     = 2 * time.Second
	DefaultAttemptTimeout = 2 * time.Second
	DefaultRejoinAfter    = 30 * time.Second
	DefaultStaleAfter     = 60 * time.Second
	// tick is how often modes and stale subflows are looked at.
	tick = 100 * time.Millisecond
)

func (c *Config) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.BackoffMin, DefaultBackoffMin)
	def(&c.BackoffMax, DefaultBackoffMax)
	def(&c.AttemptTimeout, DefaultAttemptTimeout)
	def(&c.RejoinAfter, DefaultRejoinAfter)
	def(&c.StaleAfter, DefaultStaleAfter)
}

func (c *Config) validate() error {
	var errs []error
	names := map[string]bool{}
	for _, p := range c.Paths {
		if p.Name == "" {
			errs = append(errs, errors.New("path without a name"))
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("path %s: duplicate name", p.Name))
		}
		names[p.Name] = true
		if !p.Remote.IsValid() {
			errs = append(errs, fmt.Errorf("path %s: invalid remote address", p.Name))
		}
	}
	if c.Role == Client && len(c.Paths) == 0 {
		errs = append(errs, errors.New("a client needs at least one path"))
	}
	if c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("backoff max %v below min %v", c.BackoffMax, c.BackoffMin))
	}
	return errors.Join(errs...)
}

// SocketSpec is a socket the manager needs opened for a path.
type SocketSpec struct {
	Path    string
	Network string // "udp4" or "udp6"
	Local   netip.AddrPort
	Device  string
	Fwmark  uint32
}

// Sockets opens and closes path sockets; the daemon's implementation adds
// them to the data path. Both are called from the owner goroutine.
type Sockets interface {
	// Open binds a socket and returns its index (the engine's "local")
	// and its bound address.
	Open(spec SocketSpec) (index int, local netip.AddrPort, err error)
	Close(index int)
}

// Manager is one endpoint's path manager. It is not safe for concurrent
// use: the owner goroutine calls everything.
type Manager struct {
	cfg   Config
	ep    *mpdccp.Endpoint
	socks Sockets
	set   Settings

	// Client.
	paths    []*path
	conn     *mpdccp.Conn
	dial     attempt   // the connection attempt in progress, if any
	dialNext int       // path index the next attempt starts from
	redialAt mono.Time // next connection attempt
	backoff  backoff
	openedAt mono.Time
	trial    trialState               // a fresh connection tried while every path is silent
	peerAddr map[uint8]netip.AddrPort // addresses the peer advertised

	// OS state learnt from events: link up/down and addresses per link.
	links map[string]*link

	mode      modeState
	nextTick  mono.Time
	started   bool
	stopped   bool
	events    eventQueue
	infos     []mpdccp.PathInfo // scratch for PathInfos
	serverAdv map[*mpdccp.Conn]bool
}

// Endpoint is the engine the manager manages.
func (m *Manager) Endpoint() *mpdccp.Endpoint { return m.ep }

// New returns a manager for ep. socks may be nil on a server (its listen
// sockets are the daemon's).
func New(cfg Config, ep *mpdccp.Endpoint, socks Sockets) (*Manager, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("pathmgr: %w", err)
	}
	if cfg.Role == Client && socks == nil {
		return nil, errors.New("pathmgr: a client needs Sockets")
	}
	m := &Manager{cfg: cfg, ep: ep, socks: socks, links: map[string]*link{}, peerAddr: map[uint8]netip.AddrPort{},
		serverAdv: map[*mpdccp.Conn]bool{}, redialAt: mono.Never, nextTick: mono.Never}
	m.backoff = backoff{min: cfg.BackoffMin, max: cfg.BackoffMax}
	m.trial.back = m.backoff
	for i, p := range cfg.Paths {
		m.paths = append(m.paths, newPath(i, p, &m.cfg))
	}
	return m, nil
}

// Start applies the configured settings and, on a client, opens the
// path sockets and dials. OS events known at start (the current links and
// addresses) should be fed before it.
func (m *Manager) Start(now mono.Time) error {
	if m.started {
		return errors.New("pathmgr: started twice")
	}
	m.started = true
	if err := m.apply(now, m.cfg.Settings, true); err != nil {
		return err
	}
	m.nextTick = now.Add(tick)
	if m.cfg.Role == Server {
		return nil
	}
	for _, p := range m.paths {
		m.ensureSocket(now, p)
	}
	m.redialAt = now
	m.clientStep(now)
	return nil
}

// Conn returns the client's current connection (nil while there is none).
func (m *Manager) Conn() *mpdccp.Conn { return m.conn }

// Stop ends the manager's work: the daemon is closing its connections,
// nothing is dialled or joined again.
func (m *Manager) Stop(now mono.Time) {
	if m.stopped {
		return
	}
	m.stopped = true
	m.dial.on = false
	if c := m.trial.conn; c != nil {
		m.trial.conn = nil
		c.Abort(now)
	}
	m.trial.nextAt = 0
	m.emit(now, EventSettings, m.connID(), -1, netip.AddrPort{}, "%s", "stopping: no more dials or joins")
}

// Deadline is when HandleTimer must next run.
func (m *Manager) Deadline() mono.Time {
	if !m.started || m.stopped {
		return mono.Never
	}
	d := m.nextTick
	if m.cfg.Role == Client {
		if m.conn == nil {
			d = mono.Min(d, m.redialAt)
		}
		d = mono.Min(d, m.dial.deadline())
		d = mono.Min(d, m.trial.deadline())
		if m.conn != nil {
			m.infos = m.conn.PathInfos(m.infos[:0])
		}
		for _, p := range m.paths {
			d = mono.Min(d, p.deadline())
			d = mono.Min(d, m.joinDeadline(p))
		}
	}
	return d
}

// HandleTimer runs whatever is due at now.
func (m *Manager) HandleTimer(now mono.Time) {
	if !m.started || m.stopped {
		return
	}
	if now >= m.nextTick {
		m.nextTick = now.Add(tick)
		m.periodic(now)
	}
	if m.cfg.Role == Client {
		m.clientStep(now)
	}
}

// HandleEngineEvent reacts to one event polled from the engine. Every
// engine event should pass through here (the daemon logs the manager's
// events instead).
func (m *Manager) HandleEngineEvent(now mono.Time, ev mpdccp.Event) {
	if m.cfg.Role == Server {
		m.serverEvent(now, ev)
		return
	}
	m.clientEvent(now, ev)
}

// PathName returns the configured name of path id ("" if none).
func (m *Manager) PathName(id int) string {
	if id >= 0 && id < len(m.paths) {
		return m.paths[id].spec.Name
	}
	return ""
}
