// SPDX-License-Identifier: MIT

package wire

import (
	"net/netip"
	"testing"
)

// benchPacket is the data-path case: a 1400-byte DataAck (the type that
// carries both a payload and an Acknowledgement Number) with MP_SEQ and an
// Ack Vector of 8 cells.
var (
	benchSrc   = netip.MustParseAddr("192.0.2.1")
	benchDst   = netip.MustParseAddr("198.51.100.2")
	benchCells = []byte{0x3f, 0x05, 0xc2, 0x10, 0xc0, 0x3f, 0x3f, 0x01}
)

const benchLen = 1400

func encodeBench(buf, payload []byte, seq uint64, mp *MPOption) (int, error) {
	var b Builder
	hd := Header{SrcPort: 40000, DstPort: DefaultPort, Type: TypeDataAck, Seq: seq, Ack: seq - 3}
	if err := b.Begin(buf, &hd); err != nil {
		return 0, err
	}
	mp.Seq = seq
	if err := b.MP(mp); err != nil {
		return 0, err
	}
	if err := b.AckVector(0, benchCells); err != nil {
		return 0, err
	}
	n, err := b.Finish(payload)
	if err != nil {
		return 0, err
	}
	SetChecksum(buf[:n], benchSrc, benchDst)
	return n, nil
}

// benchHeaderLen: 24 header + 9 MP_SEQ + 10 Ack Vector = 43, padded to 44.
const benchHeaderLen = 44

func BenchmarkEncodeData(b *testing.B) {
	buf := make([]byte, 2048)
	payload := make([]byte, benchLen-benchHeaderLen)
	mp := MPOption{Type: MPSeq}
	b.SetBytes(benchLen)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n, err := encodeBench(buf, payload, uint64(i)+1000, &mp)
		if err != nil || n != benchLen {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkDecodeData(b *testing.B) {
	buf := make([]byte, 2048)
	mp := MPOption{Type: MPSeq}
	n, err := encodeBench(buf, make([]byte, benchLen-benchHeaderLen), 1000, &mp)
	if err != nil || n != benchLen {
		b.Fatal(n, err)
	}
	pkt := buf[:n]
	b.SetBytes(benchLen)
	b.ReportAllocs()
	var p Packet
	var o MPOption
	for b.Loop() {
		if !VerifyChecksum(pkt, benchSrc, benchDst) {
			b.Fatal("checksum")
		}
		if err := Parse(pkt, &p); err != nil {
			b.Fatal(err)
		}
		acked := 0
		it := NewOptionIter(p.Options)
		for {
			opt, ok := it.Next()
			if !ok {
				break
			}
			switch opt.Type {
			case OptMultipath:
				if err := ParseMP(opt.Data, &o); err != nil || o.Seq != 1000 {
					b.Fatal(err)
				}
			case OptAckVector0:
				ForEachRun(p.Ack, opt.Data, func(hi, lo uint64, st AckCellState) bool {
					if st == AckReceived {
						acked += int(SeqDiff(hi, lo)) + 1
					}
					return true
				})
			}
		}
		if acked != 217 || len(p.Payload) != benchLen-benchHeaderLen {
			b.Fatal("acked", acked)
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	pkt := make([]byte, benchLen)
	for i := range pkt {
		pkt[i] = byte(i)
	}
	pkt[4], pkt[5] = 4, 0 // Data Offset 16 bytes, CsCov 0: the whole packet
	b.SetBytes(benchLen)
	b.ReportAllocs()
	for b.Loop() {
		SetChecksum(pkt, benchSrc, benchDst)
	}
}

func TestZeroAllocs(t *testing.T) {
	buf := make([]byte, 2048)
	payload := make([]byte, benchLen-benchHeaderLen)
	mp := MPOption{Type: MPSeq}
	if a := testing.AllocsPerRun(100, func() { _, _ = encodeBench(buf, payload, 5, &mp) }); a != 0 {
		t.Fatalf("encode: %v allocs", a)
	}
	var p Packet
	var o MPOption
	if a := testing.AllocsPerRun(100, func() {
		_ = Parse(buf[:benchLen], &p)
		it := NewOptionIter(p.Options)
		for {
			opt, ok := it.Next()
			if !ok {
				break
			}
			if opt.Type == OptMultipath {
				_ = ParseMP(opt.Data, &o)
			}
		}
		_ = VerifyChecksum(buf[:benchLen], benchSrc, benchDst)
	}); a != 0 {
		t.Fatalf("decode: %v allocs", a)
	}
}
