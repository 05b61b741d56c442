// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netsim"
	"github.com/mptun/mptun/mpdccp/wire"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// TestSessionPcapTshark writes every datagram of a simulated session
// (handshake, joins, data, acks, MP_PRIO/CONFIRM, close) as a pcap of raw
// IPv4 packets with protocol 33, unchanged, and checks with tshark that each
// parses as DCCP with a good checksum (the engine's own, for the outer
// addresses: nothing is recomputed), the type and sequence numbers sent, and no
// malformed or error expert info.
func TestSessionPcapTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark); skipping the session dissector check")
	}
	links := []netsim.LinkConfig{link(10e6, 10*time.Millisecond, 0.05), link(10e6, 20*time.Millisecond, 0.05)}
	h := newHarness(t, harnessConfig{seed: 91, links: links})
	var buf bytes.Buffer
	w, err := pcapdccp.NewWriter(&buf, pcapdccp.FormDCCP)
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		typ      wire.Type
		seq, ack uint64 // 24-bit when short
		short    bool
	}
	var pkts []sent
	h.tap = func(side, path int, b []byte) bool {
		var p wire.Packet
		if err := wire.Parse(b, &p); err != nil {
			t.Fatalf("engine sent an unparsable packet: %v", err)
		}
		src, dst := h.paths[path].cli, srvAddr
		if side == sideServer {
			src, dst = dst, src
		}
		ts := time.Unix(1700000000, 0).Add(time.Duration(h.sim.Now()))
		if err := w.WritePacket(ts, src, dst, b); err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, sent{p.Type, p.Seq, p.Ack, p.Short})
		return true
	}
	c := h.dial(2)
	if !h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 }) {
		t.Fatalf("not open\n%s", h.dumpEvents())
	}
	src := &source{h: h, c: c, side: sideClient, total: 300, size: 200, period: time.Millisecond, perTick: 1}
	src.start()
	h.run(200 * time.Millisecond)
	if err := c.SetPrio(h.sim.Now(), 1, 2); err != nil {
		t.Fatal(err)
	}
	h.run(2 * time.Second)
	c.Close(h.sim.Now())
	h.service(sideClient)
	h.run(5 * time.Second)

	path := filepath.Join(t.TempDir(), "session.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Wireshark gives a short (X=0) packet's 24-bit sequence number in
	// dccp.seq (its seq_raw stays empty) and its 24-bit ack in ack_raw.
	fields := []string{"dccp.type", "dccp.seq_raw", "dccp.ack_raw", "dccp.checksum.status", "_ws.malformed", "_ws.expert.severity", "dccp.x", "dccp.seq"}
	args := []string{"-r", path, "-n", "-o", "dccp.check_checksum:TRUE", "-T", "fields", "-E", "separator=/t",
		"-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(pkts) || len(pkts) < 100 {
		t.Fatalf("tshark shows %d packets, wrote %d", len(lines), len(pkts))
	}
	types := map[wire.Type]int{}
	shorts := 0
	for i, line := range lines {
		f := strings.Split(line, "\t")
		p := pkts[i]
		types[p.typ]++
		if len(f) != len(fields) || f[0] != strconv.Itoa(int(p.typ)) {
			t.Fatalf("frame %d: %q, sent %v", i+1, line, p.typ)
		}
		seq, x := f[1], "1"
		if p.short {
			seq, x = strings.Split(f[7], ",")[0], "0"
			shorts++
		}
		if f[6] != x || seq != strconv.FormatUint(p.seq, 10) {
			t.Fatalf("frame %d: %q, sent %v seq %d short %v", i+1, line, p.typ, p.seq, p.short)
		}
		if p.typ.HasAck() && f[2] != strconv.FormatUint(p.ack, 10) {
			t.Fatalf("frame %d: ack %q, sent %d", i+1, f[2], p.ack)
		}
		if f[3] != "1" { // good
			t.Fatalf("frame %d (%v): checksum status %q", i+1, p.typ, f[3])
		}
		if f[4] != "" || strings.Contains(f[5], "8388608") { // PI_ERROR
			t.Fatalf("frame %d (%v): malformed %q expert %q", i+1, p.typ, f[4], f[5])
		}
	}
	for _, typ := range []wire.Type{wire.TypeRequest, wire.TypeResponse, wire.TypeAck, wire.TypeData,
		wire.TypeDataAck, wire.TypeClose, wire.TypeReset} {
		if types[typ] == 0 {
			t.Errorf("session has no %v packet: %v", typ, types)
		}
	}
	if shorts == 0 {
		t.Error("no packet with short sequence numbers (X=0): Allow Short Seqnos was not agreed")
	}
	t.Logf("%d packets checked, %d with short sequence numbers: %v", len(pkts), shorts, types)
	_ = netip.Addr{}
}
