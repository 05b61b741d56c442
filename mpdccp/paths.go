// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

// Path management commands for a path manager (pathmgr): a path that
// comes and goes re-joins under the same id, closed subflows are
// forgotten so that a flapping path does not grow the connection, and a
// cheap snapshot of the paths drives its decisions.

// droppedID is the id of a subflow that DropPath detached from its path:
// its last packets and events carry it, and the id is free for a new join.
const droppedID = -1

// PathInfo is a snapshot of one subflow for a path manager.
type PathInfo struct {
	ID         int
	Open       bool // established (not handshaking, closing or closed)
	Closed     bool
	Failed     bool // nothing heard for PathTimeout
	Suspect    bool // no ack in time (suspect.go)
	Join       bool
	AddrID     uint8 // our address id (MP_JOIN), 0 for the first subflow
	PeerAddrID uint8 // the peer's address id of this subflow
	Local      int
	LocalAddr  netip.AddrPort
	Remote     netip.AddrPort
	Prio       uint8
	SRTT       time.Duration
	RTTVar     time.Duration
	MinRTT     time.Duration
	Sent, Lost uint64 // packets (congestion controller counters)
	LastHeard  mono.Time
	// ProbeRTT is the round trip of the last answered probe (a Sync),
	// taken at ProbeAt: an RTT for a path that carries no data.
	ProbeRTT time.Duration
	ProbeAt  mono.Time
	// OutOfWindow counts the peer's packets dropped as outside the
	// sequence window: growing on a failed path, it means the two ends
	// lost sync during an outage (a new join is the way back).
	OutOfWindow uint64
}

// PathInfos appends a snapshot of the connection's subflows to dst
// (allocation-free when dst has room).
func (c *Conn) PathInfos(dst []PathInfo) []PathInfo {
	for _, sf := range c.subflows {
		if sf.id == droppedID {
			continue
		}
		st := sf.cc.State()
		dst = append(dst, PathInfo{ID: sf.id, Open: sf.state == sfOpen, Closed: sf.state == sfClosed,
			Failed: sf.failed, Suspect: sf.sus.on, Join: sf.join, AddrID: sf.addrID, PeerAddrID: sf.peerAddrID,
			Local: sf.local, LocalAddr: sf.localAddr, Remote: sf.remote, Prio: sf.prio,
			SRTT: st.SRTT, RTTVar: st.RTTVar, MinRTT: st.MinRTT, Sent: st.PacketsSent, Lost: st.PacketsLost,
			LastHeard: sf.lastHeard, ProbeRTT: sf.sus.probeRTT, ProbeAt: sf.sus.probeAnswered,
			OutOfWindow: sf.stats.OutOfWindow})
	}
	return dst
}

// DropPath ends path id's subflow at once, without a Close handshake:
// an open subflow sends a Reset (code 2, aborted) and is gone, one still
// handshaking is abandoned. The data packets it still held go again on
// the other paths (suspect.go). The id is free for JoinPath immediately.
// A pending join of that id is cancelled. Dropping the last subflow
// closes the connection.
func (c *Conn) DropPath(now mono.Time, id int) error {
	c.touch()
	sf := c.pathByID(id)
	if sf == nil {
		if c.cancelPendingJoin(id) {
			return nil
		}
		return fmt.Errorf("mpdccp: DropPath: no path %d", id)
	}
	if sf.state == sfOpen && c.state == Open {
		sf.sus.reinjected += uint64(c.reinject(now, sf))
	}
	sf.id = droppedID
	switch sf.state {
	case sfClosed:
	case sfRequest:
		c.subflowClosed(sf, 0, "dropped")
	default:
		sf.resetOut, sf.resetCode = true, wire.ResetAborted
		c.holdUntil = 0
	}
	c.updatePaths()
	return nil
}

// JoinPath starts a join on p (a client's AddPath) after forgetting a
// closed subflow that had p.ID, so that a path that failed joins again
// under its own id.
func (c *Conn) JoinPath(now mono.Time, p PathConfig) error {
	c.ForgetClosedPaths()
	return c.AddPath(now, p)
}

// ForgetClosedPaths removes closed subflows that have nothing more to
// send, releasing their buffers, and returns how many. On a server the
// next joined path takes the lowest id above the remaining ones, so ids
// stay small on a long-lived connection with a flapping path.
func (c *Conn) ForgetClosedPaths() int {
	n := 0
	keep := c.subflows[:0]
	for _, sf := range c.subflows {
		if sf.state == sfClosed && !sf.resetOut {
			c.releaseSubflow(sf)
			n++
			continue
		}
		keep = append(keep, sf)
	}
	for i := len(keep); i < len(c.subflows); i++ {
		c.subflows[i] = nil
	}
	c.subflows = keep
	if n > 0 {
		c.touch()
		if c.ep.cfg.Role == Server {
			hi := 0
			for _, sf := range c.subflows {
				hi = max(hi, sf.id)
			}
			c.nextPathID = hi
		}
		c.updatePaths()
	}
	return n
}

// releaseSubflow frees what a forgotten subflow still holds.
func (c *Conn) releaseSubflow(sf *subflow) {
	c.ep.unindex(sf)
	c.rtxDrop(sf)
	// Control items bound to sf go at the next timer (sf is closed).
}

// SchedulerName and ReordererName name what the connection uses now.
func (c *Conn) SchedulerName() string { return c.sched.Name() }

// ReordererName names the connection's reorderer.
func (c *Conn) ReordererName() string { return c.reo.Name() }

// DefaultPrio is a path's MP_PRIO unless set otherwise (primary).
const DefaultPrio = 3

// Role is the endpoint's side of the handshake.
func (e *Endpoint) Role() Role { return e.cfg.Role }
