// SPDX-License-Identifier: MIT

package wire

// AckCellState is the 2-bit state of an Ack Vector cell (RFC 4340 §11.4).
type AckCellState uint8

// Ack Vector states; 2 is reserved.
const (
	AckReceived    AckCellState = 0
	AckECNMarked   AckCellState = 1
	AckReserved    AckCellState = 2
	AckNotReceived AckCellState = 3
)

// MaxRunLen is the largest run length of one cell: a cell covers
// RunLen+1 sequence numbers.
const MaxRunLen = 63

// AckCell returns the cell for state covering runLen+1 packets; runLen is
// clamped to 0..63.
func AckCell(state AckCellState, runLen int) byte {
	runLen = min(max(runLen, 0), MaxRunLen)
	return byte(state&3)<<6 | byte(runLen)
}

// CellState returns the state of cell c.
func CellState(c byte) AckCellState { return AckCellState(c >> 6) }

// CellRunLen returns the run length of cell c (it covers CellRunLen(c)+1
// sequence numbers).
func CellRunLen(c byte) int { return int(c & 0x3f) }

// AppendRun appends cells for n consecutive sequence numbers (n >= 1) in
// state, splitting runs longer than 64 into several cells. It allocates only
// when cells lacks capacity.
func AppendRun(cells []byte, state AckCellState, n int) []byte {
	for n > 0 {
		r := min(n, MaxRunLen+1)
		cells = append(cells, AckCell(state, r-1))
		n -= r
	}
	return cells
}

// ForEachRun walks Ack Vector cells backwards from ackNo, the packet's
// Acknowledgement Number (§11.4): the first cell's run ends at ackNo.
// For each cell fn gets the newest and oldest sequence number of the run
// (hi, then lo = hi-runLen, modulo 2^48) and its state; returning false
// stops the walk. Cells of several concatenated Ack Vector options are
// simply passed one after the other, continuing from the last seqno.
// ForEachRun returns the sequence number just below the last run walked.
func ForEachRun(ackNo uint64, cells []byte, fn func(hi, lo uint64, state AckCellState) bool) uint64 {
	s := ackNo & MaxSeq
	for _, c := range cells {
		lo := SeqAdd(s, -int64(c&0x3f))
		if !fn(s, lo, CellState(c)) {
			return SeqAdd(lo, -1)
		}
		s = SeqAdd(lo, -1)
	}
	return s
}

// ForEachAcked calls fn for every sequence number covered by cells,
// newest first, with its state. Returning false stops the walk.
func ForEachAcked(ackNo uint64, cells []byte, fn func(seq uint64, state AckCellState) bool) {
	s := ackNo & MaxSeq
	for _, c := range cells {
		st := CellState(c)
		for i := 0; i <= int(c&0x3f); i++ {
			if !fn(s, st) {
				return
			}
			s = SeqAdd(s, -1)
		}
	}
}

// AckVectorSpan returns how many sequence numbers cells cover.
func AckVectorSpan(cells []byte) int {
	n := 0
	for _, c := range cells {
		n += int(c&0x3f) + 1
	}
	return n
}

// ValidAckVector reports whether cells contain no reserved state (2);
// RFC 4340 §11.4 reserves it, so a receiver should treat such a vector as
// malformed.
func ValidAckVector(cells []byte) bool {
	for _, c := range cells {
		if CellState(c) == AckReserved {
			return false
		}
	}
	return true
}
