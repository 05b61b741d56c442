// SPDX-License-Identifier: MIT

package pcapdccp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

type sent struct {
	src, dst netip.AddrPort
	pkt      []byte
	hdr      wire.Header
	cells    string // hex of the Ack Vector cells, if any
	nonce    uint8
	mp       int // Multipath options in the packet
}

var (
	cli4, srv4 = netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("198.51.100.20")
	cli6, srv6 = netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8:1::20")
	keyA       = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	keyB       = []byte{9, 10, 11, 12, 13, 14, 15, 16}
)

// session builds the datagrams of a two-subflow MP-DCCP session with every
// packet type, option and Multipath sub-option.
func session(t *testing.T) []sent {
	t.Helper()
	var out []sent
	add := func(src, dst netip.Addr, hd wire.Header, payload []byte, opts func(b *wire.Builder) error) *sent {
		buf := make([]byte, 1500)
		var b wire.Builder
		if err := b.Begin(buf, &hd); err != nil {
			t.Fatal(err)
		}
		if opts != nil {
			if err := opts(&b); err != nil {
				t.Fatalf("%s: %v", hd.Type, err)
			}
		}
		n, err := b.Finish(payload)
		if err != nil {
			t.Fatal(err)
		}
		// The checksum as the daemon sends it: for the outer addresses.
		wire.SetChecksum(buf[:n], src, dst)
		out = append(out, sent{src: netip.AddrPortFrom(src, hd.SrcPort), dst: netip.AddrPortFrom(dst, hd.DstPort),
			pkt: buf[:n], hdr: hd})
		return &out[len(out)-1]
	}
	mp := func(o wire.MPOption) func(b *wire.Builder) error {
		return func(b *wire.Builder) error { return b.MP(&o) }
	}
	all := func(fs ...func(b *wire.Builder) error) func(b *wire.Builder) error {
		return func(b *wire.Builder) error {
			for _, f := range fs {
				if err := f(b); err != nil {
					return err
				}
			}
			return nil
		}
	}
	cp, sp := uint16(40001), uint16(wire.DefaultPort)
	keys := append([]byte{wire.KeyTypePlain}, keyA...)
	var hm [wire.HMACSize]byte
	wire.HMAC(&hm, append(keyA, keyB...), []byte{1, 2, 3, 4, 5, 6, 7, 8})

	// First subflow, 4-way handshake.
	s := add(cli4, srv4, wire.Header{SrcPort: cp, DstPort: sp, Type: wire.TypeRequest, Seq: 0x0000aabbccdd, ServiceCode: 0x4d505431}, nil,
		all(func(b *wire.Builder) error { return b.Feature(wire.OptChangeR, wire.FeatMultipath, 0) },
			func(b *wire.Builder) error { return b.Feature(wire.OptChangeL, wire.FeatCCID, 2, 3) },
			func(b *wire.Builder) error { return b.Feature(wire.OptChangeR, wire.FeatSendAckVector, 1) },
			mp(wire.MPOption{Type: wire.MPKey, Token: 0x11111111, Keys: keys})))
	s.mp = 1
	s = add(srv4, cli4, wire.Header{SrcPort: sp, DstPort: cp, Type: wire.TypeResponse, Seq: 0x7fff00000001, Ack: 0x0000aabbccdd, ServiceCode: 0x4d505431}, nil,
		all(func(b *wire.Builder) error { return b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0, 0) },
			func(b *wire.Builder) error { return b.Feature(wire.OptConfirmR, wire.FeatCCID, 2, 2, 3) },
			func(b *wire.Builder) error { return b.Option(wire.OptInitCookie, []byte{0xca, 0xfe}) },
			mp(wire.MPOption{Type: wire.MPKey, Token: 0x22222222, Keys: append([]byte{0}, keyB...)})))
	s.mp = 1
	add(cli4, srv4, wire.Header{SrcPort: cp, DstPort: sp, Type: wire.TypeAck, Seq: 0x0000aabbccde, Ack: 0x7fff00000001}, nil,
		func(b *wire.Builder) error { return b.Feature(wire.OptConfirmL, wire.FeatSendAckVector, 1) })
	add(srv4, cli4, wire.Header{SrcPort: sp, DstPort: cp, Type: wire.TypeAck, Seq: 0x7fff00000002, Ack: 0x0000aabbccde}, nil,
		func(b *wire.Builder) error { return b.Timestamp(12345) })

	// Data with MP_SEQ, wrapping around 2^48, and acks with Ack Vectors.
	payload := innerIPv4(100)
	for i := range 3 {
		s = add(cli4, srv4, wire.Header{SrcPort: cp, DstPort: sp, CCVal: uint8(i), Type: wire.TypeData, Seq: wire.MaxSeq - 1 + uint64(i)&wire.MaxSeq}, payload,
			mp(wire.MPOption{Type: wire.MPSeq, Seq: wire.SeqAdd(wire.MaxSeq, int64(i))}))
		s.hdr.Seq &= wire.MaxSeq
		s.mp = 1
	}
	cells := []byte{wire.AckCell(wire.AckReceived, 2), wire.AckCell(wire.AckNotReceived, 0), wire.AckCell(wire.AckECNMarked, 1)}
	s = add(srv4, cli4, wire.Header{SrcPort: sp, DstPort: cp, Type: wire.TypeDataAck, Seq: 0x7fff00000003, Ack: 1}, payload,
		all(func(b *wire.Builder) error { return b.AckVector(0, cells) },
			func(b *wire.Builder) error { return b.TimestampEcho(12345, 250) },
			func(b *wire.Builder) error { return b.NDPCount(1) },
			mp(wire.MPOption{Type: wire.MPSeq, Seq: 77}),
			mp(wire.MPOption{Type: wire.MPRTT, RTTType: wire.RTTSmoothed, RTT: 40, Age: 3})))
	s.cells, s.mp = hex.EncodeToString(cells), 2
	s = add(cli4, srv4, wire.Header{SrcPort: cp, DstPort: sp, Type: wire.TypeAck, Seq: 2, Ack: 0x7fff00000003}, nil,
		all(func(b *wire.Builder) error { return b.AckVector(1, []byte{wire.AckCell(wire.AckReceived, 63)}) },
			func(b *wire.Builder) error { return b.ElapsedTime(100000) },
			func(b *wire.Builder) error { return b.Option(wire.OptSlowReceiver, nil) },
			func(b *wire.Builder) error { return b.Option(wire.OptDataDropped, []byte{0x00}) },
			mp(wire.MPOption{Type: wire.MPAddAddr, AddrID: 1, Nonce: 5, Addr: cli6}),
			mp(wire.MPOption{Type: wire.MPHMAC, HMAC: hm[:]}),
			mp(wire.MPOption{Type: wire.MPSeq, Seq: 3})))
	s.cells, s.nonce, s.mp = "3f", 1, 3

	// Second subflow over IPv6: join with HMACs.
	s = add(cli6, srv6, wire.Header{SrcPort: cp + 1, DstPort: sp, Type: wire.TypeRequest, Seq: 100, ServiceCode: 0x4d505431}, nil,
		all(func(b *wire.Builder) error { return b.Feature(wire.OptChangeR, wire.FeatMultipath, 0) },
			mp(wire.MPOption{Type: wire.MPJoin, AddrID: 1, Token: 0x22222222, Nonce: 0x01020304})))
	s.mp = 1
	s = add(srv6, cli6, wire.Header{SrcPort: sp, DstPort: cp + 1, Type: wire.TypeResponse, Seq: 200, Ack: 100, ServiceCode: 0x4d505431}, nil,
		all(func(b *wire.Builder) error { return b.Feature(wire.OptConfirmL, wire.FeatMultipath, 0, 0) },
			mp(wire.MPOption{Type: wire.MPJoin, AddrID: 0, Token: 0x11111111, Nonce: 0x05060708}),
			mp(wire.MPOption{Type: wire.MPHMAC, HMAC: hm[:]})))
	s.mp = 2
	s = add(cli6, srv6, wire.Header{SrcPort: cp + 1, DstPort: sp, Type: wire.TypeAck, Seq: 101, Ack: 200}, nil,
		mp(wire.MPOption{Type: wire.MPHMAC, HMAC: hm[:]}))
	s.mp = 1
	s = add(srv6, cli6, wire.Header{SrcPort: sp, DstPort: cp + 1, Type: wire.TypeDataAck, Seq: 201, Ack: 101}, payload,
		all(mp(wire.MPOption{Type: wire.MPSeq, Seq: 78}),
			mp(wire.MPOption{Type: wire.MPPrio, Prio: 2}),
			mp(wire.MPOption{Type: wire.MPAddAddr, AddrID: 2, Nonce: 9, Addr: srv6, Port: 6511}),
			mp(wire.MPOption{Type: wire.MPHMAC, HMAC: hm[:]}),
			mp(wire.MPOption{Type: wire.MPRemoveAddr, AddrID: 3, Nonce: 10}),
			mp(wire.MPOption{Type: wire.MPHMAC, HMAC: hm[:]}),
			mp(wire.MPOption{Type: wire.MPConfirm, Raw: []byte{46, 9, 4, 0, 0, 0, 0, 0, 3, 46, 4, 9, 2}}),
			mp(wire.MPOption{Type: wire.MPExp, Raw: []byte("mptun")})))
	s.mp = 8
	add(cli6, srv6, wire.Header{SrcPort: cp + 1, DstPort: sp, Type: wire.TypeSync, Seq: 102, Ack: 201}, nil, nil)
	add(srv6, cli6, wire.Header{SrcPort: sp, DstPort: cp + 1, Type: wire.TypeSyncAck, Seq: 202, Ack: 102}, nil,
		all(func(b *wire.Builder) error { return b.Option(wire.OptMandatory, nil) },
			func(b *wire.Builder) error { return b.Timestamp(99) }))

	// Closing: CloseReq/Close with MP_CLOSE, Reset 1; abrupt close on the other.
	s = add(srv4, cli4, wire.Header{SrcPort: sp, DstPort: cp, Type: wire.TypeCloseReq, Seq: 0x7fff00000004, Ack: 2}, nil,
		mp(wire.MPOption{Type: wire.MPClose, KeyData: keyA}))
	s.mp = 1
	s = add(cli4, srv4, wire.Header{SrcPort: cp, DstPort: sp, Type: wire.TypeClose, Seq: 3, Ack: 0x7fff00000004}, nil,
		mp(wire.MPOption{Type: wire.MPClose, KeyData: keyB}))
	s.mp = 1
	add(srv4, cli4, wire.Header{SrcPort: sp, DstPort: cp, Type: wire.TypeReset, Seq: 0x7fff00000005, Ack: 3, ResetCode: wire.ResetClosed}, nil, nil)
	s = add(cli6, srv6, wire.Header{SrcPort: cp + 1, DstPort: sp, Type: wire.TypeReset, Seq: 103, Ack: 202,
		ResetCode: wire.ResetMPAbrupt, ResetData: [3]byte{1, 2, 3}}, nil,
		mp(wire.MPOption{Type: wire.MPFastClose, KeyData: keyB}))
	s.mp = 1
	return out
}

