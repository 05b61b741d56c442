// SPDX-License-Identifier: MIT

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
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

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Status snapshots the daemon; engine and path manager state is read in
// the owner goroutine.
func (d *Daemon) Status(ctx context.Context) (control.Status, error) {
	return d.StatusWith(ctx, control.StatusRequest{})
}

// StatusWith is Status with the request's options.
func (d *Daemon) StatusWith(ctx context.Context, req control.StatusRequest) (control.Status, error) {
	name, _ := d.dev.Name()
	cfg := d.config()
	st := control.Status{APIVersion: control.APIVersion, Role: cfg.Connection.Role, Tunnel: name, InnerMTU: d.innerMTU,
		UptimeS: time.Since(d.start).Seconds(), Dropped: map[string]uint64{}, ConnStates: map[string]int{}}
	err := d.dp.Do(ctx, func(now mono.Time, ep *mpdccp.Endpoint) {
		es := ep.Stats()
		for r, n := range es.Dropped { // summed over a concentrator's owners
			if n > 0 {
				st.Dropped[mpdccp.DropReason(r).String()] += n
			}
		}
		st.ResetsSent += es.ResetsSent
		st.CookieReplies += es.CookieReplies
		st.Security = cfg.Connection.Security
		if ep.Sealed() {
			st.PublicKey = ep.PublicKey().String()
		}
		// The engine decapsulates ECN (RFC 6040); the counters stay under
		// "datapath" in the API, where they always were.
		st.Datapath.DroppedECN += es.InnerECNDropped
		st.Datapath.MarkedCE += es.InnerCEMarked
		m := d.managerOf(ep) // a sharded concentrator: each owner's own
		set := m.Settings()
		st.Mode = string(set.Mode)
		if ep == d.ep {
			for _, p := range m.Paths() {
				mp := control.ManagedPath{ID: p.ID, Name: p.Name, Link: p.Link, LinkUp: p.LinkUp, Prio: p.Prio, Active: p.Active}
				if p.Local.IsValid() {
					mp.Local = p.Local.String()
				}
				if p.Remote.IsValid() {
					mp.Remote = p.Remote.String()
				}
				st.Paths = append(st.Paths, mp)
			}
		}
		server := cfg.Connection.Role == config.RoleServer
		for _, c := range ep.Conns() {
			st.ConnStates[c.State().String()]++
			if req.Summary {
				continue
			}
			st.Conns = append(st.Conns, d.connStatus(now, c, set, server))
		}
	})
	s := d.dp.Stats
	p50, p99, mx := d.dp.TimerLateness()
	droppedECN, markedCE := st.Datapath.DroppedECN, st.Datapath.MarkedCE
	st.Datapath = control.DPStatus{
		TUNRead: s.TUNRead.Load(), TUNWritten: s.TUNWritten.Load(), UDPRead: s.UDPRead.Load(),
		UDPWritten: s.UDPWritten.Load(), UDPReadBatches: s.UDPReadBatches.Load(), UDPSendCalls: s.UDPSendCalls.Load(),
		DroppedTooBig: s.DroppedTooBig.Load(), DroppedNoRoute: s.DroppedNoRoute.Load(),
		DroppedQueueFull: s.DroppedQueueFull.Load(), DroppedECN: droppedECN, MarkedCE: markedCE,
		SendErrors:     s.SendErrors.Load(),
		TimerLateP50us: float64(p50) / 1e3, TimerLateP99us: float64(p99) / 1e3, TimerLateMaxus: float64(mx) / 1e3,
	}
	st.Process = processStatus(req.GC)
	st.Process.EventsLost = d.hub.dropped.Load()
	return st, err
}

// connStatus describes one connection (owner goroutine).
func (d *Daemon) connStatus(now mono.Time, c *mpdccp.Conn, set pathmgr.Settings, server bool) control.ConnStatus {
	cs := c.Stats()
	rc := set.ReorderConfig()
	out := control.ConnStatus{State: cs.State.String(), LocalCI: cs.LocalCI, PeerCI: cs.PeerCI,
		Scheduler: c.SchedulerName(), Reorderer: c.ReordererName(), Queued: cs.Queued,
		SentPackets: cs.SentPackets, SentBytes: cs.SentBytes,
		DeliveredPackets: cs.DeliveredPackets, DeliveredBytes: cs.DeliveredBytes,
		QueueDrops: cs.QueueDrops, Repaired: cs.Repaired, NACKsSent: cs.NACKsSent, NACKsReceived: cs.NACKsReceived,
		Reorder: reorderStatus(cs.Reorder), AQM: aqmStatus(cs.AQM), SchedulerPicks: cs.Scheduler.Picks,
		ReorderHoldMs: ms(rc.MaxHold), Repair: set.Retransmit, AEAD: c.AEAD()}
	if k := c.PeerKey(); !k.IsZero() {
		out.Peer = k.String()
	}
	for _, p := range cs.Paths {
		if p.ID < 0 {
			continue // a dropped subflow saying goodbye
		}
		cc := p.CC
		ps := control.PathStatus{ID: p.ID, State: p.State, Failed: p.Failed,
			Local: p.LocalAddr.String(), Remote: p.Remote.String(), Prio: p.Prio, CCID: p.CCID,
			Phase: cc.Phase, RTTms: ms(cc.SRTT), MinRTTms: ms(cc.MinRTT), Cwnd: cc.Cwnd,
			InQueueMs: ms(p.InQueue), OutQueueMs: ms(p.OutQueue),
			InFlight: cc.InFlight, RateMbps: cc.DeliveryRate * 8 / 1e6, PacingMbps: cc.PacingRate * 8 / 1e6,
			PacketsSent: cc.PacketsSent, PacketsLost: cc.PacketsLost, ECNMarks: cc.ECNMarks,
			Spurious: cc.SpuriousEvents, Timeouts: cc.Timeouts, LastHeardMs: ms(now.Sub(p.LastHeard)),
			PacingLateMeanUs: float64(cc.PacingLateMean) / 1e3, PacingLateMaxUs: float64(cc.PacingLateMax) / 1e3,
			Suspect: p.Suspect, Suspicions: p.Suspicions, Reinjected: p.Reinjected,
			ShortSeqnos: p.ShortSeqnos, ChecksumCoverage: coverageName(p.HeaderChecksum)}
		ps.DatagramsSent, ps.DatagramsReceived = p.PacketsOut, p.PacketsIn
		ps.BytesSent, ps.BytesReceived = p.BytesOut, p.BytesIn
		if !server {
			ps.Name = d.mgr.PathName(p.ID)
		}
		if cc.PacketsSent > 0 {
			ps.LossPct = 100 * float64(cc.PacketsLost) / float64(cc.PacketsSent)
		}
		out.Paths = append(out.Paths, ps)
	}
	return out
}

