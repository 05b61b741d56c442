// SPDX-License-Identifier: MIT

package mpdccp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
)

// Security turns on mptun's secure mode (docs/security.md): a Noise IK
// handshake carried in the DCCP Request/Response, every later packet
// sealed with an AEAD, RFC 9897's HMAC and close keys derived from the
// handshake, and cryptokey routing (each peer's AllowedIPs). A nil
// Config.Security is plain RFC 9897 (no confidentiality, plain keys).
type Security struct {
	PrivateKey noise.Key
	// Peers are the keys this end accepts: on a client the concentrator,
	// on a concentrator every CPE.
	Peers []Peer
	// WallClock stamps first messages, whose timestamps must grow per
	// peer (replay protection); default time.Now.
	WallClock func() time.Time
	// AEAD forces "chacha20poly1305" or "aes-256-gcm" for connections this
	// end sets up; "" prefers AES-GCM when both ends have AES instructions.
	AEAD string
	// Key ratchet limits per subflow and direction (default 2 min, 2^32).
	RekeyAfter        time.Duration
	RekeyAfterPackets uint64
	// HandshakeRate and HandshakeBurst bound the first messages a source
	// address may make the server process (default 20/s, burst 5).
	HandshakeRate  float64
	HandshakeBurst float64
	// CookieThreshold: when more valid-looking first messages than this
	// arrive in a second, or this many connections are half open, the
	// server answers with a cookie instead of doing any work (default 50;
	// negative: always).
	CookieThreshold int
}

// Peer is one remote key and what it may do.
type Peer struct {
	PublicKey    noise.Key
	PresharedKey noise.Key // zero: none
	// AllowedIPs are the inner source prefixes the peer may send from and
	// the inner destinations routed to it.
	AllowedIPs []netip.Prefix
}

const (
	expInitiation  = 1 // MP_EXP kinds: Noise first message
	expResponse    = 2 // Noise second message
	expCookieReply = 3
	// mpKeyTypeNoise is MP_KEY's experimental key type; its 64 bytes are
	// the sender's Noise ephemeral public key and 32 zero bytes.
	mpKeyTypeNoise = wire.KeyTypeExperimental
	tai64nLen      = 12
	maxRateSources = 4096
	// joinNonceMemory is how many join nonces a connection remembers to
	// refuse replayed join Requests.
	joinNonceMemory = 16
	prologueLabel   = "mptun MP-DCCP Noise v1"
	// Handshakes per second and burst per source address.
	defaultHandshakeRate  = 20
	defaultHandshakeBurst = 5
)

// peerState is a configured peer and its connections.
type peerState struct {
	Peer
	lastTS  [tai64nLen]byte // newest first-message timestamp accepted
	conn    *Conn           // established connection
	pending *Conn           // connection whose handshake is not complete
}

