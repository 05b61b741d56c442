// SPDX-License-Identifier: MIT

package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// MPType is the MP_OPT sub-option number of a Multipath option (RFC 9897 §3.2).
type MPType uint8

// Multipath sub-options (RFC 9897 Table "MP_OPT option types").
const (
	MPConfirm    MPType = 0
	MPJoin       MPType = 1
	MPFastClose  MPType = 2
	MPKey        MPType = 3
	MPSeq        MPType = 4
	MPHMAC       MPType = 5
	MPRTT        MPType = 6
	MPAddAddr    MPType = 7
	MPRemoveAddr MPType = 8
	MPPrio       MPType = 9
	MPClose      MPType = 10
	MPExp        MPType = 11
)

var mpNames = [...]string{
	"MP_CONFIRM", "MP_JOIN", "MP_FAST_CLOSE", "MP_KEY", "MP_SEQ", "MP_HMAC",
	"MP_RTT", "MP_ADDADDR", "MP_REMOVEADDR", "MP_PRIO", "MP_CLOSE", "MP_EXP",
}

func (t MPType) String() string {
	if int(t) < len(mpNames) {
		return mpNames[t]
	}
	return "MP_OPT(" + strconv.Itoa(int(t)) + ")"
}

// NeedsConfirm reports whether RFC 9897 §3.2.1 requires the receiver to
// acknowledge sub-option t with MP_CONFIRM (ADDADDR, REMOVEADDR, PRIO).
func (t MPType) NeedsConfirm() bool {
	return t == MPAddAddr || t == MPRemoveAddr || t == MPPrio
}

// Sizes fixed by RFC 9897 (whole option, including 46, Length and MP_OPT).
const (
	MPJoinLen       = 12
	MPSeqLen        = 9
	MPHMACLen       = 23
	MPRTTLen        = 12
	MPRemoveAddrLen = 8
	MPPrioLen       = 4
	// HMACSize is the truncated HMAC-SHA256 carried by MP_HMAC.
	HMACSize = 20
	// mpPrefix is 46, Length, MP_OPT.
	mpPrefix = 3
)

// MP_RTT types (RFC 9897 §3.2.7).
const (
	RTTRaw      = 0 // the last measured sample
	RTTMin      = 1 // minimum over a period
	RTTMax      = 2 // maximum over a period
	RTTSmoothed = 3 // smoothed estimate
)

// MPOption is a decoded Multipath option; which fields are meaningful
// depends on Type. Slices alias the input buffer.
type MPOption struct {
	Type    MPType
	Seq     uint64 // MP_SEQ (48 bits)
	AddrID  uint8  // JOIN, ADDADDR, REMOVEADDR
	Token   uint32 // JOIN: the peer's Connection Identifier; KEY: own CI
	Nonce   uint32 // JOIN, ADDADDR, REMOVEADDR
	HMAC    []byte // MP_HMAC: 20 bytes
	Keys    []byte // MP_KEY: {KeyType(1) KeyData(n)}+ as on the wire
	KeyData []byte // FAST_CLOSE, CLOSE: the peer's key data
	RTTType uint8  // MP_RTT
	RTT     uint32 // MP_RTT, ms
	Age     uint32 // MP_RTT, ms since the measurement
	Addr    netip.Addr
	Port    uint16 // ADDADDR; 0 = absent or "the same port"
	// HasPort says an ADDADDR carries the port field (possibly 0: RFC
	// 9897's example uses an explicit 0 for "same port"). Encoding writes
	// the field when HasPort is set or Port is not 0.
	HasPort bool
	Prio    uint8 // MP_PRIO, 4 bits
	// Raw is, for MP_CONFIRM, the confirmed list: complete Multipath
	// options (an MP_SEQ, then the option(s) it confirms, newest first),
	// which NewOptionIter can walk; for MP_EXP, the experimental data.
	Raw []byte
}

