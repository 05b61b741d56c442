// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"fmt"
)

// Option types (RFC 4340 §5.8 Table 3, RFC 9897 for Multipath).
const (
	OptPadding       = 0
	OptMandatory     = 1
	OptSlowReceiver  = 2
	OptChangeL       = 32
	OptConfirmL      = 33
	OptChangeR       = 34
	OptConfirmR      = 35
	OptInitCookie    = 36
	OptNDPCount      = 37
	OptAckVector0    = 38
	OptAckVector1    = 39
	OptDataDropped   = 40
	OptTimestamp     = 41
	OptTimestampEcho = 42
	OptElapsedTime   = 43
	OptDataChecksum  = 44
	OptMultipath     = 46
)

// MaxOptionData is the most data a TLV option can hold (length byte 255
// minus the type and length bytes).
const MaxOptionData = 253

// Option is one option of an options area. Data excludes the type and
// length bytes and is nil for single-byte options (types 0-31).
type Option struct {
	Type uint8
	Data []byte
}

// OptionIter walks an options area (RFC 4340 §5.8): types 0-31 are one
// byte, every other type is Type, Length (counting both bytes), data.
type OptionIter struct {
	b         []byte
	err       error
	mandatory bool // the option last returned followed a Mandatory option
	pending   bool // a Mandatory option was just returned
}

// NewOptionIter returns an iterator over opts (Packet.Options).
func NewOptionIter(opts []byte) OptionIter { return OptionIter{b: opts} }

// Next returns the next option. Padding is skipped; Mandatory is returned
// as an Option of type OptMandatory so that the caller sees where it is
// (see also PrecededByMandatory and MandatoryCheck). Next returns false at
// the end of the area or at a malformed option (then Err is non-nil).
//
// Options after a malformed option cannot be located, so iteration stops.
func (it *OptionIter) Next() (Option, bool) {
	for len(it.b) > 0 {
		t := it.b[0]
		if t == OptPadding {
			it.b = it.b[1:]
			it.pending = false
			continue
		}
		it.mandatory = it.pending
		it.pending = t == OptMandatory
		if t < 32 {
			it.b = it.b[1:]
			return Option{Type: t}, true
		}
		if len(it.b) < 2 {
			it.err = fmt.Errorf("%w: option %d: missing length byte", ErrBadOption, t)
			it.b = nil
			return Option{}, false
		}
		l := int(it.b[1])
		if l < 2 || l > len(it.b) {
			it.err = fmt.Errorf("%w: option %d: length %d, %d bytes left", ErrBadOption, t, l, len(it.b))
			it.b = nil
			return Option{}, false
		}
		o := Option{Type: t, Data: it.b[2:l:l]}
		it.b = it.b[l:]
		return o, true
	}
	return Option{}, false
}

// Err returns the error that stopped iteration, if any.
func (it *OptionIter) Err() error { return it.err }

// PrecededByMandatory reports whether the option last returned by Next was
// immediately preceded by a Mandatory option (RFC 4340 §5.8.2).
func (it *OptionIter) PrecededByMandatory() bool { return it.mandatory }

// MandatoryCheck tells the engine which Reset, if any, RFC 4340 §5.8.2
// requires for the Mandatory options in opts. understood reports whether
// the engine understood and processed an option; it is not retained.
//
//   - a Mandatory option that is the last option, or is followed by Padding
//     or another Mandatory option: Reset code 5, "Option Error";
//   - a Mandatory option followed by an option the receiver does not
//     understand (understood returns false): Reset code 6, "Mandatory Error";
//   - a malformed options area: Reset code 5, "Option Error" (§5.8: option
//     lengths that overrun the header are an option error).
//
// RFC 4340 §5.8.2 exempts DCCP-Data packets: the receiver MAY ignore
// Mandatory there, so callers should not call this for TypeData.
// ok is false when a Reset must be sent.
func MandatoryCheck(opts []byte, understood func(Option) bool) (code ResetCode, ok bool) {
	mand := false
	for i := 0; i < len(opts); {
		t := opts[i]
		if mand && (t == OptPadding || t == OptMandatory) {
			return ResetOptionError, false
		}
		if t < 32 {
			i++
			if t == OptMandatory {
				mand = true
				continue
			}
			if mand && understood != nil && !understood(Option{Type: t}) {
				return ResetMandatoryError, false
			}
			mand = false
			continue
		}
		if i+1 >= len(opts) {
			return ResetOptionError, false
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return ResetOptionError, false
		}
		if mand && understood != nil && !understood(Option{Type: t, Data: opts[i+2 : i+l : i+l]}) {
			return ResetMandatoryError, false
		}
		mand = false
		i += l
	}
	if mand {
		return ResetOptionError, false
	}
	return 0, true
}

