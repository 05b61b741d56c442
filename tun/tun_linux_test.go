// SPDX-License-Identifier: MIT

package tun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var netnsCounter atomic.Int64

// inNetns runs fn on a thread inside a fresh network namespace that is
// deleted afterwards. fn must report with t.Error, not t.Fatal: it does
// not run on the test goroutine.
func inNetns(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and TUN devices")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	name := fmt.Sprintf("mptun-tun-%d-%d", os.Getpid(), netnsCounter.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread is discarded with the goroutine
		// instead of going back to the pool inside the namespace.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("setns %s: %v", name, err)
			return
		}
		fn()
	}()
	<-done
}

const testOffset = 16

// reader reads packets from dev into a channel until dev is closed.
func reader(dev Device) <-chan []byte {
	ch := make(chan []byte, 256)
	go func() {
		defer close(ch)
		n := dev.BatchSize()
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, BufferSize)
		}
		sizes := make([]int, n)
		for {
			k, err := dev.Read(bufs, sizes, testOffset)
			for i := range k {
				ch <- append([]byte(nil), bufs[i][testOffset:testOffset+sizes[i]]...)
			}
			if err != nil && err != ErrTooManySegments {
				return
			}
		}
	}()
	return ch
}

// await returns the first packet for which match is true.
func await(ch <-chan []byte, match func([]byte) bool) ([]byte, error) {
	return awaitRetry(ch, match, nil)
}

// awaitRetry is await that calls resend every 200 ms, as ping does: a
// device that has just come up may drop the first IPv6 packets while
// addrconf sets up the interface.
func awaitRetry(ch <-chan []byte, match func([]byte) bool, resend func()) ([]byte, error) {
	timeout := time.After(5 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var seen []string
	for {
		select {
		case <-tick.C:
			if resend != nil {
				resend()
			}
		case p, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("device closed")
			}
			if match(p) {
				return p, nil
			}
			seen = append(seen, fmt.Sprintf("%x", p[:min(len(p), 48)]))
		case <-timeout:
			return nil, fmt.Errorf("timed out; saw %d other packets: %s", len(seen), strings.Join(seen, ", "))
		}
	}
}

func write(dev Device, pkts ...[]byte) error {
	bufs := make([][]byte, len(pkts))
	for i, p := range pkts {
		bufs[i] = make([]byte, testOffset+len(p), BufferSize)
		copy(bufs[i][testOffset:], p)
	}
	_, err := dev.Write(bufs, testOffset)
	return err
}

func TestRealTUN(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "mpt0", Driver: DriverWireGuard, MTU: 1400, Offload: true},
		{Name: "mpt0", Driver: DriverWireGuard, MTU: 1400, Offload: false},
		{Name: "mpt0", Driver: DriverWater, MTU: 1400},
	} {
		t.Run(fmt.Sprintf("%s/offload=%v", cfg.Driver, cfg.Offload), func(t *testing.T) {
			inNetns(t, func() { testRealTUN(t, cfg) })
		})
	}
}

