// SPDX-License-Identifier: MIT

package pcapdccp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// The Wireshark Lua dissector (contrib/wireshark/mpdccp.lua), run by the
// tshark the machine has, on captures in the on-the-wire (UDP) form.

var luaScript = filepath.Join("..", "..", "..", "contrib", "wireshark", "mpdccp.lua")

func tsharkLua(t *testing.T) string {
	t.Helper()
	ts, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark); skipping the Lua dissector check")
	}
	return ts
}

// luaFields runs tshark with the dissector and returns, per frame, the
// values of fields (all occurrences, comma-separated).
func luaFields(t *testing.T, ts, path string, fields ...string) [][]string {
	t.Helper()
	args := []string{"-r", path, "-n", "-X", "lua_script:" + luaScript, "-o", "udp.check_checksum:TRUE",
		"-o", "dccp.check_checksum:TRUE", "-o", "dccp.relative_sequence_numbers:FALSE",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(ts, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if strings.HasPrefix(l, "Running as user") || l == "" {
			continue
		}
		if strings.Contains(l, "Lua") && strings.Contains(l, "rror") {
			t.Fatalf("Lua error: %s", l)
		}
		c := strings.Split(l, "\t")
		if len(c) != len(fields) {
			t.Fatalf("%d fields in %q", len(c), l)
		}
		rows = append(rows, c)
	}
	return rows
}

// mpTypes lists the Multipath sub-option types of a DCCP packet in order,
// the options an MP_CONFIRM lists right after it, as mptun's codec reads
// them.
func mpTypes(t *testing.T, pkt []byte) []string {
	var p wire.Packet
	if err := wire.Parse(pkt, &p); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(opts []byte)
	walk = func(opts []byte) {
		it := wire.NewOptionIter(opts)
		for {
			o, ok := it.Next()
			if !ok {
				return
			}
			if o.Type != wire.OptMultipath {
				continue
			}
			out = append(out, strconv.Itoa(int(o.Data[0])))
			if wire.MPType(o.Data[0]) == wire.MPConfirm {
				walk(o.Data[1:])
			}
		}
	}
	walk(p.Options)
	return out
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// TestLuaDissector: every datagram of a session with every packet type and
// every RFC 9897 sub-option is DCCP to Wireshark, with its checksum good,
// RFC 6773's checksum good (mpdccp.csum_ok), no malformed or error expert
// info, each Multipath sub-option decoded in order, and the decoded values
// those sent.
func TestLuaDissector(t *testing.T) {
	ts := tsharkLua(t)
	path := filepath.Join(t.TempDir(), "udp.pcap")
	pkts := writeSession(t, path, FormUDP)
	fields := []string{"frame.protocols", "dccp.checksum.status", "udp.checksum.status", "mpdccp.csum_ok",
		"_ws.malformed", "_ws.expert.severity", "mpdccp.type", "mpdccp.seq", "mpdccp.key.ci", "mpdccp.key.type",
		"mpdccp.join.nonce", "mpdccp.addaddr.ipv6", "mpdccp.addaddr.port", "mpdccp.prio", "mpdccp.rtt.value",
		"mpdccp.exp.data", "mpdccp.capable.version", "mpdccp.removeaddr.addrid", "mpdccp.fastclose.key"}
	rows := luaFields(t, ts, path, fields...)
	if len(rows) != len(pkts) {
		t.Fatalf("%d frames, wrote %d", len(rows), len(pkts))
	}
	seen := map[string]bool{}
	for i, r := range rows {
		ctx := fmt.Sprintf("frame %d (%s)", i+1, pkts[i].hdr.Type)
		if !strings.Contains(r[0], "udp:mpdccp:dccp") {
			t.Errorf("%s: protocols %q", ctx, r[0])
		}
		if r[1] != "1" || r[2] != "1" || r[3] != "1" {
			t.Errorf("%s: checksum status DCCP %q UDP %q, csum_ok %q", ctx, r[1], r[2], r[3])
		}
		if r[4] != "" || strings.Contains(r[5], "8388608") {
			t.Errorf("%s: malformed %q, expert severities %q", ctx, r[4], r[5])
		}
		if got, want := split(r[6]), mpTypes(t, pkts[i].pkt); !slices.Equal(got, want) {
			t.Errorf("%s: sub-options decoded %v, sent %v", ctx, got, want)
		}
		for _, typ := range split(r[6]) {
			seen[typ] = true
		}
	}
	for typ := 0; typ <= 11; typ++ {
		if !seen[strconv.Itoa(typ)] {
			t.Errorf("sub-option type %d never decoded", typ)
		}
	}
	// Values, against what the session sent.
	want := map[int]map[int]string{
		0:  {8: "0x11111111", 9: "0", 16: "0"},       // Request: MP_KEY CI, plain key, MP_CAPABLE 0
		4:  {7: strconv.FormatUint(wire.MaxSeq, 10)}, // MP_SEQ before the wrap
		10: {10: "0x05060708"},                       // MP_JOIN nonce in the Response
		7:  {14: "40"},                               // MP_RTT 40 ms
		12: {11: "2001:db8:1::20", 12: "6511", 13: "2", 15: hex.EncodeToString([]byte("mptun")), 17: "3"},
		18: {18: hex.EncodeToString(keyB)},
	}
	for frame, cols := range want {
		for col, v := range cols {
			if got := rows[frame][col]; !strings.Contains(strings.ReplaceAll(got, ":", ""), strings.ReplaceAll(v, ":", "")) &&
				got != v {
				t.Errorf("frame %d %s = %q, want %q", frame+1, fields[col], got, v)
			}
		}
	}
	if t.Failed() {
		for i, r := range rows {
			t.Logf("%d: %q", i+1, r)
		}
	}
}

// TestLuaDissectorFlagsBadInput: a damaged datagram fails RFC 6773's check
// and Wireshark's; malformed Multipath options get expert info; unknown
// sub-options and key types are shown raw; random option bytes never make
// the script fail.
func TestLuaDissectorFlagsBadInput(t *testing.T) {
	ts := tsharkLua(t)
	src, dst := netip.MustParseAddrPort("192.0.2.1:40000"), netip.MustParseAddrPort("198.51.100.7:6511")
	mk := func(opts []byte) []byte {
		pkt := make([]byte, 16+(len(opts)+3)/4*4) // padded to whole words
		pkt[0], pkt[1], pkt[2], pkt[3] = 0x9c, 0x40, 0x19, 0x6f
		pkt[4] = byte(len(pkt) / 4)
		pkt[8] = byte(wire.TypeData<<1) | 1
		pkt[15] = 1
		copy(pkt[16:], opts)
		wire.SetChecksum(pkt, src.Addr(), dst.Addr())
		return pkt
	}
	good := mk([]byte{46, 9, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	cases := [][]byte{
		good,
		good,                                // damaged in the file below, as on the wire
		mk([]byte{46, 8, 4, 0, 0, 0, 0, 0}), // MP_SEQ one byte short
		mk([]byte{46, 5, 12, 0xaa, 0xbb, 0, 0, 0}), // unknown sub-option 12
		mk(append([]byte{46, 17 + 65, 3, 0, 0, 0, 0, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 255}, bytes.Repeat([]byte{0x5a}, 64)...)), // plain + experimental key
		mk([]byte{46, 10, 0, 46, 9, 4, 0, 0, 0, 0, 0}), // MP_CONFIRM with a truncated entry
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for range 300 {
		opts := make([]byte, 4*(1+rng.IntN(20)))
		for j := range opts {
			opts[j] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 {
			opts[0] = 46
			opts[1] = byte(3 + rng.IntN(len(opts)-2))
			opts[2] = byte(rng.IntN(13))
		}
		cases = append(cases, mk(opts))
	}
	path := filepath.Join(t.TempDir(), "bad.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := NewWriter(f, FormUDP)
	for i, c := range cases {
		if err := w.WritePacket(time.Unix(int64(i), 0), src, dst, c); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	raw, _ := os.ReadFile(path)
	// The second record: file header 24, first record 16+len, its header 16,
	// IPv4 20 and UDP 8; flip a bit of the DCCP sequence number.
	raw[24+16+20+8+len(good)+16+20+8+12] ^= 0x10
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	rows := luaFields(t, ts, path, "mpdccp.csum_ok", "dccp.checksum.status", "_ws.expert.message", "mpdccp.type",
		"mpdccp.unknown", "mpdccp.key.type", "mpdccp.key.data")
	if len(rows) != len(cases) {
		t.Fatalf("%d frames of %d", len(rows), len(cases))
	}
	if rows[0][0] != "1" || rows[0][1] != "1" {
		t.Errorf("good datagram: csum_ok %q, DCCP %q", rows[0][0], rows[0][1])
	}
	if rows[1][0] != "0" || rows[1][1] != "0" || !strings.Contains(rows[1][2], "RFC 6773") {
		t.Errorf("damaged datagram: csum_ok %q, DCCP %q, expert %q", rows[1][0], rows[1][1], rows[1][2])
	}
	if !strings.Contains(rows[2][2], "Malformed") && !strings.Contains(rows[2][2], "MP_SEQ with a value of 5 bytes") {
		t.Errorf("short MP_SEQ: expert %q", rows[2][2])
	}
	if rows[3][3] != "12" || strings.ReplaceAll(rows[3][4], ":", "") != "aabb" || !strings.Contains(rows[3][2], "Unknown") {
		t.Errorf("unknown sub-option: type %q data %q expert %q", rows[3][3], rows[3][4], rows[3][2])
	}
	if rows[4][5] != "0,255" || !strings.Contains(strings.ReplaceAll(rows[4][6], ":", ""), strings.Repeat("5a", 64)) {
		t.Errorf("experimental key: types %q data %q", rows[4][5], rows[4][6])
	}
	if !strings.Contains(rows[5][2], "MP_CONFIRM entry") {
		t.Errorf("truncated MP_CONFIRM entry: expert %q", rows[5][2])
	}
}
