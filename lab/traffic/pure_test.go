// SPDX-License-Identifier: MIT

package traffic

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mptun/mptun/internal/inetsum"
	"github.com/mptun/mptun/internal/mono"
)

func TestEchoRequestRoundTrip(t *testing.T) {
	b := make([]byte, 64)
	echoRequest(b, 0x1234, 7, mono.Time(123456789))
	if inetsum.Checksum(b) != 0 {
		t.Fatal("request checksum does not verify")
	}
	// A reply is the request with type 0 and the checksum adjusted.
	b[0] = 0
	binary.BigEndian.PutUint16(b[2:], 0)
	binary.BigEndian.PutUint16(b[2:], inetsum.Checksum(b))
	seq, sent, ok := parseEchoReply(b, 0x1234)
	if !ok || seq != 7 || sent != 123456789 {
		t.Fatalf("parse: %v %v %v", seq, sent, ok)
	}
	if _, _, ok := parseEchoReply(b, 0x1235); ok {
		t.Error("reply with another identifier accepted")
	}
	b[20] ^= 1
	if _, _, ok := parseEchoReply(b, 0x1234); ok {
		t.Error("corrupted reply accepted")
	}
}

func TestRTTStats(t *testing.T) {
	s := NewRTTStats(5, []float64{30, 10, 20, 40})
	if s.Sent != 5 || s.Received != 4 || s.Min != 10 || s.P50 != 20 || s.Max != 40 {
		t.Fatalf("%+v", s)
	}
	if s.Samples[0] != 30 {
		t.Error("samples reordered: they must stay in send order")
	}
}

func TestBoundedParetoMeanMatchesSampling(t *testing.T) {
	m := BoundedParetoMean(0.9, 1000, 1e6)
	if math.Abs(m-8980) > 50 {
		t.Fatalf("analytic mean %v, want ≈ 8980", m)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var sum float64
	const n = 400000
	for range n {
		sum += BoundedPareto(r, 0.9, 1000, 1e6)
	}
	if got := sum / n; math.Abs(got-m)/m > 0.05 {
		t.Fatalf("sampled mean %v vs analytic %v", got, m)
	}
	if m1 := BoundedParetoMean(1, 1000, 1e6); m1 < 6000 || m1 > 8000 {
		t.Errorf("alpha 1: %v", m1)
	}
}

func TestCBRPPS(t *testing.T) {
	// 24 Mbit/s of 1228-byte IP packets.
	if p := (CBRConfig{RateBps: 24e6, Size: 1200}).PPS(); p != 2443 {
		t.Fatalf("pps %d", p)
	}
	if p := (CBRConfig{RateBps: 1}).PPS(); p != 1 {
		t.Fatalf("pps %d for a tiny rate", p)
	}
}

func TestParseNetstat(t *testing.T) {
	text := "TcpExt: A B\nTcpExt: 1 2\nMPTcpExt: MPCapableSYNRX MPJoinSynAckRx Zero\nMPTcpExt: 3 1 0\n"
	m := parseNetstat(text, "MPTcpExt:")
	if len(m) != 2 || m["MPCapableSYNRX"] != 3 || m["MPJoinSynAckRx"] != 1 {
		t.Fatalf("%v", m)
	}
	if m := parseNetstat("", "MPTcpExt:"); len(m) != 0 {
		t.Fatalf("%v", m)
	}
}

// segment builds an IPv4/TCP header with the given fields.
func segment(sport uint16, seq uint32, flags byte, payload int, opts []byte) []byte {
	doff := 20 + len(opts)
	b := make([]byte, 20+doff)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(20+doff+payload))
	b[9] = 6
	copy(b[12:], []byte{10, 99, 0, 1})
	copy(b[16:], []byte{10, 99, 0, 2})
	tcp := b[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 40000)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = byte(doff/4) << 4
	tcp[13] = flags
	copy(tcp[20:], opts)
	return b
}

