// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"fmt"
)

// Header is the generic header plus the type-specific subheader fields
// (RFC 4340 §5.1-§5.6). Only fields that the Type carries are encoded.
type Header struct {
	SrcPort, DstPort uint16
	CCVal            uint8 // 4 bits, for the sender's CCID
	CsCov            uint8 // 4 bits, checksum coverage (§9.2)
	Type             Type
	Seq              uint64 // 48-bit Sequence Number (24-bit when Short)
	// Ack is the 48-bit Acknowledgement Number, meaningful when Type.HasAck()
	// (24-bit when Short).
	Ack uint64
	// Short: the packet has short sequence numbers (X=0, RFC 4340 §5.1),
	// legal only on Data, Ack and DataAck once the receiver allowed them
	// (Allow Short Seqnos, §7.6.1). Parse leaves their low 24 bits in Seq
	// and Ack; the receiver extends them (ExtendSeq).
	Short bool
	// ServiceCode is carried by Request and Response (§5.2, §5.3).
	ServiceCode uint32
	// ResetCode and ResetData are carried by Reset (§5.6).
	ResetCode ResetCode
	ResetData [3]byte
}

// headerLens is generic header + subheader length per type with X=1.
var headerLens = [...]uint8{
	TypeRequest:  GenericHeaderLen + 4,
	TypeResponse: GenericHeaderLen + ackSubheaderLen + 4,
	TypeData:     GenericHeaderLen,
	TypeAck:      GenericHeaderLen + ackSubheaderLen,
	TypeDataAck:  GenericHeaderLen + ackSubheaderLen,
	TypeCloseReq: GenericHeaderLen + ackSubheaderLen,
	TypeClose:    GenericHeaderLen + ackSubheaderLen,
	TypeReset:    GenericHeaderLen + ackSubheaderLen + 4,
	TypeSync:     GenericHeaderLen + ackSubheaderLen,
	TypeSyncAck:  GenericHeaderLen + ackSubheaderLen,
}

// HeaderLen returns the length of generic header + subheader for t, or 0
// for a reserved type.
func HeaderLen(t Type) int {
	if !t.Valid() {
		return 0
	}
	return int(headerLens[t])
}

// ShortCapable reports whether packets of type t may carry short sequence
// numbers (RFC 4340 §5.1: Data, Ack and DataAck only).
func (t Type) ShortCapable() bool { return t == TypeData || t == TypeAck || t == TypeDataAck }

// shortHeaderLen is HeaderLen for X=0: a 12-byte generic header and a
// 4-byte Acknowledgement Number subheader.
func shortHeaderLen(t Type) int {
	if t == TypeData {
		return shortGenericHeaderLen
	}
	return shortGenericHeaderLen + shortAckSubheaderLen
}

// Len is the length of generic header + subheader for h.Type (no options).
func (h *Header) Len() int {
	if h.Short && h.Type.ShortCapable() {
		return shortHeaderLen(h.Type)
	}
	return HeaderLen(h.Type)
}

// ExtendSeq returns the 48-bit sequence number closest to ref whose low 24
// bits are low (RFC 4340 §7.6): how a short Sequence Number is read against
// GSR, and a short Acknowledgement Number against GSS.
func ExtendSeq(ref, low uint64) uint64 {
	const half = 1 << 23
	d := int64((low - ref) & 0xffffff) // forward distance mod 2^24
	if d >= half {
		d -= 1 << 24
	}
	return SeqAdd(ref, d)
}

// Packet is a parsed DCCP packet; Options and Payload alias the input buffer.
type Packet struct {
	Header
	Options []byte // the raw options area (may include padding)
	Payload []byte
}

// Parse decodes b (one DCCP packet: the UDP payload in DCCP-UDP) into p.
//
// It checks the X bit, the type, the Data Offset and the lengths as in
// RFC 4340 §8.5 step 1 and §5.1; it does not verify the checksum (see
// VerifyChecksum) nor the options (see OptionIter).
//
// Packets with X=0 (24-bit sequence numbers) parse only as Data, Ack and
// DataAck (others fail with ErrShortSeqnos), with Short set; whether the
// receiver allowed them (Allow Short Seqnos, feature 2) is its call.
func Parse(b []byte, p *Packet) error {
	if len(b) < shortGenericHeaderLen {
		return fmt.Errorf("%w: %d bytes, generic header needs at least 12", ErrTruncated, len(b))
	}
	t := Type(b[8]>>1) & 0xf
	if !t.Valid() {
		return fmt.Errorf("%w %d", ErrReservedType, t)
	}
	if b[8]&1 == 0 {
		return parseShort(b, t, p)
	}
	if len(b) < GenericHeaderLen {
		return fmt.Errorf("%w: %d bytes, X=1 generic header needs 16", ErrTruncated, len(b))
	}
	hl := int(headerLens[t])
	off, err := dataOffset(b, t, hl, false)
	if err != nil {
		return err
	}
	h := &p.Header
	setGeneric(h, b, t, false)
	h.Seq = get48(b[10:])
	switch t {
	case TypeRequest:
		h.ServiceCode = binary.BigEndian.Uint32(b[16:])
	case TypeData:
	default:
		h.Ack = get48(b[18:])
		switch t {
		case TypeResponse:
			h.ServiceCode = binary.BigEndian.Uint32(b[24:])
		case TypeReset:
			h.ResetCode = ResetCode(b[24])
			h.ResetData = [3]byte{b[25], b[26], b[27]}
		}
	}
	p.Options = b[hl:off:off]
	p.Payload = b[off:]
	return nil
}

