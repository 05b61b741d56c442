// SPDX-License-Identifier: MIT

package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// h decodes a hex string written with spaces and "|" separators for
// readability.
func h(s string) []byte {
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

var (
	key8a  = h("1112131415161718")
	key8b  = h("2122232425262728")
	mpKeyA = &MPOption{Type: MPKey, Token: 0xa1b2c3d4, Keys: append([]byte{KeyTypePlain}, key8a...)}
)

// packetCase is one packet built from the RFC 4340 §5 figures: the
// generic header (Figure 3, X=1), the type's subheader and its options,
// with the expected bytes written out by hand.
type packetCase struct {
	name    string
	hdr     Header
	opts    func(b *Builder) error
	payload []byte
	want    []byte
}

var packetCases = []packetCase{
	{
		name: "Request+ChangeR(MP_CAPABLE)+MP_KEY",
		hdr:  Header{SrcPort: 0x1234, DstPort: 6511, Type: TypeRequest, Seq: 0x010203040506, ServiceCode: 0x4d505455},
		opts: func(b *Builder) error {
			if err := b.Feature(OptChangeR, FeatMultipath, 0x00); err != nil {
				return err
			}
			return b.MP(mpKeyA)
		},
		// DO=11 words: 20 header + 21 options + 3 padding.
		want: h(`1234 196f | 0b 00 0000 | 01 00 0102 | 03040506 | 4d505455 |
			22 04 0a 00 | 2e 11 03 00 a1b2c3d4 00 1112131415161718 | 000000`),
	},
	{
		name: "Response+ConfirmL+MP_KEY",
		hdr: Header{SrcPort: 6511, DstPort: 0x1234, Type: TypeResponse, Seq: 0x0a0b0c0d0e0f,
			Ack: 0x010203040506, ServiceCode: 0x4d505455},
		opts: func(b *Builder) error {
			if err := b.Feature(OptConfirmL, FeatMultipath, 0x00, 0x00); err != nil {
				return err
			}
			return b.MP(&MPOption{Type: MPKey, Token: 0x01020304, Keys: append([]byte{KeyTypePlain}, key8b...)})
		},
		want: h(`196f 1234 | 0d 00 0000 | 03 00 0a0b | 0c0d0e0f | 0000 010203040506 | 4d505455 |
			21 05 0a 00 00 | 2e 11 03 00 01020304 00 2122232425262728 | 0000`),
	},
	{
		name:    "Data+MP_SEQ",
		hdr:     Header{SrcPort: 1, DstPort: 2, CCVal: 5, Type: TypeData, Seq: MaxSeq},
		opts:    func(b *Builder) error { return b.MP(&MPOption{Type: MPSeq, Seq: 0xfffffffffffe}) },
		payload: []byte("abcd"),
		want: h(`0001 0002 | 07 50 0000 | 05 00 ffff | ffffffff |
			2e 09 04 fffffffffffe | 000000 | 61626364`),
	},
	{
		name: "Ack+AckVector0+Timestamp",
		hdr:  Header{SrcPort: 1, DstPort: 2, Type: TypeAck, Seq: 7, Ack: 0x123456789abc},
		opts: func(b *Builder) error {
			if err := b.AckVector(0, []byte{AckCell(AckReceived, 4), AckCell(AckNotReceived, 1), AckCell(AckECNMarked, 0)}); err != nil {
				return err
			}
			return b.Timestamp(0xdeadbeef)
		},
		want: h(`0001 0002 | 09 00 0000 | 07 00 0000 | 00000007 | 0000 123456789abc |
			26 05 04 c1 40 | 29 06 deadbeef | 00`),
	},
	{
		name: "DataAck+NDPCount+AckVector1+MP_SEQ",
		hdr:  Header{SrcPort: 1, DstPort: 2, CsCov: 1, Type: TypeDataAck, Seq: 0x100000000, Ack: 0xffffffffffff},
		opts: func(b *Builder) error {
			if err := b.NDPCount(5); err != nil {
				return err
			}
			if err := b.AckVector(1, []byte{AckCell(AckReceived, 10)}); err != nil {
				return err
			}
			return b.MP(&MPOption{Type: MPSeq, Seq: 1})
		},
		payload: []byte{0xaa, 0xbb, 0xcc},
		want: h(`0001 0002 | 0a 01 0000 | 09 00 0001 | 00000000 | 0000 ffffffffffff |
			25 03 05 | 27 03 0a | 2e 09 04 000000000001 | 00 | aabbcc`),
	},
	{
		name: "CloseReq+MP_CLOSE",
		hdr:  Header{SrcPort: 1, DstPort: 2, Type: TypeCloseReq, Seq: 10, Ack: 9},
		opts: func(b *Builder) error { return b.MP(&MPOption{Type: MPClose, KeyData: key8b}) },
		want: h(`0001 0002 | 09 00 0000 | 0b 00 0000 | 0000000a | 0000 000000000009 |
			2e 0b 0a 2122232425262728 | 00`),
	},
	{
		name: "Close+ElapsedTime+MP_CLOSE",
		hdr:  Header{SrcPort: 1, DstPort: 2, Type: TypeClose, Seq: 11, Ack: 10},
		opts: func(b *Builder) error {
			if err := b.ElapsedTime(0x1234); err != nil {
				return err
			}
			return b.MP(&MPOption{Type: MPClose, KeyData: key8a})
		},
		want: h(`0001 0002 | 0a 00 0000 | 0d 00 0000 | 0000000b | 0000 00000000000a |
			2b 04 1234 | 2e 0b 0a 1112131415161718 | 00`),
	},
	{
		name: "Reset(13)+MP_FAST_CLOSE",
		hdr: Header{SrcPort: 1, DstPort: 2, Type: TypeReset, Seq: 12, Ack: 11,
			ResetCode: ResetMPAbrupt, ResetData: [3]byte{1, 2, 3}},
		opts: func(b *Builder) error { return b.MP(&MPOption{Type: MPFastClose, KeyData: key8b}) },
		want: h(`0001 0002 | 0a 00 0000 | 0f 00 0000 | 0000000c | 0000 00000000000b | 0d 010203 |
			2e 0b 02 2122232425262728 | 00`),
	},
	{
		name: "Sync+TimestampEcho(elapsed)",
		hdr:  Header{SrcPort: 1, DstPort: 2, Type: TypeSync, Seq: 0x800000000000, Ack: 0x7fffffffffff},
		opts: func(b *Builder) error { return b.TimestampEcho(0x01020304, 0x1234) },
		want: h(`0001 0002 | 08 00 0000 | 11 00 8000 | 00000000 | 0000 7fffffffffff |
			2a 08 01020304 1234`),
	},
	{
		name: "SyncAck+TimestampEcho+Mandatory+InitCookie",
		hdr:  Header{SrcPort: 1, DstPort: 2, Type: TypeSyncAck, Seq: 1, Ack: 0x800000000000},
		opts: func(b *Builder) error {
			if err := b.TimestampEcho(0x0a0b0c0d, 0); err != nil {
				return err
			}
			if err := b.Option(OptMandatory, nil); err != nil {
				return err
			}
			return b.Option(OptInitCookie, []byte{0xab, 0xcd})
		},
		want: h(`0001 0002 | 09 00 0000 | 13 00 0000 | 00000001 | 0000 800000000000 |
			2a 06 0a0b0c0d | 01 | 24 04 abcd | 00`),
	},
}

func TestEncodePackets(t *testing.T) {
	for _, tc := range packetCases {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, 1500)
			var b Builder
			if err := b.Begin(buf, &tc.hdr); err != nil {
				t.Fatal(err)
			}
			if tc.opts != nil {
				if err := tc.opts(&b); err != nil {
					t.Fatal(err)
				}
			}
			n, err := b.Finish(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], tc.want) {
				t.Fatalf("encoded\n got %x\nwant %x", buf[:n], tc.want)
			}
			if (n-len(tc.payload))%4 != 0 {
				t.Fatalf("header+options of %d bytes not padded to 4", n-len(tc.payload))
			}
		})
	}
}

