// SPDX-License-Identifier: MIT

package pathmgr

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp"
)

// Modes are carried out with MP_PRIO: the schedulers send on standby
// paths (prio 1) only when no primary or secondary one is usable, so in
// active-backup and switch modes the active path keeps its priority (at
// least 2) and the others get 1. A suspected or failed active path stops
// carrying data at once (the engine and scheduler see to that); the
// manager then makes the next healthy path active, and moves traffic back
// to a more preferred path only after it has been healthy for Hold.

// modeState is what the modes remember.
type modeState struct {
	active  int // active path id; 0 with activeOK false: none yet
	hasAct  bool
	quality map[int]*quality
}

// quality is one path's health for the modes.
type quality struct {
	healthy      bool
	healthySince mono.Time
	badSince     mono.Time // a soft problem began
	good         bool      // switch mode: within thresholds (with hysteresis)
	cause        string    // why it is not good
	samples      []lossSample
	why          string // why it is not healthy
}

type lossSample struct {
	at         mono.Time
	sent, lost uint64
	rtt        time.Duration
}

// desiredPrio is the MP_PRIO path p should have now.
func (m *Manager) desiredPrio(p *path) uint8 {
	prio := p.configuredPrio()
	if m.set.Mode == ModeAggregate || prio == 0 || !m.mode.hasAct {
		return prio
	}
	if p.id == m.mode.active {
		return max(prio, 3)
	}
	return 1
}

// updatePrios sends MP_PRIO for the paths whose priority differs from
// what they should have.
func (m *Manager) updatePrios(now mono.Time) {
	if m.cfg.Role != Client || m.conn == nil || m.conn.State() != mpdccp.Open {
		return
	}
	m.infos = m.conn.PathInfos(m.infos[:0])
	for _, in := range m.infos {
		p := m.pathByID(in.ID)
		if p == nil || in.Closed {
			continue
		}
		if want := m.desiredPrio(p); want != in.Prio {
			_ = m.conn.SetPrio(now, in.ID, want)
		}
	}
}

// periodic runs the modes (client) and tidies connections (server).
func (m *Manager) periodic(now mono.Time) {
	if m.cfg.Role == Server {
		m.serverTidy(now)
		return
	}
	if m.conn == nil || m.conn.State() != mpdccp.Open {
		return
	}
	if m.set.Mode != ModeAggregate {
		m.runMode(now)
	}
	m.updatePrios(now)
}

// runMode picks the active path of active-backup and switch modes.
func (m *Manager) runMode(now mono.Time) {
	ms := &m.mode
	if ms.quality == nil {
		ms.quality = map[int]*quality{}
	}
	m.infos = m.conn.PathInfos(m.infos[:0])
	for _, p := range m.paths {
		q := ms.quality[p.id]
		if q == nil {
			q = &quality{}
			ms.quality[p.id] = q
		}
		in, ok := m.infoIn(p.id)
		m.judge(now, p, q, in, ok)
	}
	// Candidates by preference: priority, then config order.
	cands := make([]*path, 0, len(m.paths))
	for _, p := range m.paths {
		if p.configuredPrio() > 0 {
			cands = append(cands, p)
		}
	}
	slices.SortStableFunc(cands, func(a, b *path) int { return int(b.configuredPrio()) - int(a.configuredPrio()) })
	var cur *path
	if ms.hasAct {
		cur = m.pathByID(ms.active)
	}
	var next *path
	for _, p := range cands {
		q := ms.quality[p.id]
		if !q.healthy {
			continue
		}
		if p == cur {
			next = p
			break
		}
		// Move to a more preferred path only once it has stayed healthy
		// for Hold; leave an unhealthy active path at once.
		if cur == nil || !ms.quality[cur.id].healthy || now.Sub(q.healthySince) >= m.set.Switch.Hold {
			next = p
			break
		}
	}
	if next == nil || next == cur {
		return
	}
	why := "start"
	if cur != nil {
		why = fmt.Sprintf("%s → %s", cur.spec.Name, next.spec.Name)
		if r := ms.quality[cur.id].why; r != "" {
			why += ": " + cur.spec.Name + " " + r
		} else {
			why += ": " + next.spec.Name + " preferred and healthy for " + m.set.Switch.Hold.String()
		}
	}
	ms.active, ms.hasAct = next.id, true
	m.emit(now, EventModeSwitch, m.connID(), next.id, netip.AddrPort{}, "%s: active path %s", m.set.Mode, why)
}

