// SPDX-License-Identifier: MIT

package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

func addPacketSeeds(f *testing.F) {
	for _, tc := range packetCases {
		f.Add(tc.want)
	}
	f.Add(h("0001000205000000010000000000000100000000"))
	f.Add([]byte{})
}

// reencode builds p again from its parsed parts: the header, each option
// as the iterator returned it (which must not fail), the payload.
func reencode(t *testing.T, p *Packet, buf []byte) []byte {
	var b Builder
	if err := b.Begin(buf, &p.Header); err != nil {
		t.Fatalf("Begin of a parsed header: %v", err)
	}
	it := NewOptionIter(p.Options)
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		if err := b.Option(o.Type, o.Data); err != nil {
			t.Fatalf("re-adding option %d: %v", o.Type, err)
		}
	}
	if it.Err() != nil {
		t.Fatalf("options of a parsed packet: %v", it.Err())
	}
	n, err := b.Finish(p.Payload)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return buf[:n]
}

func optionList(opts []byte) ([]Option, error) {
	var l []Option
	it := NewOptionIter(opts)
	for {
		o, ok := it.Next()
		if !ok {
			return l, it.Err()
		}
		l = append(l, o)
	}
}

func sameOptions(a, b []Option) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// FuzzParse: Parse never panics, and a parsed packet with a well-formed
// options area re-encodes to a packet that parses to the same fields.
func FuzzParse(f *testing.F) {
	addPacketSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return // larger payloads exercise nothing new
		}
		var p Packet
		if err := Parse(data, &p); err != nil {
			return
		}
		if len(p.Options)+p.Len()+len(p.Payload) != len(data) {
			t.Fatalf("lengths %d+%d+%d != %d", p.Len(), len(p.Options), len(p.Payload), len(data))
		}
		src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
		_ = VerifyChecksum(data, src, dst)
		opts, err := optionList(p.Options)
		if err != nil {
			return
		}
		buf := make([]byte, len(data)+8)
		out := reencode(t, &p, buf)
		var q Packet
		if err := Parse(out, &q); err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		if q.Header != p.Header || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("round trip\n got %+v\nwant %+v", q.Header, p.Header)
		}
		opts2, err := optionList(q.Options)
		if err != nil || !sameOptions(opts, opts2) {
			t.Fatalf("options round trip: %v\n got %v\nwant %v", err, opts2, opts)
		}
		SetChecksum(out, src, dst)
		if !VerifyChecksum(out, src, dst) && p.CsCov == 0 {
			t.Fatal("own checksum does not verify")
		}
	})
}

// FuzzHeader: any header encodes and decodes to itself (fields masked to
// their widths).
func FuzzHeader(f *testing.F) {
	f.Add(uint16(1), uint16(6511), uint8(0x5a), uint8(4), uint64(MaxSeq), uint64(1), uint32(7), uint8(13), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, sp, dp uint16, ccv uint8, typ uint8, seq, ack uint64, sc uint32, rc uint8, rd []byte) {
		hd := Header{SrcPort: sp, DstPort: dp, CCVal: ccv >> 4, CsCov: ccv & 0xf, Type: Type(typ % 10),
			Seq: seq & MaxSeq, Ack: ack & MaxSeq, ServiceCode: sc, ResetCode: ResetCode(rc)}
		copy(hd.ResetData[:], rd)
		var b Builder
		buf := make([]byte, 64)
		if err := b.Begin(buf, &hd); err != nil {
			t.Fatal(err)
		}
		n, err := b.Finish(nil)
		if err != nil || n != hd.Len() {
			t.Fatal(n, err)
		}
		var p Packet
		if err := Parse(buf[:n], &p); err != nil {
			t.Fatal(err)
		}
		want := hd
		if !want.Type.HasAck() {
			want.Ack = 0
		}
		if want.Type != TypeRequest && want.Type != TypeResponse {
			want.ServiceCode = 0
		}
		if want.Type != TypeReset {
			want.ResetCode, want.ResetData = 0, [3]byte{}
		}
		if p.Header != want {
			t.Fatalf("got %+v want %+v", p.Header, want)
		}
	})
}

