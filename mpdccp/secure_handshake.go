// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
)

// connSec is a connection's secure-mode state.
type connSec struct {
	peer      *peerState
	init      *noise.Initiation // client: from the Request until the Response
	initMsg   [noise.InitiationLen]byte
	resp      [noise.ResponseLen]byte // server: the Response's message
	ephemeral [32]byte                // own Noise ephemeral: MP_KEY key data
	kind      uint8                   // AEAD
	tx, rx    [32]byte                // traffic secrets: ours, the peer's
	ready     bool
	joins     [joinNonceMemory]uint32 // server: join nonces seen
	joinN     int
}

// secInitClient prepares a client connection's first Noise message.
func (e *Endpoint) secInitClient(c *Conn) error {
	es := e.sec
	var peer *peerState
	for _, p := range es.peers {
		peer = p
	}
	var pay [noise.InitPayloadLen]byte
	ts := tai64n(es.cfg.WallClock())
	copy(pay[:], ts[:])
	pay[tai64nLen] = es.aead
	in, err := noise.Initiate(e.cfg.Rand, es.id, peer.PublicKey, peer.PresharedKey, prologue(e.cfg.ServiceCode, c.localCI), pay[:])
	if err != nil {
		return err
	}
	c.sec = &connSec{peer: peer, init: in}
	copy(c.sec.ephemeral[:], in.Message()[:32])
	return nil
}

// putSecureKey writes MP_KEY (type 255: our ephemeral key) and MP_EXP
// (the Noise message) into a Request or Response of the first subflow.
func (c *Conn) putSecureKey(b *wire.Builder, typ wire.Type) {
	var keys [1 + 64]byte
	keys[0] = mpKeyTypeNoise
	copy(keys[1:], c.sec.ephemeral[:])
	_ = b.MP(&wire.MPOption{Type: wire.MPKey, Token: c.localCI, Keys: keys[:]})
	var exp [1 + noise.InitiationLen]byte
	n := 1
	if typ == wire.TypeRequest && c.sec.init != nil {
		exp[0] = expInitiation
		n += copy(exp[1:], c.sec.init.Message())
	} else {
		exp[0] = expResponse
		n += copy(exp[1:], c.sec.resp[:])
	}
	_ = b.MP(&wire.MPOption{Type: wire.MPExp, Raw: exp[:n]})
}

// installSession derives the connection's keys from a finished handshake.
func (c *Conn) installSession(sess *noise.Session, kind uint8) {
	s := c.sec
	s.tx, s.rx, s.kind, s.ready = sess.Send, sess.Recv, kind, true
	s.init = nil
	k := &c.keys
	k.secure = &sessionKeys{
		hmacOwn:  noise.Derive(s.tx[:], "mptun hmac"),
		hmacPeer: noise.Derive(s.rx[:], "mptun hmac"),
	}
	own, peer := noise.Derive(s.tx[:], "mptun close"), noise.Derive(s.rx[:], "mptun close")
	copy(k.secure.closeOwn[:], own[:])
	copy(k.secure.closePeer[:], peer[:])
}

// subflowSecrets are a subflow's per-direction keys: the connection's
// traffic secrets bound to the subflow's join nonces (zero for the first).
func (s *connSec) subflowSecrets(clientNonce, serverNonce uint32) (tx, rx [32]byte) {
	var ctx [8]byte
	binary.BigEndian.PutUint32(ctx[:], clientNonce)
	binary.BigEndian.PutUint32(ctx[4:], serverNonce)
	return noise.Derive(s.tx[:], "mptun subflow", ctx[:]), noise.Derive(s.rx[:], "mptun subflow", ctx[:])
}

// joinRequestKey seals a join Request: the client's traffic secret bound
// to the join's nonce, so a forged join never gets as far as a subflow.
func joinRequestKey(clientTraffic *[32]byte, nonce uint32) [32]byte {
	var ctx [4]byte
	binary.BigEndian.PutUint32(ctx[:], nonce)
	return noise.Derive(clientTraffic[:], "mptun join request", ctx[:])
}

// secSubflowKeys installs the keys of a subflow whose nonces are known.
func (c *Conn) secSubflowKeys(now mono.Time, sf *subflow) *sfCrypto {
	cn, sn := sf.nonceLocal, sf.noncePeer
	if c.ep.cfg.Role == Server {
		cn, sn = sn, cn
	}
	if !sf.join {
		cn, sn = 0, 0
	}
	tx, rx := c.sec.subflowSecrets(cn, sn)
	return newSFCrypto(c.sec.kind, tx, rx, now)
}

