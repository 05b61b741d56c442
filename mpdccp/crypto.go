// SPDX-License-Identifier: MIT

package mpdccp

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
)

// Packet protection (Config.Security). After the handshake every packet
// of a subflow is sealed with an AEAD: the DCCP header and options (with
// the checksum field zero) are the associated data, the payload is
// encrypted, the 16-byte tag is appended. Each subflow has one key per
// direction, derived from the connection's traffic secrets and the
// subflow's join nonces, and the nonce is the packet's 48-bit DCCP
// sequence number, which a sender never reuses within a subflow: so no
// (key, nonce) pair repeats. Keys ratchet forward (RekeyAfter,
// RekeyAfterPackets); the key phase travels in bit 0 of the generic
// header's Reserved byte (a reserved bit of byte 8 with short sequence
// numbers, see setKeyPhase), so the receiver knows which key opens a
// packet without trying two. The nonce is the 48-bit number even when
// the header carries 24 bits of it. The checksum (CsCov 1) then covers only the
// header: the tag protects the rest.

const (
	sealOverhead = chacha20poly1305.Overhead // both AEADs append 16 bytes
	// reservedByte is the generic header's Reserved field (RFC 4340 §5.1).
	reservedByte = 9
	keyPhaseBit  = 1
	// shortPhaseBit carries the key phase in byte 8 of a short-seqno header.
	shortPhaseBit = 1 << 5
	// replayWindow is how far behind the newest sequence number a packet
	// may arrive; older or already seen ones are replays.
	replayWindow = 4096
	// Defaults of Security.RekeyAfter / RekeyAfterPackets.
	defaultRekeyAfter        = 2 * time.Minute
	defaultRekeyAfterPackets = 1 << 32
)

// AEAD choices negotiated in the handshake.
const (
	aeadChaCha uint8 = iota
	aeadAESGCM
)

func aeadName(a uint8) string {
	if a == aeadAESGCM {
		return "aes-256-gcm"
	}
	return "chacha20poly1305"
}

func newAEAD(kind uint8, key *[32]byte) cipher.AEAD {
	if kind == aeadAESGCM {
		b, err := aes.NewCipher(key[:])
		if err == nil {
			if g, err := cipher.NewGCM(b); err == nil {
				return g
			}
		}
	}
	a, _ := chacha20poly1305.New(key[:]) // 32-byte key: cannot fail
	return a
}

// dirKey is one direction's current key of a subflow.
type dirKey struct {
	aead   cipher.AEAD
	secret [32]byte
	phase  uint8
	since  mono.Time
	count  uint64
}

func (k *dirKey) set(kind uint8, secret [32]byte, phase uint8, now mono.Time) {
	k.secret, k.phase, k.since, k.count = secret, phase, now, 0
	k.aead = newAEAD(kind, &secret)
}

func (k *dirKey) ratchet(kind uint8, now mono.Time) dirKey {
	var n dirKey
	n.set(kind, noise.Derive(k.secret[:], "mptun rekey"), k.phase^keyPhaseBit, now)
	return n
}

// sfCrypto is a subflow's packet protection state.
type sfCrypto struct {
	kind     uint8
	tx       dirKey
	rx, prev dirKey
	next     *dirKey // the receiver's next key, derived once on demand
	hasPrev  bool
	curFirst uint64 // first sequence number opened with rx after an update
	replay   replay
}

func newSFCrypto(kind uint8, txSecret, rxSecret [32]byte, now mono.Time) *sfCrypto {
	k := &sfCrypto{kind: kind}
	k.tx.set(kind, txSecret, 0, now)
	k.rx.set(kind, rxSecret, 0, now)
	return k
}

// nonceOf writes the AEAD nonce of seq into n (12 bytes): the 48-bit
// sequence number, zero-padded. n is a scratch buffer of the Endpoint, so
// the call through the cipher.AEAD interface does not allocate.
func nonceOf(n []byte, seq uint64) []byte {
	n = n[:12]
	binary.BigEndian.PutUint32(n, 0)
	binary.BigEndian.PutUint64(n[4:], seq)
	return n
}

// sealPacket protects the packet in buf[:n] (header length hl) with key k,
// writing the key phase and appending the tag; it returns the new length.
// The checksum field must still be zero.
func sealPacket(a cipher.AEAD, nonce []byte, phase uint8, buf []byte, hl, n int, seq uint64) int {
	return sealPacketFrom(a, nonce, phase, buf, hl, buf[hl:n], seq)
}

