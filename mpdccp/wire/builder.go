// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"fmt"
)

// Builder writes one packet into a caller buffer: header, then options,
// then payload. The zero value is ready for Begin; a Builder may be reused.
//
//	var b wire.Builder
//	b.Begin(buf, &hdr)
//	b.MP(&wire.MPOption{Type: wire.MPSeq, Seq: s})
//	n, err := b.Finish(payload)
//	wire.SetChecksum(buf[:n], src, dst)
type Builder struct {
	buf []byte
	off int // end of header + options written so far
	err error
}

// Begin starts a packet in buf (len(buf) is the capacity available). It
// writes the header; Data Offset is filled by Finish, the checksum by
// SetChecksum.
func (b *Builder) Begin(buf []byte, h *Header) error {
	b.buf, b.off, b.err = nil, 0, nil
	if !h.Type.Valid() {
		b.err = fmt.Errorf("%w: packet type %d", ErrBadArgument, h.Type)
		return b.err
	}
	hl := h.Len()
	if len(buf) < hl {
		b.err = fmt.Errorf("%w: %s header needs %d bytes, have %d", ErrNoSpace, h.Type, hl, len(buf))
		return b.err
	}
	putHeader(buf, h)
	b.buf, b.off = buf, hl
	return nil
}

// Len returns the header + options bytes written so far (before padding).
func (b *Builder) Len() int { return b.off }

// room checks that n more option bytes fit both the buffer and the 1020
// bytes Data Offset can describe (counting the padding Finish may add).
func (b *Builder) room(n int) error {
	if b.buf == nil {
		if b.err != nil {
			return b.err
		}
		return ErrNotBegun
	}
	end := b.off + n
	if end > len(b.buf) || (end+3)&^3 > MaxHeaderLen {
		return fmt.Errorf("%w: %d option bytes at offset %d", ErrNoSpace, n, b.off)
	}
	return nil
}

// Option appends one TLV option (type >= 32) or single-byte option
// (type < 32, data must be nil).
func (b *Builder) Option(typ uint8, data []byte) error {
	if typ < 32 {
		if len(data) != 0 {
			return fmt.Errorf("%w: single-byte option %d with data", ErrBadArgument, typ)
		}
		if err := b.room(1); err != nil {
			return err
		}
		b.buf[b.off] = typ
		b.off++
		return nil
	}
	if len(data) > MaxOptionData {
		return fmt.Errorf("%w: option %d with %d data bytes", ErrBadArgument, typ, len(data))
	}
	if err := b.room(2 + len(data)); err != nil {
		return err
	}
	b.buf[b.off] = typ
	b.buf[b.off+1] = byte(2 + len(data))
	copy(b.buf[b.off+2:], data)
	b.off += 2 + len(data)
	return nil
}

// tlv reserves a TLV option with n data bytes and returns the data slice.
func (b *Builder) tlv(typ uint8, n int) ([]byte, error) {
	if err := b.room(2 + n); err != nil {
		return nil, err
	}
	b.buf[b.off] = typ
	b.buf[b.off+1] = byte(2 + n)
	d := b.buf[b.off+2 : b.off+2+n]
	b.off += 2 + n
	return d, nil
}

// Feature appends a Change L/R or Confirm L/R option (RFC 4340 §6.1/§6.2)
// for feature with the given values (none for an empty Confirm).
func (b *Builder) Feature(opt uint8, feature uint8, values ...byte) error {
	if opt < OptChangeL || opt > OptConfirmR {
		return fmt.Errorf("%w: option %d is not a feature option", ErrBadArgument, opt)
	}
	if len(values) > MaxOptionData-1 {
		return fmt.Errorf("%w: %d feature values", ErrBadArgument, len(values))
	}
	d, err := b.tlv(opt, 1+len(values))
	if err != nil {
		return err
	}
	d[0] = feature
	copy(d[1:], values)
	return nil
}

// FeatureNN appends a Change L/R or Confirm L/R option for a
// non-negotiable feature (§6.3.2, e.g. Sequence Window, Ack Ratio) with v
// in the fewest bytes (1..6) that hold it.
func (b *Builder) FeatureNN(opt uint8, feature uint8, v uint64) error {
	if v > MaxSeq {
		return fmt.Errorf("%w: NN value %d exceeds 48 bits", ErrBadArgument, v)
	}
	var vals [6]byte
	l := 1
	for l < 6 && v>>(8*l) != 0 {
		l++
	}
	for i := l - 1; i >= 0; i-- {
		vals[i] = byte(v)
		v >>= 8
	}
	return b.Feature(opt, feature, vals[:l]...)
}

