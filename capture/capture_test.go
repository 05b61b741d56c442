// SPDX-License-Identifier: MIT

package capture

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
)

// count reads a pcap file and returns its number of packets.
func count(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := 0
	for {
		_, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("%s: packet %d: %v", path, n, err)
		}
		n++
	}
}

var (
	src = netip.MustParseAddr("192.0.2.1")
	dst = netip.MustParseAddr("198.51.100.1")
)

func TestWriteAndRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcap")
	c, err := Create(path, MinSize)
	if err != nil {
		t.Fatal(err)
	}
	pkt := make([]byte, 1000)
	pkt[4] = 1 << 4 // a data-offset-ish byte; content is irrelevant to pcap
	const total = 150
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range total / 3 {
				if err := c.WritePacket(time.Unix(1700000000, int64(g)), src, dst, pkt); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.WritePacket(time.Now(), src, dst, pkt); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	cur, old := count(t, path), count(t, path+".1")
	if cur == 0 || old == 0 {
		t.Fatalf("no rotation: %d packets in current, %d in old", cur, old)
	}
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > MinSize {
			t.Errorf("%s is %d bytes, over the %d limit", p, fi.Size(), MinSize)
		}
	}
	// Only the last two files are kept, so some early packets are gone,
	// but the newest file ends with the newest packets.
	if cur+old > total {
		t.Errorf("%d packets in files, only %d written", cur+old, total)
	}
}

func TestUnlimited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcap")
	c, err := Create(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := c.WritePacket(time.Now(), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), make([]byte, 1200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, path); n != 100 {
		t.Errorf("%d packets after Flush, want 100", n)
	}
	c.Close()
	if _, err := os.Stat(path + ".1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rotated without a limit: %v", err)
	}
	if _, err := Create(path, 100); err == nil {
		t.Error("tiny limit accepted")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "no", "dir.pcap"), 0); err == nil {
		t.Error("missing directory accepted")
	}
}
