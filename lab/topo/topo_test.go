// SPDX-License-Identifier: MIT

package topo

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/netns"
	"github.com/mptun/mptun/lab/emu"
)

func TestBuildCarrierAndClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	ctx := context.Background()
	tb, err := Build(ctx, []PathSpec{{Name: "a"}, {Name: "b", Up: emu.Config{Delay: 5 * time.Millisecond}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{tb.Cli.Name, tb.Srv.Name, tb.Emu.Name}
	// Source routing: from path b's address to path a's server address
	// still leaves on path b (the emulator of b sees it).
	var srv net.PacketConn
	if err := tb.Srv.Do(func() (err error) { srv, err = net.ListenPacket("udp4", "10.100.0.2:9"); return err }); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c net.Conn
	if err := tb.Cli.Do(func() (err error) {
		c, err = (&net.Dialer{LocalAddr: &net.UDPAddr{IP: tb.Paths[1].CliAddr.AsSlice()}}).Dial("udp4", "10.100.0.2:9")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	srv.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := srv.ReadFrom(make([]byte, 8)); err != nil {
		t.Fatalf("datagram via path b: %v", err)
	}
	if n := tb.Paths[1].Link.Stats(emu.AB).DeliveredFrames; n != 1 {
		t.Fatalf("path b carried %d frames, want 1", n)
	}
	// Carrier loss: the sender sees an error at once.
	if err := tb.SetCarrier(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		// The first write may be accepted while the route goes away.
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write([]byte("x")); err == nil {
			t.Error("write through a downed device succeeded")
		}
	}
	if err := tb.SetCarrier(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Errorf("write after link up: %v", err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, n := range netns.List() {
		for _, m := range names {
			if n == m {
				t.Errorf("namespace %s left after Close", n)
			}
		}
	}
}