func writeSession(t *testing.T, path string, form Form) []sent {
	pkts := session(t)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, form)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range pkts {
		before := append([]byte(nil), p.pkt...)
		if err := w.WritePacket(t0.Add(time.Duration(i)*time.Millisecond), p.src, p.dst, p.pkt); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, p.pkt) {
			t.Fatal("WritePacket modified its input")
		}
	}
	return pkts
}

func TestWriterFormat(t *testing.T) {
	pkt := session(t)[0].pkt
	src, dst := netip.AddrPortFrom(cli4, 40001), netip.AddrPortFrom(srv4, 6511)
	for _, form := range []Form{FormUDP, FormDCCP} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, form)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(time.Unix(1, 0), src, dst, pkt); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		ul := 8
		if form == FormDCCP {
			ul = 0
		}
		// 24-byte file header (link type 101 = raw IP), 16-byte record header.
		if len(b) != 24+16+20+ul+len(pkt) || b[20] != 101 {
			t.Fatalf("%v: pcap of %d bytes, link type %d", form, len(b), b[20])
		}
		ip := b[40:60]
		if ip[0] != 0x45 || wire.InternetChecksum(ip) != 0 {
			t.Fatalf("%v: IPv4 header %x", form, ip)
		}
		if !bytes.Equal(b[60+ul:], pkt) {
			t.Fatalf("%v: DCCP packet not written as given", form)
		}
		switch form {
		case FormDCCP:
			if ip[9] != 33 {
				t.Fatalf("protocol %d", ip[9])
			}
		case FormUDP:
			udp := b[60:]
			if ip[9] != 17 || binary.BigEndian.Uint16(udp) != 40001 || binary.BigEndian.Uint16(udp[2:]) != 6511 ||
				int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
				t.Fatalf("UDP header %x", udp[:8])
			}
			// The RFC 768 pseudo-header, laid out byte by byte.
			ph := append(append(cli4.AsSlice(), srv4.AsSlice()...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
			if binary.BigEndian.Uint16(udp[6:]) == 0 || wire.InternetChecksum(append(ph, udp...)) != 0 {
				t.Fatalf("UDP checksum %x does not verify", udp[6:8])
			}
		}
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, FormUDP)
	if err := w.WritePacket(time.Unix(1, 0), src, netip.AddrPortFrom(srv6, 6511), pkt); err == nil {
		t.Fatal("mixed families accepted")
	}
	// A wildcard dual-stack socket's address takes the peer's family.
	if err := w.WritePacket(time.Unix(1, 0), src, netip.AddrPortFrom(netip.IPv6Unspecified(), 6511), pkt); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureHonesty: a datagram whose DCCP checksum is wrong, as a
