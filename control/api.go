// SPDX-License-Identifier: MIT

package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// The wire contract of mptund's control socket: the methods, their
// parameters and their results. The daemon answers with these types and
// the CLI decodes them; neither side needs the other's packages.

// APIVersion is the version of the contract below, sent in Status. It
// grows when a field changes meaning or disappears; a new field alone
// does not change it (clients ignore fields they do not know).
const APIVersion = 1

// Method names.
const (
	MethodStatus  = "status"
	MethodSet     = "set"
	MethodCapture = "capture"
)

// Status is the result of "status"; `mptun status --json` prints it as is.
type Status struct {
	APIVersion int               `json:"api_version"`
	Role       string            `json:"role"`
	Tunnel     string            `json:"tunnel"`
	InnerMTU   int               `json:"inner_mtu"`
	UptimeS    float64           `json:"uptime_s"`
	Mode       string            `json:"mode"`
	Conns      []ConnStatus      `json:"connections"`
	Paths      []ManagedPath     `json:"paths,omitempty"` // a client's configured paths
	Datapath   DPStatus          `json:"datapath"`
	Dropped    map[string]uint64 `json:"dropped_datagrams"`
	ResetsSent uint64            `json:"resets_sent"`
	Process    ProcessStatus     `json:"process"`
	// Security is "noise" or "none"; PublicKey is this end's key.
	Security      string `json:"security"`
	PublicKey     string `json:"public_key,omitempty"`
	CookieReplies uint64 `json:"cookie_replies"`
	// ConnStates counts the connections by state, also in a summary.
	ConnStates map[string]int `json:"connection_states"`
}

// StatusRequest is the optional parameters of "status".
type StatusRequest struct {
	// Summary leaves the connection list out (a concentrator's lists
	// thousands); ConnStates still counts them.
	Summary bool `json:"summary,omitempty"`
	// GC collects garbage first, so that process.heap_live_bytes is the
	// heap in use now (load tests divide it by the connections).
	GC bool `json:"gc,omitempty"`
}

// ProcessStatus is the daemon's own footprint (leaks show here).
type ProcessStatus struct {
	Goroutines int    `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"`
	// HeapLiveBytes is the heap the last garbage collection kept: unlike
	// HeapBytes it does not swing with garbage, so growth here is a leak.
	HeapLiveBytes uint64 `json:"heap_live_bytes"`
	SysBytes      uint64 `json:"sys_bytes"`
	GCs           uint32 `json:"gcs"`
	EventsLost    uint64 `json:"monitor_events_lost"`
}

// ManagedPath is a client path as the path manager sees it, whether or
// not it has a subflow now.
type ManagedPath struct {
	ID     int    `json:"id"`
	Name   string `json:"name"`
	Local  string `json:"local,omitempty"` // bound address; empty: no socket (e.g. waiting for an address)
	Link   string `json:"link,omitempty"`
	LinkUp bool   `json:"link_up"`
	Remote string `json:"remote,omitempty"`
	Prio   uint8  `json:"prio"`
	Active bool   `json:"active,omitempty"` // the active path in active-backup or switch mode
}

