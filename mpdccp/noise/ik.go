// SPDX-License-Identifier: MIT

package noise

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/chacha20poly1305"
)

// Construction names the Noise protocol; it seeds the handshake hash.
const Construction = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s"

const (
	tagLen = chacha20poly1305.Overhead
	macLen = 16
	// InitPayloadLen and RespPayloadLen are the encrypted payloads the
	// engine sends in each message (a timestamp and an AEAD choice).
	InitPayloadLen = 13
	RespPayloadLen = 1
	// InitiationLen is e, encrypted s, encrypted payload, mac1, mac2.
	InitiationLen = KeyLen + KeyLen + tagLen + InitPayloadLen + tagLen + 2*macLen
	// ResponseLen is e, encrypted payload, mac1, mac2.
	ResponseLen = KeyLen + RespPayloadLen + tagLen + 2*macLen
)

// Errors. Every failure of a received message is one of these; the engine
// drops the packet and counts it.
var (
	ErrShort    = errors.New("noise: message too short")
	ErrMAC1     = errors.New("noise: bad mac1")
	ErrDecrypt  = errors.New("noise: message does not authenticate")
	ErrDH       = errDH
	ErrCookie   = errors.New("noise: bad cookie reply")
	ErrNotReady = errors.New("noise: no handshake in progress")
)

// Session is what a completed handshake yields: one traffic secret per
// direction, the handshake hash (channel binding) and the peer's static key.
type Session struct {
	Send, Recv [HashLen]byte
	Hash       [HashLen]byte
	PeerStatic Key
}

var (
	initialHash = hashOf([]byte(Construction))
	labelMAC1   = []byte("mac1----")
	labelCookie = []byte("cookie--")
)

// symmetric is the Noise SymmetricState: chaining key and handshake hash.
type symmetric struct {
	ck, h [HashLen]byte
}

func (s *symmetric) init(prologue []byte, responderStatic *Key) {
	s.ck = initialHash
	s.h = initialHash
	s.mixHash(prologue)
	s.mixHash(responderStatic[:])
}

func (s *symmetric) mixHash(data []byte) { s.h = hashOf(s.h[:], data) }

// mixKey returns the new cipher key.
func (s *symmetric) mixKey(input []byte) [HashLen]byte {
	out := KDF(s.ck[:], input, 2)
	s.ck = out[0]
	return out[1]
}

func (s *symmetric) mixKeyAndHash(input []byte) [HashLen]byte {
	out := KDF(s.ck[:], input, 3)
	s.ck = out[0]
	s.mixHash(out[1][:])
	return out[2]
}

// encrypt appends AEAD(k, nonce 0, plain, ad=h) to dst and mixes it into h.
func (s *symmetric) encrypt(dst []byte, k *[HashLen]byte, plain []byte) []byte {
	aead, _ := chacha20poly1305.New(k[:])
	var nonce [chacha20poly1305.NonceSize]byte
	start := len(dst)
	dst = aead.Seal(dst, nonce[:], plain, s.h[:])
	s.mixHash(dst[start:])
	return dst
}

func (s *symmetric) decrypt(dst []byte, k *[HashLen]byte, ct []byte) ([]byte, error) {
	aead, _ := chacha20poly1305.New(k[:])
	var nonce [chacha20poly1305.NonceSize]byte
	out, err := aead.Open(dst, nonce[:], ct, s.h[:])
	if err != nil {
		return nil, ErrDecrypt
	}
	s.mixHash(ct)
	return out, nil
}

func (s *symmetric) split() (initToResp, respToInit [HashLen]byte) {
	out := KDF(s.ck[:], nil, 2)
	return out[0], out[1]
}

// Identity is a static key pair.
type Identity struct {
	Private, Public Key
	mac1Key         [HashLen]byte // key of mac1 on messages to us
	cookieKey       [HashLen]byte // key of cookie replies we send
}

// NewIdentity derives the public key and the MAC keys of private.
func NewIdentity(private Key) (*Identity, error) {
	pub, err := PublicKey(private)
	if err != nil {
		return nil, err
	}
	id := &Identity{Private: private, Public: pub}
	id.mac1Key = hashOf(labelMAC1, pub[:])
	id.cookieKey = hashOf(labelCookie, pub[:])
	return id, nil
}