func TestDecodePackets(t *testing.T) {
	for _, tc := range packetCases {
		t.Run(tc.name, func(t *testing.T) {
			var p Packet
			if err := Parse(tc.want, &p); err != nil {
				t.Fatal(err)
			}
			want := tc.hdr
			if !want.Type.HasAck() {
				want.Ack = 0
			}
			if p.Header != want {
				t.Fatalf("header\n got %+v\nwant %+v", p.Header, want)
			}
			if !bytes.Equal(p.Payload, tc.payload) && !(len(p.Payload) == 0 && len(tc.payload) == 0) {
				t.Fatalf("payload %x, want %x", p.Payload, tc.payload)
			}
			// Re-encode the parsed options verbatim: same bytes.
			if got := reencode(t, &p, make([]byte, 1500)); !bytes.Equal(got, tc.want) {
				t.Fatalf("re-encoded\n got %x\nwant %x", got, tc.want)
			}
		})
	}
}

func TestDecodeOptionsTyped(t *testing.T) {
	// The Ack packet: Ack Vector cells and Timestamp.
	var p Packet
	if err := Parse(packetCases[3].want, &p); err != nil {
		t.Fatal(err)
	}
	it := NewOptionIter(p.Options)
	o, ok := it.Next()
	if nonce, isAV := AckVectorNonce(o.Type); !ok || !isAV || nonce != 0 || !bytes.Equal(o.Data, h("04c140")) {
		t.Fatalf("ack vector option %+v", o)
	}
	o, _ = it.Next()
	if ts, err := ParseTimestamp(o.Data); o.Type != OptTimestamp || err != nil || ts != 0xdeadbeef {
		t.Fatalf("timestamp %+v %v", o, err)
	}
	if _, ok := it.Next(); ok || it.Err() != nil {
		t.Fatalf("expected end, err %v", it.Err())
	}

	// The Request: Change R(MP_CAPABLE, 0), MP_KEY.
	if err := Parse(packetCases[0].want, &p); err != nil {
		t.Fatal(err)
	}
	it = NewOptionIter(p.Options)
	o, _ = it.Next()
	f, vals, err := ParseFeature(o.Data)
	if o.Type != OptChangeR || err != nil || f != FeatMultipath || !bytes.Equal(vals, []byte{0}) {
		t.Fatalf("feature %+v %d %x %v", o, f, vals, err)
	}
	o, _ = it.Next()
	var mp MPOption
	if o.Type != OptMultipath || ParseMP(o.Data, &mp) != nil || mp.Type != MPKey || mp.Token != 0xa1b2c3d4 {
		t.Fatalf("mp key %+v %+v", o, mp)
	}
	kt, key, rest, ok := NextKey(mp.Keys)
	if !ok || kt != KeyTypePlain || !bytes.Equal(key, key8a) || len(rest) != 0 {
		t.Fatalf("NextKey = %d %x %x %v", kt, key, rest, ok)
	}

	// Sync: Timestamp Echo with elapsed time; Close: Elapsed Time.
	if err := Parse(packetCases[8].want, &p); err != nil {
		t.Fatal(err)
	}
	it = NewOptionIter(p.Options)
	o, _ = it.Next()
	if ts, el, err := ParseTimestampEcho(o.Data); err != nil || ts != 0x01020304 || el != 0x1234 {
		t.Fatalf("ts echo %x %x %v", ts, el, err)
	}
	if err := Parse(packetCases[6].want, &p); err != nil {
		t.Fatal(err)
	}
	it = NewOptionIter(p.Options)
	o, _ = it.Next()
	if el, err := ParseElapsedTime(o.Data); err != nil || el != 0x1234 {
		t.Fatalf("elapsed %x %v", el, err)
	}

	// DataAck: NDP Count.
	if err := Parse(packetCases[4].want, &p); err != nil {
		t.Fatal(err)
	}
	it = NewOptionIter(p.Options)
	o, _ = it.Next()
	if n, err := ParseNDPCount(o.Data); err != nil || n != 5 {
		t.Fatalf("ndp %d %v", n, err)
	}

	// SyncAck: Mandatory is returned, and marks the next option.
	if err := Parse(packetCases[9].want, &p); err != nil {
		t.Fatal(err)
	}
	it = NewOptionIter(p.Options)
	o, _ = it.Next()
	if it.PrecededByMandatory() {
		t.Fatal("timestamp echo marked mandatory")
	}
	o, _ = it.Next()
	if o.Type != OptMandatory {
		t.Fatalf("got %d, want Mandatory", o.Type)
	}
	o, _ = it.Next()
	if o.Type != OptInitCookie || !it.PrecededByMandatory() || !bytes.Equal(o.Data, h("abcd")) {
		t.Fatalf("init cookie %+v mandatory=%v", o, it.PrecededByMandatory())
	}
}