// AckVector appends cells as Ack Vector options of the given ECN nonce
// (0 or 1), split into options of at most 253 cells (RFC 4340 §11.4).
// Either all options fit or none is written.
func (b *Builder) AckVector(nonce uint8, cells []byte) error {
	if nonce > 1 {
		return fmt.Errorf("%w: Ack Vector nonce %d", ErrBadArgument, nonce)
	}
	if len(cells) == 0 {
		return fmt.Errorf("%w: empty Ack Vector", ErrBadArgument)
	}
	nopts := (len(cells) + MaxOptionData - 1) / MaxOptionData
	if err := b.room(len(cells) + 2*nopts); err != nil {
		return err
	}
	typ := uint8(OptAckVector0) + nonce
	for len(cells) > 0 {
		n := min(len(cells), MaxOptionData)
		b.buf[b.off] = typ
		b.buf[b.off+1] = byte(2 + n)
		copy(b.buf[b.off+2:], cells[:n])
		b.off += 2 + n
		cells = cells[n:]
	}
	return nil
}

// Timestamp appends a Timestamp option (RFC 4340 §13.1).
func (b *Builder) Timestamp(v uint32) error {
	d, err := b.tlv(OptTimestamp, 4)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(d, v)
	return nil
}

// TimestampEcho appends a Timestamp Echo option (RFC 4340 §13.3). elapsed
// is in units of 10 microseconds; 0 omits it, values below 65536 use the
// 2-byte form.
func (b *Builder) TimestampEcho(v uint32, elapsed uint32) error {
	n := 4
	switch {
	case elapsed == 0:
	case elapsed < 1<<16:
		n = 6
	default:
		n = 8
	}
	d, err := b.tlv(OptTimestampEcho, n)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(d, v)
	switch n {
	case 6:
		binary.BigEndian.PutUint16(d[4:], uint16(elapsed))
	case 8:
		binary.BigEndian.PutUint32(d[4:], elapsed)
	}
	return nil
}

// ElapsedTime appends an Elapsed Time option (RFC 4340 §13.2) in units of
// 10 microseconds, in the 2-byte form when it fits.
func (b *Builder) ElapsedTime(v uint32) error {
	if v < 1<<16 {
		d, err := b.tlv(OptElapsedTime, 2)
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint16(d, uint16(v))
		return nil
	}
	d, err := b.tlv(OptElapsedTime, 4)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(d, v)
	return nil
}

// NDPCountLen is the length of the NDP Count option NDPCount writes for n.
func NDPCountLen(n uint64) int { return 2 + ndpBytes(n) }

// ndpBytes is the fewest bytes (1..6) that hold n.
func ndpBytes(n uint64) int {
	l := 1
	for l < 6 && n>>(8*l) != 0 {
		l++
	}
	return l
}

// NDPCount appends an NDP Count option (RFC 4340 §7.7) in the fewest
// bytes (1..6) that hold n.
func (b *Builder) NDPCount(n uint64) error {
	if n > MaxSeq {
		return fmt.Errorf("%w: NDP Count %d exceeds 48 bits", ErrBadArgument, n)
	}
	l := ndpBytes(n)
	d, err := b.tlv(OptNDPCount, l)
	if err != nil {
		return err
	}
	for i := l - 1; i >= 0; i-- {
		d[i] = byte(n)
		n >>= 8
	}
	return nil
}

// MP appends a Multipath option (type 46, RFC 9897).
func (b *Builder) MP(o *MPOption) error {
	n, err := MPLen(o)
	if err != nil {
		return err
	}
	if err := b.room(n); err != nil {
		return err
	}
	if _, err := PutMP(b.buf[b.off:], o); err != nil {
		return err
	}
	b.off += n
	return nil
}

// Finish pads the options to a multiple of 4 bytes with Padding (0),
// appends payload, sets Data Offset and returns the packet length. The
// checksum field is left zero; call SetChecksum.
func (b *Builder) Finish(payload []byte) (int, error) {
	if b.buf == nil {
		if b.err != nil {
			return 0, b.err
		}
		return 0, ErrNotBegun
	}
	hl := (b.off + 3) &^ 3
	if hl > MaxHeaderLen || hl+len(payload) > len(b.buf) {
		return 0, fmt.Errorf("%w: header %d + payload %d > %d", ErrNoSpace, hl, len(payload), len(b.buf))
	}
	clear(b.buf[b.off:hl])
	copy(b.buf[hl:], payload)
	b.buf[4] = byte(hl / 4)
	n := hl + len(payload)
	b.buf, b.off = nil, 0
	return n, nil
}

// FinishInPlace is Finish for a payload that the caller has already
// written at offset PayloadOffset() of the buffer, avoiding a copy on the
// data path. payloadLen is the length of that payload.
func (b *Builder) FinishInPlace(payloadLen int) (int, error) {
	if b.buf == nil {
		if b.err != nil {
			return 0, b.err
		}
		return 0, ErrNotBegun
	}
	hl := (b.off + 3) &^ 3
	if hl > MaxHeaderLen || hl+payloadLen > len(b.buf) {
		return 0, fmt.Errorf("%w: header %d + payload %d > %d", ErrNoSpace, hl, payloadLen, len(b.buf))
	}
	clear(b.buf[b.off:hl])
	b.buf[4] = byte(hl / 4)
	b.buf, b.off = nil, 0
	return hl + payloadLen, nil
}

// PayloadOffset is where Finish will place the payload given the options
// written so far.
func (b *Builder) PayloadOffset() int { return (b.off + 3) &^ 3 }