func testRealTUN(t *testing.T, cfg Config) {
	dev, err := Open(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	defer dev.Close()
	if name, err := dev.Name(); err != nil || name != cfg.Name {
		t.Errorf("Name() = %q, %v", name, err)
	}
	wantBatch := 1
	if cfg.Driver == DriverWireGuard && cfg.Offload {
		wantBatch = 128
	}
	if b := dev.BatchSize(); b != wantBatch {
		t.Errorf("BatchSize() = %d, want %d", b, wantBatch)
	}
	addrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.1/24"), netip.MustParsePrefix("fd20::1/64")}
	routes := []netip.Prefix{netip.MustParsePrefix("10.201.0.0/24")}
	if err := Configure(cfg.Name, 1380, addrs, routes); err != nil {
		t.Error(err)
		return
	}
	if out, err := exec.Command("ip", "-6", "addr", "show", "dev", cfg.Name).CombinedOutput(); err != nil ||
		strings.Contains(string(out), "fe80") || !strings.Contains(string(out), "fd20::1/64") {
		t.Errorf("IPv6 addresses (want fd20::1 and no link-local): %v\n%s", err, out)
	}
	if mtu, err := dev.MTU(); err != nil || mtu != 1380 {
		t.Errorf("MTU() = %d, %v; want 1380", mtu, err)
	}
	ch := reader(dev)

	// A datagram routed into the tunnel is read from the device.
	c, err := net.Dial("udp4", "10.201.0.9:4000")
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello tunnel")); err != nil {
		t.Error(err)
		return
	}
	p, err := await(ch, func(p []byte) bool {
		return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 17 && bytes.Equal(p[16:20], []byte{10, 201, 0, 9})
	})
	if err != nil {
		t.Errorf("UDP into the tunnel: %v", err)
	} else if !bytes.Equal(p[28:], []byte("hello tunnel")) {
		t.Errorf("UDP payload %q", p[28:])
	}

	// A UDP GSO send becomes three packets (split by the kernel, or by the
	// device when USO offload is on).
	if err := sendGSO(c, 1000, 3); err != nil {
		t.Error(err)
	}
	for i := range 3 {
		p, err := await(ch, func(p []byte) bool { return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 17 })
		if err != nil {
			t.Errorf("GSO segment %d: %v", i, err)
			break
		}
		if len(p) != 1028 {
			t.Errorf("GSO segment %d is %d bytes, want 1028", i, len(p))
		}
	}

	// Ping through the device, IPv4 and IPv6: the kernel answers.
	src4, dst4 := netip.MustParseAddr("10.200.0.2"), netip.MustParseAddr("10.200.0.1")
	ping4 := func() {
		if err := write(dev, icmp4Echo(src4, dst4, 7)); err != nil {
			t.Errorf("write echo request: %v", err)
		}
	}
	ping4()
	if _, err := awaitRetry(ch, func(p []byte) bool {
		return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 1 && p[20] == 0 && binary.BigEndian.Uint16(p[26:]) == 7
	}, ping4); err != nil {
		t.Errorf("IPv4 echo reply: %v", err)
	}
	src6, dst6 := netip.MustParseAddr("fd20::2"), netip.MustParseAddr("fd20::1")
	ping6 := func() {
		if err := write(dev, icmp6Echo(src6, dst6, 9)); err != nil {
			t.Errorf("write echo6 request: %v", err)
		}
	}
	ping6()
	if _, err := awaitRetry(ch, func(p []byte) bool {
		return len(p) >= 48 && p[0]>>4 == 6 && p[6] == 58 && p[40] == 129 && binary.BigEndian.Uint16(p[46:]) == 9
	}, ping6); err != nil {
		t.Errorf("IPv6 echo reply: %v", err)
	}
}

// sendGSO sends n segments of size bytes in one UDP_SEGMENT send.
func sendGSO(c net.Conn, size, n int) error {
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size)
	})
	if err != nil || serr != nil {
		return fmt.Errorf("UDP_SEGMENT: %v %v", err, serr)
	}
	_, err = c.Write(make([]byte, size*n))
	return err
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func icmp4Echo(src, dst netip.Addr, seq uint16) []byte {
	p := make([]byte, 20+8+16)
	p[0], p[8], p[9] = 0x45, 64, 1
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], src.AsSlice())
	copy(p[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20], 0))
	icmp := p[20:]
	icmp[0] = 8
	binary.BigEndian.PutUint16(icmp[4:], 0x1234)
	binary.BigEndian.PutUint16(icmp[6:], seq)
	binary.BigEndian.PutUint16(icmp[2:], checksum(icmp, 0))
	return p
}

func icmp6Echo(src, dst netip.Addr, seq uint16) []byte {
	p := make([]byte, 40+8+16)
	p[0], p[6], p[7] = 0x60, 58, 64
	binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
	copy(p[8:], src.AsSlice())
	copy(p[24:], dst.AsSlice())
	icmp := p[40:]
	icmp[0] = 128
	binary.BigEndian.PutUint16(icmp[4:], 0x1234)
	binary.BigEndian.PutUint16(icmp[6:], seq)
	var pseudo uint32
	for i := 8; i < 40; i += 2 {
		pseudo += uint32(p[i])<<8 | uint32(p[i+1])
	}
	pseudo += uint32(len(icmp)) + 58
	binary.BigEndian.PutUint16(icmp[2:], checksum(icmp, pseudo))
	return p
}