func TestParseErrors(t *testing.T) {
	good := packetCases[3].want // Ack, DO=9
	mod := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"11 bytes", good[:11], ErrTruncated},
		{"X=0 Request", mod(func(b []byte) []byte { b[8] = byte(TypeRequest) << 1; return b }), ErrShortSeqnos},
		{"X=0 Sync", mod(func(b []byte) []byte { b[8] = byte(TypeSync) << 1; return b }), ErrShortSeqnos},
		{"X=0 Ack offset below its 16 bytes", mod(func(b []byte) []byte { b[8] &^= 1; b[4] = 3; return b }), ErrBadDataOffset},
		{"X=1 but 12 bytes", good[:12], ErrTruncated},
		{"reserved type 10", mod(func(b []byte) []byte { b[8] = 10<<1 | 1; return b }), ErrReservedType},
		{"reserved type 15", mod(func(b []byte) []byte { b[8] = 15<<1 | 1; return b }), ErrReservedType},
		{"offset below Ack header", mod(func(b []byte) []byte { b[4] = 5; return b }), ErrBadDataOffset},
		{"offset beyond packet", mod(func(b []byte) []byte { b[4] = 10; return b }), ErrBadDataOffset},
		{"Response offset 6", h("0001000206000000030000000000000000000000000000000000000000"), ErrBadDataOffset},
	}
	for _, tc := range tests {
		var p Packet
		if err := Parse(tc.b, &p); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// Reserved bits in the header are ignored on receipt (§5.1).
	var p Packet
	b := mod(func(b []byte) []byte { b[8] |= 0xe0; b[9] = 0xff; b[16] = 0xff; return b })
	if err := Parse(b, &p); err != nil || p.Type != TypeAck || p.Ack != 0x123456789abc {
		t.Fatalf("reserved bits: %v %+v", err, p.Header)
	}
}

