// SPDX-License-Identifier: MIT

// Package noise is mptun's authenticated key exchange: the Noise IKpsk2
// pattern (Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s, as WireGuard uses it)
// over X25519, ChaCha20-Poly1305 and BLAKE2s from golang.org/x/crypto,
// plus WireGuard-style MACs and cookies that let a responder under load
// refuse work for clients that have not proved their address.
//
// It only builds and checks messages; it keeps no clock, no sockets and
// reads randomness from the io.Reader it is given, so the engine stays
// sans-I/O and tests are deterministic. This package is small and free of
// daemon code, so the mptun CLI can use its key helpers.
package noise

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/curve25519"
)

// KeyLen is the length of X25519 keys and of preshared keys.
const KeyLen = 32

// Key is an X25519 private or public key, or a preshared key.
type Key [KeyLen]byte

// IsZero reports whether k is all zeros (unset).
func (k Key) IsZero() bool { return k == Key{} }

// String is the base64 form used in configs (as `wg` prints keys).
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// ParseKey decodes a base64 key of 32 bytes.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("key is not base64: %w", err)
	}
	if len(b) != KeyLen {
		return k, fmt.Errorf("key has %d bytes, want %d", len(b), KeyLen)
	}
	copy(k[:], b)
	return k, nil
}

// GeneratePrivateKey returns a new clamped X25519 private key.
func GeneratePrivateKey(rand io.Reader) (Key, error) {
	var k Key
	if _, err := io.ReadFull(rand, k[:]); err != nil {
		return k, fmt.Errorf("noise: random: %w", err)
	}
	clamp(&k)
	return k, nil
}

func clamp(k *Key) {
	k[0] &= 248
	k[31] = k[31]&127 | 64
}

// PublicKey returns the public key of private key k.
func PublicKey(k Key) (Key, error) {
	var pub Key
	out, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		return pub, fmt.Errorf("noise: public key: %w", err)
	}
	copy(pub[:], out)
	return pub, nil
}

var errDH = errors.New("noise: low-order point")

// dh is X25519; it refuses low-order points (an all-zero shared secret).
func dh(priv, pub *Key) (Key, error) {
	var s Key
	out, err := curve25519.X25519(priv[:], pub[:])
	if err != nil {
		return s, errDH
	}
	copy(s[:], out)
	return s, nil
}