func addrBytes(a netip.AddrPort) []byte {
	b := a.Addr().Unmap().AsSlice()
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// secAccept is the server's handling of a first-subflow Request in secure
// mode. Cheap checks come first: MP_KEY type, mac1, then (under load) the
// cookie, then the per-source rate; only then the Diffie-Hellman work,
// the peer lookup and the timestamp. Nothing is kept before all pass.
func (e *Endpoint) secAccept(now mono.Time, local int, from netip.AddrPort, to netip.Addr, p *wire.Packet, key wire.MPOption, exp []byte) {
	es := e.sec
	if !offersNoise(key.Keys) {
		e.drop(DropDowngrade) // plain keys only: never fall back to them
		return
	}
	if len(exp) != 1+noise.InitiationLen || exp[0] != expInitiation {
		e.drop(DropHandshake)
		return
	}
	msg := exp[1:]
	if !es.id.CheckMAC1(msg) {
		e.drop(DropHandshake)
		return
	}
	if es.underLoad(e, now) && !es.cookies.CheckMAC2(e.cfg.Rand, int64(now), msg, addrBytes(from)) {
		e.queueCookie(now, local, from, to, p, msg)
		return
	}
	if !e.limiter.allow(now, from.Addr()) {
		e.drop(DropRateLimited)
		return
	}
	pend, err := es.id.ConsumeInitiation(msg, prologue(e.cfg.ServiceCode, key.Token))
	if err != nil {
		e.drop(DropHandshake)
		return
	}
	peer := es.peers[pend.PeerStatic]
	if peer == nil {
		e.drop(DropUnknownPeer)
		return
	}
	if bytes.Compare(pend.Payload[:tai64nLen], peer.lastTS[:]) <= 0 {
		e.drop(DropReplay) // an old first message played again
		return
	}
	if peer.pending != nil {
		old := peer.pending // the peer starts over: its last attempt is dead
		peer.pending = nil
		old.state = Closed
		old.removed = true
		e.removeConn(old)
	}
	if len(e.conns) >= e.cfg.MaxConns {
		e.drop(DropTooBusy)
		return
	}
	kind := aeadChaCha
	if pend.Payload[tai64nLen] == aeadAESGCM && es.aead == aeadAESGCM {
		kind = aeadAESGCM
	}
	c, err := e.newConn(now)
	if err != nil {
		return
	}
	c.sec = &connSec{peer: peer}
	resp, sess, err := pend.Respond(c.sec.resp[:0], e.cfg.Rand, peer.PresharedKey, []byte{kind})
	if err != nil {
		e.removeConn(c)
		e.drop(DropHandshake)
		return
	}
	copy(peer.lastTS[:], pend.Payload[:tai64nLen])
	copy(c.sec.initMsg[:], msg)
	copy(c.sec.ephemeral[:], resp[:32])
	c.installSession(&sess, kind)
	c.keys.setNoise(c.sec.ephemeral[:], msg[:32])
	c.peerCI = key.Token
	c.mpConfirmed = true
	peer.pending = c
	sf, err := c.newSubflow(now, PathConfig{Local: local, LocalAddr: netip.AddrPortFrom(to, 0), Remote: from}, false)
	if err != nil {
		e.removeConn(c)
		return
	}
	c.acceptSubflow(now, sf, p)
}

func offersNoise(keys []byte) bool {
	for {
		kt, kd, rest, ok := wire.NextKey(keys)
		if !ok {
			return false
		}
		if kt == mpKeyTypeNoise && len(kd) == 64 {
			return true
		}
		keys = rest
	}
}

// queueCookie answers a first message with a cookie reply (a Reset "too
// busy" carrying MP_EXP): about a third of the Request's size, and no
// state is kept.
func (e *Endpoint) queueCookie(now mono.Time, local int, from netip.AddrPort, to netip.Addr, p *wire.Packet, msg []byte) {
	if len(e.stateless) >= maxStateless {
		e.drop(DropRateLimited)
		return
	}
	r := statelessReply{local: local, remote: from, src: to, srcPort: p.DstPort, dstPort: p.SrcPort,
		ack: p.Seq, code: wire.ResetTooBusy}
	r.exp[0] = expCookieReply
	out := e.sec.cookies.Reply(r.exp[1:1], e.cfg.Rand, int64(now), e.sec.id, msg, addrBytes(from))
	r.expLen = 1 + len(out)
	e.stateless = append(e.stateless, r)
	e.stats.CookieReplies++
}

// secCheckJoin authenticates a join Request for c (sealed with the join
// key) and refuses a join nonce seen before (a replayed Request).
func (e *Endpoint) secCheckJoin(c *Conn, b []byte, p *wire.Packet, nonce uint32) bool {
	if c.sec == nil || !c.sec.ready {
		e.drop(DropAuth)
		return false
	}
	k := joinRequestKey(&c.sec.rx, nonce)
	a := newAEAD(c.sec.kind, &k)
	if _, ok := openPacket(a, e.sec.nonce, b, int(b[4])*4, p.Seq); !ok {
		e.drop(DropAuth)
		return false
	}
	for i := 0; i < min(c.sec.joinN, joinNonceMemory); i++ {
		if c.sec.joins[i] == nonce {
			e.drop(DropReplay)
			return false
		}
	}
	c.sec.joins[c.sec.joinN%joinNonceMemory] = nonce
	c.sec.joinN++
	return true
}

// secConnOpen runs when a server connection opens: it becomes its peer's
// connection, replacing an older one (the CPE restarted).
func (e *Endpoint) secConnOpen(now mono.Time, c *Conn) {
	if c.sec == nil || c.sec.peer == nil {
		return
	}
	p := c.sec.peer
	if p.pending == c {
		p.pending = nil
	}
	if old := p.conn; old != nil && old != c {
		old.Abort(now)
	}
	p.conn = c
}

// secForget drops the peer's references to a removed connection.
func (e *Endpoint) secForget(c *Conn) {
	if c.sec == nil || c.sec.peer == nil {
		return
	}
	if c.sec.peer.conn == c {
		c.sec.peer.conn = nil
	}
	if c.sec.peer.pending == c {
		c.sec.peer.pending = nil
	}
}