// mpCases are the Multipath sub-options laid out as in the RFC 9897
// figures: 46, Length, MP_OPT, value.
var mpCases = []struct {
	name string
	o    MPOption
	want []byte
}{
	{"MP_CONFIRM", MPOption{Type: MPConfirm, Raw: h("2e0904000000000102 2e040903")},
		h("2e 10 00 2e0904000000000102 2e040903")},
	{"MP_JOIN", MPOption{Type: MPJoin, AddrID: 3, Token: 0xa1b2c3d4, Nonce: 0x01020304},
		h("2e 0c 01 03 a1b2c3d4 01020304")},
	{"MP_FAST_CLOSE", MPOption{Type: MPFastClose, KeyData: key8a}, h("2e 0b 02 1112131415161718")},
	{"MP_KEY plain", *mpKeyA, h("2e 11 03 00 a1b2c3d4 00 1112131415161718")},
	{"MP_KEY plain+experimental", MPOption{Type: MPKey, Token: 7,
		Keys: append(append([]byte{0}, key8a...), append([]byte{255}, bytes.Repeat([]byte{0x5a}, 64)...)...)},
		append(h("2e 52 03 00 00000007 00 1112131415161718 ff"), bytes.Repeat([]byte{0x5a}, 64)...)},
	{"MP_SEQ", MPOption{Type: MPSeq, Seq: 0x0102030405ff}, h("2e 09 04 0102030405ff")},
	{"MP_HMAC", MPOption{Type: MPHMAC, HMAC: h("000102030405060708090a0b0c0d0e0f10111213")},
		h("2e 17 05 000102030405060708090a0b0c0d0e0f10111213")},
	{"MP_RTT", MPOption{Type: MPRTT, RTTType: RTTSmoothed, RTT: 0x1234, Age: 0x10},
		h("2e 0c 06 03 00001234 00000010")},
	{"MP_ADDADDR v4", MPOption{Type: MPAddAddr, AddrID: 1, Nonce: 0xcafebabe, Addr: netip.MustParseAddr("192.0.2.1")},
		h("2e 0c 07 01 cafebabe c0000201")},
	{"MP_ADDADDR v4+port", MPOption{Type: MPAddAddr, AddrID: 1, Nonce: 0xcafebabe, Addr: netip.MustParseAddr("192.0.2.1"), Port: 6511, HasPort: true},
		h("2e 0e 07 01 cafebabe c0000201 196f")},
	{"MP_ADDADDR v6", MPOption{Type: MPAddAddr, AddrID: 2, Nonce: 1, Addr: netip.MustParseAddr("2001:db8::1")},
		h("2e 18 07 02 00000001 20010db8000000000000000000000001")},
	{"MP_ADDADDR v6+port", MPOption{Type: MPAddAddr, AddrID: 2, Nonce: 1, Addr: netip.MustParseAddr("2001:db8::1"), Port: 0x1234, HasPort: true},
		h("2e 1a 07 02 00000001 20010db8000000000000000000000001 1234")},
	// RFC 9897's own example: an explicit port 0, "the same port".
	{"MP_ADDADDR v4+port 0", MPOption{Type: MPAddAddr, AddrID: 1, Nonce: 0xcafebabe, Addr: netip.MustParseAddr("192.0.2.1"), HasPort: true},
		h("2e 0e 07 01 cafebabe c0000201 0000")},
	{"MP_REMOVEADDR", MPOption{Type: MPRemoveAddr, AddrID: 9, Nonce: 0x0badf00d}, h("2e 08 08 09 0badf00d")},
	{"MP_PRIO", MPOption{Type: MPPrio, Prio: 15}, h("2e 04 09 0f")},
	{"MP_CLOSE", MPOption{Type: MPClose, KeyData: key8b}, h("2e 0b 0a 2122232425262728")},
	{"MP_EXP", MPOption{Type: MPExp, Raw: []byte("hi")}, h("2e 05 0b 6869")},
}

func TestMPOptions(t *testing.T) {
	for _, tc := range mpCases {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, 300)
			n, err := PutMP(buf, &tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], tc.want) {
				t.Fatalf("encoded\n got %x\nwant %x", buf[:n], tc.want)
			}
			if int(tc.want[1]) != len(tc.want) {
				t.Fatalf("length byte %d, option is %d bytes", tc.want[1], len(tc.want))
			}
			var o MPOption
			if err := ParseMP(tc.want[2:], &o); err != nil {
				t.Fatal(err)
			}
			if !mpEqual(&o, &tc.o) {
				t.Fatalf("decoded\n got %+v\nwant %+v", o, tc.o)
			}
			// And through the Builder + option iterator.
			var b Builder
			pkt := make([]byte, 400)
			hd := Header{Type: TypeData, Seq: 1}
			if err := b.Begin(pkt, &hd); err != nil {
				t.Fatal(err)
			}
			if err := b.MP(&tc.o); err != nil {
				t.Fatal(err)
			}
			n, err = b.Finish(nil)
			if err != nil {
				t.Fatal(err)
			}
			var p Packet
			if err := Parse(pkt[:n], &p); err != nil {
				t.Fatal(err)
			}
			it := NewOptionIter(p.Options)
			opt, ok := it.Next()
			if !ok || opt.Type != OptMultipath || !bytes.Equal(opt.Data, tc.want[2:]) {
				t.Fatalf("option %+v ok=%v", opt, ok)
			}
		})
	}
}

