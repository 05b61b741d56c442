// SPDX-License-Identifier: MIT

package tun

import (
	"errors"
	"os"
	"testing"
)

func TestChannelDevice(t *testing.T) {
	d := NewChannel("mem0", 1400, 4)
	for i := range 6 {
		d.Inbound <- []byte{byte(i), 1, 2}
	}
	bufs := [][]byte{make([]byte, 32), make([]byte, 32), make([]byte, 32), make([]byte, 32), make([]byte, 32)}
	sizes := make([]int, len(bufs))
	n, err := d.Read(bufs, sizes, 10)
	if err != nil || n != 4 {
		t.Fatalf("Read = %d, %v; want 4 (the batch size)", n, err)
	}
	if bufs[3][10] != 3 || sizes[3] != 3 {
		t.Errorf("packet 3: %v size %d", bufs[3][10:13], sizes[3])
	}
	if n, _ = d.Read(bufs, sizes, 10); n != 2 {
		t.Errorf("second Read = %d, want the 2 left", n)
	}
	out := [][]byte{append(make([]byte, 10), 9, 8), append(make([]byte, 10), 7)}
	if n, err := d.Write(out, 10); err != nil || n != 2 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	out[0][10] = 0 // Outbound holds copies
	if p := <-d.Outbound; len(p) != 2 || p[0] != 9 {
		t.Errorf("outbound packet %v", p)
	}
	d.Close()
	if _, err := d.Read(bufs, sizes, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
}
