// SPDX-License-Identifier: MIT

package reorder

import "testing"

// An idle reorderer gives its grown window and history back, still knows
// the newest packets it delivered (duplicates stay duplicates), and grows
// again when traffic returns. With packets held it keeps everything.
func TestShrinkWhenIdle(t *testing.T) {
	h := newHarness(t, "adaptive", Config{})
	b := h.r.(*buffer)
	h.push(0, 0)
	for seq := uint64(2); seq < 1000; seq++ {
		h.push(0, seq) // 1 is missing: the window grows past 512
	}
	grown := len(b.slots)
	if grown < 1024 {
		t.Fatalf("window %d slots with 998 held", grown)
	}
	b.Shrink()
	if len(b.slots) != grown {
		t.Fatalf("Shrink with packets held resized the window to %d", len(b.slots))
	}
	h.push(1, 1)
	if len(h.out) != 1000 {
		t.Fatalf("delivered %d of 1000", len(h.out))
	}
	hist := len(b.pastOpen)
	b.Shrink()
	if len(b.slots) != initialSlots || len(b.pastOpen) != histMin || b.ready != nil {
		t.Fatalf("after Shrink: window %d (want %d), history %d (was %d, want %d), ready %d",
			len(b.slots), initialSlots, len(b.pastOpen), hist, histMin, len(b.ready))
	}
	if h.push(0, 999) || h.push(0, 990) {
		t.Fatal("a recent duplicate was accepted after Shrink")
	}
	h.out = nil
	for seq := uint64(1001); seq < 1200; seq++ {
		h.push(0, seq)
	}
	h.push(1, 1000)
	if len(h.out) != 200 || h.out[0] != 1000 || h.out[199] != 1199 {
		t.Fatalf("after Shrink delivered %d packets, %v…", len(h.out), h.out[:min(len(h.out), 3)])
	}
}