// Initiation is the initiator's state from its first message until the
// response: the message itself (resent unchanged, with mac2 refreshed once
// a cookie arrives) and the keys to read the response.
type Initiation struct {
	sym      symmetric
	local    *Identity
	peer     Key
	peerMAC1 [HashLen]byte
	peerCk   [HashLen]byte // key of the peer's cookie replies
	psk      Key
	e, ePub  Key
	msg      [InitiationLen]byte
	cookie   [macLen]byte
	hasCk    bool
}

// Initiate builds the first message to peer (the responder's static key):
// -> e, es, s, ss with payload encrypted. prologue binds the DCCP context
// (connection identifier and the like) into the handshake.
func Initiate(rnd io.Reader, local *Identity, peer, psk Key, prologue, payload []byte) (*Initiation, error) {
	if len(payload) != InitPayloadLen {
		return nil, fmt.Errorf("noise: initiation payload of %d bytes", len(payload))
	}
	in := &Initiation{local: local, peer: peer, psk: psk}
	in.peerMAC1 = hashOf(labelMAC1, peer[:])
	in.peerCk = hashOf(labelCookie, peer[:])
	var err error
	if in.e, err = GeneratePrivateKey(rnd); err != nil {
		return nil, err
	}
	if in.ePub, err = PublicKey(in.e); err != nil {
		return nil, err
	}
	s := &in.sym
	s.init(prologue, &peer)
	msg := in.msg[:0]
	msg = append(msg, in.ePub[:]...)
	s.mixHash(in.ePub[:])
	s.mixKey(in.ePub[:]) // psk modes mix e into the chaining key too
	es, err := dh(&in.e, &peer)
	if err != nil {
		return nil, err
	}
	k := s.mixKey(es[:])
	msg = s.encrypt(msg, &k, local.Public[:])
	ss, err := dh(&local.Private, &peer)
	if err != nil {
		return nil, err
	}
	k = s.mixKey(ss[:])
	msg = s.encrypt(msg, &k, payload)
	if len(msg) != InitiationLen-2*macLen { // msg was built in place in in.msg
		return nil, fmt.Errorf("noise: initiation of %d bytes", len(msg))
	}
	in.sealMACs()
	return in, nil
}

// sealMACs writes mac1 and, with a cookie, mac2 into the message.
func (in *Initiation) sealMACs() {
	n := InitiationLen - 2*macLen
	m1 := mac(in.peerMAC1[:], in.msg[:n])
	copy(in.msg[n:], m1[:])
	var m2 [macLen]byte
	if in.hasCk {
		m2 = mac(in.cookie[:], in.msg[:n+macLen])
	}
	copy(in.msg[n+macLen:], m2[:])
}

// Message is the first message as it is to be sent now.
func (in *Initiation) Message() []byte { return in.msg[:] }

// ConsumeCookieReply takes a cookie reply to this initiation: later copies
// of the message carry mac2 from it.
func (in *Initiation) ConsumeCookieReply(reply []byte) error {
	if len(reply) != CookieReplyLen {
		return ErrCookie
	}
	aead, _ := chacha20poly1305.NewX(in.peerCk[:])
	mac1 := in.msg[InitiationLen-2*macLen : InitiationLen-macLen]
	var ck [macLen]byte
	if _, err := aead.Open(ck[:0], reply[:chacha20poly1305.NonceSizeX], reply[chacha20poly1305.NonceSizeX:], mac1); err != nil {
		return ErrCookie
	}
	in.cookie, in.hasCk = ck, true
	in.sealMACs()
	return nil
}

