// SPDX-License-Identifier: MIT

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/mpdccp/noise"
	"github.com/mptun/mptun/mpdccp/wire"
)

// concentratorPub is the public key of configs/concentrator.toml's
// (example) private key, as the CPE's [[peer]] names it.
const concentratorPub = "TyqZ+Tz6RpR1dYJ2S+eLgkIDBB5/RVXNuLgsgWJojE4="

// bogusHandshakes returns n first Requests as an attacker who knows the
// concentrator's public key makes them: valid mac1 (so they cost a
// Diffie-Hellman unless the server asks for cookies), unknown static keys.
func bogusHandshakes(t *testing.T, n int) [][]byte {
	t.Helper()
	srvPub, err := noise.ParseKey(concentratorPub)
	must(t, err)
	var out [][]byte
	buf := make([]byte, 1500)
	for i := 0; i < n; i++ {
		priv, _ := noise.GeneratePrivateKey(rand.Reader)
		id, err := noise.NewIdentity(priv)
		must(t, err)
		in, err := noise.Initiate(rand.Reader, id, srvPub, noise.Key{}, []byte("x"), make([]byte, noise.InitPayloadLen))
		must(t, err)
		var b wire.Builder
		h := wire.Header{SrcPort: uint16(20000 + i), DstPort: 6511, Type: wire.TypeRequest, Seq: uint64(i) << 8, ServiceCode: 0x6D707475}
		must(t, b.Begin(buf, &h))
		b.Feature(wire.OptChangeR, wire.FeatMultipath, 0)
		keys := append([]byte{wire.KeyTypeExperimental}, in.Message()[:32]...)
		keys = append(keys, make([]byte, 32)...)
		b.MP(&wire.MPOption{Type: wire.MPKey, Token: uint32(i), Keys: keys})
		b.MP(&wire.MPOption{Type: wire.MPExp, Raw: append([]byte{1}, in.Message()...)}) // 1: Noise first message
		m, err := b.Finish(nil)
		must(t, err)
		wire.SetChecksum(buf[:m], netip.Addr{}, netip.Addr{})
		out = append(out, append([]byte(nil), buf[:m]...))
	}
	return out
}

// spoofer sends UDP datagrams with forged IPv4 source addresses (raw socket).
type spoofer struct {
	fd  int
	dst [4]byte
	buf []byte
}

func newSpoofer(dst netip.Addr) (*spoofer, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return nil, err
	}
	return &spoofer{fd: fd, dst: dst.As4(), buf: make([]byte, 2048)}, nil
}

func (s *spoofer) send(src [4]byte, sport uint16, payload []byte) error {
	n := 28 + len(payload)
	b := s.buf[:n]
	clear(b[:28])
	b[0], b[8], b[9] = 0x45, 64, syscall.IPPROTO_UDP
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	copy(b[12:16], src[:])
	copy(b[16:20], s.dst[:])
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], 6511)
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload) // UDP checksum 0: none (IPv4)
	return syscall.Sendto(s.fd, b, 0, &syscall.SockaddrInet4{Addr: s.dst})
}

// flood sends garbage and bogus handshakes from random 10.200.0.0/16
// sources at the given rates until ctx ends; it returns what it sent.
func (s *spoofer) flood(ctx context.Context, garbagePPS, handshakePPS int, garbage, handshakes [][]byte) (int, int) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	start := time.Now()
	ng, nh := 0, 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ng, nh
		case <-tick.C:
		}
		el := time.Since(start).Seconds()
		src := func() [4]byte { return [4]byte{10, 200, byte(rng.IntN(256)), byte(1 + rng.IntN(254))} }
		for ; float64(ng) < el*float64(garbagePPS); ng++ {
			_ = s.send(src(), uint16(1024+rng.IntN(60000)), garbage[ng%len(garbage)])
		}
		for ; float64(nh) < el*float64(handshakePPS); nh++ {
			_ = s.send(src(), uint16(1024+rng.IntN(60000)), handshakes[nh%len(handshakes)])
		}
	}
}

