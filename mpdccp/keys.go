// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/hmac"

	"github.com/mptun/mptun/mpdccp/wire"
)

// keyScheme is one MP_KEY key type (RFC 9897 §3.2.4): its key length and
// how the sender's derived key for MP_HMAC is formed. Only type 0 (plain
// 8-byte key) exists today; an authenticated type slots in here, offered
// by the client next to type 0 and picked by the server in the client's
// order of preference, without touching the handshake code.
type keyScheme struct {
	typ uint8
	len int
	// derive appends the derived key of the side owning own (RFC 9897:
	// d-key = own key || peer key for plain keys).
	derive func(dst, own, peer []byte) []byte
}

func plainDerive(dst, own, peer []byte) []byte {
	dst = append(dst, own...)
	return append(dst, peer...)
}

// keySchemes lists the supported key types, most preferred first.
var keySchemes = []keyScheme{
	{typ: wire.KeyTypePlain, len: 8, derive: plainDerive},
}

func schemeByType(t uint8) *keyScheme {
	for i := range keySchemes {
		if keySchemes[i].typ == t {
			return &keySchemes[i]
		}
	}
	return nil
}

const maxKeyLen = 64

// connKeys holds a connection's key material.
type connKeys struct {
	ks       *keyScheme // negotiated scheme; nil while the client waits for the Response
	local    [maxKeyLen]byte
	peer     [maxKeyLen]byte
	offered  [][maxKeyLen]byte // client: one key per entry of keySchemes
	localLen int
	// secure holds the keys derived from the Noise handshake (secure
	// mode); when set, they replace the plain keys' d-keys and close keys.
	secure *sessionKeys
}

// noiseScheme is MP_KEY type 255 in secure mode: the key data are the
// Noise ephemeral keys, which key nothing (see sessionKeys).
var noiseScheme = keyScheme{typ: wire.KeyTypeExperimental, len: 64, derive: plainDerive}

// setNoise records the MP_KEY data of a secure handshake.
func (k *connKeys) setNoise(local, peer []byte) {
	k.ks = &noiseScheme
	clear(k.local[:])
	clear(k.peer[:])
	copy(k.local[:], local)
	copy(k.peer[:], peer)
	k.localLen = 64
}

// ready reports whether the keys that MP_HMAC needs exist.
func (k *connKeys) ready() bool { return k.ks != nil }

func (k *connKeys) localKey() []byte { return k.local[:k.localLen] }
func (k *connKeys) peerKey() []byte {
	if k.secure != nil {
		return k.secure.closePeer[:]
	}
	if k.ks == nil {
		return nil
	}
	return k.peer[:k.ks.len]
}

// ownDKey and peerDKey append the derived keys of this side and of the peer.
// Before the key scheme is set there are none (empty keys: no MP_HMAC can
// match, see ready).
func (k *connKeys) ownDKey(dst []byte) []byte {
	switch {
	case k.secure != nil:
		return append(dst, k.secure.hmacOwn[:]...)
	case k.ks == nil:
		return dst
	}
	return k.ks.derive(dst, k.localKey(), k.peerKey())
}

func (k *connKeys) peerDKey(dst []byte) []byte {
	switch {
	case k.secure != nil:
		return append(dst, k.secure.hmacPeer[:]...)
	case k.ks == nil:
		return dst
	}
	return k.ks.derive(dst, k.peerKey(), k.localKey())
}

// isOwnKey reports whether data (from MP_CLOSE or MP_FAST_CLOSE) is our key.
func (k *connKeys) isOwnKey(data []byte) bool {
	if k.secure != nil {
		return hmac.Equal(data, k.secure.closeOwn[:])
	}
	return k.ks != nil && hmac.Equal(data, k.localKey())
}

// appendOffer appends the MP_KEY key list of a Request: every scheme.
func (k *connKeys) appendOffer(dst []byte) []byte {
	for i, s := range keySchemes {
		dst = append(dst, s.typ)
		dst = append(dst, k.offered[i][:s.len]...)
	}
	return dst
}

// appendChosen appends the MP_KEY key list of a Response: the chosen key.
func (k *connKeys) appendChosen(dst []byte) []byte {
	dst = append(dst, k.ks.typ)
	return append(dst, k.localKey()...)
}

// pickOffer is the server's choice among the client's keys: the first
// offered type we support. It reports false if there is none.
func (k *connKeys) pickOffer(keys []byte, random func(int) []byte) bool {
	for {
		kt, kd, rest, ok := wire.NextKey(keys)
		if !ok {
			return false
		}
		if s := schemeByType(kt); s != nil && len(kd) == s.len {
			k.ks = s
			copy(k.peer[:], kd)
			copy(k.local[:], random(s.len))
			k.localLen = s.len
			return true
		}
		keys = rest
	}
}

// acceptChosen is the client's handling of the Response's MP_KEY.
func (k *connKeys) acceptChosen(keys []byte) bool {
	kt, kd, _, ok := wire.NextKey(keys)
	if !ok {
		return false
	}
	for i := range keySchemes {
		s := &keySchemes[i]
		if s.typ == kt && len(kd) == s.len {
			k.ks = s
			copy(k.peer[:], kd)
			k.local = k.offered[i]
			k.localLen = s.len
			return true
		}
	}
	return false
}
