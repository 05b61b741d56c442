// SPDX-License-Identifier: MIT

package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// Vectors laid out by hand from RFC 4340 §5.1 (generic header, X=1), §5.2
// (Request: Service Code; Ack subheader), §5.8 and §6 (Change R) and RFC
// 9897 (MP_SEQ), with checksums per §9.1 computed outside mptun and
// confirmed by Wireshark 4.0's DCCP dissector on an IP protocol 33 capture.
var checksumVectors = []struct {
	name     string
	src, dst string
	pkt      string
	sum      uint16
}{
	{
		// Request 40000 -> 6511, Data Offset 6 (16 + Service Code 4 +
		// Change R(MP_CAPABLE, 0) 4), Seq 1, service "mptu".
		name: "request-v4", src: "192.0.2.1", dst: "198.51.100.7",
		pkt: "9c40 196f 06 00 0000 01 00 0000 00000001 6d707475 22 04 0a 00",
		sum: 0x48ef,
	},
	{
		name: "request-v6", src: "2001:db8::1", dst: "2001:db8:ffff::2",
		pkt: "9c40 196f 06 00 0000 01 00 0000 00000001 6d707475 22 04 0a 00",
		sum: 0xd9b6,
	},
	{
		// DataAck, Data Offset 9 (16 + Ack 8 + MP_SEQ 9 + 3 padding),
		// CsCov 2: header, options and the first 4 payload bytes.
		name: "dataack-cscov2", src: "192.0.2.1", dst: "198.51.100.7",
		pkt: "9c40 196f 09 02 0000 09 00 0000 00000005 0000 000000000007 2e 09 04 00000000002a 000000" +
			"0102030405060708090a",
		sum: 0xeba6,
	},
}

func TestChecksumVectors(t *testing.T) {
	for _, v := range checksumVectors {
		src, dst := netip.MustParseAddr(v.src), netip.MustParseAddr(v.dst)
		pkt := h(v.pkt)
		SetChecksum(pkt, src, dst)
		if got := binary.BigEndian.Uint16(pkt[6:]); got != v.sum {
			t.Errorf("%s: checksum %#04x, want %#04x", v.name, got, v.sum)
		}
		if !VerifyChecksum(pkt, src, dst) {
			t.Errorf("%s: does not verify", v.name)
		}
		if VerifyChecksum(pkt, dst, src.Next()) {
			t.Errorf("%s: verifies with other addresses", v.name)
		}
	}
	// Outside the coverage of the CsCov 2 vector a byte may change.
	v := checksumVectors[2]
	pkt := h(v.pkt)
	binary.BigEndian.PutUint16(pkt[6:], v.sum)
	src, dst := netip.MustParseAddr(v.src), netip.MustParseAddr(v.dst)
	pkt[len(pkt)-1] ^= 0xff
	if !VerifyChecksum(pkt, src, dst) {
		t.Error("a byte outside CsCov coverage broke the checksum")
	}
	pkt[36] ^= 1 // first payload byte: covered
	if VerifyChecksum(pkt, src, dst) {
		t.Error("a covered payload byte changed unnoticed")
	}
}

// TestChecksumThroughNAT: a NAT rewrites the addresses and leaves the DCCP
// checksum alone; the residual the receiver sees is then one value for the
// whole flow, and a corrupted packet shows another.
func TestChecksumThroughNAT(t *testing.T) {
	priv, pub := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("203.0.113.9")
	srv := netip.MustParseAddr("198.51.100.7")
	r := rand.New(rand.NewPCG(5, 6))
	var want uint16
	for i := 0; i < 200; i++ {
		pkt := make([]byte, 24+4*r.IntN(40))
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		pkt[4] = 4                                 // Data Offset: the generic header
		pkt[5] = byte(r.IntN(3)) & 0x0f            // CsCov 0, 1 or 2
		SetChecksum(pkt, priv, srv)                // the sender knows its private address
		res, ok := ChecksumResidual(pkt, pub, srv) // the server sees the public one
		if !ok {
			t.Fatal("coverage")
		}
		if i == 0 {
			want = res
			if res == ResidualGood {
				t.Fatal("address change not visible in the residual")
			}
		} else if res != want {
			t.Fatalf("packet %d: residual %#04x, flow's %#04x", i, res, want)
		}
		cov, _ := Coverage(pkt)
		pkt[8+r.IntN(cov-8)] ^= 1 << r.IntN(8)
		if res, _ := ChecksumResidual(pkt, pub, srv); res == want {
			t.Fatalf("packet %d: corruption hidden behind the NAT residual", i)
		}
	}
}

func TestChecksumCoverage(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	buf := make([]byte, 200)
	var b Builder
	hd := Header{Type: TypeData, Seq: 3, CsCov: 2} // header + 4 payload bytes
	_ = b.Begin(buf, &hd)
	n, _ := b.Finish(make([]byte, 40))
	pkt := buf[:n]
	if cov, ok := Coverage(pkt); !ok || cov != 20 {
		t.Fatalf("coverage %d %v", cov, ok)
	}
	// Coverage beyond the packet: the packet must be dropped (§9.2).
	pkt[5] = 15
	SetChecksum(pkt, src, dst)
	pkt = pkt[:30]
	if _, ok := Coverage(pkt); ok || VerifyChecksum(pkt, src, dst) {
		t.Fatal("coverage beyond packet accepted")
	}
	if _, ok := ChecksumResidual(pkt, src, dst); ok {
		t.Fatal("residual of a packet with bad coverage")
	}
	// IPv4-mapped IPv6 addresses (from dual-stack sockets) are IPv4.
	pkt = buf[:n]
	pkt[5] = 0
	SetChecksum(pkt, src, dst)
	if !VerifyChecksum(pkt, netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())) {
		t.Fatal("4in6 addresses not treated as IPv4")
	}
	if VerifyChecksum(pkt[:10], src, dst) {
		t.Fatal("short packet verified")
	}
}

func TestUDPChecksum(t *testing.T) {
	// A UDP datagram 40000 -> 6511 carrying the request-v4 vector; the
	// value was computed outside mptun over the RFC 768 pseudo-header.
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	dccp := h(checksumVectors[0].pkt)
	binary.BigEndian.PutUint16(dccp[6:], checksumVectors[0].sum)
	udp := append(h("9c40 196f 0020 0000"), dccp...)
	got := UDPChecksum(src, dst, udp)
	binary.BigEndian.PutUint16(udp[6:], got)
	if InternetChecksum(append(pseudo4(src, dst, 17, len(udp)), udp...)) != 0 {
		t.Fatalf("UDP checksum %#04x does not verify", got)
	}
	if got != 0x4a38 {
		t.Fatalf("UDP checksum %#04x, want 0x4a38", got)
	}
}

func pseudo4(src, dst netip.Addr, proto byte, n int) []byte {
	b := append(src.AsSlice(), dst.AsSlice()...)
	return binary.BigEndian.AppendUint16(append(b, 0, proto), uint16(n))
}