// ConnStatus is one MP-DCCP connection.
type ConnStatus struct {
	State            string `json:"state"`
	LocalCI          uint32 `json:"local_ci"`
	PeerCI           uint32 `json:"peer_ci"`
	Scheduler        string `json:"scheduler"`
	Reorderer        string `json:"reorderer"`
	Queued           int    `json:"queued"`
	SentPackets      uint64 `json:"sent_packets"`
	SentBytes        uint64 `json:"sent_bytes"`
	DeliveredPackets uint64 `json:"delivered_packets"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	QueueDrops       uint64 `json:"queue_drops"`
	Repaired         uint64 `json:"repaired"`
	NACKsSent        uint64 `json:"nacks_sent"`     // repair requests sent (receiver side)
	NACKsReceived    uint64 `json:"nacks_received"` // repair requests the peer sent
	// The reorderer's longest hold and whether it waits for loss repair
	// (holds gaps for the repair to arrive).
	ReorderHoldMs  float64        `json:"reorder_max_hold_ms"`
	Repair         bool           `json:"repair"`
	Paths          []PathStatus   `json:"paths"`
	Reorder        ReorderStats   `json:"reorder"`
	AQM            AQMStats       `json:"aqm"`
	SchedulerPicks map[int]uint64 `json:"scheduler_picks"`
	// Peer is the authenticated public key of the other end, AEAD the
	// packet protection (secure mode).
	Peer string `json:"peer,omitempty"`
	AEAD string `json:"aead,omitempty"`
}

// OpenPaths counts the connection's paths that are up.
func (c ConnStatus) OpenPaths() int {
	n := 0
	for _, p := range c.Paths {
		if p.Up() {
			n++
		}
	}
	return n
}

// ReorderStats are the receiver's reordering counters. The field names
// (no JSON tags) are the JSON keys, as in the first version of the API.
type ReorderStats struct {
	Delivered      uint64
	InOrder        uint64 // delivered without waiting
	Held           uint64 // delivered after waiting in the buffer
	OutOfOrder     uint64 // delivered with a lower MP_SEQ than one already delivered
	Urgent         uint64 // delivered at once (a redundant class), not counted in the others
	GapsSkipped    uint64 // sequence numbers given up on
	GapsLateArrive uint64 // skipped sequence numbers that arrived later
	Duplicates     uint64
	LateDropped    uint64
	Overflow       uint64 // skips forced by the buffer limit
	PathOrdered    uint64 // delivered at once in their path's order (flows kept on one path)
	Holes          uint64 // losses found in a path's own sequence
	NACKs          uint64 // repair requests for them
	Repaired       uint64 // their gaps filled by a repair
	RepairGivenUp  uint64 // their gaps skipped, no repair in time
	Buffered       int    // packets held now
	// HoldHist counts hold times: bucket i counts holds shorter than the
	// bound i of reorder.HoldBuckets and at least bound i-1; the last
	// bucket counts the rest.
	HoldHist []uint64
}

// AQMStats are the send queue's CoDel counters (JSON keys as field names).
type AQMStats struct {
	Enqueued, Dequeued uint64
	Marked             uint64 // CE marks set by CoDel
	Dropped            uint64 // CoDel drops
	TailDropped        uint64 // arrivals refused by the queue's limit
	Superseded         uint64 // queued TCP ACKs replaced by a later one of their connection
	MaxSojourn         time.Duration
}

// PathStatus is one subflow.
type PathStatus struct {
	ID       int     `json:"id"`
	Name     string  `json:"name,omitempty"`
	State    string  `json:"state"`
	Failed   bool    `json:"failed"`
	Local    string  `json:"local"`
	Remote   string  `json:"remote"`
	Prio     uint8   `json:"prio"`
	CCID     string  `json:"ccid"`
	Phase    string  `json:"phase"`
	RTTms    float64 `json:"rtt_ms"`
	MinRTTms float64 `json:"min_rtt_ms"`
	// Queueing delay of the packets arriving on the path (from the peer's
	// DCCP Timestamps) and of the packets leaving on it (the RTT's excess
	// over its minimum less the arriving queue); 0 while unmeasured.
	InQueueMs   float64 `json:"in_queue_ms"`
	OutQueueMs  float64 `json:"out_queue_ms"`
	Cwnd        int     `json:"cwnd"`
	InFlight    int     `json:"in_flight"`
	RateMbps    float64 `json:"rate_mbps"`
	PacingMbps  float64 `json:"pacing_mbps"`
	PacketsSent uint64  `json:"packets_sent"`

	// Datagrams and their bytes (DCCP packets of every type, the UDP
	// payload) sent and received on the path.
	DatagramsSent     uint64 `json:"datagrams_sent"`
	DatagramsReceived uint64 `json:"datagrams_received"`
	BytesSent         uint64 `json:"bytes_sent"`
	BytesReceived     uint64 `json:"bytes_received"`

	PacketsLost uint64  `json:"packets_lost"`
	LossPct     float64 `json:"loss_pct"`
	ECNMarks    uint64  `json:"ecn_marks"`
	Spurious    uint64  `json:"spurious_events"`
	Timeouts    uint64  `json:"timeouts"`
	LastHeardMs float64 `json:"last_heard_ms_ago"`
	// Pacing lateness: how much later than the controller's release time
	// packets actually left (timer and batching error).
	PacingLateMeanUs float64 `json:"pacing_late_mean_us"`
	PacingLateMaxUs  float64 `json:"pacing_late_max_us"`
	// Suspect: no ack in time; its data went on the other paths and it
	// carries none until probes are answered.
	Suspect    bool   `json:"suspect"`
	Suspicions uint64 `json:"suspicions"`
	Reinjected uint64 `json:"reinjected"`
	// What the ends agreed for the path's data packets: 24-bit sequence
	// numbers (Allow Short Seqnos), and a DCCP checksum over the header
	// only ("header": sealed, or the peer accepts it) or the whole packet
	// ("full").
	ShortSeqnos      bool   `json:"short_seqnos"`
	ChecksumCoverage string `json:"checksum_coverage"`
}

// Up reports whether the path is open, not declared failed nor suspected.
func (p PathStatus) Up() bool { return p.State == "open" && !p.Failed && !p.Suspect }

// DPStatus are the data path's counters.
type DPStatus struct {
	TUNRead          uint64  `json:"tun_read"`
	TUNWritten       uint64  `json:"tun_written"`
	UDPRead          uint64  `json:"udp_read"`
	UDPWritten       uint64  `json:"udp_written"`
	UDPReadBatches   uint64  `json:"udp_read_batches"`
	UDPSendCalls     uint64  `json:"udp_send_calls"`
	DroppedTooBig    uint64  `json:"dropped_too_big"`
	DroppedNoRoute   uint64  `json:"dropped_no_route"`
	DroppedQueueFull uint64  `json:"dropped_queue_full"`
	DroppedECN       uint64  `json:"dropped_ecn"`
	MarkedCE         uint64  `json:"marked_ce"`
	SendErrors       uint64  `json:"send_errors"`
	TimerLateP50us   float64 `json:"timer_lateness_p50_us"`
	TimerLateP99us   float64 `json:"timer_lateness_p99_us"`
	TimerLateMaxus   float64 `json:"timer_lateness_max_us"`
}

// SetRequest is the parameters of "set"; absent fields stay as they are.
// Changes reach the open connections and the ones opened later.
type SetRequest struct {
	Scheduler string `json:"scheduler,omitempty"`
	Reorderer string `json:"reorderer,omitempty"`
	// Hold is the reorderer's longest hold, e.g. "150ms".
	Hold string `json:"hold,omitempty"`
	// Mode is "aggregate", "active-backup" or "switch".
	Mode string `json:"mode,omitempty"`
	// Path (an id) or PathName (a client's path name) with Prio sets a
	// path's MP_PRIO; on a client it sticks to the path across re-joins.
	Path     *int   `json:"path,omitempty"`
	PathName string `json:"path_name,omitempty"`
	Prio     *uint8 `json:"prio,omitempty"`
}

// Validate checks what can be checked without the daemon's state.
func (r SetRequest) Validate() error {
	path := r.Path != nil || r.PathName != ""
	switch {
	case r.Path != nil && r.PathName != "":
		return errors.New("path and path_name: give one")
	case path != (r.Prio != nil):
		return errors.New("path and prio go together")
	case r.Scheduler == "" && r.Reorderer == "" && r.Hold == "" && r.Mode == "" && !path:
		return errors.New(`nothing to set, e.g. {"scheduler":"otias"}`)
	}
	if r.Hold != "" {
		if h, err := time.ParseDuration(r.Hold); err != nil || h <= 0 || h > 10*time.Second {
			return fmt.Errorf("hold %q: want a duration up to 10s, e.g. \"150ms\"", r.Hold)
		}
	}
	return nil
}

// MaxCapture bounds a capture's duration.
const MaxCapture = time.Hour

// CaptureRequest is the parameters (and the result) of "capture": write
// the tunnel's datagrams as they crossed the wire (pcap of IP + UDP + DCCP)
// to File for Seconds and, if DCCPFile is set, the same datagrams as IP
// protocol 33 (UDP header removed) to DCCPFile. No DCCP byte is changed.
type CaptureRequest struct {
	File     string  `json:"file"`
	Seconds  float64 `json:"seconds"`
	DCCPFile string  `json:"dccp_file,omitempty"`
}

// Duration is the capture's length.
func (r CaptureRequest) Duration() time.Duration {
	return time.Duration(r.Seconds * float64(time.Second))
}

// Validate checks the file name and the duration.
func (r CaptureRequest) Validate() error {
	if r.File == "" || !filepath.IsAbs(r.File) {
		return errors.New("file must be an absolute path")
	}
	if r.DCCPFile != "" && (!filepath.IsAbs(r.DCCPFile) || r.DCCPFile == r.File) {
		return errors.New("dccp_file must be another absolute path")
	}
	if d := r.Duration(); d <= 0 || d > MaxCapture {
		return fmt.Errorf("seconds must be in (0, %v]", MaxCapture.Seconds())
	}
	return nil
}

// DecodeParams decodes a method's params strictly: unknown fields and
// trailing data are errors, and absent params are an error.
func DecodeParams(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return errors.New("params required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad params: %w", err)
	}
	if dec.More() {
		return errors.New("bad params: trailing data after the object")
	}
	return nil
}