func mpEqual(a, b *MPOption) bool {
	return a.Type == b.Type && a.Seq == b.Seq && a.AddrID == b.AddrID && a.Token == b.Token &&
		a.Nonce == b.Nonce && bytes.Equal(a.HMAC, b.HMAC) && bytes.Equal(a.Keys, b.Keys) &&
		bytes.Equal(a.KeyData, b.KeyData) && a.RTTType == b.RTTType && a.RTT == b.RTT &&
		a.Age == b.Age && a.Addr == b.Addr && a.Port == b.Port && a.HasPort == b.HasPort && a.Prio == b.Prio &&
		bytes.Equal(a.Raw, b.Raw)
}

func TestParseMPErrors(t *testing.T) {
	bad := []string{
		"",                        // no MP_OPT
		"01 03a1b2c3d4010203",     // JOIN one byte short
		"01 03a1b2c3d40102030405", // JOIN one byte long
		"02",                      // FAST_CLOSE without key
		"03 00a1b2c3d4",           // KEY without key
		"03 00a1b2c3d4 00 11",     // KEY plain truncated
		"04 0102030405",           // SEQ short
		"05 00",                   // HMAC short
		"06 03 00001234 000000",   // RTT short
		"07 01 cafebabe c00002",   // ADDADDR bad address length
		"08 09 0badf0",            // REMOVEADDR short
		"08 09",                   // REMOVEADDR in the 4-byte form of the figure
		"09",                      // PRIO without value
		"0a",                      // CLOSE without key
		"0c",                      // unknown MP_OPT 12
	}
	for _, s := range bad {
		var o MPOption
		if err := ParseMP(h(s), &o); err == nil {
			t.Errorf("ParseMP(%s) = nil, want error (%+v)", s, o)
		}
	}
	var o MPOption
	if err := ParseMP(h("0c"), &o); !errors.Is(err, ErrUnknownMP) {
		t.Errorf("unknown MP_OPT: %v", err)
	}
	// MP_PRIO's reserved upper nibble is ignored.
	if err := ParseMP(h("09 f5"), &o); err != nil || o.Prio != 5 {
		t.Errorf("prio with reserved bits: %v %d", err, o.Prio)
	}
	// An unknown key type after a plain key leaves the plain key usable.
	if err := ParseMP(h("03 00 a1b2c3d4 00 1112131415161718 07 abcdef"), &o); err != nil {
		t.Errorf("unknown trailing key type: %v", err)
	}
}

func TestOptionIterMalformed(t *testing.T) {
	for _, s := range []string{
		"20",                   // TLV without length
		"2001",                 // length 1 < 2
		"200500",               // length overruns
		"00 00 29 07 01020304", // overrun after padding
	} {
		it := NewOptionIter(h(s))
		for {
			if _, ok := it.Next(); !ok {
				break
			}
		}
		if !errors.Is(it.Err(), ErrBadOption) {
			t.Errorf("%s: err %v", s, it.Err())
		}
	}
	// Padding only, an empty TLV (length 2) and an unknown option are fine.
	it := NewOptionIter(h("00 00 02 c8 02 2c 03 aa 00"))
	var types []uint8
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		types = append(types, o.Type)
	}
	if it.Err() != nil || !bytes.Equal(types, []byte{2, 0xc8, 0x2c}) {
		t.Fatalf("types %v err %v", types, it.Err())
	}
}

func TestMandatoryCheck(t *testing.T) {
	known := func(o Option) bool { return o.Type != 0xc8 && o.Type != 3 }
	tests := []struct {
		opts string
		code ResetCode
		ok   bool
	}{
		{"", 0, true},
		{"01 29 06 01020304", 0, true},                    // Mandatory Timestamp, understood
		{"01 c8 02", ResetMandatoryError, false},          // Mandatory unknown TLV → 6
		{"01 03", ResetMandatoryError, false},             // Mandatory unknown single-byte → 6
		{"c8 02", 0, true},                                // unknown without Mandatory: skipped
		{"29 06 01020304 01", ResetOptionError, false},    // Mandatory last → 5
		{"01 00", ResetOptionError, false},                // Mandatory before Padding → 5
		{"01 01 29 06 01020304", ResetOptionError, false}, // Mandatory before Mandatory → 5
		{"01 29 09 01", ResetOptionError, false},          // Mandatory + malformed → 5
		{"29 09", ResetOptionError, false},                // malformed → 5
	}
	for _, tc := range tests {
		code, ok := MandatoryCheck(h(tc.opts), known)
		if code != tc.code || ok != tc.ok {
			t.Errorf("%q: got %v,%v want %v,%v", tc.opts, code, ok, tc.code, tc.ok)
		}
	}
}

