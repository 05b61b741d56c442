// SPDX-License-Identifier: MIT

package pathmgr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// Mode is how the paths share the traffic.
type Mode string

const (
	// ModeAggregate uses every path at its configured priority.
	ModeAggregate Mode = "aggregate"
	// ModeActiveBackup sends on one path, the most preferred healthy one
	// (highest priority, then config order); the others stand by (MP_PRIO
	// 1), carrying only probes, until it fails.
	ModeActiveBackup Mode = "active-backup"
	// ModeSwitch is active-backup where a path also counts as unhealthy
	// when its RTT or loss passes the high thresholds, and healthy again
	// only below the low ones (hysteresis): the WiFi/LTE switching case.
	ModeSwitch Mode = "switch"
)

// Modes lists the valid modes.
var Modes = []Mode{ModeAggregate, ModeActiveBackup, ModeSwitch}

// SwitchConfig are the thresholds of ModeSwitch; Hold also delays the
// return to a more preferred path in ModeActiveBackup.
type SwitchConfig struct {
	RTTHigh, RTTLow   time.Duration
	LossHigh, LossLow float64 // fractions over Window
	// Hold is how long a path must be healthy before traffic moves (back)
	// to it.
	Hold time.Duration
	// Window is the loss measurement window.
	Window time.Duration
}

// Settings are the runtime settings of the open connections and of those
// opened later. The receiver's side of loss repair (reorder.Config.Repair:
// gaps wait for their repair) follows Retransmit in the engine, so no
// change can leave repair half-configured.
type Settings struct {
	Scheduler   string
	Reorderer   string
	Reorder     reorder.Config // MaxHold, BufferLimit, DropLate
	Retransmit  bool
	CCID        string
	KeepAlive   time.Duration
	PathTimeout time.Duration
	Mode        Mode
	Switch      SwitchConfig
}

// ReorderConfig is the reorderer config the connections get.
func (s Settings) ReorderConfig() reorder.Config {
	// Neither HoldGaps nor NoEarlyLoss: they are ablations. Forcing them
	// here (until 2 December) held every gap for the whole hold cap and
	// left a packet lost last on a slow path to the sender's suspicion
	// (~220 ms) instead of the receiver's NACK, stalling the inner flow
	// on the fast path meanwhile.
	return s.Reorder
}

func (s *Settings) fill() {
	if s.Mode == "" {
		s.Mode = ModeAggregate
	}
	sw := &s.Switch
	if sw.RTTHigh == 0 {
		sw.RTTHigh = 150 * time.Millisecond
	}
	if sw.RTTLow == 0 {
		sw.RTTLow = sw.RTTHigh * 2 / 3
	}
	if sw.LossHigh == 0 {
		sw.LossHigh = 0.05
	}
	if sw.LossLow == 0 {
		sw.LossLow = sw.LossHigh / 4
	}
	if sw.Hold == 0 {
		sw.Hold = 2 * time.Second
	}
	if sw.Window == 0 {
		sw.Window = time.Second
	}
}

// validate checks names and values without applying anything.
func (s *Settings) validate() error {
	var errs []error
	if s.Scheduler != "" {
		if _, err := scheduler.New(s.Scheduler, scheduler.Config{}); err != nil {
			errs = append(errs, fmt.Errorf("scheduler: %w", err))
		}
	}
	if s.Reorderer != "" {
		if _, err := reorder.New(s.Reorderer, s.ReorderConfig()); err != nil {
			errs = append(errs, fmt.Errorf("reorderer: %w", err))
		}
	}
	if s.CCID != "" && !slices.Contains(ccid.Names(), s.CCID) {
		errs = append(errs, fmt.Errorf("ccid: unknown congestion controller %q (have %s)", s.CCID, strings.Join(ccid.Names(), ", ")))
	}
	if !slices.Contains(Modes, s.Mode) {
		errs = append(errs, fmt.Errorf("mode %q: want aggregate, active-backup or switch", s.Mode))
	}
	if s.KeepAlive > 0 && s.PathTimeout > 0 && s.PathTimeout <= s.KeepAlive {
		errs = append(errs, fmt.Errorf("path timeout %v must be longer than keepalive %v", s.PathTimeout, s.KeepAlive))
	}
	sw := s.Switch
	if sw.RTTLow > sw.RTTHigh || sw.LossLow > sw.LossHigh || sw.LossHigh > 1 || sw.LossLow < 0 {
		errs = append(errs, fmt.Errorf("switch thresholds: want rtt_low <= rtt_high and 0 <= loss_low <= loss_high <= 1"))
	}
	return errors.Join(errs...)
}

// Settings returns the current settings.
func (m *Manager) Settings() Settings { return m.set }

// Apply changes the runtime settings of the open connections and of
// those opened later. Nothing changes when any setting is invalid.
func (m *Manager) Apply(now mono.Time, s Settings) error {
	return m.apply(now, s, false)
}