// ParseMP decodes data, the Option.Data of an OptMultipath option (starting
// with the MP_OPT byte), into o. Lengths are checked exactly as RFC 9897
// fixes them; an unknown MP_OPT gives ErrUnknownMP.
func ParseMP(data []byte, o *MPOption) error {
	if len(data) < 1 {
		return fmt.Errorf("%w: empty", ErrBadMP)
	}
	*o = MPOption{Type: MPType(data[0])}
	v := data[1:]
	bad := func() error {
		return fmt.Errorf("%w: %s with %d value bytes", ErrBadMP, o.Type, len(v))
	}
	switch o.Type {
	case MPConfirm:
		o.Raw = v
	case MPJoin:
		if len(v) != MPJoinLen-mpPrefix {
			return bad()
		}
		o.AddrID = v[0]
		o.Token = binary.BigEndian.Uint32(v[1:])
		o.Nonce = binary.BigEndian.Uint32(v[5:])
	case MPFastClose, MPClose:
		if len(v) < 1 {
			return bad()
		}
		o.KeyData = v
	case MPKey:
		// Reserved(1), Connection Identifier(4), then at least one key.
		if len(v) < 6 {
			return bad()
		}
		o.Token = binary.BigEndian.Uint32(v[1:])
		o.Keys = v[5:]
		if err := checkKeys(o.Keys); err != nil {
			return err
		}
	case MPSeq:
		if len(v) != MPSeqLen-mpPrefix {
			return bad()
		}
		o.Seq = get48(v)
	case MPHMAC:
		if len(v) != HMACSize {
			return bad()
		}
		o.HMAC = v
	case MPRTT:
		if len(v) != MPRTTLen-mpPrefix {
			return bad()
		}
		o.RTTType = v[0]
		o.RTT = binary.BigEndian.Uint32(v[1:])
		o.Age = binary.BigEndian.Uint32(v[5:])
	case MPAddAddr:
		// AddrID(1) Nonce(4) then IPv4 / IPv4+port / IPv6 / IPv6+port.
		if len(v) < 5 {
			return bad()
		}
		o.AddrID = v[0]
		o.Nonce = binary.BigEndian.Uint32(v[1:])
		a := v[5:]
		switch len(a) {
		case 4, 6:
			o.Addr = netip.AddrFrom4([4]byte(a[:4]))
		case 16, 18:
			o.Addr = netip.AddrFrom16([16]byte(a[:16]))
		default:
			return bad()
		}
		if len(a) == 6 || len(a) == 18 {
			// An explicit 0 means the same port as the subflow's; it
			// authenticates as an absent port does (0x0000 in the HMAC).
			o.Port, o.HasPort = binary.BigEndian.Uint16(a[len(a)-2:]), true
		}
	case MPRemoveAddr:
		if len(v) != MPRemoveAddrLen-mpPrefix {
			return bad()
		}
		o.AddrID = v[0]
		o.Nonce = binary.BigEndian.Uint32(v[1:])
	case MPPrio:
		if len(v) != MPPrioLen-mpPrefix {
			return bad()
		}
		o.Prio = v[0] & 0xf // the upper 4 bits are reserved
	case MPExp:
		o.Raw = v
	default:
		return fmt.Errorf("%w %d", ErrUnknownMP, data[0])
	}
	return nil
}

// MPLen returns the encoded length of o (including 46, Length, MP_OPT),
// or an error if o cannot be encoded.
func MPLen(o *MPOption) (int, error) {
	n := mpPrefix
	switch o.Type {
	case MPConfirm, MPExp:
		n += len(o.Raw)
	case MPJoin:
		n = MPJoinLen
	case MPFastClose, MPClose:
		if len(o.KeyData) == 0 {
			return 0, fmt.Errorf("%w: %s without key data", ErrBadArgument, o.Type)
		}
		n += len(o.KeyData)
	case MPKey:
		if err := checkKeys(o.Keys); err != nil {
			return 0, err
		}
		n += 5 + len(o.Keys)
	case MPSeq:
		n = MPSeqLen
	case MPHMAC:
		if len(o.HMAC) != HMACSize {
			return 0, fmt.Errorf("%w: MP_HMAC of %d bytes", ErrBadArgument, len(o.HMAC))
		}
		n = MPHMACLen
	case MPRTT:
		n = MPRTTLen
	case MPAddAddr:
		switch {
		case o.Addr.Is4():
			n += 5 + 4
		case o.Addr.Is6():
			n += 5 + 16
		default:
			return 0, fmt.Errorf("%w: MP_ADDADDR without address", ErrBadArgument)
		}
		if o.Port != 0 || o.HasPort {
			n += 2
		}
	case MPRemoveAddr:
		n = MPRemoveAddrLen
	case MPPrio:
		n = MPPrioLen
	default:
		return 0, fmt.Errorf("%w: unknown %s", ErrBadArgument, o.Type)
	}
	if n > 255 {
		return 0, fmt.Errorf("%w: %s of %d bytes exceeds 255", ErrBadArgument, o.Type, n)
	}
	return n, nil
}

