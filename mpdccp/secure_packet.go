// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
)

// sessionKeys are RFC 9897's keys in secure mode, derived from the Noise
// handshake: the HMAC keys of MP_JOIN, MP_ADDADDR and MP_REMOVEADDR (each
// side's d-key) and the tokens MP_CLOSE and MP_FAST_CLOSE carry. The
// handshake's plain key data (ephemeral public keys) never keys anything.
type sessionKeys struct {
	hmacOwn, hmacPeer   [32]byte
	closeOwn, closePeer [16]byte
}

// secSealing reports whether a packet of type typ on sf is sealed, and
// prepares its key; a subflow that cannot seal (no key yet) sends nothing
// but its first-subflow Request.
func (c *Conn) secSealing(sf *subflow, typ wire.Type) (seal, ok bool) {
	if c.sec == nil {
		return false, true
	}
	if typ == wire.TypeRequest && !sf.join {
		return false, true // carries the Noise first message itself
	}
	if typ == wire.TypeRequest {
		return true, c.sec.ready
	}
	return true, sf.crypt != nil
}

// secReserve returns buf less the room for the tag when the packet will
// be sealed; ok is false when sf cannot send it (secSealing).
func (c *Conn) secReserve(sf *subflow, typ wire.Type, buf []byte) ([]byte, bool, bool) {
	seal, ok := c.secSealing(sf, typ)
	if seal {
		buf = buf[:len(buf)-sealOverhead]
	}
	return buf, seal, ok
}

// secFinish seals the finished packet buf[:n] when seal is set; it gives
// back the full buffer and the new length. A sealed packet's payload was
// not copied into buf (build used FinishInPlace): it is sealed from
// ps.payload, the plaintext, which also gives the outer ECN field
// (outerECN).
func (c *Conn) secFinish(now mono.Time, sf *subflow, buf []byte, n int, seal bool, ps *pktSpec, seq uint64) ([]byte, int) {
	if !seal {
		return buf, n
	}
	buf = buf[:len(buf)+sealOverhead]
	return buf, c.secSeal(now, sf, buf, ps.payload, ps.typ, seq)
}

// secSeal seals the packet built for sf, its header in buf and its
// payload plain, into buf and returns its length.
func (c *Conn) secSeal(now mono.Time, sf *subflow, buf, plain []byte, typ wire.Type, seq uint64) int {
	hl := int(buf[4]) * 4
	if typ == wire.TypeRequest {
		k := joinRequestKey(&c.sec.tx, sf.nonceLocal)
		return sealPacketFrom(newAEAD(c.sec.kind, &k), c.ep.sec.nonce, 0, buf, hl, plain, seq)
	}
	k := sf.crypt.txKey(now, &c.ep.sec.cfg)
	return sealPacketFrom(k.aead, c.ep.sec.nonce, k.phase, buf, hl, plain, seq)
}

// secOpen authenticates and decrypts a packet for sf (secure mode) in
// place, updating p.Payload. It drops (and counts) anything that fails:
// nothing unauthenticated reaches the state machines. Responses install
// the keys they prove.
func (c *Conn) secOpen(now mono.Time, sf *subflow, b []byte, p *wire.Packet, ecn uint8) bool {
	e := c.ep
	hl := int(b[4]) * 4
	switch {
	case p.Type == wire.TypeRequest && sf.state == sfRespond && sf.join:
		if sf.crypt == nil || !e.secCheckJoinRetransmit(c, b, p, sf) {
			return false
		}
		return true
	case p.Type == wire.TypeRequest && sf.state == sfRespond:
		// A retransmitted first Request: the very same Noise message.
		if exp := findExp(p.Options, expInitiation); exp == nil || c.sec == nil || !bytes.Equal(exp[1:], c.sec.initMsg[:]) {
			e.drop(DropAuth)
			return false
		}
		return true
	case sf.state == sfRequest && p.Type == wire.TypeResponse:
		return c.secOpenResponse(now, sf, b, p)
	case sf.crypt == nil:
		if sf.state == sfRequest && p.Type == wire.TypeReset {
			c.secCookieReply(now, sf, p)
			return false
		}
		e.drop(DropAuth)
		return false
	}
	k := sf.crypt
	if k.replay.seen(p.Seq) {
		e.drop(DropReplay)
		return false
	}
	key, update := k.rxKey(now, keyPhase(b), p.Seq)
	out, ok := openPacket(key.aead, e.sec.nonce, b, hl, p.Seq)
	if !ok {
		e.drop(DropAuth)
		return false
	}
	if update {
		k.commitUpdate(p.Seq)
	}
	k.replay.mark(p.Seq)
	p.Payload = out
	return true
}

