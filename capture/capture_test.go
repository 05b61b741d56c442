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

	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
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
	src = netip.MustParseAddrPort("192.0.2.1:40000")
	dst = netip.MustParseAddrPort("198.51.100.1:6511")
)

func TestWriteAndRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcap")
	c, err := Create(path, pcapdccp.FormUDP, MinSize)
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
	c, err := Create(path, pcapdccp.FormDCCP, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := c.WritePacket(time.Now(), netip.MustParseAddrPort("[fd00::1]:1"), netip.MustParseAddrPort("[fd00::2]:2"), make([]byte, 1200)); err != nil {
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
	if _, err := Create(path, pcapdccp.FormUDP, 100); err == nil {
		t.Error("tiny limit accepted")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "no", "dir.pcap"), pcapdccp.FormUDP, 0); err == nil {
		t.Error("missing directory accepted")
	}
}

// TestDatagramsAsGiven: what the file holds after the made-up IP and UDP
// headers is the datagram byte for byte, in both forms.
func TestDatagramsAsGiven(t *testing.T) {
	dg := []byte{0x9c, 0x40, 0x19, 0x6f, 4, 0, 0xde, 0xad, 4, 0, 0, 0, 0, 0, 0, 1, 'x'}
	for _, form := range []pcapdccp.Form{pcapdccp.FormUDP, pcapdccp.FormDCCP} {
		path := filepath.Join(t.TempDir(), "cap.pcap")
		c, err := Create(path, form, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WritePacket(time.Now(), src, dst, dg); err != nil {
			t.Fatal(err)
		}
		c.Close()
		f, _ := os.Open(path)
		r, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := r.ReadPacketData()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		hl := 20 + 8
		if form == pcapdccp.FormDCCP {
			hl = 20
		}
		if string(data[hl:]) != string(dg) {
			t.Errorf("%v: datagram %x written as %x", form, dg, data[hl:])
		}
	}
}