func (m *Manager) infoIn(id int) (mpdccp.PathInfo, bool) {
	for _, in := range m.infos {
		if in.ID == id && !in.Closed {
			return in, true
		}
	}
	return mpdccp.PathInfo{}, false
}

// judge updates a path's health: open, not failed or suspected, link up,
// and in switch mode within the RTT and loss thresholds. A suspicion or a
// passed threshold counts only once it lasted settle: the scheduler
// already keeps data off a suspected path, and a short spike (a queue
// filling as traffic moves onto a path) must not make the modes thrash.
func (m *Manager) judge(now mono.Time, p *path, q *quality, in mpdccp.PathInfo, ok bool) {
	hard, soft := "", ""
	switch {
	case !ok || !in.Open:
		hard = "has no open subflow"
	case p.linkDown:
		hard = "link down"
	case in.Failed:
		hard = "failed"
	case in.Suspect:
		soft = "suspected"
	}
	if m.set.Mode == ModeSwitch && ok {
		active := m.mode.hasAct && m.mode.active == p.id
		m.judgeQuality(now, q, in, active)
		if soft == "" && !q.good {
			soft = q.why
		}
	}
	switch {
	case soft != "" && hard == "":
		if q.badSince == 0 {
			q.badSince = now
		}
		if now.Sub(q.badSince) < settle {
			soft = "" // not yet
		}
	default:
		q.badSince = 0
	}
	why := hard + soft
	healthy := why == ""
	if healthy && !q.healthy {
		q.healthySince = now
	}
	q.healthy = healthy
	q.why = why
}

// settle is how long a soft problem (suspicion, a threshold) must last
// before the modes act on it.
const settle = 500 * time.Millisecond

// judgeQuality applies the switch thresholds with hysteresis. The RTT is
// the smallest smoothed RTT of the last window (queueing spikes are not
// the path's delay); a standby path carrying no data is measured by its
// probes.
func (m *Manager) judgeQuality(now mono.Time, q *quality, in mpdccp.PathInfo, active bool) {
	sw := m.set.Switch
	rtt := in.SRTT
	if !active && in.ProbeRTT > 0 && now.Sub(in.ProbeAt) < 3*time.Second {
		rtt = in.ProbeRTT
	}
	q.samples = append(q.samples, lossSample{at: now, sent: in.Sent, lost: in.Lost, rtt: rtt})
	for len(q.samples) > 2 && now.Sub(q.samples[1].at) >= sw.Window {
		q.samples = q.samples[1:]
	}
	for _, s := range q.samples {
		if s.rtt > 0 && s.rtt < rtt {
			rtt = s.rtt
		}
	}
	loss, known := 0.0, false
	if first := q.samples[0]; now.Sub(first.at) >= sw.Window/2 && in.Sent-first.sent >= 20 {
		loss, known = float64(in.Lost-first.lost)/float64(in.Sent-first.sent), true
	}
	switch {
	case rtt > sw.RTTHigh:
		q.good, q.cause = false, fmt.Sprintf("RTT %v above %v", rtt.Round(time.Millisecond), sw.RTTHigh)
	case known && loss > sw.LossHigh:
		q.good, q.cause = false, fmt.Sprintf("loss %.1f%% above %.1f%%", 100*loss, 100*sw.LossHigh)
	case rtt > 0 && rtt <= sw.RTTLow && (!known || loss <= sw.LossLow):
		q.good, q.cause = true, ""
	case rtt == 0 && !q.good && q.cause == "":
		q.good = true // nothing measured yet: give it the benefit of the doubt
	}
	if !q.good {
		q.why = q.cause
	}
}