// PutMP writes o as a complete Multipath option (46, Length, MP_OPT,
// value) into b and returns its length. MP_CONFIRM bodies are lists of such
// options, so the engine can use PutMP to build them.
func PutMP(b []byte, o *MPOption) (int, error) {
	n, err := MPLen(o)
	if err != nil {
		return 0, err
	}
	if len(b) < n {
		return 0, ErrNoSpace
	}
	b[0] = OptMultipath
	b[1] = byte(n)
	b[2] = byte(o.Type)
	v := b[mpPrefix:n]
	switch o.Type {
	case MPConfirm, MPExp:
		copy(v, o.Raw)
	case MPJoin:
		v[0] = o.AddrID
		binary.BigEndian.PutUint32(v[1:], o.Token)
		binary.BigEndian.PutUint32(v[5:], o.Nonce)
	case MPFastClose, MPClose:
		copy(v, o.KeyData)
	case MPKey:
		v[0] = 0
		binary.BigEndian.PutUint32(v[1:], o.Token)
		copy(v[5:], o.Keys)
	case MPSeq:
		put48(v, o.Seq)
	case MPHMAC:
		copy(v, o.HMAC)
	case MPRTT:
		v[0] = o.RTTType
		binary.BigEndian.PutUint32(v[1:], o.RTT)
		binary.BigEndian.PutUint32(v[5:], o.Age)
	case MPAddAddr:
		v[0] = o.AddrID
		binary.BigEndian.PutUint32(v[1:], o.Nonce)
		a := o.Addr.AsSlice()
		copy(v[5:], a)
		if o.Port != 0 || o.HasPort {
			binary.BigEndian.PutUint16(v[5+len(a):], o.Port)
		}
	case MPRemoveAddr:
		v[0] = o.AddrID
		binary.BigEndian.PutUint32(v[1:], o.Nonce)
	case MPPrio:
		v[0] = o.Prio & 0xf
	}
	return n, nil
}

// MP_KEY key types (RFC 9897 §3.2.4).
const (
	KeyTypePlain        = 0   // 8-byte plain-text key, MUST be supported
	KeyTypeExperimental = 255 // 64-byte experimental key
)

// KeyLen returns the key data length of keyType, or -1 if it is unknown.
func KeyLen(keyType uint8) int {
	switch keyType {
	case KeyTypePlain:
		return 8
	case KeyTypeExperimental:
		return 64
	}
	return -1
}

// NextKey splits the first {KeyType, KeyData} entry off an MP_KEY key
// list. ok is false at the end of the list, for an unknown key type (whose
// length cannot be known) or when the data is short.
func NextKey(keys []byte) (keyType uint8, key []byte, rest []byte, ok bool) {
	if len(keys) < 1 {
		return 0, nil, nil, false
	}
	keyType = keys[0]
	n := KeyLen(keyType)
	if n < 0 || len(keys) < 1+n {
		return keyType, nil, nil, false
	}
	return keyType, keys[1 : 1+n : 1+n], keys[1+n:], true
}

// checkKeys validates an MP_KEY key list: at least one key, known types
// with their exact lengths. An unknown type ends validation, since what
// follows cannot be delimited; RFC 9897 lets a receiver pick any type it
// supports, so the entries before it stay usable.
func checkKeys(keys []byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: MP_KEY without key", ErrBadMP)
	}
	for len(keys) > 0 {
		t, _, rest, ok := NextKey(keys)
		if !ok {
			if KeyLen(t) < 0 {
				return nil
			}
			return fmt.Errorf("%w: MP_KEY type %d truncated", ErrBadMP, t)
		}
		keys = rest
	}
	return nil
}

// HMAC computes HMAC-SHA256(key, msg...) truncated to the 20 bytes that
// MP_HMAC carries (RFC 9897 §3.2.6).
func HMAC(dst *[HMACSize]byte, key []byte, msg ...[]byte) {
	m := hmac.New(sha256.New, key)
	for _, b := range msg {
		m.Write(b)
	}
	var sum [sha256.Size]byte
	copy(dst[:], m.Sum(sum[:0]))
}

// HMACInput appends the message that an MP_HMAC following o authenticates
// (RFC 9897 §3.2.6) to dst: for MP_ADDADDR Address ID, Nonce, address and
// port (0x0000 when absent); for MP_REMOVEADDR Address ID and Nonce.
// For MP_JOIN the input is the two nonces and is built by the engine.
func HMACInput(dst []byte, o *MPOption) []byte {
	switch o.Type {
	case MPAddAddr, MPRemoveAddr:
		dst = append(dst, o.AddrID)
		dst = binary.BigEndian.AppendUint32(dst, o.Nonce)
		if o.Type == MPAddAddr {
			dst = append(dst, o.Addr.AsSlice()...)
			dst = binary.BigEndian.AppendUint16(dst, o.Port)
		}
	}
	return dst
}