// FuzzOptions: the iterator, the typed decoders and MandatoryCheck never
// panic, and options re-encode to the same list.
func FuzzOptions(f *testing.F) {
	for _, tc := range packetCases {
		var p Packet
		if Parse(tc.want, &p) == nil {
			f.Add(p.Options)
		}
	}
	f.Add(h("01 c8 02 00 2001 29"))
	f.Fuzz(func(t *testing.T, opts []byte) {
		if len(opts) > MaxHeaderLen {
			return // longer than any options area; keeps the corpus small
		}
		_, _ = MandatoryCheck(opts, func(o Option) bool { return o.Type&1 == 0 })
		l, err := optionList(opts)
		for _, o := range l {
			switch o.Type {
			case OptChangeL, OptChangeR, OptConfirmL, OptConfirmR:
				if _, v, err := ParseFeature(o.Data); err == nil && len(v) > 0 {
					_, _ = FeatureNN(v)
				}
			case OptTimestamp:
				_, _ = ParseTimestamp(o.Data)
			case OptTimestampEcho:
				ts, el, err := ParseTimestampEcho(o.Data)
				if err == nil {
					// Re-encoding picks the shortest form; it must decode the same.
					var b Builder
					buf := make([]byte, 32)
					_ = b.Begin(buf, &Header{Type: TypeData})
					if err := b.TimestampEcho(ts, el); err != nil {
						t.Fatal(err)
					}
					ts2, el2, err := ParseTimestampEcho(buf[18 : 16+int(buf[17])])
					if err != nil || ts2 != ts || el2 != el {
						t.Fatalf("timestamp echo %x/%x -> %x/%x %v", ts, el, ts2, el2, err)
					}
				}
			case OptElapsedTime:
				_, _ = ParseElapsedTime(o.Data)
			case OptNDPCount:
				_, _ = ParseNDPCount(o.Data)
			case OptMultipath:
				var mp MPOption
				_ = ParseMP(o.Data, &mp)
			}
		}
		if err != nil {
			return
		}
		var b Builder
		buf := make([]byte, 16+len(opts)+4)
		_ = b.Begin(buf, &Header{Type: TypeData})
		for _, o := range l {
			if err := b.Option(o.Type, o.Data); err != nil {
				if len(opts) > MaxHeaderLen-GenericHeaderLen-3 {
					return // the input area was longer than Data Offset allows
				}
				t.Fatal(err)
			}
		}
		n, err := b.Finish(nil)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := optionList(buf[16:n])
		if err != nil || !sameOptions(l, l2) {
			t.Fatalf("round trip %v: got %v want %v", err, l2, l)
		}
	})
}

// FuzzAckVector: walking cells never panics, the walks agree with each
// other, and cells survive the encoder's splitting into options.
func FuzzAckVector(f *testing.F) {
	f.Add(uint64(1000), []byte{0x04, 0xc1, 0x40})
	f.Add(uint64(2), []byte{0x3f, 0x3f, 0xff})
	f.Add(uint64(MaxSeq), bytes.Repeat([]byte{0x3f}, 300))
	f.Fuzz(func(t *testing.T, ack uint64, cells []byte) {
		ack &= MaxSeq
		n1 := 0
		next := ForEachRun(ack, cells, func(hi, lo uint64, st AckCellState) bool {
			n1 += int(SeqDiff(hi, lo)) + 1
			return true
		})
		n2 := 0
		last := ack
		ForEachAcked(ack, cells, func(s uint64, st AckCellState) bool {
			if n2 > 0 && SeqDiff(last, s) != 1 {
				t.Fatalf("walk not consecutive: %x after %x", s, last)
			}
			last = s
			n2++
			return true
		})
		if n1 != n2 || n1 != AckVectorSpan(cells) {
			t.Fatalf("spans %d %d %d", n1, n2, AckVectorSpan(cells))
		}
		if SeqDiff(ack, next) != int64(n1) && n1 < 1<<47 {
			t.Fatalf("next %x after %d from %x", next, n1, ack)
		}
		if len(cells) == 0 || len(cells) > 900 {
			return
		}
		var b Builder
		buf := make([]byte, 2048)
		_ = b.Begin(buf, &Header{Type: TypeAck, Ack: ack})
		if err := b.AckVector(uint8(ack&1), cells); err != nil {
			t.Fatal(err)
		}
		p := finishParse(t, &b, buf)
		l, err := optionList(p.Options)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, o := range l {
			if nonce, ok := AckVectorNonce(o.Type); !ok || nonce != uint8(ack&1) || len(o.Data) > MaxOptionData {
				t.Fatalf("option %d of %d bytes", o.Type, len(o.Data))
			}
			got = append(got, o.Data...)
		}
		if !bytes.Equal(got, cells) || p.Ack != ack {
			t.Fatal("cells changed through the encoder")
		}
	})
}