// secRebindOpen opens a packet for sf that came from a new address, on a
// copy (a failed open destroys the payload, and another subflow may still
// be tried); on success b holds the opened packet and p describes it.
func (e *Endpoint) secRebindOpen(now mono.Time, sf *subflow, p *wire.Packet, b []byte, ecn uint8) bool {
	if len(b) > len(e.sec.scratch) {
		return false // larger than we ever send: not our peer's
	}
	trial := e.sec.scratch[:len(b)]
	copy(trial, b)
	var tp wire.Packet
	if wire.Parse(trial, &tp) != nil {
		return false
	}
	tp.Seq, tp.Ack = p.Seq, p.Ack // read against sf already (rebind)
	if !sf.conn.secOpen(now, sf, trial, &tp, ecn) {
		return false
	}
	copy(b, trial)
	seq, ack := p.Seq, p.Ack
	_ = wire.Parse(b, p) // the same layout, now over b
	p.Seq, p.Ack = seq, ack
	p.Payload = p.Payload[:len(tp.Payload)]
	return true
}

// secCheckJoinRetransmit opens a retransmitted join Request.
func (e *Endpoint) secCheckJoinRetransmit(c *Conn, b []byte, p *wire.Packet, sf *subflow) bool {
	k := joinRequestKey(&c.sec.rx, sf.noncePeer)
	if _, ok := openPacket(newAEAD(c.sec.kind, &k), e.sec.nonce, b, int(b[4])*4, p.Seq); !ok {
		e.drop(DropAuth)
		return false
	}
	return true
}

// secOpenResponse handles a client's Response: for the first subflow it
// completes the Noise handshake, for a join it derives the subflow keys;
// the keys are kept only if they open the Response itself.
func (c *Conn) secOpenResponse(now mono.Time, sf *subflow, b []byte, p *wire.Packet) bool {
	e := c.ep
	var sess noise.Session
	var kind uint8
	if !sf.join {
		exp := findExp(p.Options, expResponse)
		if exp == nil || c.sec == nil || c.sec.init == nil || len(exp) != 1+noise.ResponseLen {
			e.drop(DropHandshake)
			return false
		}
		var pay [noise.RespPayloadLen]byte
		var err error
		var out []byte
		if sess, out, err = c.sec.init.ConsumeResponse(exp[1:], pay[:0]); err != nil || out[0] > aeadAESGCM {
			e.drop(DropHandshake)
			return false
		}
		kind = out[0]
	}
	// Try the keys on a copy of the connection's secrets: commit on success.
	trial := *c.sec
	if !sf.join {
		trial.tx, trial.rx, trial.kind = sess.Send, sess.Recv, kind
	} else {
		nonce, ok := findJoinNonce(p.Options)
		if !ok || !c.sec.ready {
			e.drop(DropAuth)
			return false
		}
		sf.noncePeer = nonce
	}
	cn, sn := sf.nonceLocal, sf.noncePeer
	if !sf.join {
		cn, sn = 0, 0
	}
	tx, rx := trial.subflowSecrets(cn, sn)
	k := newSFCrypto(trial.kind, tx, rx, now)
	out, ok := openPacket(k.rx.aead, e.sec.nonce, b, int(b[4])*4, p.Seq)
	if !ok {
		e.drop(DropAuth)
		return false
	}
	k.replay.mark(p.Seq)
	if !sf.join {
		ephemeral := findNoiseKey(p.Options)
		c.installSession(&sess, kind)
		c.keys.setNoise(c.sec.ephemeral[:], ephemeral)
	}
	sf.crypt = k
	p.Payload = out
	return true
}

// secCookieReply takes a cookie reply (a Reset with MP_EXP) to our
// Request; the next copy of the Request carries mac2 and goes at once.
func (c *Conn) secCookieReply(now mono.Time, sf *subflow, p *wire.Packet) {
	exp := findExp(p.Options, expCookieReply)
	if sf.join || exp == nil || c.sec == nil || c.sec.init == nil || c.sec.init.ConsumeCookieReply(exp[1:]) != nil {
		c.ep.drop(DropAuth)
		return
	}
	c.ep.stats.CookiesTaken++
	c.touch() // the Request's new due time is the connection's deadline
	sf.reqDue = now
}

func findExp(opts []byte, kind byte) []byte {
	it := wire.NewOptionIter(opts)
	var mo wire.MPOption
	for {
		o, ok := it.Next()
		if !ok {
			return nil
		}
		if o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &mo) == nil && mo.Type == wire.MPExp &&
			len(mo.Raw) > 0 && mo.Raw[0] == kind {
			return mo.Raw
		}
	}
}

func findJoinNonce(opts []byte) (uint32, bool) {
	it := wire.NewOptionIter(opts)
	var mo wire.MPOption
	for {
		o, ok := it.Next()
		if !ok {
			return 0, false
		}
		if o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &mo) == nil && mo.Type == wire.MPJoin {
			return mo.Nonce, true
		}
	}
}

func findNoiseKey(opts []byte) []byte {
	it := wire.NewOptionIter(opts)
	var mo wire.MPOption
	for {
		o, ok := it.Next()
		if !ok {
			return make([]byte, 32)
		}
		if o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &mo) == nil && mo.Type == wire.MPKey {
			if kt, kd, _, ok := wire.NextKey(mo.Keys); ok && kt == mpKeyTypeNoise {
				return kd[:32]
			}
		}
	}
}
