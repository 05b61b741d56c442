// SPDX-License-Identifier: MIT

package flow

import (
	"encoding/binary"
	"testing"
)

// tcpPacket builds an IPv4 (v6 false) or IPv6 TCP packet from port
// sport to 5201 with the given flags, sequence and ACK numbers, TCP
// options and payload length.
func tcpPacket(v6 bool, sport uint16, flags byte, seq, ack uint32, opts []byte, payload int) []byte {
	ip := 20
	if v6 {
		ip = 40
	}
	thl := 20 + len(opts)
	b := make([]byte, ip+thl+payload)
	if v6 {
		b[0] = 0x60
		binary.BigEndian.PutUint16(b[4:], uint16(thl+payload))
		b[6], b[7] = 6, 64
		b[23], b[39] = 1, 2 // ::1 to ::2
	} else {
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		b[6] = 0x40 // DF
		b[8], b[9] = 64, 6
		copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	}
	t := b[ip:]
	binary.BigEndian.PutUint16(t[0:], sport)
	binary.BigEndian.PutUint16(t[2:], 5201)
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], ack)
	t[12] = byte(thl/4) << 4
	t[13] = flags
	binary.BigEndian.PutUint16(t[14:], 500)
	copy(t[20:], opts)
	return b
}

// ce marks an IP packet Congestion Experienced.
func ce(v6 bool, b []byte) []byte {
	if v6 {
		b[1] |= 0x30
	} else {
		b[1] |= 3
	}
	return b
}

// tsOpt is Linux's option block on an established connection's ACK.
func tsOpt(val uint32) []byte {
	o := []byte{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(o[4:], val)
	return o
}

func TestACKSupersedes(t *testing.T) {
	sack := []byte{1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, v6 := range []bool{false, true} {
		older := tcpPacket(v6, 40000, tcpACK, 7, 1000, tsOpt(1), 0)
		for _, tc := range []struct {
			name  string
			newer []byte
			want  bool
		}{
			{"a later ACK", tcpPacket(v6, 40000, tcpACK, 7, 2448, tsOpt(2), 0), true},
			{"the same ACK (a window update)", tcpPacket(v6, 40000, tcpACK|tcpPSH, 7, 1000, tsOpt(2), 0), true},
			{"an ACK 2^31-1 ahead (serial arithmetic)", tcpPacket(v6, 40000, tcpACK, 7, 1000+1<<31-1, tsOpt(2), 0), true},
			{"an older ACK (reordered)", tcpPacket(v6, 40000, tcpACK, 7, 999, tsOpt(2), 0), false},
			{"another connection", tcpPacket(v6, 40001, tcpACK, 7, 2448, tsOpt(2), 0), false},
			{"data", tcpPacket(v6, 40000, tcpACK, 7, 2448, tsOpt(2), 100), false},
			{"SACK blocks", tcpPacket(v6, 40000, tcpACK, 7, 2448, sack, 0), false},
			{"a FIN", tcpPacket(v6, 40000, tcpACK|0x01, 7, 2448, tsOpt(2), 0), false},
			{"ECN echo", tcpPacket(v6, 40000, tcpACK|0x40, 7, 2448, tsOpt(2), 0), false},
			{"another sequence number", tcpPacket(v6, 40000, tcpACK, 8, 2448, tsOpt(2), 0), false},
			{"marked CE", ce(v6, tcpPacket(v6, 40000, tcpACK, 7, 2448, tsOpt(2), 0)), false},
			{"the other IP version", tcpPacket(!v6, 40000, tcpACK, 7, 2448, tsOpt(2), 0), false},
		} {
			if got := ACKSupersedes(tc.newer, older); got != tc.want {
				t.Errorf("v6 %v, %s: ACKSupersedes = %v, want %v", v6, tc.name, got, tc.want)
			}
		}
		// An older packet that is not a pure ACK is never replaced.
		if ACKSupersedes(tcpPacket(v6, 40000, tcpACK, 7, 2448, tsOpt(2), 0), tcpPacket(v6, 40000, tcpACK, 7, 1000, sack, 0)) {
			t.Errorf("v6 %v: an ACK with SACK blocks was superseded", v6)
		}
	}
	// Per packet on the send path: no allocation.
	n, o := tcpPacket(true, 1, tcpACK, 7, 2, tsOpt(2), 0), tcpPacket(true, 1, tcpACK, 7, 1, tsOpt(1), 0)
	if allocs := testing.AllocsPerRun(100, func() { ACKSupersedes(n, o) }); allocs != 0 {
		t.Errorf("ACKSupersedes allocates %v times", allocs)
	}
	// Other addresses, and cut or odd packets.
	a := tcpPacket(false, 40000, tcpACK, 7, 1000, tsOpt(1), 0)
	b := tcpPacket(false, 40000, tcpACK, 7, 2000, tsOpt(2), 0)
	b[15] = 9 // source 10.0.0.9
	if ACKSupersedes(b, a) {
		t.Error("an ACK from another address superseded")
	}
	for _, bad := range [][]byte{nil, {0x45}, a[:30], append(a[:len(a):len(a)], 0)} {
		if ACKSupersedes(bad, a) || ACKSupersedes(a, bad) {
			t.Errorf("a malformed packet (%d bytes) took part", len(bad))
		}
	}
}

func FuzzACKSupersedes(f *testing.F) {
	f.Add(tcpPacket(false, 1, tcpACK, 7, 2, tsOpt(2), 0), tcpPacket(false, 1, tcpACK, 7, 1, tsOpt(1), 0))
	f.Add(tcpPacket(true, 1, tcpACK, 7, 2, nil, 0), tcpPacket(true, 1, tcpACK, 7, 1, nil, 0))
	f.Fuzz(func(t *testing.T, newer, older []byte) {
		n, o := string(newer), string(older)
		got := ACKSupersedes(newer, older)
		if string(newer) != n || string(older) != o {
			t.Fatal("ACKSupersedes changed its input")
		}
		if got && (len(newer) < 40 || len(older) < 40 || newer[0]>>4 != older[0]>>4) {
			t.Fatalf("superseded across versions or with short packets: %x %x", newer, older)
		}
	})
}
