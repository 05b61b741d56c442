// SPDX-License-Identifier: MIT

package mpdccp

import "testing"

// TestDataSeqOfAPacketThePathOvertook: the reorderer finds a path's
// losses in the data sequence dataSeq gives it, and tells them from the
// path's own reordering by a packet that comes behind a later one. Such
// a packet must number below the later one, not the same.
func TestDataSeqOfAPacketThePathOvertook(t *testing.T) {
	var sf subflow
	var ro rxOpts
	got := []uint64{}
	for _, seq := range []uint64{100, 101, 103, 102, 104, 107, 105, 106, 108} {
		got = append(got, sf.dataSeq(seq, &ro))
	}
	want := []uint64{0, 1, 3, 2, 4, 7, 5, 6, 8}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("data seqs %v, want %v", got, want)
		}
	}
	// Non-data packets announced by NDP Count are no data lost: the gap
	// they leave does not count.
	ro.ndp = 2
	if d := sf.dataSeq(111, &ro); d != 9 {
		t.Errorf("after two non-data packets: data seq %d, want 9", d)
	}
}
