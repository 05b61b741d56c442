// SPDX-License-Identifier: MIT

package mpdccp

import (
	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/mpdccp/wire"
)

// rxWindow is how many of the peer's sequence numbers a subflow tracks for
// its Ack Vector. Older state is dropped once the peer acknowledged an ack
// covering it (ack-of-ack, RFC 4340 Appendix A) or when it falls out of
// this window.
const rxWindow = 1024

// maxAckCells bounds the Ack Vector one packet carries.
const maxAckCells = 64

// rxState is the receiver side of a subflow's Ack Vector (RFC 4340 §11.4):
// the state of every sequence number from tail to gsr.
type rxState struct {
	st   [rxWindow]uint8 // wire.AckCellState per seq modulo rxWindow
	tail uint64          // oldest tracked sequence number
	gsr  uint64
}

func (r *rxState) init(isr uint64) {
	r.tail, r.gsr = isr, isr
	r.st[isr%rxWindow] = uint8(wire.AckReceived)
}

// record notes the arrival of seq; it returns whether seq was new (not a
// duplicate) and whether it arrived out of order (below gsr or leaving a gap).
func (r *rxState) record(seq uint64, ecnCE bool) (fresh, disorder bool) {
	state := uint8(wire.AckReceived)
	if ecnCE {
		state = uint8(wire.AckECNMarked)
	}
	d := seqDiff(seq, r.gsr)
	switch {
	case d > 0:
		if d > 1 {
			disorder = true
		}
		if d >= rxWindow {
			r.tail = seqAdd(seq, -(rxWindow - 1))
			for i := range r.st {
				r.st[i] = uint8(wire.AckNotReceived)
			}
		} else {
			for s := seqAdd(r.gsr, 1); s != seq; s = seqAdd(s, 1) {
				r.st[s%rxWindow] = uint8(wire.AckNotReceived)
			}
			if seqDiff(seq, r.tail) >= rxWindow {
				r.tail = seqAdd(seq, -(rxWindow - 1))
			}
		}
		r.gsr = seq
		r.st[seq%rxWindow] = state
		return true, disorder
	case seqLess(seq, r.tail):
		return false, true
	default:
		if r.st[seq%rxWindow] != uint8(wire.AckNotReceived) {
			return false, true
		}
		r.st[seq%rxWindow] = state
		return true, true
	}
}

// span is the number of sequence numbers the Ack Vector currently covers.
func (r *rxState) span() int { return int(seqDiff(r.gsr, r.tail)) + 1 }

// trim forgets state at and below seq: the peer knows it (ack-of-ack).
func (r *rxState) trim(seq uint64) {
	switch {
	case seqLess(seq, r.tail):
	case seqLess(seq, r.gsr):
		r.tail = seqAdd(seq, 1)
	default:
		r.tail = r.gsr // keep the newest so that a vector is never empty
	}
}

// cells appends the Ack Vector, newest first from gsr, to dst; at most
// maxCells cells.
func (r *rxState) cells(dst []byte, maxCells int) []byte {
	n := r.span()
	if n <= 0 {
		return dst
	}
	s := r.gsr
	cur := r.st[s%rxWindow]
	run := 0
	for i := 1; i < n; i++ {
		s = seqAdd(s, -1)
		v := r.st[s%rxWindow]
		if v == cur && run < wire.MaxRunLen {
			run++
			continue
		}
		dst = append(dst, wire.AckCell(wire.AckCellState(cur), run))
		if len(dst) >= maxCells {
			return dst
		}
		cur, run = v, 0
	}
	return append(dst, wire.AckCell(wire.AckCellState(cur), run))
}

// decodeRuns converts Ack Vector cells starting at ackNo into runs for the
// congestion controller, newest first.
func decodeRuns(dst []ccid.AckRun, ackNo uint64, cells []byte) []ccid.AckRun {
	s := ackNo
	for _, c := range cells {
		n := uint32(wire.CellRunLen(c)) + 1
		st := wire.CellState(c)
		if st == wire.AckReserved {
			break
		}
		dst = append(dst, ccid.AckRun{High: s, N: n, State: ccid.AckState(st)})
		s = seqAdd(s, -int64(n))
	}
	return dst
}