func TestParseTCPSegmentAndMSS(t *testing.T) {
	// MSS 1460, SACK permitted, timestamps, NOP, window scale.
	opts := []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7}
	b := segment(5400, 1000, 0x12, 0, opts)
	ev, ok := parseTCPSegment(b, len(b))
	if !ok || !ev.synAck || ev.mss != 1448 || ev.seq != 1000 || ev.key.sport != 5400 {
		t.Fatalf("syn-ack %+v %v", ev, ok)
	}
	d := segment(5400, 1001, 0x10, 1448, nil)
	ev, ok = parseTCPSegment(d[:40], 40+1448)
	if !ok || ev.synAck || ev.len != 1448 {
		t.Fatalf("data %+v %v", ev, ok)
	}
	// The tap filter trims packets to 128 bytes, and that is the length the
	// socket reports: the IP header's length counts, also for a GSO packet
	// of two segments.
	g := segment(5400, 1001, 0x10, 2*1448, nil)
	if ev, _ = parseTCPSegment(g[:40], 128); ev.len != 2*1448 {
		t.Fatalf("trimmed capture: len %d, want %d", ev.len, 2*1448)
	}
	// A GSO packet whose IP length field is 0 takes the wire length.
	binary.BigEndian.PutUint16(d[2:], 0)
	if ev, _ = parseTCPSegment(d[:40], 40+20000); ev.len != 20000 {
		t.Fatalf("gso len %d", ev.len)
	}
	// A bare ACK carries nothing to time.
	a := segment(5400, 1001, 0x10, 0, nil)
	if _, ok := parseTCPSegment(a, len(a)); ok {
		t.Error("pure ACK accepted")
	}
	// Malformed options end the scan instead of looping.
	if m := synMSS(segment(5400, 0, 0x12, 0, []byte{2, 0, 0, 0})[20:]); m != 0 {
		t.Errorf("malformed mss %d", m)
	}
	for _, bad := range [][]byte{nil, make([]byte, 19), append([]byte{0x46}, make([]byte, 30)...)} {
		if _, ok := parseTCPSegment(bad, len(bad)); ok {
			t.Errorf("accepted %x", bad)
		}
	}
}

func TestMatchOWD(t *testing.T) {
	k := flowKey{src: [4]byte{10, 99, 0, 1}, dst: [4]byte{10, 99, 0, 2}, sport: 5400, dport: 40000}
	var isn uint32 = 0xffffff00 // relative sequence numbers wrap
	ms := int64(1e6)
	sent := []capEvent{
		{t: 0, key: k, seq: isn, synAck: true, mss: 1000},
		// One 3000-byte super-packet, then bytes 3000-3999, then a
		// retransmission of 3000-3999.
		{t: 10 * ms, key: k, seq: isn + 1, len: 3000},
		{t: 11 * ms, key: k, seq: isn + 3001, len: 1000},
		{t: 50 * ms, key: k, seq: isn + 3001, len: 1000},
	}
	recv := []capEvent{
		{t: 5 * ms, key: k, seq: isn, synAck: true},
		{t: 30 * ms, key: k, seq: isn + 1, len: 1000},
		{t: 31 * ms, key: k, seq: isn + 1001, len: 2000}, // coalesced: two segments
		{t: 70 * ms, key: k, seq: isn + 3001, len: 1000}, // only the retransmission arrived
		{t: 71 * ms, key: k, seq: isn + 3001, len: 1000}, // duplicate
		{t: 72 * ms, key: k, seq: isn + 9001, len: 1000}, // never sent: unmatched
		// A flow whose SYN-ACK was not seen is ignored.
		{t: 73 * ms, key: flowKey{sport: 5400}, seq: 5, len: 100},
	}
	r := MatchOWD(sent, recv)
	want := []float64{20, 21, 21, 59}
	if len(r.OWD) != len(want) {
		t.Fatalf("owd %v, want %v", r.OWD, want)
	}
	for i := range want {
		if math.Abs(r.OWD[i]-want[i]) > 1e-9 {
			t.Fatalf("owd %v, want %v", r.OWD, want)
		}
	}
	if r.Unmatched != 1 || r.Flows != 1 || r.SentPackets != 3 || r.RecvPackets != 5 {
		t.Fatalf("%+v", r)
	}
	if r.OWDms.P50 != 21 || r.OWDms.Max != 59 {
		t.Fatalf("quantiles %+v", r.OWDms)
	}
}

func TestTapFilterJumpsStayInProgram(t *testing.T) {
	f := tapFilter(5400)
	for i, ins := range f {
		if ins.Code&0x07 == 0x05 { // BPF_JMP
			for _, off := range []uint8{ins.Jt, ins.Jf} {
				if i+1+int(off) >= len(f) {
					t.Fatalf("instruction %d jumps out of the program", i)
				}
			}
		}
	}
	if last := f[len(f)-1]; last.Code != 0x06 || last.K != 0 {
		t.Fatal("the program does not end with a drop")
	}
}
