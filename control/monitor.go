// SPDX-License-Identifier: MIT

package control

import "time"

// MethodMonitor streams the daemon's path and connection events
// (`mptun monitor`): one MonitorEvent per result line.
const MethodMonitor = "monitor"

// MonitorRequest is the (optional) parameters of "monitor".
type MonitorRequest struct {
	// Status first sends the current state of the connections and paths
	// as events of kind "state".
	Status bool `json:"status,omitempty"`
}

// MonitorEvent is one event: a path went up, down or suspect, joined,
// was bound to a new address, the active path changed, and so on. Kind is
// the path manager's event name ("path-suspect", "join", "rebind",
// "mode-switch", ...); "events-lost" says the monitor fell behind.
type MonitorEvent struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"event"`
	Conn   string    `json:"conn,omitempty"` // local connection id, 8 hex digits
	Path   string    `json:"path,omitempty"` // a client's path name
	PathID *int      `json:"path_id,omitempty"`
	Remote string    `json:"remote,omitempty"`
	Reason string    `json:"reason,omitempty"`
}
