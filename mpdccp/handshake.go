// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/hmac"
	"github.com/mptun/mptun/ccid"
	"net/netip"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

func (e *Endpoint) handleRequest(now mono.Time, local int, from netip.AddrPort, to netip.Addr, p *wire.Packet, residual uint16, b []byte) {
	if p.ServiceCode != e.cfg.ServiceCode {
		e.drop(DropBadService)
		e.queueReset(local, from, to, p, wire.ResetBadServiceCode)
		return
	}
	var (
		mpVersionOK bool
		key         wire.MPOption
		join        wire.MPOption
		haveKey     bool
		haveJoin    bool
		mo          wire.MPOption
		exp         []byte // MP_EXP: the Noise first message in secure mode
	)
	it := wire.NewOptionIter(p.Options)
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		switch o.Type {
		case wire.OptChangeR:
			if f, vals, err := wire.ParseFeature(o.Data); err == nil && f == wire.FeatMultipath {
				for _, v := range vals {
					mpVersionOK = mpVersionOK || v>>4 == 0
				}
			}
		case wire.OptMultipath:
			if wire.ParseMP(o.Data, &mo) != nil {
				continue
			}
			switch mo.Type {
			case wire.MPKey:
				key, haveKey = mo, true
			case wire.MPJoin:
				join, haveJoin = mo, true
			case wire.MPExp:
				exp = mo.Raw
			}
		}
	}
	if it.Err() != nil {
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetOptionError)
		return
	}
	if !mpVersionOK || haveKey == haveJoin {
		// No MP_CAPABLE: we do not serve plain DCCP (RFC 9897 fallback: close).
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetConnectionRefused)
		return
	}
	pc := PathConfig{Local: local, LocalAddr: netip.AddrPortFrom(to, 0), Remote: from}
	if haveJoin {
		e.acceptJoin(now, pc, join, p, residual, b)
		return
	}
	if e.sec != nil {
		e.secAccept(now, local, from, to, p, key, exp)
		return
	}
	if !e.limiter.allow(now, from.Addr()) {
		e.drop(DropRateLimited)
		return
	}
	if len(e.conns) >= e.cfg.MaxConns {
		e.drop(DropTooBusy)
		e.queueReset(local, from, to, p, wire.ResetTooBusy)
		return
	}
	c, err := e.newConn(now)
	if err != nil {
		return
	}
	// MP_KEY with a key type we support.
	if !c.keys.pickOffer(key.Keys, e.random) {
		e.removeConn(c)
		e.drop(DropBadOption)
		e.queueReset(local, from, to, p, wire.ResetOptionError)
		return
	}
	c.peerCI = key.Token
	c.mpConfirmed = true
	pc.ID = 0
	sf, err := c.newSubflow(now, pc, false)
	if err != nil {
		e.removeConn(c)
		return
	}
	sf.natResidual = residual
	c.acceptSubflow(now, sf, p)
}

// acceptJoin is a Request carrying MP_JOIN: a new subflow of the open
// connection the token names, if the join is genuine and there is room.
func (e *Endpoint) acceptJoin(now mono.Time, pc PathConfig, join wire.MPOption, p *wire.Packet, residual uint16, b []byte) {
	local, from, to := pc.Local, pc.Remote, pc.LocalAddr.Addr()
	c := e.byCI[join.Token]
	if c == nil || c.state != Open {
		e.drop(DropNoConn)
		e.queueReset(local, from, to, p, wire.ResetNoConnection)
		return
	}
	if e.sec != nil && !e.secCheckJoin(c, b, p, join.Nonce) {
		return // forged or replayed join: no subflow, no answer
	}
	live := 0
	for _, sf := range c.subflows {
		if sf.state != sfClosed {
			live++
		}
	}
	if live >= e.cfg.MaxSubflows {
		e.drop(DropTooBusy)
		e.queueReset(local, from, to, p, wire.ResetTooBusy)
		return
	}
	c.nextPathID++
	pc.ID = c.nextPathID
	sf, err := c.newSubflow(now, pc, true)
	if err != nil {
		e.drop(DropTooBusy)
		return
	}
	sf.natResidual = residual
	sf.peerAddrID = join.AddrID
	sf.addrID = 0
	sf.noncePeer = join.Nonce
	sf.nonceLocal = e.rand32()
	c.acceptSubflow(now, sf, p)
}

// acceptSubflow is the server side of a Request: RESPOND state, Response out.
func (c *Conn) acceptSubflow(now mono.Time, sf *subflow, p *wire.Packet) {
	c.touch()
	sf.state = sfRespond
	sf.localPort, sf.remotePort = p.DstPort, p.SrcPort
	sf.isr, sf.gsr, sf.gsrAt = p.Seq, p.Seq, now
	sf.hsRTT = now.Sub(sf.lastSent)
	sf.rx.init(p.Seq)
	sf.initFeatures(false)
	sf.respOut = true
	sf.respUntil = now.Add(respondTimeout)
	sf.lastHeard = now
	sf.stats.PacketsIn++
	if c.sec != nil {
		sf.crypt = c.secSubflowKeys(now, sf)
	}
	c.ep.index(sf)
	// Process the Request's feature options (Change R MP_CAPABLE etc).
	c.handleFeatures(sf, p.Options)
}

// handleFeatures processes every Change/Confirm option in opts.
func (c *Conn) handleFeatures(sf *subflow, opts []byte) {
	it := wire.NewOptionIter(opts)
	for {
		o, ok := it.Next()
		if !ok {
			return
		}
		if o.Type >= wire.OptChangeL && o.Type <= wire.OptConfirmR {
			c.handleFeature(sf, o)
		}
	}
}