// damaged or foreign datagram would be, is written with that checksum in
// both forms; and Wireshark says it is bad.
func TestCaptureHonesty(t *testing.T) {
	pkt := append([]byte(nil), session(t)[4].pkt...)
	pkt[len(pkt)-1] ^= 0x20 // a payload bit flipped after the checksum was made
	src, dst := netip.AddrPortFrom(cli4, 40001), netip.AddrPortFrom(srv4, 6511)
	path := filepath.Join(t.TempDir(), "bad.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := NewWriter(f, FormDCCP)
	if err := w.WritePacket(time.Unix(1, 0), src, dst, pkt); err != nil {
		t.Fatal(err)
	}
	f.Close()
	raw, _ := os.ReadFile(path)
	if !bytes.Equal(raw[24+16+20:], pkt) {
		t.Fatal("the capture changed the packet")
	}
	if wire.VerifyChecksum(raw[24+16+20:], cli4, srv4) {
		t.Fatal("the capture repaired the DCCP checksum")
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark); skipping Wireshark's verdict")
	}
	out, err := exec.Command(tshark, "-r", path, "-n", "-o", "dccp.check_checksum:TRUE", "-T", "fields",
		"-e", "dccp.checksum.status").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("Wireshark checksum status %q, want 0 (bad)", out)
	}
}