func TestSeqArithmetic(t *testing.T) {
	if SeqAdd(MaxSeq, 1) != 0 || SeqAdd(0, -1) != MaxSeq || SeqAdd(5, 3) != 8 {
		t.Fatal("SeqAdd wraparound")
	}
	tests := []struct {
		a, b uint64
		d    int64
	}{
		{0, MaxSeq, 1},
		{MaxSeq, 0, -1},
		{5, 5, 0},
		{1 << 47, 0, -(1 << 47)}, // exactly half way counts as behind
		{1<<47 - 1, 0, 1<<47 - 1},
		{2, MaxSeq - 1, 4},
	}
	for _, tc := range tests {
		if d := SeqDiff(tc.a, tc.b); d != tc.d {
			t.Errorf("SeqDiff(%#x, %#x) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
	if !SeqLess(MaxSeq, 0) || SeqLess(0, MaxSeq) || SeqLess(3, 3) || !SeqLessEq(3, 3) {
		t.Fatal("SeqLess across wraparound")
	}
	if !SeqInWindow(1, MaxSeq-5, 10) || SeqInWindow(11, MaxSeq-5, 10) || SeqInWindow(MaxSeq-6, MaxSeq-5, 10) {
		t.Fatal("SeqInWindow across wraparound")
	}
}

func TestAckVectorWalk(t *testing.T) {
	cells := []byte{AckCell(AckReceived, 4), AckCell(AckNotReceived, 1), AckCell(AckECNMarked, 0)}
	type sa struct {
		seq uint64
		st  AckCellState
	}
	var got []sa
	ForEachAcked(1000, cells, func(s uint64, st AckCellState) bool {
		got = append(got, sa{s, st})
		return true
	})
	want := []sa{{1000, 0}, {999, 0}, {998, 0}, {997, 0}, {996, 0}, {995, 3}, {994, 3}, {993, 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
	// Wraparound below zero.
	var seqs []uint64
	ForEachAcked(2, []byte{AckCell(AckReceived, 5)}, func(s uint64, _ AckCellState) bool {
		seqs = append(seqs, s)
		return true
	})
	wantSeqs := []uint64{2, 1, 0, MaxSeq, MaxSeq - 1, MaxSeq - 2}
	for i := range wantSeqs {
		if i >= len(seqs) || seqs[i] != wantSeqs[i] {
			t.Fatalf("wraparound walk %x, want %x", seqs, wantSeqs)
		}
	}
	// Runs.
	type run struct {
		hi, lo uint64
		st     AckCellState
	}
	var runs []run
	next := ForEachRun(1, cells, func(hi, lo uint64, st AckCellState) bool {
		runs = append(runs, run{hi, lo, st})
		return true
	})
	wantRuns := []run{{1, MaxSeq - 2, 0}, {MaxSeq - 3, MaxSeq - 4, 3}, {MaxSeq - 5, MaxSeq - 5, 1}}
	if len(runs) != 3 || runs[0] != wantRuns[0] || runs[1] != wantRuns[1] || runs[2] != wantRuns[2] || next != MaxSeq-6 {
		t.Fatalf("runs %x next %x, want %x", runs, next, wantRuns)
	}
	if AckVectorSpan(cells) != 8 {
		t.Fatal("span")
	}
	// Early stop.
	n := 0
	ForEachAcked(10, cells, func(uint64, AckCellState) bool { n++; return n < 3 })
	if n != 3 {
		t.Fatalf("stop after %d", n)
	}
	if CellState(0xc5) != AckNotReceived || CellRunLen(0xc5) != 5 || AckCell(AckECNMarked, 100) != 0x7f {
		t.Fatal("cell helpers")
	}
	if got := AppendRun(nil, AckReceived, 130); !bytes.Equal(got, []byte{0x3f, 0x3f, 0x01}) {
		t.Fatalf("AppendRun 130 = %x", got)
	}
	if ValidAckVector([]byte{0x80}) || !ValidAckVector(cells) {
		t.Fatal("ValidAckVector")
	}
}

// finishParse finishes the packet b builds in buf and parses it back.
func finishParse(t testing.TB, b *Builder, buf []byte) Packet {
	t.Helper()
	n, err := b.Finish(nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := Parse(buf[:n], &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAckVectorSplit(t *testing.T) {
	cells := make([]byte, 300)
	for i := range cells {
		cells[i] = AckCell(AckReceived, i%64)
	}
	buf := make([]byte, 1500)
	var b Builder
	if err := b.Begin(buf, &Header{Type: TypeAck}); err != nil {
		t.Fatal(err)
	}
	if err := b.AckVector(1, cells); err != nil {
		t.Fatal(err)
	}
	p := finishParse(t, &b, buf)
	it := NewOptionIter(p.Options)
	var got []byte
	var lens []int
	for {
		o, ok := it.Next()
		if !ok {
			break
		}
		if o.Type != OptAckVector1 {
			t.Fatalf("type %d", o.Type)
		}
		lens = append(lens, len(o.Data))
		got = append(got, o.Data...)
	}
	if !bytes.Equal(got, cells) || len(lens) != 2 || lens[0] != 253 || lens[1] != 47 {
		t.Fatalf("split into %v", lens)
	}
}

func TestBuilderLimits(t *testing.T) {
	var b Builder
	if err := b.Option(OptTimestamp, nil); !errors.Is(err, ErrNotBegun) {
		t.Fatalf("option before Begin: %v", err)
	}
	if err := b.Begin(make([]byte, 10), &Header{Type: TypeData}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("small buffer: %v", err)
	}
	if err := b.Begin(make([]byte, 100), &Header{Type: 12}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("bad type: %v", err)
	}
	buf := make([]byte, 24)
	if err := b.Begin(buf, &Header{Type: TypeData}); err != nil {
		t.Fatal(err)
	}
	if err := b.Timestamp(1); err != nil {
		t.Fatal(err)
	}
	if err := b.Timestamp(2); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("overflow: %v", err)
	}
	if err := b.Option(OptSlowReceiver, []byte{1}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("single-byte with data: %v", err)
	}
	if _, err := b.Finish([]byte{1, 2}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("payload overflow: %v", err)
	}
	if _, err := b.Finish(nil); err != nil {
		t.Fatal(err)
	}
	// Data Offset cannot describe more than 1020 bytes of header.
	big := make([]byte, 4000)
	if err := b.Begin(big, &Header{Type: TypeData}); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 200 && err == nil; i++ {
		err = b.Timestamp(uint32(i))
	}
	if !errors.Is(err, ErrNoSpace) || b.Len() > MaxHeaderLen {
		t.Fatalf("header grew to %d: %v", b.Len(), err)
	}
	n, err := b.Finish(nil)
	if err != nil || n > MaxHeaderLen || int(big[4])*4 != n {
		t.Fatalf("finish %d %v", n, err)
	}
}

func TestNDPCountSizes(t *testing.T) {
	for _, v := range []uint64{0, 0xff, 0x100, 0xffffff, 1 << 40, MaxSeq} {
		buf := make([]byte, 64)
		var b Builder
		_ = b.Begin(buf, &Header{Type: TypeData})
		if err := b.NDPCount(v); err != nil {
			t.Fatal(err)
		}
		l := int(buf[17]) - 2
		got, err := ParseNDPCount(buf[18 : 18+l])
		if err != nil || got != v {
			t.Fatalf("NDP %d: got %d (%d bytes) %v", v, got, l, err)
		}
		if v > 0 && l > 1 && buf[18] == 0 {
			t.Fatalf("NDP %d: not minimal (%d bytes)", v, l)
		}
	}
	var b Builder
	_ = b.Begin(make([]byte, 64), &Header{Type: TypeData})
	if b.NDPCount(1<<48) == nil {
		t.Fatal("49-bit NDP count accepted")
	}
}

func TestTypeStrings(t *testing.T) {
	if TypeDataAck.String() != "DataAck" || Type(12).String() != "Type(12)" {
		t.Fatal("Type.String")
	}
	for ty := TypeRequest; ty <= TypeSyncAck; ty++ {
		if ty.HasAck() == (ty == TypeRequest || ty == TypeData) {
			t.Fatalf("%s HasAck", ty)
		}
	}
	if Type(10).HasAck() || ResetMPAbrupt.String() != "Abrupt MP termination" || MPRemoveAddr.String() != "MP_REMOVEADDR" {
		t.Fatal("strings")
	}
}

func TestHMAC(t *testing.T) {
	// RFC 4231 test case 2: HMAC-SHA-256 with key "Jefe".
	var d [HMACSize]byte
	HMAC(&d, []byte("Jefe"), []byte("what do ya want "), []byte("for nothing?"))
	want := h("5bdcc146bf60754e6a042426089575c75a003f08")
	if !bytes.Equal(d[:], want) {
		t.Fatalf("HMAC %x want %x", d, want)
	}
	o := MPOption{Type: MPAddAddr, AddrID: 1, Nonce: 2, Addr: netip.MustParseAddr("10.0.0.1")}
	if got := HMACInput(nil, &o); !bytes.Equal(got, h("01 00000002 0a000001 0000")) {
		t.Fatalf("ADDADDR HMAC input %x", got)
	}
	o = MPOption{Type: MPRemoveAddr, AddrID: 1, Nonce: 2}
	if got := HMACInput(nil, &o); !bytes.Equal(got, h("01 00000002")) {
		t.Fatalf("REMOVEADDR HMAC input %x", got)
	}
}

func TestFinishInPlace(t *testing.T) {
	buf := make([]byte, 200)
	var b Builder
	hd := Header{Type: TypeData, Seq: 9}
	_ = b.Begin(buf, &hd)
	_ = b.MP(&MPOption{Type: MPSeq, Seq: 4})
	off := b.PayloadOffset()
	if off != 28 {
		t.Fatalf("payload offset %d", off)
	}
	copy(buf[off:], "xyz")
	n, err := b.FinishInPlace(3)
	if err != nil || n != 31 {
		t.Fatal(n, err)
	}
	var p Packet
	if err := Parse(buf[:n], &p); err != nil || string(p.Payload) != "xyz" || len(p.Options) != 12 {
		t.Fatalf("%v %q %x", err, p.Payload, p.Options)
	}
	if _, err := b.FinishInPlace(1); !errors.Is(err, ErrNotBegun) {
		t.Fatalf("second finish: %v", err)
	}
}

func TestFeatureNNAndDataDropped(t *testing.T) {
	buf := make([]byte, 64)
	var b Builder
	_ = b.Begin(buf, &Header{Type: TypeData})
	if err := b.FeatureNN(OptChangeL, FeatSequenceWindow, 0x1_0000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[16:22], h("20 06 03 010000")) {
		t.Fatalf("Change L(Sequence Window, 65536) = %x", buf[16:22])
	}
	f, vals, _ := ParseFeature(buf[18:22])
	if v, err := FeatureNN(vals); f != FeatSequenceWindow || err != nil || v != 0x10000 {
		t.Fatalf("FeatureNN = %d %v", v, err)
	}
	if drop, st, rl := DataDroppedBlock(0xa5); !drop || st != 2 || rl != 5 {
		t.Fatalf("drop block %v %d %d", drop, st, rl)
	}
	if drop, _, rl := DataDroppedBlock(0x7f); drop || rl != 127 {
		t.Fatalf("normal block %v %d", drop, rl)
	}
	if v, err := ParseDataChecksum(h("01020304")); err != nil || v != 0x01020304 {
		t.Fatal(v, err)
	}
}

// TestShortSeqnos: X=0 headers (RFC 4340 §5.1) of Data, Ack and DataAck
// round-trip with their 24-bit numbers, 12 and 16 bytes long, and read
// back to 48 bits against a reference (§7.6).
func TestShortSeqnos(t *testing.T) {
	for _, typ := range []Type{TypeData, TypeAck, TypeDataAck} {
		h := Header{SrcPort: 5000, DstPort: 6511, Type: typ, Seq: 0xabcdef, Ack: 0x123456, CCVal: 3, Short: true}
		want := 16
		if typ == TypeData {
			want = 12
		}
		if h.Len() != want {
			t.Errorf("%v: short header %d bytes, want %d", typ, h.Len(), want)
		}
		buf := make([]byte, 64)
		var b Builder
		if err := b.Begin(buf, &h); err != nil {
			t.Fatal(err)
		}
		if err := b.MP(&MPOption{Type: MPSeq, Seq: 77}); err != nil {
			t.Fatal(err)
		}
		n, err := b.Finish([]byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		if buf[8]&1 != 0 || n != want+12+7 {
			t.Fatalf("%v: X bit %d, length %d", typ, buf[8]&1, n)
		}
		var p Packet
		if err := Parse(buf[:n], &p); err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		wantAck := uint64(0x123456)
		if typ == TypeData {
			wantAck = 0
		}
		if !p.Short || p.Type != typ || p.Seq != 0xabcdef || p.Ack != wantAck || p.CCVal != 3 || string(p.Payload) != "payload" {
			t.Errorf("%v: parsed %+v payload %q", typ, p.Header, p.Payload)
		}
		if it := NewOptionIter(p.Options); true {
			o, ok := it.Next()
			var mo MPOption
			if !ok || o.Type != OptMultipath || ParseMP(o.Data, &mo) != nil || mo.Seq != 77 {
				t.Errorf("%v: options %x", typ, p.Options)
			}
		}
	}
	// Types that need X=1 ignore Short.
	h := Header{Type: TypeSync, Seq: 1 << 40, Ack: 5, Short: true}
	if h.Len() != 24 {
		t.Errorf("short Sync header %d bytes, want the X=1 24", h.Len())
	}
	for _, tc := range []struct{ ref, low, want uint64 }{
		{0x1000000, 0x000005, 0x1000005},
		{0x1000005, 0xfffffe, 0x0fffffe},     // just behind, across the 24-bit wrap
		{0x0fffffe, 0x000003, 0x1000003},     // just ahead, across it
		{0x5_7fffff, 0x000000, 0x5_000000},   // 2^23-1 behind
		{0x5_800001, 0x000000, 0x6_000000},   // 2^23-1 ahead
		{0xffffffffffff, 0x000001, 0x000001}, // across the 48-bit wrap
		{0x000001, 0xffffff, 0xffffffffffff},
	} {
		if got := ExtendSeq(tc.ref, tc.low); got != tc.want {
			t.Errorf("ExtendSeq(%#x, %#x) = %#x, want %#x", tc.ref, tc.low, got, tc.want)
		}
	}
}