func (c *Conn) subflowOpen(now mono.Time, sf *subflow) {
	if sf.state == sfOpen {
		return
	}
	sf.state = sfOpen
	sf.lastHeard = now
	c.holdUntil = 0
	if s, ok := sf.cc.(ccid.RTTSeeder); ok && sf.hsRTT > 0 {
		s.SeedRTT(now, sf.hsRTT)
	}
	c.updatePaths()
	c.ep.emit(Event{Kind: EventPathUp, Conn: c, Path: sf.id, Remote: sf.remote, Reason: "established"})
	if c.state == Connecting && !sf.join {
		c.state = Open
		c.ep.secConnOpen(now, c)
		c.ep.emit(Event{Kind: EventConnOpen, Conn: c, Path: sf.id, Remote: sf.remote})
		if c.ep.cfg.Role == Client {
			joins := c.pendingJoins
			c.pendingJoins = nil
			for _, p := range joins {
				_ = c.startJoin(now, p)
			}
		}
	}
}

func (c *Conn) handleResponse(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) {
	e := c.ep
	if sf.state != sfRequest {
		e.drop(DropBadState)
		return
	}
	sf.isr, sf.gsr, sf.gsrAt = p.Seq, p.Seq, now
	sf.hsRTT = now.Sub(sf.lastSent)
	sf.rx.init(p.Seq)
	sf.gar = p.Ack
	if !ro.confirmMP {
		// RFC 9897 fallback: no MP_CAPABLE. mptun does not run plain DCCP, so
		// the first subflow is closed; a join failing only loses that path.
		e.drop(DropBadOption)
		sf.resetOut, sf.resetCode = true, wire.ResetOptionError
		c.failSubflow(sf, wire.ResetOptionError, "peer not MP_CAPABLE")
		return
	}
	if !sf.join {
		// Secure mode: secOpenResponse has set the keys from the Noise
		// handshake before this packet could be read at all.
		if !ro.hasKey || c.sec == nil && !c.keys.acceptChosen(ro.key) || c.sec != nil && !c.sec.ready {
			e.drop(DropBadOption)
			sf.resetOut, sf.resetCode = true, wire.ResetOptionError
			c.failSubflow(sf, wire.ResetOptionError, "bad MP_KEY in Response")
			return
		}
		c.peerCI = ro.keyCI
	} else {
		var want [20]byte
		sf.noncePeer = ro.join.Nonce
		sf.peerAddrID = ro.join.AddrID
		c.joinHMAC(&want, false, sf)
		if !ro.hasJoin || ro.hmac == nil || !hmac.Equal(ro.hmac, want[:]) {
			e.drop(DropBadHMAC)
			sf.resetOut, sf.resetCode = true, wire.ResetOptionError
			c.failSubflow(sf, wire.ResetOptionError, "bad MP_HMAC in Response")
			return
		}
	}
	sf.state = sfPartOpen
	sf.ackNow = true
	sf.partDue = now.Add(sf.partRTO)
}

// failSubflow ends a subflow that is sending a Reset (the Reset goes out
// first, then PollTransmit closes it).
func (c *Conn) failSubflow(sf *subflow, code wire.ResetCode, reason string) {
	if !sf.join && c.state == Connecting {
		c.closeReason = reason
		c.ep.emit(Event{Kind: EventConnClosed, Conn: c, Path: sf.id, Reset: code, Reason: reason})
		c.state = Closed
		return
	}
	c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: code, Reason: reason})
}

func (c *Conn) handleReset(now mono.Time, sf *subflow, p *wire.Packet, ro *rxOpts) {
	if p.ResetCode == wire.ResetMPAbrupt && ro.hasFast && c.keys.isOwnKey(ro.fastKey) {
		for _, x := range c.subflows {
			if x.state != sfClosed {
				x.state = sfClosed
				c.ep.unindex(x)
			}
		}
		c.closeReason = "peer abort"
		c.setClosed("peer abort", wire.ResetMPAbrupt)
		return
	}
	reason := "peer reset: " + p.ResetCode.String()
	if sf.state == sfRequest && sf.join || sf.state == sfPartOpen && sf.join {
		sf.state = sfClosed
		c.ep.unindex(sf)
		c.ep.emit(Event{Kind: EventJoinFailed, Conn: c, Path: sf.id, Remote: sf.remote, Reset: p.ResetCode, Reason: reason})
		return
	}
	c.subflowClosed(sf, p.ResetCode, reason)
}

// putHandshake adds the handshake options of a packet of type typ on sf:
// MP_KEY (and in secure mode the Noise message), MP_JOIN, MP_HMAC.
func (c *Conn) putHandshake(b *wire.Builder, sf *subflow, typ wire.Type) {
	switch {
	case typ == wire.TypeRequest && !sf.join && c.sec != nil,
		typ == wire.TypeResponse && !sf.join && c.sec != nil:
		c.putSecureKey(b, typ)
	case typ == wire.TypeRequest && !sf.join:
		c.putKey(b)
	case typ == wire.TypeRequest && sf.join:
		_ = b.MP(&wire.MPOption{Type: wire.MPJoin, AddrID: sf.addrID, Token: c.peerCI, Nonce: sf.nonceLocal})
	case typ == wire.TypeResponse && !sf.join:
		c.putKey(b)
	case typ == wire.TypeResponse && sf.join:
		_ = b.MP(&wire.MPOption{Type: wire.MPJoin, AddrID: sf.addrID, Token: c.peerCI, Nonce: sf.nonceLocal})
		c.putJoinHMAC(b, sf)
	case sf.state == sfPartOpen && sf.join && typ != wire.TypeReset:
		c.putJoinHMAC(b, sf)
	}
}
