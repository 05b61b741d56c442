// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"time"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/internal/defaults"
	"github.com/mptun/mptun/reorder"
	"github.com/mptun/mptun/scheduler"
)

// Runtime settings for connections opened from now on. A path manager
// changes the open connections (Conn.SetScheduler, SetReorderer, SetPrio)
// and these together, so that a concentrator's next connection gets what
// `mptun set` or a reload asked for rather than the startup config.

// SetScheduler makes connections opened from now on use scheduler name.
func (e *Endpoint) SetScheduler(name string) error {
	n := orDefault(name, defaults.Scheduler)
	if _, err := scheduler.New(n, scheduler.Config{}); err != nil {
		return fmt.Errorf("mpdccp: %w", err)
	}
	e.schedName = n
	return nil
}

// SetReorderer makes connections opened from now on use reorderer name
// with cfg.
func (e *Endpoint) SetReorderer(name string, cfg reorder.Config) error {
	n := orDefault(name, defaults.Reorderer)
	if _, err := reorder.New(n, cfg); err != nil {
		return fmt.Errorf("mpdccp: %w", err)
	}
	e.reoName, e.cfg.Reorder = n, cfg
	return nil
}

// SetCCID makes paths opened from now on (joins included) use controller
// name unless their PathConfig names one.
func (e *Endpoint) SetCCID(name string) error {
	n := orDefault(name, defaults.CCID)
	if _, err := ccid.New(n, e.cfg.CC); err != nil {
		return fmt.Errorf("mpdccp: %w", err)
	}
	e.ccidName = n
	return nil
}

// SetRetransmit turns loss repair on or off for packets sent from now on.
func (e *Endpoint) SetRetransmit(on bool) { e.cfg.Retransmit = on }

// SetTimeouts changes the keepalive and path timeout of every connection
// (zero keeps a value).
func (e *Endpoint) SetTimeouts(keepAlive, pathTimeout time.Duration) error {
	ka, pt := e.cfg.KeepAlive, e.cfg.PathTimeout
	if keepAlive > 0 {
		ka = keepAlive
	}
	if pathTimeout > 0 {
		pt = pathTimeout
	}
	if pt <= ka {
		return fmt.Errorf("mpdccp: path timeout %v must be longer than keepalive %v", pt, ka)
	}
	e.cfg.KeepAlive, e.cfg.PathTimeout = ka, pt
	for _, c := range e.conns {
		c.touch()
	}
	return nil
}

// Settings are the endpoint's current defaults.
type Settings struct {
	Scheduler, Reorderer, CCID string
	Reorder                    reorder.Config
	Retransmit                 bool
	KeepAlive, PathTimeout     time.Duration
}

// Settings returns what connections opened now would use.
func (e *Endpoint) Settings() Settings {
	return Settings{Scheduler: e.schedName, Reorderer: e.reoName, CCID: e.ccidName, Reorder: e.cfg.Reorder,
		Retransmit: e.cfg.Retransmit, KeepAlive: e.cfg.KeepAlive, PathTimeout: e.cfg.PathTimeout}
}
