// SPDX-License-Identifier: MIT

package noise

import (
	"crypto/hmac"
	"hash"

	"golang.org/x/crypto/blake2s"
)

// HashLen is the BLAKE2s-256 output length.
const HashLen = blake2s.Size

func newBlake2s() hash.Hash {
	h, _ := blake2s.New256(nil) // cannot fail without a key
	return h
}

// hashOf is BLAKE2s-256 of the concatenated inputs.
func hashOf(parts ...[]byte) [HashLen]byte {
	h := newBlake2s()
	for _, p := range parts {
		h.Write(p)
	}
	var out [HashLen]byte
	h.Sum(out[:0])
	return out
}

func hmacBlake2s(key []byte, parts ...[]byte) [HashLen]byte {
	m := hmac.New(newBlake2s, key)
	for _, p := range parts {
		m.Write(p)
	}
	var out [HashLen]byte
	m.Sum(out[:0])
	return out
}

// KDF is the Noise HKDF over HMAC-BLAKE2s: it derives up to three 32-byte
// outputs from chaining key ck and input.
func KDF(ck, input []byte, n int) [3][HashLen]byte {
	var out [3][HashLen]byte
	tmp := hmacBlake2s(ck, input)
	prev := []byte{}
	for i := 0; i < n; i++ {
		out[i] = hmacBlake2s(tmp[:], prev, []byte{byte(i + 1)})
		prev = out[i][:]
	}
	return out
}

// Derive returns a 32-byte key from secret for a labelled purpose; the
// engine derives every connection and subflow key with it.
func Derive(secret []byte, label string, context ...[]byte) [HashLen]byte {
	parts := make([][]byte, 0, len(context)+1)
	parts = append(parts, []byte(label))
	parts = append(parts, context...)
	m := hmac.New(newBlake2s, secret)
	for _, p := range parts {
		m.Write(p)
	}
	var out [HashLen]byte
	m.Sum(out[:0])
	return out
}

// mac is keyed BLAKE2s-128, the MAC of WireGuard's mac1/mac2 and cookies.
func mac(key []byte, parts ...[]byte) [16]byte {
	h, err := blake2s.New128(key)
	var out [16]byte
	if err != nil {
		return out
	}
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(out[:0])
	return out
}