// procStatus reads fields of /proc/PID/status.
func procStatus(t *testing.T, pid int, keys ...string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		for _, want := range keys {
			if ok && k == want {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

func rssKB(t *testing.T, pid int) int {
	v := strings.TrimSuffix(procStatus(t, pid, "VmRSS")["VmRSS"], " kB")
	n, _ := strconv.Atoi(v)
	return n
}

// TestSecureTunnelUnderAttack: during an iperf3 transfer through the
// (encrypted) tunnel, 50,000 packets/s of garbage and 1,000 bogus
// handshakes/s from spoofed sources hit the concentrator, over a link of
// their own. The transfer keeps >= 80 % of its undisturbed goodput, the
// daemons survive, memory stays bounded, both run with CAP_NET_ADMIN only.
func TestSecureTunnelUnderAttack(t *testing.T) {
	requireRoot(t)
	requireTools(t, "iperf3", "ethtool", "ping", "tc")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tp := newTopology(t, ctx)
	a0, b0 := tp.addPath(t, ctx, 0, 50)
	a1, b1 := tp.addPath(t, ctx, 1, 30)
	_, atk := tp.addPath(t, ctx, 2, 0) // the attacker's link, unshaped
	// The concentrator has a default route, as on the Internet: answers to
	// spoofed sources leave on the attacker's link and vanish.
	must(t, tp.srv.IP(ctx, "route", "add", "default", "via", "10.77.3.1", "dev", "p2"))
	must(t, tp.srv.IP(ctx, "link", "set", "lo", "up")) // for the metrics listener
	cpe, srv := startTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})

	for _, d := range []*daemonProc{cpe, srv} {
		caps := procStatus(t, d.cmd.Process.Pid, "CapEff", "CapPrm", "NoNewPrivs")
		if caps["CapEff"] != "0000000000001000" || caps["CapPrm"] != "0000000000001000" || caps["NoNewPrivs"] != "1" {
			t.Errorf("%s runs with %v, want CAP_NET_ADMIN only and no_new_privs", d.config, caps)
		}
	}
	st := status(t, cpe.socket)
	if st.Security != "noise" || len(st.Conns) != 1 || st.Conns[0].AEAD == "" || st.Conns[0].Peer != concentratorPub {
		t.Fatalf("cpe status: security %q conns %+v", st.Security, st.Conns)
	}

	const secs = 10
	calm, _ := iperf(t, ctx, tp.srv, tp.cpe, "10.99.0.1", secs, nil)
	rss0 := rssKB(t, srv.cmd.Process.Pid)

	garb := garbage(mrand.New(mrand.NewPCG(1, 2)), 5000)
	for i := range garb { // keep the garbage small: it is the packet rate that counts
		garb[i] = garb[i][:min(len(garb[i]), 200)]
	}
	hs := bogusHandshakes(t, 200)
	var sp *spoofer
	must(t, tp.cpe.Do(func() (err error) { sp, err = newSpoofer(netip.MustParseAddr(atk)); return err }))
	defer syscall.Close(sp.fd)
	fctx, stop := context.WithCancel(ctx)
	sent := make(chan [2]int, 1)
	go func() { g, h := sp.flood(fctx, 50000, 1000, garb, hs); sent <- [2]int{g, h} }()
	time.Sleep(time.Second) // the flood is on before the transfer starts
	attacked, _ := iperf(t, ctx, tp.srv, tp.cpe, "10.99.0.1", secs, nil)
	stop()
	n := <-sent
	rss1 := rssKB(t, srv.cmd.Process.Pid)
	hwm := procStatus(t, srv.cmd.Process.Pid, "VmHWM")["VmHWM"]

	ss := status(t, srv.socket)
	var dropped uint64
	for _, v := range ss.Dropped {
		dropped += v
	}
	t.Logf("undisturbed %.1f Mbit/s, under attack %.1f Mbit/s (%.1f %%); sent %d garbage + %d handshakes in %d s (%.0f + %.0f /s)",
		calm, attacked, 100*attacked/calm, n[0], n[1], secs+1, float64(n[0])/(secs+1), float64(n[1])/(secs+1))
	t.Logf("concentrator: RSS %d kB before, %d kB after (peak %s); dropped %d %v; cookie replies %d; connections %d",
		rss0, rss1, hwm, dropped, ss.Dropped, ss.CookieReplies, len(ss.Conns))
	if attacked < 0.8*calm {
		t.Errorf("goodput under attack %.1f Mbit/s < 80 %% of %.1f", attacked, calm)
	}
	if float64(n[0]) < 0.7*50000*secs || float64(n[1]) < 0.7*1000*secs {
		t.Errorf("the flood fell short of its rate: %v", n)
	}
	if len(ss.Conns) != 1 || ss.Conns[0].State != "open" {
		t.Errorf("concentrator connections after the attack: %+v", ss.Conns)
	}
	if ss.CookieReplies == 0 || ss.Dropped["bad-handshake"]+ss.Dropped["unknown-peer"] == 0 {
		t.Errorf("the bogus handshakes were neither answered with cookies nor refused: %v", ss.Dropped)
	}
	// The same drops in Prometheus (concentrator.toml serves 127.0.0.1:9511
	// in its namespace).
	var body []byte
	must(t, tp.srv.Do(func() error {
		// Dial here: net/http would dial from another goroutine, outside
		// the namespace.
		c, err := net.DialTimeout("tcp", "127.0.0.1:9511", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
			return err
		}
		body, err = io.ReadAll(c)
		return err
	}))
	if !regexp.MustCompile(`mptun_dropped_packets_total\{direction="rx",reason="handshake"\} [1-9]`).Match(body) {
		t.Errorf("metrics do not count the refused handshakes:\n%s", grepLines(body, "dropped_packets_total"))
	}
	if rss1 > rss0+64*1024 {
		t.Errorf("concentrator memory grew from %d to %d kB", rss0, rss1)
	}
	select {
	case err := <-srv.done:
		t.Fatalf("concentrator exited: %v", err)
	default:
	}
}

// TestCaptureHasNoPlaintext: a capture of the paths (the daemon's own
// pcap of its datagrams) holds no inner payload, while the same check on
// a security = "none" tunnel finds it (so the check can fail).
func TestCaptureHasNoPlaintext(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ping", "ethtool", "tc")
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "noise", true: "none"}[plain], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tp := newTopology(t, ctx)
			a0, b0 := tp.addPath(t, ctx, 0, 0)
			a1, b1 := tp.addPath(t, ctx, 1, 0)
			var cpe *daemonProc
			if plain {
				cpe, _ = startPlainTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})
			} else {
				cpe, _ = startTunnel(t, ctx, tp, [][2]string{{a0, b0}, {a1, b1}})
			}
			pcap := filepath.Join(t.TempDir(), "paths.pcap")
			must(t, control.Call(cpe.socket, "capture", control.CaptureRequest{File: pcap, Seconds: 3}, nil))
			const pattern = "5ec2e7c0ffee1dea"
			out, err := tp.cpe.Output(ctx, "ping", "-c", "20", "-i", "0.05", "-s", "400", "-p", pattern, "10.99.0.1")
			if err != nil {
				t.Fatalf("ping: %v\n%s", err, out)
			}
			time.Sleep(3500 * time.Millisecond)
			b, err := os.ReadFile(pcap)
			must(t, err)
			needle := bytes.Repeat([]byte{0x5e, 0xc2, 0xe7, 0xc0, 0xff, 0xee, 0x1d, 0xea}, 4)
			found := bytes.Count(b, needle)
			t.Logf("capture %d bytes, %d copies of the inner payload pattern", len(b), found)
			if len(b) < 20*400 {
				t.Fatalf("capture too small: %d bytes", len(b))
			}
			if !plain && found != 0 {
				t.Fatalf("encrypted tunnel: inner payload in the clear %d times", found)
			}
			if plain && found < 20 {
				t.Fatalf("plain tunnel: pattern found %d times; the check cannot see plaintext", found)
			}
			// A capture never overwrites: the same file again is refused.
			err = control.Call(cpe.socket, "capture", control.CaptureRequest{File: pcap, Seconds: 1}, nil)
			if err == nil || !strings.Contains(err.Error(), "exists") {
				t.Fatalf("second capture to an existing file: %v", err)
			}
		})
	}
}

// startPlainTunnel is startTunnel with security = "none" on both ends.
func startPlainTunnel(t *testing.T, ctx context.Context, tp *topology, paths [][2]string) (cpe, srv *daemonProc) {
	t.Helper()
	old := shippedOverride
	shippedOverride = func(name, text string) string {
		text = strings.Replace(text, "security = \"noise\"", "security = \"none\"", 1)
		text = regexpKeyLine.ReplaceAllString(text, "")
		return regexpPeer.ReplaceAllString(text, "")
	}
	defer func() { shippedOverride = old }()
	return startTunnel(t, ctx, tp, paths)
}

func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