// TestTshark has Wireshark's DCCP dissector check our encoding
// independently: every packet parses as DCCP, checksum good, no expert
// errors or malformed packets, types and sequence numbers as sent, Ack
// Vectors decoded to the cells sent.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark); skipping the independent DCCP dissector check")
	}
	path := filepath.Join(t.TempDir(), "session.pcap")
	if p := os.Getenv("PCAPDCCP_KEEP"); p != "" {
		path = p
	}
	pkts := writeSession(t, path, FormDCCP)

	fields := []string{"frame.number", "ip.proto", "ipv6.nxt", "dccp.type", "dccp.seq_raw", "dccp.ack_raw",
		"dccp.checksum.status", "dccp.ack_vector.nonce_0", "dccp.ack_vector.nonce_1", "dccp.option_type",
		"_ws.expert.severity", "_ws.malformed", "dccp.srcport", "dccp.reset_code", "dccp.service_code"}
	args := []string{"-r", path, "-n", "-o", "dccp.relative_sequence_numbers:FALSE", "-o", "dccp.check_checksum:TRUE",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark shows %d packets, wrote %d:\n%s", len(lines), len(pkts), out)
	}
	for i, line := range lines {
		c := strings.Split(line, "\t")
		if len(c) != len(fields) {
			t.Fatalf("frame %d: %d fields: %q", i+1, len(c), line)
		}
		p := pkts[i]
		ctx := fmt.Sprintf("frame %d (%s)", i+1, p.hdr.Type)
		if c[1] != "33" && c[2] != "33" {
			t.Errorf("%s: not protocol 33: %q %q", ctx, c[1], c[2])
		}
		if c[3] != strconv.Itoa(int(p.hdr.Type)) {
			t.Errorf("%s: dccp.type %q", ctx, c[3])
		}
		if c[4] != strconv.FormatUint(p.hdr.Seq, 10) {
			t.Errorf("%s: dccp.seq %q, sent %d", ctx, c[4], p.hdr.Seq)
		}
		if p.hdr.Type.HasAck() && c[5] != strconv.FormatUint(p.hdr.Ack, 10) {
			t.Errorf("%s: dccp.ack %q, sent %d", ctx, c[5], p.hdr.Ack)
		}
		// PROTO_CHECKSUM_E_GOOD = 1.
		if c[6] != "1" {
			t.Errorf("%s: checksum status %q, want 1 (good)", ctx, c[6])
		}
		av := []string{c[7], c[8]}
		if p.cells != "" && strings.ReplaceAll(av[p.nonce], ":", "") != p.cells {
			t.Errorf("%s: Ack Vector nonce %d %q, sent %s", ctx, p.nonce, av[p.nonce], p.cells)
		}
		if strings.Contains(c[10], "error") || strings.Contains(c[10], "8388608") || c[11] != "" {
			t.Errorf("%s: expert severity %q, malformed %q", ctx, c[10], c[11])
		}
		n := 0
		for _, typ := range strings.Split(c[9], ",") {
			if typ == "46" {
				n++
			}
		}
		if n != p.mp {
			t.Errorf("%s: %d Multipath options seen, sent %d (types %s)", ctx, n, p.mp, c[9])
		}
		if p.hdr.Type == wire.TypeReset && c[13] != strconv.Itoa(int(p.hdr.ResetCode)) {
			t.Errorf("%s: reset code %q", ctx, c[13])
		}
		if p.hdr.Type == wire.TypeRequest && c[14] != strconv.Itoa(int(p.hdr.ServiceCode)) {
			t.Errorf("%s: service code %q", ctx, c[14])
		}
	}
	// The verbose dissection must not mention malformed packets or bad
	// option lengths anywhere.
	v, err := exec.Command(tshark, "-r", path, "-n", "-V", "-o", "dccp.check_checksum:TRUE").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	for _, bad := range []string{"Malformed", "Bad option length", "header length bad", "[Expert Info (Error", "incorrect", "Wrong", "too long"} {
		if strings.Contains(string(v), bad) {
			t.Errorf("tshark -V contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("tshark fields:\n%s", out)
	}

	// Negative control: the same check must see a corrupted packet.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 0x01 // last payload/option byte of the last packet
	bad := filepath.Join(t.TempDir(), "bad.pcap")
	if err := os.WriteFile(bad, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(tshark, "-r", bad, "-n", "-o", "dccp.check_checksum:TRUE",
		"-T", "fields", "-e", "dccp.checksum.status").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	st := strings.Split(strings.TrimSpace(string(out)), "\n")
	if st[len(st)-1] != "0" {
		t.Errorf("corrupted packet: checksum status %q, want 0 (bad)", st[len(st)-1])
	}
}

// innerIPv4 is a tunnelled packet: an IPv4 header (protocol 253, for
// experiments) and zeros, n bytes in all.
func innerIPv4(n int) []byte {
	p := make([]byte, n)
	p[0], p[8], p[9] = 0x45, 64, 253
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	copy(p[12:], []byte{10, 99, 0, 1, 10, 99, 0, 2})
	binary.BigEndian.PutUint16(p[10:], wire.InternetChecksum(p[:20]))
	return p
}