// currentState describes the connections and paths as events, for the
// start of a monitor.
func (d *Daemon) currentState(ctx context.Context) []control.MonitorEvent {
	st, err := d.Status(ctx)
	if err != nil {
		return nil
	}
	var out []control.MonitorEvent
	now := time.Now()
	for _, c := range st.Conns {
		conn := fmt.Sprintf("%08x", c.LocalCI)
		out = append(out, control.MonitorEvent{Time: now, Kind: "state", Conn: conn, Reason: "connection " + c.State})
		for _, p := range c.Paths {
			id := p.ID
			state := p.State
			switch {
			case p.Failed:
				state = "failed"
			case p.Suspect:
				state = "suspect"
			}
			out = append(out, control.MonitorEvent{Time: now, Kind: "state", Conn: conn, Path: p.Name, PathID: &id,
				Remote: p.Remote, Reason: "path " + state})
		}
	}
	for _, p := range st.Paths {
		if p.Local == "" {
			id := p.ID
			out = append(out, control.MonitorEvent{Time: now, Kind: "state", Path: p.Name, PathID: &id,
				Reason: "path has no socket (waiting for an address)"})
		}
	}
	return out
}

func (d *Daemon) handlers() control.Handlers {
	return control.Handlers{
		control.MethodStatus: func(raw json.RawMessage) (any, error) {
			var req control.StatusRequest
			if len(raw) > 0 && string(raw) != "null" {
				if err := control.DecodeParams(raw, &req); err != nil {
					return nil, err
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return d.StatusWith(ctx, req)
		},
		// capture: registered with the caller's credentials (privileges.go).
		control.MethodSet: func(raw json.RawMessage) (any, error) {
			var req control.SetRequest
			if err := control.DecodeParams(raw, &req); err != nil {
				return nil, err
			}
			if err := req.Validate(); err != nil {
				return nil, err
			}
			return nil, d.apply(req)
		},
	}
}

// apply changes runtime settings through the path manager, in the
// engine's goroutine: the open connections and the ones opened later.
func (d *Daemon) apply(req control.SetRequest) error {
	mr := pathmgr.Request{Scheduler: req.Scheduler, Reorderer: req.Reorderer, Mode: pathmgr.Mode(req.Mode), Prio: req.Prio}
	if req.Hold != "" {
		h, err := time.ParseDuration(req.Hold)
		if err != nil {
			return fmt.Errorf("hold %q: %w", req.Hold, err)
		}
		mr.Hold = h
	}
	switch {
	case req.Path != nil:
		mr.Path = strconv.Itoa(*req.Path)
	case req.PathName != "":
		mr.Path = req.PathName
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return d.withManager(ctx, func(now mono.Time, m *pathmgr.Manager) error { return m.Set(now, mr) })
}

// reorderStatus and aqmStatus copy the engine's counters into the API's
// types, which do not change when the engine's do.
func reorderStatus(s reorder.Stats) control.ReorderStats {
	return control.ReorderStats{Delivered: s.Delivered, InOrder: s.InOrder, Held: s.Held,
		OutOfOrder: s.OutOfOrder, Urgent: s.Urgent, GapsSkipped: s.GapsSkipped,
		GapsLateArrive: s.GapsLateArrive, Duplicates: s.Duplicates, LateDropped: s.LateDropped,
		Overflow: s.Overflow, PathOrdered: s.PathOrdered, Holes: s.Holes, NACKs: s.NACKs, Repaired: s.Repaired,
		RepairGivenUp: s.RepairGivenUp, Buffered: s.Buffered, HoldHist: append([]uint64(nil), s.HoldHist[:]...)}
}

func aqmStatus(s aqm.Stats) control.AQMStats {
	return control.AQMStats{Enqueued: s.Enqueued, Dequeued: s.Dequeued, Marked: s.Marked,
		Dropped: s.Dropped, TailDropped: s.TailDropped, Superseded: s.Superseded, MaxSojourn: s.MaxSojourn}
}

// coverageName names a path's DCCP checksum coverage for the status API.
func coverageName(header bool) string {
	if header {
		return "header"
	}
	return "full"
}
