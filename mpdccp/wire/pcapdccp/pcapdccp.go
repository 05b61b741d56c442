// SPDX-License-Identifier: MIT

// Package pcapdccp writes mptun's datagrams to a pcap of raw IP packets, in
// one of two forms:
//
//   - FormUDP (the default): IPv4/IPv6 + UDP + the DCCP packet, as the
//     datagram crossed the wire (DCCP-UDP, RFC 6773). Wireshark shows it as
//     UDP to port 6511; contrib/wireshark/mpdccp.lua hands it to Wireshark's
//     DCCP dissector and decodes the Multipath option.
//   - FormDCCP: IP protocol 33 + the DCCP packet, the UDP header removed,
//     which Wireshark's and tcpdump's DCCP dissectors read without a plugin.
//
// The DCCP packet is written exactly as it was sent or received: nothing
// here computes or "fixes" a DCCP checksum, so a damaged or NATed packet
// shows up as such. The IP and UDP headers are made up from the addresses,
// because a UDP socket does not see them; the UDP checksum written is the
// one the kernel computes when sending and has verified before handing a
// received datagram over (docs/interop.md, "Captures").
package pcapdccp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// SnapLen is the snapshot length written in the file header.
const SnapLen = 65535

// Form selects the encapsulation a Writer writes.
type Form uint8

const (
	FormUDP  Form = iota // IP + UDP + DCCP, as on the wire
	FormDCCP             // IP protocol 33 + DCCP, the UDP header removed
)

func (f Form) String() string {
	if f == FormDCCP {
		return "dccp"
	}
	return "udp"
}

// ParseForm parses "udp" or "dccp".
func ParseForm(s string) (Form, error) {
	switch s {
	case "", "udp":
		return FormUDP, nil
	case "dccp":
		return FormDCCP, nil
	}
	return 0, fmt.Errorf("pcap: unknown form %q (udp or dccp)", s)
}

// MaxOverhead is the most a record adds to a datagram: the record header,
// an IPv6 header and a UDP header.
const MaxOverhead = 16 + 40 + 8

// Writer writes datagrams wrapped in IPv4 or IPv6 headers. It is not safe
// for concurrent use.
type Writer struct {
	w    io.Writer
	form Form
	buf  []byte
	id   uint16
}

// The classic pcap format (little-endian, microsecond timestamps) is
// written here directly: a 24-byte file header, then a 16-byte header per
// record. A library for it would add megabytes to the daemon.
const (
	pcapMagic     = 0xa1b2c3d4
	linkTypeRaw   = 101 // LINKTYPE_RAW: the record starts with an IPv4 or IPv6 header
	recordHdrSize = 16
)

// NewWriter writes a pcap file header (link type raw IP) to w.
func NewWriter(w io.Writer, form Form) (*Writer, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], SnapLen)
	binary.LittleEndian.PutUint32(h[20:], linkTypeRaw)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcap: write file header: %w", err)
	}
	return &Writer{w: w, form: form, buf: make([]byte, 0, 2048)}, nil
}

// Form is the encapsulation w writes.
func (w *Writer) Form() Form { return w.form }

// WritePacket writes dg, the payload of one UDP datagram (a DCCP packet),
// as sent from src to dst at t. dg is written unchanged and not modified.
// An unspecified address of one family next to an address of the other
// (a wildcard dual-stack socket) takes the other's family.
func (w *Writer) WritePacket(t time.Time, src, dst netip.AddrPort, dg []byte) error {
	sa, da, err := addrPair(src.Addr(), dst.Addr())
	if err != nil {
		return err
	}
	hl := 40
	if sa.Is4() {
		hl = 20
	}
	ul := 0
	proto := uint8(wire.ProtoDCCP)
	if w.form == FormUDP {
		ul, proto = 8, wire.ProtoUDP
	}
	total := hl + ul + len(dg)
	if total > SnapLen {
		return fmt.Errorf("pcap: packet of %d bytes exceeds %d", total, SnapLen)
	}
	if cap(w.buf) < recordHdrSize+total {
		w.buf = make([]byte, 0, recordHdrSize+total)
	}
	rec := w.buf[:recordHdrSize+total]
	us := t.UnixMicro()
	binary.LittleEndian.PutUint32(rec[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(rec[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(rec[8:], uint32(total))
	binary.LittleEndian.PutUint32(rec[12:], uint32(total))
	b := rec[recordHdrSize:]
	w.putIP(b[:hl], sa, da, proto, ul+len(dg))
	copy(b[hl+ul:], dg)
	if ul > 0 {
		udp := b[hl:]
		binary.BigEndian.PutUint16(udp[0:], src.Port())
		binary.BigEndian.PutUint16(udp[2:], dst.Port())
		binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
		udp[6], udp[7] = 0, 0
		binary.BigEndian.PutUint16(udp[6:], wire.UDPChecksum(sa, da, udp))
	}
	if _, err := w.w.Write(rec); err != nil {
		return fmt.Errorf("pcap: write packet: %w", err)
	}
	return nil
}

// putIP writes an IPv4 (len(ip) 20) or IPv6 header for a payload of n bytes.
func (w *Writer) putIP(ip []byte, src, dst netip.Addr, proto uint8, n int) {
	clear(ip)
	if len(ip) == 20 {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
		binary.BigEndian.PutUint16(ip[4:], w.id)
		w.id++
		ip[6] = 0x40 // Don't Fragment
		ip[8] = 64
		ip[9] = proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], wire.InternetChecksum(ip))
		return
	}
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(n))
	ip[6] = proto
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
}

// addrPair makes src and dst one family.
func addrPair(src, dst netip.Addr) (netip.Addr, netip.Addr, error) {
	src, dst = src.Unmap(), dst.Unmap()
	switch {
	case !src.IsValid() || !dst.IsValid():
	case src.Is4() == dst.Is4():
		return src, dst, nil
	case src.IsUnspecified():
		return unspecifiedLike(dst), dst, nil
	case dst.IsUnspecified():
		return src, unspecifiedLike(src), nil
	}
	return netip.Addr{}, netip.Addr{}, fmt.Errorf("pcap: address families differ or invalid: %v -> %v", src, dst)
}

func unspecifiedLike(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}