func (p *peerState) allows(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range p.AllowedIPs {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// epSec is an Endpoint's secure-mode state.
type epSec struct {
	cfg      Security
	id       *noise.Identity
	peers    map[noise.Key]*peerState
	routes   map[int]map[netip.Prefix]*peerState // by prefix length
	lens     []int                               // prefix lengths in routes, longest first
	cookies  noise.Cookies
	loadSec  int64 // the second loadN counts
	loadN    int
	loadPrev int
	aead     uint8 // what this end prefers
	scratch  []byte
	nonce    []byte // AEAD nonce scratch
}

func newEPSec(s *Security, role Role, maxPacket int) (*epSec, error) {
	cfg := *s
	if cfg.PrivateKey.IsZero() {
		return nil, errors.New("mpdccp: security: no private key")
	}
	if len(cfg.Peers) == 0 {
		return nil, errors.New("mpdccp: security: no peer")
	}
	if role == Client && len(cfg.Peers) != 1 {
		return nil, fmt.Errorf("mpdccp: security: a client has exactly one peer, not %d", len(cfg.Peers))
	}
	if cfg.WallClock == nil {
		cfg.WallClock = time.Now
	}
	if cfg.RekeyAfter <= 0 {
		cfg.RekeyAfter = defaultRekeyAfter
	}
	if cfg.RekeyAfterPackets == 0 {
		cfg.RekeyAfterPackets = defaultRekeyAfterPackets
	}
	if cfg.HandshakeRate <= 0 {
		cfg.HandshakeRate = defaultHandshakeRate
	}
	if cfg.HandshakeBurst <= 0 {
		cfg.HandshakeBurst = defaultHandshakeBurst
	}
	if cfg.CookieThreshold == 0 {
		cfg.CookieThreshold = 50
	}
	id, err := noise.NewIdentity(cfg.PrivateKey)
	if err != nil {
		return nil, err
	}
	es := &epSec{cfg: cfg, id: id, peers: map[noise.Key]*peerState{}, routes: map[int]map[netip.Prefix]*peerState{},
		scratch: make([]byte, maxPacket), nonce: make([]byte, 12)}
	switch cfg.AEAD {
	case "":
		if cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ || cpu.ARM64.HasAES && cpu.ARM64.HasPMULL {
			es.aead = aeadAESGCM
		}
	case "aes-256-gcm":
		es.aead = aeadAESGCM
	case "chacha20poly1305":
	default:
		return nil, fmt.Errorf("mpdccp: security: unknown AEAD %q", cfg.AEAD)
	}
	for i := range cfg.Peers {
		p := &peerState{Peer: cfg.Peers[i]}
		if p.PublicKey == id.Public {
			return nil, errors.New("mpdccp: security: a peer has this end's own public key")
		}
		if _, dup := es.peers[p.PublicKey]; dup {
			return nil, fmt.Errorf("mpdccp: security: peer %s listed twice", p.PublicKey)
		}
		es.peers[p.PublicKey] = p
		for _, pf := range p.AllowedIPs {
			pf = pf.Masked()
			bits := pf.Bits()
			if pf.Addr().Is6() {
				bits += 1000 // v4 and v6 prefixes live apart
			}
			m := es.routes[bits]
			if m == nil {
				m = map[netip.Prefix]*peerState{}
				es.routes[bits] = m
				es.lens = append(es.lens, bits)
			}
			if other, dup := m[pf]; dup && other != p {
				return nil, fmt.Errorf("mpdccp: security: allowed IP %s given to two peers", pf)
			}
			m[pf] = p
		}
	}
	sortDesc(es.lens)
	return es, nil
}

func sortDesc(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] > a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// route returns the peer whose allowed IPs hold dst (longest prefix).
func (es *epSec) route(dst netip.Addr) *peerState {
	dst = dst.Unmap()
	for _, l := range es.lens {
		bits, v6 := l, false
		if l >= 1000 {
			bits, v6 = l-1000, true
		}
		if dst.Is6() != v6 {
			continue
		}
		pf, err := dst.Prefix(bits)
		if err != nil {
			continue
		}
		if p := es.routes[l][pf]; p != nil {
			return p
		}
	}
	return nil
}

// underLoad reports whether first messages need a cookie (mac2) now.
func (es *epSec) underLoad(e *Endpoint, now mono.Time) bool {
	if es.cfg.CookieThreshold < 0 {
		return true
	}
	sec := int64(now) / int64(time.Second)
	if sec != es.loadSec {
		if sec == es.loadSec+1 {
			es.loadPrev = es.loadN
		} else {
			es.loadPrev = 0
		}
		es.loadSec, es.loadN = sec, 0
	}
	es.loadN++
	if es.loadN > es.cfg.CookieThreshold || es.loadPrev > es.cfg.CookieThreshold {
		return true
	}
	half := 0
	for _, p := range es.peers {
		if p.pending != nil {
			half++
		}
	}
	return half >= max(es.cfg.CookieThreshold/4, 4)
}

// tai64n encodes t as TAI64N (12 bytes, big endian, monotonic order).
func tai64n(t time.Time) [tai64nLen]byte {
	var b [tai64nLen]byte
	s := uint64(t.Unix()) + 1<<62 + 10
	for i := 7; i >= 0; i-- {
		b[i] = byte(s)
		s >>= 8
	}
	ns := uint32(t.Nanosecond())
	b[8], b[9], b[10], b[11] = byte(ns>>24), byte(ns>>16), byte(ns>>8), byte(ns)
	return b
}

func prologue(serviceCode, clientCI uint32) []byte {
	b := make([]byte, 0, len(prologueLabel)+8)
	b = append(b, prologueLabel...)
	b = append(b, byte(serviceCode>>24), byte(serviceCode>>16), byte(serviceCode>>8), byte(serviceCode))
	return append(b, byte(clientCI>>24), byte(clientCI>>16), byte(clientCI>>8), byte(clientCI))
}

// RouteInner returns the connection that carries inner packets to dst in
// secure mode: the one of the peer whose allowed IPs hold dst. It returns
// nil in plain mode, for unrouted destinations and for peers without an
// open connection. The table is the configuration: it never learns.
func (e *Endpoint) RouteInner(dst netip.Addr) *Conn {
	if e.sec == nil {
		return nil
	}
	p := e.sec.route(dst)
	if p == nil {
		return nil
	}
	if e.cfg.Role == Client && len(e.conns) == 1 {
		// A client queues inner packets while its connection opens.
		return e.conns[0]
	}
	if p.conn == nil || p.conn.state != Open {
		return nil
	}
	return p.conn
}

// Sealed reports whether packets are encrypted (secure mode). The data
// path then takes the outer ECN field from Transmit.ECN instead of reading
// the (encrypted) inner header, and leaves CE decapsulation to the engine.
func (e *Endpoint) Sealed() bool { return e.sec != nil }

// PublicKey is this end's public key in secure mode (zero otherwise).
func (e *Endpoint) PublicKey() noise.Key {
	if e.sec == nil {
		return noise.Key{}
	}
	return e.sec.id.Public
}

// PeerKey is the authenticated public key of the connection's peer in
// secure mode (zero in plain mode or before the handshake completed).
func (c *Conn) PeerKey() noise.Key {
	if c.sec == nil || !c.sec.ready || c.sec.peer == nil {
		return noise.Key{}
	}
	return c.sec.peer.PublicKey
}

// AEAD names the packet protection of the connection ("" in plain mode).
func (c *Conn) AEAD() string {
	if c.sec == nil || !c.sec.ready {
		return ""
	}
	return aeadName(c.sec.kind)
}

// rateLimiter is a token bucket per source address, bounded in size.
type rateLimiter struct {
	rate, burst float64
	b           map[netip.Addr]*bucket
	lastGC      mono.Time
}

type bucket struct {
	tokens float64
	last   mono.Time
}

func (l *rateLimiter) init(rate, burst float64) {
	l.rate, l.burst, l.b = rate, burst, map[netip.Addr]*bucket{}
}

// allow takes a token for src; false when src is over its rate or the
// table is full of recently active sources.
func (l *rateLimiter) allow(now mono.Time, src netip.Addr) bool {
	bk := l.b[src]
	if bk == nil {
		if len(l.b) >= maxRateSources {
			if now.Sub(l.lastGC) < 100*time.Millisecond {
				return false
			}
			l.lastGC = now
			for a, x := range l.b {
				if now.Sub(x.last) > time.Second {
					delete(l.b, a)
				}
			}
			if len(l.b) >= maxRateSources {
				return false
			}
		}
		bk = &bucket{tokens: l.burst, last: now}
		l.b[src] = bk
	}
	bk.tokens = min(l.burst, bk.tokens+now.Sub(bk.last).Seconds()*l.rate)
	bk.last = now
	if bk.tokens < 1 {
		return false
	}
	bk.tokens--
	return true
}
