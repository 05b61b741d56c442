// SPDX-License-Identifier: MIT

package mpdccp

import (
	"fmt"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

func (c *Conn) deadline() mono.Time {
	d := mono.Never
	if c.queued() > 0 && c.state == Open && c.holdUntil != mono.Never {
		d = c.holdUntil
	}
	if len(c.rtxQ) > 0 && c.state == Open {
		d = mono.Min(d, c.repairAt)
	}
	if len(c.pendPaths) > 0 {
		// Redundant copies wait only for pacing (holdUntil) or go at once.
		d = mono.Min(d, c.holdUntil)
	}
	if rd := c.reo.Deadline(); rd < d {
		d = rd
	}
	if c.mayDeliver {
		d = 0
	}
	for _, sf := range c.subflows {
		if sf.resetOut || sf.respOut || sf.syncOut || sf.syncAckOut || sf.closeOut {
			return 0
		}
		switch sf.state {
		case sfRequest:
			d = mono.Min(d, sf.reqDue)
		case sfRespond:
			d = mono.Min(d, sf.respUntil)
		case sfPartOpen:
			if sf.ackNow {
				return 0
			}
			d = mono.Min(d, sf.partDue)
		case sfClosing:
			d = mono.Min(d, sf.closeDue)
		case sfOpen:
			if sf.ackNow || sf.dataSinceAck >= sf.rxAckRatio {
				return 0
			}
			d = mono.Min(d, sf.ackDeadline)
			if sf.ackLazy && sf.rx.span() >= lazyAckSpan {
				d = mono.Min(d, sf.lastAckAt.Add(lazyAckInterval))
			}
			d = mono.Min(d, sf.cc.Deadline())
			d = mono.Min(d, c.probeDue(sf))
			d = mono.Min(d, c.suspectDeadline(sf))
			if !sf.failed {
				d = mono.Min(d, sf.lastHeard.Add(c.ep.cfg.PathTimeout))
			}
			if sf.hasChanges() {
				d = mono.Min(d, sf.lastChangeSent.Add(200*time.Millisecond))
			}
		}
	}
	for i := range c.ctrl {
		if c.ctrl[i].tries < maxCtrlTries {
			d = mono.Min(d, c.ctrl[i].next)
		}
	}
	if len(c.confirmOut) > 0 {
		return 0
	}
	if c.state == Open || c.state == Closing {
		d = mono.Min(d, c.lastHeard().Add(c.ep.cfg.IdleTimeout))
	}
	return mono.Min(d, c.shrinkDue())
}

func (c *Conn) lastHeard() mono.Time {
	t := c.created
	for _, sf := range c.subflows {
		t = mono.Max(t, sf.lastHeard)
	}
	return t
}

func (c *Conn) handleTimer(now mono.Time) {
	if c.reo.Deadline() <= now {
		c.reo.OnTimer(now)
		c.mayDeliver = true
		if c.ep.cfg.Retransmit {
			c.pollNACKs(now)
		}
	}
	for _, sf := range c.subflows {
		switch sf.state {
		case sfRequest:
			if sf.reqDue <= now && sf.reqTries >= maxRequestTries {
				reason := "no answer to Request"
				if sf.join {
					sf.state = sfClosed
					c.ep.unindex(sf)
					c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reason: reason})
				} else {
					c.subflowClosed(sf, 0, reason)
				}
			}
		case sfRespond:
			if sf.respUntil <= now {
				c.subflowClosed(sf, 0, "handshake timeout")
			}
		case sfClosing:
			if sf.closeDue <= now && sf.closeTries >= maxCloseTries {
				c.subflowClosed(sf, 0, "close timeout")
			}
		case sfOpen:
			c.rtxExpire(now, sf)
			if sf.cc.Deadline() <= now {
				sf.cc.OnTimer(now)
				c.holdUntil = 0
			}
			c.checkSuspect(now, sf)
			if !sf.failed && now.Sub(sf.lastHeard) >= c.ep.cfg.PathTimeout {
				sf.failed = true
				c.holdUntil = 0
				c.ep.emit(Event{Kind: EventPathDown, Conn: c, Path: sf.id, Remote: sf.remote,
					Reason: fmt.Sprintf("nothing heard for %v", now.Sub(sf.lastHeard))})
				c.updatePaths()
			}
		}
	}
	if c.shrinkDue() <= now {
		c.shrink(now)
	}
	for i := 0; i < len(c.ctrl); i++ {
		ci := &c.ctrl[i]
		if ci.tries >= maxCtrlTries && ci.next <= now || ci.sf != nil && ci.sf.state == sfClosed {
			c.stats.CtrlGivenUp++
			c.ctrl = append(c.ctrl[:i], c.ctrl[i+1:]...)
			i--
		}
	}
	c.pruneSubflows()
	if c.state == Open || c.state == Closing {
		if last := c.lastHeard(); now.Sub(last) >= c.ep.cfg.IdleTimeout {
			c.closeReason = "idle timeout"
			c.setClosed("idle timeout", 0)
			return
		}
	}
	if c.state == Closing {
		live := false
		for _, sf := range c.subflows {
			if sf.state != sfClosed {
				live = true
			}
		}
		if !live {
			c.setClosed(c.closeReason, 0)
		}
	}
}
