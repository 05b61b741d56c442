// SPDX-License-Identifier: MIT

// Package pcapdccp writes DCCP packets as a pcap of raw IP packets with
// IP protocol 33, so that Wireshark's and tcpdump's DCCP dissectors read
// them. mptun carries DCCP inside UDP (RFC 6773); a capture rewritten this
// way shows the DCCP layer directly, which is what one wants to debug.
package pcapdccp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mptun/mptun/mpdccp/wire"
)

// SnapLen is the snapshot length written in the file header.
const SnapLen = 65535

// Writer writes DCCP packets wrapped in IPv4 or IPv6 headers. It is not
// safe for concurrent use.
type Writer struct {
	w   *pcapgo.Writer
	buf []byte
	id  uint16
}

// NewWriter writes a pcap file header (link type raw IP) to w.
func NewWriter(w io.Writer) (*Writer, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(SnapLen, layers.LinkTypeRaw); err != nil {
		return nil, fmt.Errorf("pcap: write file header: %w", err)
	}
	return &Writer{w: pw, buf: make([]byte, 0, 2048)}, nil
}

// WritePacket writes dccp (one DCCP packet) as sent from src to dst at t.
// Both addresses must be IPv4 or both IPv6. The DCCP checksum of the copy
// written is recomputed for the pseudo-header with protocol 33; dccp
// itself is not modified.
func (w *Writer) WritePacket(t time.Time, src, dst netip.Addr, dccp []byte) error {
	src, dst = src.Unmap(), dst.Unmap()
	var hl int
	switch {
	case src.Is4() && dst.Is4():
		hl = 20
	case src.Is6() && dst.Is6():
		hl = 40
	default:
		return fmt.Errorf("pcap: address families differ or invalid: %v -> %v", src, dst)
	}
	total := hl + len(dccp)
	if total > SnapLen {
		return fmt.Errorf("pcap: packet of %d bytes exceeds %d", total, SnapLen)
	}
	if cap(w.buf) < total {
		w.buf = make([]byte, 0, total)
	}
	b := w.buf[:total]
	ip := b[:hl]
	clear(ip)
	if hl == 20 {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(total))
		binary.BigEndian.PutUint16(ip[4:], w.id)
		w.id++
		ip[6] = 0x40 // Don't Fragment
		ip[8] = 64
		ip[9] = wire.ProtoDCCP
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], wire.InternetChecksum(ip))
	} else {
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(dccp)))
		ip[6] = wire.ProtoDCCP
		ip[7] = 64
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	pkt := b[hl:]
	copy(pkt, dccp)
	wire.SetChecksumProto(pkt, src, dst, wire.ProtoDCCP)
	ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: total, Length: total}
	if err := w.w.WritePacket(ci, b); err != nil {
		return fmt.Errorf("pcap: write packet: %w", err)
	}
	return nil
}