func (m *Manager) apply(now mono.Time, s Settings, initial bool) error {
	s.fill()
	if err := s.validate(); err != nil {
		return fmt.Errorf("pathmgr: %w", err)
	}
	old := m.set
	var changed []string
	e := m.ep
	if initial || s.Scheduler != old.Scheduler {
		if err := e.SetScheduler(s.Scheduler); err != nil {
			return err
		}
		changed = append(changed, "scheduler "+s.Scheduler)
	}
	reo := initial || s.Reorderer != old.Reorderer || s.ReorderConfig() != old.ReorderConfig()
	if reo {
		if err := e.SetReorderer(s.Reorderer, s.ReorderConfig()); err != nil {
			return err
		}
		changed = append(changed, fmt.Sprintf("reorderer %s (hold %v, repair %v)", s.Reorderer, s.Reorder.MaxHold, s.Retransmit))
	}
	if initial || s.CCID != old.CCID {
		if err := e.SetCCID(s.CCID); err != nil {
			return err
		}
		changed = append(changed, "ccid "+s.CCID)
	}
	if initial || s.Retransmit != old.Retransmit {
		e.SetRetransmit(s.Retransmit)
	}
	if s.KeepAlive != old.KeepAlive || s.PathTimeout != old.PathTimeout {
		if err := e.SetTimeouts(s.KeepAlive, s.PathTimeout); err != nil {
			return err
		}
		if !initial {
			changed = append(changed, fmt.Sprintf("keepalive %v, path timeout %v", s.KeepAlive, s.PathTimeout))
		}
	}
	for _, c := range e.Conns() {
		if !initial && s.Scheduler != old.Scheduler {
			if err := c.SetScheduler(s.Scheduler); err != nil {
				return err
			}
		}
		if !initial && reo {
			if err := c.SetReorderer(s.Reorderer, s.ReorderConfig()); err != nil {
				return err
			}
		}
	}
	if s.Mode != old.Mode || s.Switch != old.Switch {
		m.mode = modeState{}
		changed = append(changed, "mode "+string(s.Mode))
	}
	m.set = s
	if !initial && len(changed) > 0 {
		m.emit(now, EventSettings, 0, -1, netip.AddrPort{}, "%s", strings.Join(changed, "; "))
	}
	m.updatePrios(now)
	return nil
}

// Request is one runtime change (`mptun set`); empty fields stay.
type Request struct {
	Scheduler string
	Reorderer string
	Hold      time.Duration // reorder max hold
	Mode      Mode
	// Path (a name, or a path id) and Prio set a path's MP_PRIO; it
	// sticks to the path across re-joins and reconnections.
	Path string
	Prio *uint8
}

// Set applies one runtime change to the open and future connections.
func (m *Manager) Set(now mono.Time, req Request) error {
	if (req.Path == "") != (req.Prio == nil) {
		return errors.New("path and prio go together")
	}
	s := m.set
	if req.Scheduler != "" {
		s.Scheduler = req.Scheduler
	}
	if req.Reorderer != "" {
		s.Reorderer = req.Reorderer
	}
	if req.Hold < 0 {
		return fmt.Errorf("hold %v: must be positive", req.Hold)
	}
	if req.Hold > 0 {
		s.Reorder.MaxHold = req.Hold
	}
	if req.Mode != "" {
		s.Mode = req.Mode
	}
	if req.Prio != nil {
		if err := m.checkPrio(req.Path, *req.Prio); err != nil {
			return err
		}
	}
	if err := m.Apply(now, s); err != nil {
		return err
	}
	if req.Prio != nil {
		return m.setPrio(now, req.Path, *req.Prio)
	}
	return nil
}

func (m *Manager) checkPrio(name string, prio uint8) error {
	if prio > 15 {
		return fmt.Errorf("prio %d: must be 0..15", prio)
	}
	if m.cfg.Role == Server {
		if _, err := strconv.Atoi(name); err != nil {
			return fmt.Errorf("path %q: a server names paths by id", name)
		}
		return nil
	}
	if m.pathNamed(name) == nil {
		return fmt.Errorf("path %q: no such path (have %s)", name, strings.Join(m.pathNames(), ", "))
	}
	return nil
}

// setPrio sets a path's priority: on a client the named (or numbered)
// path, from now on; on a server path id of every connection.
func (m *Manager) setPrio(now mono.Time, name string, prio uint8) error {
	if m.cfg.Role == Server {
		id, _ := strconv.Atoi(name)
		var errs []error
		for _, c := range m.ep.Conns() {
			errs = append(errs, c.SetPrio(now, id, prio))
		}
		m.emit(now, EventPrio, 0, id, netip.AddrPort{}, "prio %d", prio)
		return errors.Join(errs...)
	}
	p := m.pathNamed(name)
	p.prio = &prio
	m.emit(now, EventPrio, m.connID(), p.id, netip.AddrPort{}, "prio %d", prio)
	m.updatePrios(now)
	return nil
}

// pathNamed finds a client path by name or id.
func (m *Manager) pathNamed(name string) *path {
	for _, p := range m.paths {
		if p.spec.Name == name {
			return p
		}
	}
	if id, err := strconv.Atoi(name); err == nil {
		return m.pathByID(id)
	}
	return nil
}

func (m *Manager) pathNames() []string {
	var out []string
	for _, p := range m.paths {
		out = append(out, p.spec.Name)
	}
	return out
}