// parseShort is Parse for an X=0 packet of type t.
func parseShort(b []byte, t Type, p *Packet) error {
	if !t.ShortCapable() {
		return fmt.Errorf("%w: on a %s packet", ErrShortSeqnos, t)
	}
	hl := shortHeaderLen(t)
	off, err := dataOffset(b, t, hl, true)
	if err != nil {
		return err
	}
	h := &p.Header
	setGeneric(h, b, t, true)
	h.Seq = get24(b[9:])
	if t != TypeData {
		h.Ack = get24(b[13:])
	}
	p.Options = b[hl:off:off]
	p.Payload = b[off:]
	return nil
}

// dataOffset returns b's Data Offset in bytes, checked against the header
// length hl of its type t (short: the X=0 form) and against b's length.
func dataOffset(b []byte, t Type, hl int, short bool) (int, error) {
	off := int(b[4]) * 4
	if off < hl {
		form := ""
		if short {
			form = "short "
		}
		return 0, fmt.Errorf("%w: %d bytes, %s%s header needs %d", ErrBadDataOffset, off, form, t, hl)
	}
	if off > len(b) {
		return 0, fmt.Errorf("%w: %d bytes beyond packet of %d", ErrBadDataOffset, off, len(b))
	}
	return off, nil
}

// setGeneric fills the header fields both forms share from b and clears
// the ones only some types carry.
func setGeneric(h *Header, b []byte, t Type, short bool) {
	h.SrcPort = binary.BigEndian.Uint16(b[0:])
	h.DstPort = binary.BigEndian.Uint16(b[2:])
	h.CCVal = b[5] >> 4
	h.CsCov = b[5] & 0xf
	h.Type = t
	h.Short = short
	h.Ack = 0
	h.ServiceCode = 0
	h.ResetCode = 0
	h.ResetData = [3]byte{}
}

// PeekType returns the type of the packet in b without a full parse.
func PeekType(b []byte) (Type, bool) {
	if len(b) < minGenericHeader(b) {
		return 0, false
	}
	t := Type(b[8]>>1) & 0xf
	return t, t.Valid()
}

func get24(b []byte) uint64 {
	_ = b[2]
	return uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2])
}

func get48(b []byte) uint64 {
	_ = b[5]
	return uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 |
		uint64(b[3])<<16 | uint64(b[4])<<8 | uint64(b[5])
}

func put48(b []byte, v uint64) {
	_ = b[5]
	b[0] = byte(v >> 40)
	b[1] = byte(v >> 32)
	b[2] = byte(v >> 24)
	b[3] = byte(v >> 16)
	b[4] = byte(v >> 8)
	b[5] = byte(v)
}

// putHeader writes h (generic header + subheader, Data Offset and checksum
// zero) into b, which has at least h.Len() bytes.
func putHeader(b []byte, h *Header) {
	hl := h.Len()
	clear(b[:hl])
	binary.BigEndian.PutUint16(b[0:], h.SrcPort)
	binary.BigEndian.PutUint16(b[2:], h.DstPort)
	b[5] = h.CCVal<<4 | h.CsCov&0xf
	if h.Short && h.Type.ShortCapable() {
		// X=0: Sequence Number in bytes 9-11, the Acknowledgement Number's
		// low 24 bits in 13-15 (byte 12 reserved).
		b[8] = byte(h.Type) << 1
		b[9], b[10], b[11] = byte(h.Seq>>16), byte(h.Seq>>8), byte(h.Seq)
		if h.Type != TypeData {
			b[13], b[14], b[15] = byte(h.Ack>>16), byte(h.Ack>>8), byte(h.Ack)
		}
		return
	}
	b[8] = byte(h.Type)<<1 | 1
	put48(b[10:], h.Seq)
	switch h.Type {
	case TypeRequest:
		binary.BigEndian.PutUint32(b[16:], h.ServiceCode)
	case TypeData:
	default:
		put48(b[18:], h.Ack)
		switch h.Type {
		case TypeResponse:
			binary.BigEndian.PutUint32(b[24:], h.ServiceCode)
		case TypeReset:
			b[24] = byte(h.ResetCode)
			b[25], b[26], b[27] = h.ResetData[0], h.ResetData[1], h.ResetData[2]
		}
	}
}
