// SPDX-License-Identifier: MIT

package noise

import (
	"crypto/subtle"
	"io"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// CookieReplyLen is a cookie reply: a 24-byte nonce and the encrypted
// 16-byte cookie with its tag.
const CookieReplyLen = chacha20poly1305.NonceSizeX + macLen + tagLen

// CookieLifetime is how long a cookie secret (and so a cookie) is good.
const CookieLifetime = 2 * time.Minute

// Cookies are a responder's stateless proofs of a source address: a
// cookie is MAC(secret, source address); a client that has one shows, in
// mac2 of its next first message, that it receives at that address. The
// secret changes every CookieLifetime. Times are the caller's monotonic
// nanoseconds.
type Cookies struct {
	secret [HashLen]byte
	made   int64
	valid  bool
}

func (c *Cookies) current(rnd io.Reader, now int64) *[HashLen]byte {
	if !c.valid || now-c.made >= int64(CookieLifetime) {
		if _, err := io.ReadFull(rnd, c.secret[:]); err != nil {
			// Keep the old secret rather than make a predictable one.
			return &c.secret
		}
		c.made, c.valid = now, true
	}
	return &c.secret
}

func (c *Cookies) cookie(rnd io.Reader, now int64, src []byte) [macLen]byte {
	return mac(c.current(rnd, now)[:], src)
}

// CheckMAC2 reports whether msg (a first message whose mac1 is valid)
// carries the cookie of source src.
func (c *Cookies) CheckMAC2(rnd io.Reader, now int64, msg, src []byte) bool {
	if len(msg) != InitiationLen || !c.valid {
		return false
	}
	ck := c.cookie(rnd, now, src)
	n := InitiationLen - macLen
	want := mac(ck[:], msg[:n])
	return subtle.ConstantTimeCompare(want[:], msg[n:]) == 1
}

// Reply appends the cookie reply to first message msg from src: the
// cookie encrypted under a key only someone who knows our public key has,
// bound to the message's mac1 (so it answers that message only).
func (c *Cookies) Reply(dst []byte, rnd io.Reader, now int64, id *Identity, msg, src []byte) []byte {
	ck := c.cookie(rnd, now, src)
	var nonce [chacha20poly1305.NonceSizeX]byte
	if _, err := io.ReadFull(rnd, nonce[:]); err != nil {
		return dst
	}
	aead, _ := chacha20poly1305.NewX(id.cookieKey[:])
	mac1 := msg[InitiationLen-2*macLen : InitiationLen-macLen]
	dst = append(dst, nonce[:]...)
	return aead.Seal(dst, nonce[:], ck[:], mac1)
}
