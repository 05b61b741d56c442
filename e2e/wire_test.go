// SPDX-License-Identifier: MIT

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/mpdccp/wire"
)

// luaDissector is contrib/wireshark/mpdccp.lua, relative to this package.
var luaDissector = filepath.Join("..", "contrib", "wireshark", "mpdccp.lua")

// wireReport is what checkWireCapture found in a capture.
type wireReport struct {
	packets int
	decoded map[int]bool // Multipath sub-option types the Lua dissector decoded
	sent    map[int]bool // the same, as mptun's own codec reads the capture
}

// checkWireCapture runs tshark with the Lua dissector over a capture of
// DCCP-UDP datagrams (any link type) and checks every packet: decoded as
// DCCP by Wireshark's dissector, no malformed packet and no error expert
// info, the UDP checksum good by Wireshark's own verification and by RFC
// 6773's rule (mpdccp.csum_ok), and the DCCP checksum good by Wireshark's
// verification for packets whose source dccpFrom accepts (all if nil).
// It also lists the Multipath sub-option types decoded, and those mptun's
// codec finds in the same datagrams.
func checkWireCapture(file string, dccpFrom func(netip.Addr) bool) (wireReport, error) {
	rep := wireReport{decoded: map[int]bool{}, sent: map[int]bool{}}
	fields := []string{"frame.number", "frame.protocols", "ip.src", "ipv6.src", "dccp.checksum.status",
		"udp.checksum.status", "mpdccp.csum_ok", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message", "mpdccp.type",
		"_ws.expert.group"}
	args := []string{"-r", file, "-n", "-X", "lua_script:" + luaDissector, "-o", "udp.check_checksum:TRUE",
		"-o", "dccp.check_checksum:TRUE", "-o", "mpdccp.inner:FALSE", "-T", "fields", "-E", "separator=/t",
		"-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).CombinedOutput()
	if err != nil {
		return rep, fmt.Errorf("tshark: %v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" || strings.HasPrefix(line, "Running as user") {
			continue
		}
		c := strings.Split(line, "\t")
		if len(c) != len(fields) {
			return rep, fmt.Errorf("tshark line %q: %d fields", line, len(c))
		}
		rep.packets++
		frame := "frame " + c[0]
		src := c[2]
		if src == "" {
			src = c[3]
		}
		if i := strings.IndexByte(src, ','); i >= 0 {
			src = src[:i] // the outer header's
		}
		switch {
		case !strings.Contains(c[1], "udp:mpdccp:dccp"):
			return rep, fmt.Errorf("%s not decoded as DCCP: %s", frame, c[1])
		case c[7] != "" || expertError(c[8], c[11]):
			return rep, fmt.Errorf("%s malformed or in error: %q", frame, c[9])
		case c[5] != "1":
			return rep, fmt.Errorf("%s: Wireshark's UDP checksum status %q, want 1 (good)", frame, c[5])
		case c[6] != "1":
			return rep, fmt.Errorf("%s: mpdccp.csum_ok %q, want 1 (RFC 6773 checksum good)", frame, c[6])
		case c[4] != "1" && (dccpFrom == nil || dccpFrom(netip.MustParseAddr(src))):
			return rep, fmt.Errorf("%s from %s: Wireshark's DCCP checksum status %q, want 1 (good)", frame, src, c[4])
		}
		for _, v := range strings.Split(c[10], ",") {
			if n, err := strconv.Atoi(v); err == nil {
				rep.decoded[n] = true
			}
		}
	}
	if rep.packets == 0 {
		return rep, errors.New("no packets in the capture")
	}
	return rep, mpTypesSent(file, rep.sent)
}

// expertError reports an error-severity expert item other than a checksum
// verdict (those are judged by the status fields).
func expertError(severities, groups string) bool {
	const piError, piChecksum = "8388608", "16777216"
	sv, gr := strings.Split(severities, ","), strings.Split(groups, ",")
	for i, s := range sv {
		if s == piError && (i >= len(gr) || gr[i] != piChecksum) {
			return true
		}
	}
	return false
}

// mpTypesSent adds the Multipath sub-option types in the capture's
// datagrams, as mptun's codec parses them, to types.
func mpTypesSent(file string, types map[int]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	src := gopacket.NewPacketSource(r, r.LinkType())
	var p wire.Packet
	var mo wire.MPOption
	for pkt := range src.Packets() {
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || wire.Parse(udp.Payload, &p) != nil {
			continue
		}
		it := wire.NewOptionIter(p.Options)
		for {
			o, ok := it.Next()
			if !ok {
				break
			}
			if o.Type == wire.OptMultipath && wire.ParseMP(o.Data, &mo) == nil {
				types[int(mo.Type)] = true
			}
		}
	}
	return nil
}

// corruptCopy writes a copy of a capture with one bit flipped in the DCCP
// part of a datagram in the middle of it.
func corruptCopy(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Classic pcap: a 24-byte file header, then 16-byte record headers.
	var offs []int
	for off := 24; off+16 <= len(raw); {
		n := int(uint32(raw[off+8]) | uint32(raw[off+9])<<8 | uint32(raw[off+10])<<16 | uint32(raw[off+11])<<24)
		offs = append(offs, off+16)
		off += 16 + n
	}
	rec := offs[len(offs)/2]
	// Ethernet 14 + IPv4 20 + UDP 8 + 12: the low byte of the DCCP sequence number.
	raw[rec+14+20+8+15] ^= 0x01
	out := filepath.Join(t.TempDir(), "corrupt.pcap")
	if err := os.WriteFile(out, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// startCapture runs tcpdump on dev in ns for DCCP-UDP until stop.
func startCapture(t *testing.T, ctx context.Context, ns *netns.NS, dev, file string) (stop func()) {
	t.Helper()
	// Immediate mode: without it the kernel hands packets over in blocks
	// (up to a second late), and the last ones, the close handshake, are
	// lost when tcpdump is stopped.
	cmd := ns.Command(ctx, "tcpdump", "--immediate-mode", "-i", dev, "-n", "-U", "-s", "0", "-Z", "root", "-w", file, "udp", "port", "6511")
	stderr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen strings.Builder
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "listening on") {
				ready <- ""
				io.Copy(io.Discard, stderr)
				return
			}
		}
		ready <- seen.String()
	}()
	select {
	case msg := <-ready:
		if msg != "" {
			t.Fatalf("tcpdump on %s: %s", dev, msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("tcpdump on %s did not start", dev)
	}
	done := false
	stop = func() {
		if done {
			return
		}
		done = true
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // flushes the file
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			cmd.Cancel()
			<-waited
		}
	}
	t.Cleanup(stop)
	return stop
}

// startBoundTunnel is startTunnel with the concentrator listening on the
// paths' own addresses instead of the wildcard: a wildcard-bound socket
// learns the address a datagram came to only where the data path passes
// it on (IP_PKTINFO), and until then it would fill the DCCP checksum of
// its replies for an unknown source address.
func startBoundTunnel(t *testing.T, ctx context.Context, tp *topology, paths [][2]string) (cpe, srv *daemonProc) {
	t.Helper()
	return startShippedTunnel(t, ctx, tp, paths, [2]string{"mptw", "mptv"}, map[string]string{
		`address = "0.0.0.0:6511"`: fmt.Sprintf("address = %q", paths[0][1]+":6511"),
		`address = "[::]:6511"`:    fmt.Sprintf("address = %q", paths[1][1]+":6511"),
	})
}

// mptunCLI runs the mptun command against a daemon's control socket.
func mptunCLI(t *testing.T, ctx context.Context, socket string, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(binaries(t), "mptun"), append([]string{"-s", socket}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mptun %v: %v: %s", args, err, out)
	}
}

// TestWireCaptureDecodes captures the real UDP traffic on both paths'
// interfaces with tcpdump through a handshake, a join, bulk data, priority
// changes, a path failure and its recovery, and the close; tshark with the
// Lua dissector must decode every packet as DCCP, none malformed, every
// checksum good by Wireshark's verification and by RFC 6773's rule, and
// every Multipath sub-option type mptun sent. A copy of the capture with
// one bit flipped must fail the same check.
func TestWireCaptureDecodes(t *testing.T) {
	requireRoot(t)
	requireTools(t, "tcpdump", "tshark", "iperf3", "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	// Slow paths keep the capture (and tshark's work) small.
	a0, b0 := tp.addPath(t, ctx, 0, 20)
	a1, b1 := tp.addPath(t, ctx, 1, 10)
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "p0.pcap"), filepath.Join(dir, "p1.pcap")}
	stop0 := startCapture(t, ctx, tp.srv, "p0", files[0])
	stop1 := startCapture(t, ctx, tp.srv, "p1", files[1])

	cpe, srv := startBoundTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})
	if mbps, _ := iperf(t, ctx, tp.srv, tp.cpe, "10.99.0.1", 2, nil); mbps < 5 {
		t.Errorf("bulk TCP through the tunnel: %.1f Mbit/s", mbps)
	}
	// MP_PRIO, answered by MP_CONFIRM.
	mptunCLI(t, ctx, cpe.socket, "set", "prio", "1", "2")
	time.Sleep(500 * time.Millisecond)
	mptunCLI(t, ctx, cpe.socket, "set", "prio", "1", "3")
	// Path 1 fails silently for longer than the path timeout, then returns.
	must(t, tp.cpe.IP(ctx, "link", "set", "p1", "down"))
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "20", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Errorf("ping with path 1 down: %v\n%s", err, out)
	}
	must(t, tp.cpe.IP(ctx, "link", "set", "p1", "up"))
	waitOpen(t, cpe.socket, 2, 15*time.Second)
	if out, err := tp.cpe.Output(ctx, "ping", "-c", "5", "-i", "0.2", "-W", "2", "10.99.0.1"); err != nil {
		t.Errorf("ping after path 1 came back: %v\n%s", err, out)
	}
	if err := cpe.stop(); err != nil { // SIGTERM: MP_CLOSE on every subflow
		t.Errorf("cpe did not exit cleanly: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	stop0()
	stop1()
	_ = srv

	checkStart := time.Now()
	decoded, sent := map[int]bool{}, map[int]bool{}
	total := 0
	for _, f := range files {
		rep, err := checkWireCapture(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		total += rep.packets
		for k := range rep.decoded {
			decoded[k] = true
		}
		for k := range rep.sent {
			sent[k] = true
		}
	}
	var missing []string
	for typ := range sent {
		if !decoded[typ] {
			missing = append(missing, wire.MPType(typ).String())
		}
	}
	if len(missing) > 0 {
		t.Errorf("sub-options mptun sent that the dissector never decoded: %v", missing)
	}
	// What this session must have sent, read by mptun's own codec.
	for _, typ := range []wire.MPType{wire.MPConfirm, wire.MPJoin, wire.MPKey, wire.MPSeq, wire.MPHMAC,
		wire.MPRTT, wire.MPPrio, wire.MPClose} {
		if !sent[int(typ)] {
			t.Errorf("capture has no %s", typ)
		}
	}
	var names []string
	for typ := range decoded {
		names = append(names, wire.MPType(typ).String())
	}
	slices.Sort(names)
	t.Logf("%d datagrams on both paths, all DCCP with good checksums (checked in %v); sub-options decoded: %v",
		total, time.Since(checkStart).Round(time.Millisecond), names)

	// The same check must catch a damaged datagram.
	if _, err := checkWireCapture(corruptCopy(t, files[0]), nil); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a capture with a flipped bit passed the check (%v)", err)
	} else {
		t.Logf("corrupted copy rejected: %v", err)
	}
}

// TestCaptureShowsDamagedDatagram: `mptun capture` on the concentrator
// records a datagram whose DCCP checksum is wrong (its UDP checksum right,
// as the kernel demands) exactly as it arrived: Wireshark calls its DCCP
// checksum bad in the on-the-wire form and in the protocol-33 form, and
// the concentrator drops it.
func TestCaptureShowsDamagedDatagram(t *testing.T) {
	requireRoot(t)
	requireTools(t, "tshark", "ethtool", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 0)
	a1, b1 := tp.addPath(t, ctx, 1, 0)
	_, srv := startBoundTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})
	dir := t.TempDir()
	udpFile, dccpFile := filepath.Join(dir, "wire.pcap"), filepath.Join(dir, "dccp.pcap")
	captured := make(chan error, 1)
	go func() { // the CLI returns when the capture has ended
		out, err := exec.CommandContext(ctx, filepath.Join(binaries(t), "mptun"), "-s", srv.socket, "capture",
			"-w", udpFile, "-dccp", dccpFile, "-d", "2s").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		captured <- err
	}()
	time.Sleep(500 * time.Millisecond)

	// A Request from a port no subflow uses, its checksum damaged after it
	// was made for the real addresses.
	const srcPort = 40123
	buf := make([]byte, 64)
	var b wire.Builder
	h := wire.Header{SrcPort: srcPort, DstPort: 6511, Type: wire.TypeRequest, Seq: 77, ServiceCode: 0x6D707475}
	must(t, b.Begin(buf, &h))
	n, err := b.Finish(nil)
	must(t, err)
	wire.SetChecksum(buf[:n], netip.MustParseAddr(a0), netip.MustParseAddr(b0))
	buf[6] ^= 0x5a
	must(t, tp.cpe.Do(func() error {
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a0+":"+strconv.Itoa(srcPort))),
			net.UDPAddrFromAddrPort(netip.MustParseAddrPort(b0+":6511")))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(buf[:n])
		return err
	}))
	if err := <-captured; err != nil {
		t.Fatalf("mptun capture: %v", err)
	}

	for _, c := range []struct{ file, lua string }{{udpFile, "lua_script:" + luaDissector}, {dccpFile, ""}} {
		args := []string{"-r", c.file, "-n", "-o", "dccp.check_checksum:TRUE", "-Y", "dccp.srcport == " + strconv.Itoa(srcPort),
			"-T", "fields", "-e", "dccp.checksum.status", "-e", "mpdccp.csum_ok"}
		if c.lua != "" {
			args = append(args, "-X", c.lua)
		} else {
			args = args[:len(args)-2] // no mpdccp fields without the script
		}
		out, err := exec.Command("tshark", args...).Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", filepath.Base(c.file), err)
		}
		got := strings.Fields(string(out))
		want := []string{"0", "1"} // DCCP checksum bad; the UDP checksum was fine
		if c.lua == "" {
			want = want[:1]
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: damaged datagram shows %q, want %q (DCCP bad, RFC 6773 good)", filepath.Base(c.file), got, want)
		}
	}
	dropped := uint64(0)
	for _, n := range status(t, srv.socket).Dropped {
		dropped += n
	}
	if dropped == 0 {
		t.Error("the concentrator did not count the datagram as dropped")
	}
}
