// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/config"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/pathmgr"
	"github.com/mptun/mptun/reorder"
)

// Status is the answer to the control method "status"; `mptun status
// --json` prints it as is.
type Status struct {
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

// ProcessStatus is the daemon's own footprint (leaks show here).
type ProcessStatus struct {
	Goroutines int    `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"`
	SysBytes   uint64 `json:"sys_bytes"`
	GCs        uint32 `json:"gcs"`
	EventsLost uint64 `json:"monitor_events_lost"`
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
	// The reorderer's hold and whether it waits for loss repair (it
	// holds gaps for the repair to arrive).
	ReorderHoldMs  float64        `json:"reorder_max_hold_ms"`
	Repair         bool           `json:"repair"`
	Paths          []PathStatus   `json:"paths"`
	Reorder        reorder.Stats  `json:"reorder"`
	AQM            aqm.Stats      `json:"aqm"`
	SchedulerPicks map[int]uint64 `json:"scheduler_picks"`
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

// PathStatus is one subflow.
type PathStatus struct {
	ID          int     `json:"id"`
	Name        string  `json:"name,omitempty"`
	State       string  `json:"state"`
	Failed      bool    `json:"failed"`
	Local       string  `json:"local"`
	Remote      string  `json:"remote"`
	Prio        uint8   `json:"prio"`
	CCID        string  `json:"ccid"`
	Phase       string  `json:"phase"`
	RTTms       float64 `json:"rtt_ms"`
	MinRTTms    float64 `json:"min_rtt_ms"`
	Cwnd        int     `json:"cwnd"`
	InFlight    int     `json:"in_flight"`
	RateMbps    float64 `json:"rate_mbps"`
	PacingMbps  float64 `json:"pacing_mbps"`
	PacketsSent uint64  `json:"packets_sent"`
	PacketsLost uint64  `json:"packets_lost"`
	LossPct     float64 `json:"loss_pct"`
	ECNMarks    uint64  `json:"ecn_marks"`
	Spurious    uint64  `json:"spurious_events"`
	Timeouts    uint64  `json:"timeouts"`
	LastHeardMs float64 `json:"last_heard_ms_ago"`
	// Suspect: no ack in time; its data went on the other paths and it
	// carries none until probes are answered.
	Suspect    bool   `json:"suspect"`
	Suspicions uint64 `json:"suspicions"`
	Reinjected uint64 `json:"reinjected"`
	// Pacing lateness: how much later than the controller's release time
	// packets actually left (timer and batching error).
	PacingLateMeanUs float64 `json:"pacing_late_mean_us"`
	PacingLateMaxUs  float64 `json:"pacing_late_max_us"`
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

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Status snapshots the daemon; engine state is read in its owner goroutine.
func (d *Daemon) Status(ctx context.Context) (Status, error) {
	name, _ := d.dev.Name()
	cfg := d.config()
	st := Status{Role: cfg.Connection.Role, Tunnel: name, InnerMTU: d.innerMTU,
		UptimeS: time.Since(d.start).Seconds(), Dropped: map[string]uint64{}}
	err := d.dp.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		es := ep.Stats()
		for r, n := range es.Dropped {
			if n > 0 {
				st.Dropped[mpdccp.DropReason(r).String()] = n
			}
		}
		st.ResetsSent = es.ResetsSent
		set := d.mgr.Settings()
		st.Mode = string(set.Mode)
		for _, p := range d.mgr.Paths() {
			mp := ManagedPath{ID: p.ID, Name: p.Name, Link: p.Link, LinkUp: p.LinkUp, Prio: p.Prio, Active: p.Active}
			if p.Local.IsValid() {
				mp.Local = p.Local.String()
			}
			if p.Remote.IsValid() {
				mp.Remote = p.Remote.String()
			}
			st.Paths = append(st.Paths, mp)
		}
		for _, c := range ep.Conns() {
			st.Conns = append(st.Conns, d.connStatus(now, c, set))
		}
	})
	s := &d.dp.Stats
	p50, p99, mx := d.dp.TimerLateness()
	st.Datapath = DPStatus{
		TUNRead: s.TUNRead.Load(), TUNWritten: s.TUNWritten.Load(), UDPRead: s.UDPRead.Load(),
		UDPWritten: s.UDPWritten.Load(), UDPReadBatches: s.UDPReadBatches.Load(), UDPSendCalls: s.UDPSendCalls.Load(),
		DroppedTooBig: s.DroppedTooBig.Load(), DroppedNoRoute: s.DroppedNoRoute.Load(),
		DroppedQueueFull: s.DroppedQueueFull.Load(), DroppedECN: s.DroppedECN.Load(), MarkedCE: s.MarkedCE.Load(),
		SendErrors:     s.SendErrors.Load(),
		TimerLateP50us: float64(p50) / 1e3, TimerLateP99us: float64(p99) / 1e3, TimerLateMaxus: float64(mx) / 1e3,
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st.Process = ProcessStatus{Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc, SysBytes: ms.Sys,
		GCs: ms.NumGC, EventsLost: d.hub.dropped.Load()}
	return st, err
}

// connStatus describes one connection (owner goroutine).
func (d *Daemon) connStatus(now mono.Time, c *mpdccp.Conn, set pathmgr.Settings) ConnStatus {
	cs := c.Stats()
	rc := set.ReorderConfig()
	out := ConnStatus{State: cs.State.String(), LocalCI: cs.LocalCI, PeerCI: cs.PeerCI,
		Scheduler: c.SchedulerName(), Reorderer: c.ReordererName(), Queued: cs.Queued,
		SentPackets: cs.SentPackets, SentBytes: cs.SentBytes,
		DeliveredPackets: cs.DeliveredPackets, DeliveredBytes: cs.DeliveredBytes,
		QueueDrops: cs.QueueDrops, Repaired: cs.Repaired, Reorder: cs.Reorder, AQM: cs.AQM, SchedulerPicks: cs.Scheduler.Picks,
		ReorderHoldMs: ms(rc.MaxHold), Repair: set.Retransmit && rc.HoldGaps}
	for _, p := range cs.Paths {
		if p.ID < 0 {
			continue // a dropped subflow saying goodbye
		}
		cc := p.CC
		ps := PathStatus{ID: p.ID, Name: d.mgr.PathName(p.ID), State: p.State, Failed: p.Failed,
			Local: p.LocalAddr.String(), Remote: p.Remote.String(), Prio: p.Prio, CCID: p.CCID,
			Phase: cc.Phase, RTTms: ms(cc.SRTT), MinRTTms: ms(cc.MinRTT), Cwnd: cc.Cwnd,
			InFlight: cc.InFlight, RateMbps: cc.DeliveryRate * 8 / 1e6, PacingMbps: cc.PacingRate * 8 / 1e6,
			PacketsSent: cc.PacketsSent, PacketsLost: cc.PacketsLost, ECNMarks: cc.ECNMarks,
			Spurious: cc.SpuriousEvents, Timeouts: cc.Timeouts, LastHeardMs: ms(now.Sub(p.LastHeard)),
			PacingLateMeanUs: float64(cc.PacingLateMean) / 1e3, PacingLateMaxUs: float64(cc.PacingLateMax) / 1e3,
			Suspect: p.Suspect, Suspicions: p.Suspicions, Reinjected: p.Reinjected}
		if d.config().Connection.Role == config.RoleServer {
			ps.Name = ""
		}
		if cc.PacketsSent > 0 {
			ps.LossPct = 100 * float64(cc.PacketsLost) / float64(cc.PacketsSent)
		}
		out.Paths = append(out.Paths, ps)
	}
	return out
}

// currentState describes the paths as events, for a monitor's start.
func (d *Daemon) currentState(ctx context.Context) []MonitorEvent {
	st, err := d.Status(ctx)
	if err != nil {
		return nil
	}
	var out []MonitorEvent
	now := time.Now()
	for _, c := range st.Conns {
		conn := fmt.Sprintf("%08x", c.LocalCI)
		out = append(out, MonitorEvent{Time: now, Kind: "state", Conn: conn, Reason: "connection " + c.State})
		for _, p := range c.Paths {
			id := p.ID
			state := p.State
			switch {
			case p.Failed:
				state = "failed"
			case p.Suspect:
				state = "suspect"
			}
			out = append(out, MonitorEvent{Time: now, Kind: "state", Conn: conn, Path: p.Name, PathID: &id,
				Remote: p.Remote, Reason: "path " + state})
		}
	}
	for _, p := range st.Paths {
		id := p.ID
		if p.Local == "" {
			out = append(out, MonitorEvent{Time: now, Kind: "state", Path: p.Name, PathID: &id, Reason: "path has no socket (waiting for an address)"})
		}
	}
	return out
}

// SetRequest is the "set" method's parameters; absent fields stay as they are.
type SetRequest struct {
	Scheduler string `json:"scheduler,omitempty"`
	Reorderer string `json:"reorderer,omitempty"`
	// Hold is the reorderer's longest hold, e.g. "150ms".
	Hold string `json:"hold,omitempty"`
	// Mode is "aggregate", "active-backup" or "switch".
	Mode string `json:"mode,omitempty"`
	// Path (an id) or PathName (a client's path name) and Prio set a
	// path's MP_PRIO; on a client it sticks to the path across re-joins.
	Path     *int   `json:"path,omitempty"`
	PathName string `json:"path_name,omitempty"`
	Prio     *uint8 `json:"prio,omitempty"`
}

func (d *Daemon) handlers() control.Handlers {
	return control.Handlers{
		"status": func(json.RawMessage) (any, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return d.Status(ctx)
		},
		"capture": d.handleCapture,
		"set": func(raw json.RawMessage) (any, error) {
			var req SetRequest
			if len(raw) == 0 || string(raw) == "null" {
				return nil, errors.New("params required, e.g. {\"scheduler\":\"otias\"}")
			}
			dec := json.NewDecoder(bytesReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return nil, fmt.Errorf("bad params: %w", err)
			}
			return nil, d.apply(req)
		},
	}
}

// apply changes runtime settings through the path manager, in the
// engine's goroutine: the open connections and the ones opened later.
func (d *Daemon) apply(req SetRequest) error {
	mr := pathmgr.Request{Scheduler: req.Scheduler, Reorderer: req.Reorderer, Mode: pathmgr.Mode(req.Mode), Prio: req.Prio}
	if req.Hold != "" {
		h, err := time.ParseDuration(req.Hold)
		if err != nil || h <= 0 || h > 10*time.Second {
			return fmt.Errorf("hold %q: want a duration up to 10s, e.g. \"150ms\"", req.Hold)
		}
		mr.Hold = h
	}
	switch {
	case req.Path != nil && req.PathName != "":
		return errors.New("path and path_name: give one")
	case req.Path != nil:
		mr.Path = strconv.Itoa(*req.Path)
	case req.PathName != "":
		mr.Path = req.PathName
	}
	if (mr.Path == "") != (req.Prio == nil) {
		return errors.New("path and prio go together")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return d.withManager(ctx, func(now mono.Time, m *pathmgr.Manager) error { return m.Set(now, mr) })
}