// sealPacketFrom is sealPacket for a payload that is not in buf yet: the
// header is buf[:hl], the ciphertext is written from buf[hl] straight
// from plain, which must be buf[hl:n] itself or not overlap buf. Sealing
// from the queued inner packet saves copying every payload into buf first.
func sealPacketFrom(a cipher.AEAD, nonce []byte, phase uint8, buf []byte, hl int, plain []byte, seq uint64) int {
	setKeyPhase(buf, phase)
	buf[5] = buf[5]&0xf0 | 1 // CsCov 1: the checksum covers the header only
	out := a.Seal(buf[hl:hl], nonceOf(nonce, seq), plain, buf[:hl])
	return hl + len(out)
}

// openPacket authenticates and decrypts b in place; it returns the
// plaintext payload. b's checksum field is cleared (it is not part of the
// associated data). On failure b's payload is destroyed.
func openPacket(a cipher.AEAD, nonce []byte, b []byte, hl int, seq uint64) ([]byte, bool) {
	if len(b) < hl+sealOverhead {
		return nil, false
	}
	b[6], b[7] = 0, 0
	out, err := a.Open(b[hl:hl], nonceOf(nonce, seq), b[hl:], b[:hl])
	return out, err == nil
}

// txKey returns the key to seal the next packet with, ratcheting first
// when the current one reached its age or packet limit.
func (k *sfCrypto) txKey(now mono.Time, s *Security) *dirKey {
	if now.Sub(k.tx.since) >= s.RekeyAfter || k.tx.count >= s.RekeyAfterPackets {
		k.tx = k.tx.ratchet(k.kind, now)
	}
	k.tx.count++
	return &k.tx
}

// rxKey picks the key for a packet of phase at seq: the current one, the
// previous one for stragglers sent before the peer's last update, or the
// next one (the peer updated). update is set when it is the next key.
func (k *sfCrypto) rxKey(now mono.Time, phase uint8, seq uint64) (key *dirKey, update bool) {
	if phase == k.rx.phase {
		return &k.rx, false
	}
	if k.hasPrev && seqLess(seq, k.curFirst) {
		return &k.prev, false
	}
	if k.next == nil {
		n := k.rx.ratchet(k.kind, now)
		k.next = &n
	}
	return k.next, true
}

// commitUpdate makes the next key current once a packet opened with it.
func (k *sfCrypto) commitUpdate(seq uint64) {
	k.prev, k.hasPrev = k.rx, true
	k.rx = *k.next
	k.next = nil
	k.curFirst = seq
}

// replay is a sliding window of the sequence numbers opened on a subflow.
type replay struct {
	top  uint64
	bits [replayWindow / 64]uint64
	init bool
}

// seen reports whether seq is a replay: already opened, or too old.
func (r *replay) seen(seq uint64) bool {
	if !r.init {
		return false
	}
	d := seqDiff(r.top, seq)
	if d < 0 {
		return false
	}
	if d >= replayWindow-64 { // the oldest word is being reused
		return true
	}
	return r.bits[(seq/64)%uint64(len(r.bits))]&(1<<(seq%64)) != 0
}

// mark records seq (which passed seen and authenticated).
func (r *replay) mark(seq uint64) {
	if !r.init {
		r.top, r.init = seq, true
	} else if d := seqDiff(seq, r.top); d > 0 {
		// Clear the words the window slides over.
		if d >= replayWindow {
			clear(r.bits[:])
		} else {
			end := (seq/64 + 1) & (wire.MaxSeq / 64)
			for w := (r.top/64 + 1) & (wire.MaxSeq / 64); w != end; w = (w + 1) & (wire.MaxSeq / 64) {
				r.bits[w%uint64(len(r.bits))] = 0
			}
		}
		r.top = seq
	}
	r.bits[(seq/64)%uint64(len(r.bits))] |= 1 << (seq % 64)
}

// setKeyPhase writes the key phase into the packet's header: the Reserved
// byte of the X=1 generic header, or, with short sequence numbers (X=0,
// whose generic header has no such byte), the lowest of the three Reserved
// bits before the Type.
func setKeyPhase(buf []byte, phase uint8) {
	if buf[8]&1 == 0 {
		buf[8] = buf[8]&^shortPhaseBit | (phase&keyPhaseBit)<<5
		return
	}
	buf[reservedByte] = phase
}

// keyPhase reads the key phase setKeyPhase wrote.
func keyPhase(b []byte) uint8 {
	if b[8]&1 == 0 {
		return b[8] & shortPhaseBit >> 5
	}
	return b[reservedByte] & keyPhaseBit
}
