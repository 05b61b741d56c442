// SPDX-License-Identifier: MIT

package metrics

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// NewLogger builds the daemon's logger from the config's level ("debug",
// "info", "warn", "error") and format ("text", "json").
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// Events writes the structured event log: connection and path state
// changes and congestion events, one record each with "event" naming it.
// These are rare events; nothing here is meant for the per-packet path.
type Events struct{ log *slog.Logger }

// NewEvents logs to log (nil discards).
func NewEvents(log *slog.Logger) *Events {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Events{log: log}
}

// Event names.
const (
	EventConnUp     = "conn_up"
	EventConnDown   = "conn_down"
	EventPathUp     = "path_up"
	EventPathDown   = "path_down"
	EventPathRebind = "path_rebind"
	EventCongestion = "congestion"
)

// ConnUp logs an established connection.
func (e *Events) ConnUp(conn, peer string) {
	e.log.Info("connection up", "event", EventConnUp, "conn", conn, "peer", peer)
}

// ConnDown logs a closed connection.
func (e *Events) ConnDown(conn, reason string) {
	e.log.Info("connection down", "event", EventConnDown, "conn", conn, "reason", reason)
}

// PathUp logs a path becoming usable.
func (e *Events) PathUp(conn, path string, rtt time.Duration) {
	e.log.Info("path up", "event", EventPathUp, "conn", conn, "path", path, "rtt", rtt)
}

// PathDown logs a path failing.
func (e *Events) PathDown(conn, path, reason string) {
	e.log.Warn("path down", "event", EventPathDown, "conn", conn, "path", path, "reason", reason)
}

// PathRebind logs a subflow whose remote address changed (NAT rebinding).
func (e *Events) PathRebind(conn, path, from, to string) {
	e.log.Info("path remote address changed", "event", EventPathRebind, "conn", conn, "path", path, "from", from, "to", to)
}

// Congestion logs a congestion event (loss, ECN CE, RTO, state change) at
// debug level: there can be several per second.
func (e *Events) Congestion(conn, path, kind string, cwnd int, srtt time.Duration) {
	e.log.Debug("congestion event", "event", EventCongestion, "conn", conn, "path", path, "kind", kind, "cwnd", cwnd, "srtt", srtt)
}