// ConsumeResponse checks the responder's message (<- e, ee, se, psk) and
// returns the session and the decrypted payload (RespPayloadLen bytes).
func (in *Initiation) ConsumeResponse(msg []byte, payload []byte) (Session, []byte, error) {
	var sess Session
	if len(msg) != ResponseLen {
		return sess, nil, ErrShort
	}
	n := ResponseLen - 2*macLen
	want := mac(in.local.mac1Key[:], msg[:n])
	if subtle.ConstantTimeCompare(want[:], msg[n:n+macLen]) != 1 {
		return sess, nil, ErrMAC1
	}
	s := in.sym // a copy: a forged response must not spoil the state
	var re Key
	copy(re[:], msg[:KeyLen])
	s.mixHash(re[:])
	s.mixKey(re[:])
	ee, err := dh(&in.e, &re)
	if err != nil {
		return sess, nil, err
	}
	s.mixKey(ee[:])
	se, err := dh(&in.local.Private, &re)
	if err != nil {
		return sess, nil, err
	}
	s.mixKey(se[:])
	k := s.mixKeyAndHash(in.psk[:])
	out, err := s.decrypt(payload[:0], &k, msg[KeyLen:n])
	if err != nil {
		return sess, nil, err
	}
	sess.Send, sess.Recv = s.split()
	sess.Hash, sess.PeerStatic = s.h, in.peer
	return sess, out, nil
}

// Pending is the responder's view of a valid first message: who sent it
// (PeerStatic, to be looked up) and what it says (Payload).
type Pending struct {
	sym        symmetric
	local      *Identity
	ePeer      Key
	PeerStatic Key
	Payload    [InitPayloadLen]byte
}

// CheckMAC1 is the cheap test a responder runs before any DH: only
// someone who knows our public key can compute mac1.
func (id *Identity) CheckMAC1(msg []byte) bool {
	if len(msg) != InitiationLen {
		return false
	}
	n := InitiationLen - 2*macLen
	want := mac(id.mac1Key[:], msg[:n])
	return subtle.ConstantTimeCompare(want[:], msg[n:n+macLen]) == 1
}

// ConsumeInitiation decrypts a first message (mac1 already checked).
func (id *Identity) ConsumeInitiation(msg, prologue []byte) (*Pending, error) {
	if len(msg) != InitiationLen {
		return nil, ErrShort
	}
	p := &Pending{local: id}
	s := &p.sym
	s.init(prologue, &id.Public)
	copy(p.ePeer[:], msg[:KeyLen])
	s.mixHash(p.ePeer[:])
	s.mixKey(p.ePeer[:])
	es, err := dh(&id.Private, &p.ePeer)
	if err != nil {
		return nil, err
	}
	k := s.mixKey(es[:])
	off := KeyLen
	st, err := s.decrypt(p.PeerStatic[:0], &k, msg[off:off+KeyLen+tagLen])
	if err != nil || len(st) != KeyLen {
		return nil, ErrDecrypt
	}
	off += KeyLen + tagLen
	ss, err := dh(&id.Private, &p.PeerStatic)
	if err != nil {
		return nil, err
	}
	k = s.mixKey(ss[:])
	if _, err := s.decrypt(p.Payload[:0], &k, msg[off:off+InitPayloadLen+tagLen]); err != nil {
		return nil, err
	}
	return p, nil
}

// Respond builds the second message into dst (ResponseLen bytes appended)
// and returns the responder's session.
func (p *Pending) Respond(dst []byte, rnd io.Reader, psk Key, payload []byte) ([]byte, Session, error) {
	var sess Session
	if len(payload) != RespPayloadLen {
		return nil, sess, fmt.Errorf("noise: response payload of %d bytes", len(payload))
	}
	e, err := GeneratePrivateKey(rnd)
	if err != nil {
		return nil, sess, err
	}
	ePub, err := PublicKey(e)
	if err != nil {
		return nil, sess, err
	}
	s := &p.sym
	start := len(dst)
	dst = append(dst, ePub[:]...)
	s.mixHash(ePub[:])
	s.mixKey(ePub[:])
	ee, err := dh(&e, &p.ePeer)
	if err != nil {
		return nil, sess, err
	}
	s.mixKey(ee[:])
	se, err := dh(&e, &p.PeerStatic)
	if err != nil {
		return nil, sess, err
	}
	s.mixKey(se[:])
	k := s.mixKeyAndHash(psk[:])
	dst = s.encrypt(dst, &k, payload)
	peerMAC1 := hashOf(labelMAC1, p.PeerStatic[:])
	m1 := mac(peerMAC1[:], dst[start:])
	dst = append(dst, m1[:]...)
	var m2 [macLen]byte
	dst = append(dst, m2[:]...)
	r, i := s.split()
	sess.Send, sess.Recv, sess.Hash, sess.PeerStatic = i, r, s.h, p.PeerStatic
	return dst, sess, nil
}