// Typed option decoders. Each takes Option.Data.

// ParseFeature decodes Change L/R and Confirm L/R data (RFC 4340 §6.1,
// §6.2): the feature number then the value(s). An empty Confirm (no value)
// is valid and means the feature is unknown or no agreement was reached.
func ParseFeature(data []byte) (feature uint8, values []byte, err error) {
	if len(data) < 1 {
		return 0, nil, fmt.Errorf("%w: feature option without feature number", ErrBadOption)
	}
	return data[0], data[1:], nil
}

// FeatureNN decodes a non-negotiable feature value (§6.3.2: big-endian,
// 1..6 bytes, e.g. Sequence Window, Ack Ratio).
func FeatureNN(values []byte) (uint64, error) {
	if len(values) < 1 || len(values) > 6 {
		return 0, fmt.Errorf("%w: NN feature value of %d bytes", ErrBadOption, len(values))
	}
	var v uint64
	for _, c := range values {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// ParseTimestamp decodes a Timestamp option (§13.1, 4 bytes).
func ParseTimestamp(data []byte) (uint32, error) {
	if len(data) != 4 {
		return 0, fmt.Errorf("%w: Timestamp of %d bytes", ErrBadOption, len(data))
	}
	return binary.BigEndian.Uint32(data), nil
}

// ParseTimestampEcho decodes a Timestamp Echo option (§13.3): the echoed
// timestamp and an optional elapsed time (0, 2 or 4 bytes, units of
// 10 microseconds; 0 when absent).
func ParseTimestampEcho(data []byte) (ts, elapsed uint32, err error) {
	switch len(data) {
	case 4:
		return binary.BigEndian.Uint32(data), 0, nil
	case 6:
		return binary.BigEndian.Uint32(data), uint32(binary.BigEndian.Uint16(data[4:])), nil
	case 8:
		return binary.BigEndian.Uint32(data), binary.BigEndian.Uint32(data[4:]), nil
	}
	return 0, 0, fmt.Errorf("%w: Timestamp Echo of %d bytes", ErrBadOption, len(data))
}

// ParseElapsedTime decodes an Elapsed Time option (§13.2: 2 or 4 bytes,
// units of 10 microseconds).
func ParseElapsedTime(data []byte) (uint32, error) {
	switch len(data) {
	case 2:
		return uint32(binary.BigEndian.Uint16(data)), nil
	case 4:
		return binary.BigEndian.Uint32(data), nil
	}
	return 0, fmt.Errorf("%w: Elapsed Time of %d bytes", ErrBadOption, len(data))
}

// ParseNDPCount decodes an NDP Count option (§7.7: 1..6 bytes).
func ParseNDPCount(data []byte) (uint64, error) {
	if len(data) < 1 || len(data) > 6 {
		return 0, fmt.Errorf("%w: NDP Count of %d bytes", ErrBadOption, len(data))
	}
	var v uint64
	for _, c := range data {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// AckVectorNonce returns the ECN nonce sum (0 or 1) of an Ack Vector
// option type and whether typ is an Ack Vector at all (§11.4).
func AckVectorNonce(typ uint8) (nonce uint8, ok bool) {
	switch typ {
	case OptAckVector0:
		return 0, true
	case OptAckVector1:
		return 1, true
	}
	return 0, false
}

// DataDropped states (RFC 4340 §11.7.2) carried by Drop Blocks.
const (
	DropProtocolConstraints = 0
	DropAppNotListening     = 1
	DropReceiveBuffer       = 2
	DropCorrupt             = 3
)

// DataDroppedBlock decodes one block of a Data Dropped option (§11.7):
// a Normal Block (top bit 0) has a 7-bit run length; a Drop Block (top bit
// 1) has a 3-bit Drop State and a 4-bit run length. Either covers runLen+1
// packets. Only the block structure is decoded; how blocks map onto
// sequence numbers is left to the receiver of the option.
func DataDroppedBlock(c byte) (drop bool, state uint8, runLen int) {
	if c&0x80 == 0 {
		return false, 0, int(c & 0x7f)
	}
	return true, (c >> 4) & 7, int(c & 0xf)
}

// ParseDataChecksum decodes a Data Checksum option (§9.3: a 4-byte CRC-32c).
func ParseDataChecksum(data []byte) (uint32, error) {
	if len(data) != 4 {
		return 0, fmt.Errorf("%w: Data Checksum of %d bytes", ErrBadOption, len(data))
	}
	return binary.BigEndian.Uint32(data), nil
}
