// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mptun/mptun/ccid/aqm"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
	"github.com/mptun/mptun/reorder"
)

// Status is the answer to the control method "status"; `mptun status
// --json` prints it as is.
type Status struct {
	Role       string            `json:"role"`
	Tunnel     string            `json:"tunnel"`
	InnerMTU   int               `json:"inner_mtu"`
	UptimeS    float64           `json:"uptime_s"`
	Conns      []ConnStatus      `json:"connections"`
	Datapath   DPStatus          `json:"datapath"`
	Dropped    map[string]uint64 `json:"dropped_datagrams"`
	ResetsSent uint64            `json:"resets_sent"`
	// Security is "noise" or "none"; PublicKey is this end's key.
	Security      string `json:"security"`
	PublicKey     string `json:"public_key,omitempty"`
	CookieReplies uint64 `json:"cookie_replies"`
}

// ConnStatus is one MP-DCCP connection.
type ConnStatus struct {
	State            string         `json:"state"`
	LocalCI          uint32         `json:"local_ci"`
	PeerCI           uint32         `json:"peer_ci"`
	Scheduler        string         `json:"scheduler"`
	Reorderer        string         `json:"reorderer"`
	Queued           int            `json:"queued"`
	SentPackets      uint64         `json:"sent_packets"`
	SentBytes        uint64         `json:"sent_bytes"`
	DeliveredPackets uint64         `json:"delivered_packets"`
	DeliveredBytes   uint64         `json:"delivered_bytes"`
	QueueDrops       uint64         `json:"queue_drops"`
	Repaired         uint64         `json:"repaired"`
	Paths            []PathStatus   `json:"paths"`
	Reorder          reorder.Stats  `json:"reorder"`
	AQM              aqm.Stats      `json:"aqm"`
	SchedulerPicks   map[int]uint64 `json:"scheduler_picks"`
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
	// Pacing lateness: how much later than the controller's release time
	// packets actually left (timer and batching error).
	PacingLateMeanUs float64 `json:"pacing_late_mean_us"`
	PacingLateMaxUs  float64 `json:"pacing_late_max_us"`
}

// Up reports whether the path is open and not declared failed.
func (p PathStatus) Up() bool { return p.State == "open" && !p.Failed }

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
	st := Status{Role: d.cfg.Connection.Role, Tunnel: name, InnerMTU: d.innerMTU,
		UptimeS: time.Since(d.start).Seconds(), Dropped: map[string]uint64{}}
	d.mu.Lock()
	schedName, reoName := d.schedName, d.reoName
	d.mu.Unlock()
	err := d.dp.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		es := ep.Stats()
		for r, n := range es.Dropped {
			if n > 0 {
				st.Dropped[mpdccp.DropReason(r).String()] = n
			}
		}
		st.ResetsSent = es.ResetsSent
		st.CookieReplies = es.CookieReplies
		st.Security = d.cfg.Connection.Security
		if ep.Sealed() {
			st.PublicKey = ep.PublicKey().String()
		}
		for _, c := range ep.Conns() {
			cs := c.Stats()
			out := ConnStatus{State: cs.State.String(), LocalCI: cs.LocalCI, PeerCI: cs.PeerCI,
				Scheduler: schedName, Reorderer: reoName, Queued: cs.Queued,
				SentPackets: cs.SentPackets, SentBytes: cs.SentBytes,
				DeliveredPackets: cs.DeliveredPackets, DeliveredBytes: cs.DeliveredBytes,
				QueueDrops: cs.QueueDrops, Repaired: cs.Repaired, Reorder: cs.Reorder, AQM: cs.AQM, SchedulerPicks: cs.Scheduler.Picks,
				AEAD: c.AEAD()}
			if k := c.PeerKey(); !k.IsZero() {
				out.Peer = k.String()
			}
			for _, p := range cs.Paths {
				cc := p.CC
				ps := PathStatus{ID: p.ID, Name: d.pathName[p.ID], State: p.State, Failed: p.Failed,
					Local: p.LocalAddr.String(), Remote: p.Remote.String(), Prio: p.Prio, CCID: p.CCID,
					Phase: cc.Phase, RTTms: ms(cc.SRTT), MinRTTms: ms(cc.MinRTT), Cwnd: cc.Cwnd,
					InFlight: cc.InFlight, RateMbps: cc.DeliveryRate * 8 / 1e6, PacingMbps: cc.PacingRate * 8 / 1e6,
					PacketsSent: cc.PacketsSent, PacketsLost: cc.PacketsLost, ECNMarks: cc.ECNMarks,
					Spurious: cc.SpuriousEvents, Timeouts: cc.Timeouts, LastHeardMs: ms(now.Sub(p.LastHeard)),
					PacingLateMeanUs: float64(cc.PacingLateMean) / 1e3, PacingLateMaxUs: float64(cc.PacingLateMax) / 1e3}
				if cc.PacketsSent > 0 {
					ps.LossPct = 100 * float64(cc.PacketsLost) / float64(cc.PacketsSent)
				}
				out.Paths = append(out.Paths, ps)
			}
			st.Conns = append(st.Conns, out)
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
	return st, err
}

// SetRequest is the "set" method's parameters; absent fields stay as they are.
type SetRequest struct {
	Scheduler string `json:"scheduler,omitempty"`
	Reorderer string `json:"reorderer,omitempty"`
	Path      *int   `json:"path,omitempty"`
	Prio      *uint8 `json:"prio,omitempty"`
}

func (d *Daemon) handlers() control.Handlers {
	return control.Handlers{
		"status": func(json.RawMessage) (any, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return d.Status(ctx)
		},
		"set": func(raw json.RawMessage) (any, error) {
			var req SetRequest
			if len(raw) == 0 || string(raw) == "null" {
				return nil, errors.New("set: params required, e.g. {\"scheduler\":\"otias\"}")
			}
			dec := json.NewDecoder(bytesReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return nil, fmt.Errorf("set: bad params: %w", err)
			}
			if (req.Path == nil) != (req.Prio == nil) {
				return nil, errors.New("set: path and prio go together")
			}
			return nil, d.apply(req)
		},
	}
}

// apply changes runtime settings in the engine's goroutine.
func (d *Daemon) apply(req SetRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	derr := d.dp.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		for _, c := range ep.Conns() {
			if req.Scheduler != "" {
				if err = c.SetScheduler(req.Scheduler); err != nil {
					return
				}
			}
			if req.Reorderer != "" {
				rc := reorder.Config{MaxHold: d.cfg.Connection.ReorderMaxHold,
					BufferLimit: d.cfg.Connection.ReorderBuffer, DropLate: d.cfg.Connection.DropLate}
				if err = c.SetReorderer(req.Reorderer, rc); err != nil {
					return
				}
			}
			if req.Path != nil {
				if err = c.SetPrio(now, *req.Path, *req.Prio); err != nil {
					return
				}
			}
		}
	})
	if derr == nil && err == nil {
		d.mu.Lock()
		if req.Scheduler != "" {
			d.schedName = req.Scheduler
		}
		if req.Reorderer != "" {
			d.reoName = req.Reorderer
		}
		d.mu.Unlock()
	}
	return errors.Join(derr, err)
}