// fuzzMP checks one MP sub-option decoder: data is the value after MP_OPT.
// A decoded option encodes to an option that decodes to the same fields,
// and the encoding is byte-identical except for reserved bits.
func fuzzMP(f *testing.F, typ MPType) {
	for _, tc := range mpCases {
		if tc.o.Type == typ {
			f.Add(tc.want[3:])
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		data := append([]byte{byte(typ)}, v...)
		var o MPOption
		if err := ParseMP(data, &o); err != nil {
			return
		}
		buf := make([]byte, 300)
		n, err := PutMP(buf, &o)
		if err != nil {
			if len(data)+2 > 255 {
				return // too long for one option in the first place
			}
			t.Fatalf("%+v does not encode: %v", o, err)
		}
		var o2 MPOption
		if err := ParseMP(buf[2:n], &o2); err != nil {
			t.Fatalf("re-encoded %x does not decode: %v", buf[:n], err)
		}
		if !mpEqual(&o, &o2) {
			t.Fatalf("round trip\n got %+v\nwant %+v", o2, o)
		}
		if n != len(data)+2 || int(buf[1]) != n {
			t.Fatalf("length %d, decoded from %d", n, len(data)+2)
		}
		exact := bytes.Equal(buf[2:n], data)
		switch typ {
		case MPPrio:
			exact = exact || buf[3] == data[1]&0xf
		case MPKey:
			exact = exact || bytes.Equal(buf[4:n], data[2:])
		}
		if !exact {
			t.Fatalf("re-encoded %x from %x", buf[2:n], data)
		}
	})
}

func FuzzMPConfirm(f *testing.F)    { fuzzMP(f, MPConfirm) }
func FuzzMPJoin(f *testing.F)       { fuzzMP(f, MPJoin) }
func FuzzMPFastClose(f *testing.F)  { fuzzMP(f, MPFastClose) }
func FuzzMPKey(f *testing.F)        { fuzzMP(f, MPKey) }
func FuzzMPSeq(f *testing.F)        { fuzzMP(f, MPSeq) }
func FuzzMPHMAC(f *testing.F)       { fuzzMP(f, MPHMAC) }
func FuzzMPRTT(f *testing.F)        { fuzzMP(f, MPRTT) }
func FuzzMPAddAddr(f *testing.F)    { fuzzMP(f, MPAddAddr) }
func FuzzMPRemoveAddr(f *testing.F) { fuzzMP(f, MPRemoveAddr) }
func FuzzMPPrio(f *testing.F)       { fuzzMP(f, MPPrio) }
func FuzzMPClose(f *testing.F)      { fuzzMP(f, MPClose) }
func FuzzMPExp(f *testing.F)        { fuzzMP(f, MPExp) }

// FuzzMPOption: any byte string as Multipath option data (including
// unknown sub-options) never panics ParseMP.
func FuzzMPOption(f *testing.F) {
	for _, tc := range mpCases {
		f.Add(tc.want[2:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var o MPOption
		if ParseMP(data, &o) == nil {
			if _, err := MPLen(&o); err != nil && len(data) < 250 {
				t.Fatalf("decoded %+v has no length: %v", o, err)
			}
		}
	})
}

// FuzzSeq: serial arithmetic is consistent for all 48-bit values.
func FuzzSeq(f *testing.F) {
	f.Add(uint64(0), uint64(MaxSeq), int64(1))
	f.Fuzz(func(t *testing.T, a, b uint64, d int64) {
		a, b = a&MaxSeq, b&MaxSeq
		if SeqAdd(b, SeqDiff(a, b)) != a {
			t.Fatalf("b + (a-b) != a for %x %x", a, b)
		}
		if a != b && SeqLess(a, b) == SeqLess(b, a) && SeqDiff(a, b) != -(1<<47) {
			t.Fatalf("order not antisymmetric for %x %x", a, b)
		}
		d %= 1 << 47
		if SeqDiff(SeqAdd(a, d), a) != d {
			t.Fatalf("(a+d)-a != d for %x %d", a, d)
		}
	})
}
