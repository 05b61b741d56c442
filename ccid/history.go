// SPDX-License-Identifier: MIT

package ccid

import (
	"math/bits"

	"github.com/mptun/mptun/internal/mono"
	"github.com/mptun/mptun/mpdccp/wire"
)

// History is one subflow's record of the packets it sent, indexed by a
// 64-bit counter that never wraps (the 48-bit wire sequence number is kept
// in each record). It is the one place that says what was sent with
// sequence number S and what the peer said about it; three users read it,
// each from its own oldest index:
//   - the congestion controller (tracker): packets in flight, RTT, RACK
//     losses, delivery-rate state; its records are [head, next);
//   - loss repair: the payload and MP_SEQ of a data packet kept until the
//     peer reports it (Repair, from RepairHead);
//   - ack-of-ack: the Ack Number an ack-carrying packet reported, so that
//     the peer's acknowledgement of that packet trims our Ack Vector state
//     (RFC 4340 Appendix A; AckOfAck).
//
// The ring keeps the records from the oldest index any user still needs,
// grows on demand and shrinks when the subflow idles (Compact), so an
// idle subflow holds a few records, not its largest window's. Nothing
// here allocates per packet.
type History struct {
	ring []sentPacket
	// Bit sets over ring slots: pending (in flight or lost, not yet
	// acked), live (in flight, neither acked nor lost), repairs (holds a
	// loss-repair entry) and acks (carried an Ack Number still remembered).
	pending, live, repairs, acks []uint64
	mask                         uint64

	next    uint64 // index of the next packet sent
	head    uint64 // the congestion controller's oldest record
	seqBase uint64 // wire seq of index 0
	started bool

	repairHead, repairCount, repairCap uint64
	ackHead, ackCount                  uint64
}

// historyMin is the records a history starts with (a handshake's); an
// idle subflow's shrinks to historyIdle, enough for its keepalives.
const (
	historyMin  = 16
	historyIdle = 4
)

// Loss repair keeps at most RepairMax packets per subflow; its share of the
// history starts at repairMin entries and doubles up to that.
const (
	RepairMax = 2048
	repairMin = 32
)

// ackRecords is how many ack-carrying packets' Ack Numbers are remembered.
const ackRecords = 64

// Repair is what loss repair keeps with a data packet it may send again.
type Repair struct {
	MPSeq uint64 // kept after release, to find the path a NACK names
	B     []byte // nil once acknowledged, repaired or given up
	N     int32
	Again bool // a repair of a packet first sent on another path
}

// NewHistory returns an empty history.
func NewHistory() *History {
	h := &History{}
	h.resize(historyMin)
	return h
}

// floor is the oldest index any user still needs.
func (h *History) floor() uint64 {
	f := h.head
	if h.repairCount > 0 {
		f = min(f, h.repairHead)
	}
	if h.ackCount > 0 {
		f = min(f, h.ackHead)
	}
	return f
}

// resize replaces the ring with one of at least n records (a power of two),
// keeping the records from floor by index.
func (h *History) resize(n int) {
	size := uint64(historyIdle)
	for size < uint64(n) {
		size <<= 1
	}
	ring := make([]sentPacket, size)
	words := (size + 63) / 64
	all := make([]uint64, 4*words) // one allocation for the four sets
	sets := [4][]uint64{all[:words:words], all[words : 2*words : 2*words], all[2*words : 3*words : 3*words], all[3*words:]}
	old := [4][]uint64{h.pending, h.live, h.repairs, h.acks}
	for i := h.floor(); i < h.next; i++ {
		j := i & (size - 1)
		ring[j] = h.ring[i&h.mask]
		for k := range sets {
			if bitGet(old[k], i&h.mask) {
				sets[k][j>>6] |= 1 << (j & 63)
			}
		}
	}
	h.ring, h.mask = ring, size-1
	h.pending, h.live, h.repairs, h.acks = sets[0], sets[1], sets[2], sets[3]
}

// push makes room for the record of the next packet and returns its index.
// The record and its bits are cleared.
func (h *History) push(seq uint64) uint64 {
	if h.next-h.floor() >= uint64(len(h.ring)) {
		h.resize(2 * len(h.ring))
	}
	i := h.next
	h.next++
	j := i & h.mask
	h.ring[j] = sentPacket{seq: seq}
	for _, set := range [...][]uint64{h.pending, h.live, h.repairs, h.acks} {
		bitSet(set, j, false)
	}
	return i
}

// compact shrinks the ring to what its users still keep, so that an idle
// subflow holds a few records; it grows again on demand.
func (h *History) compact() {
	n := max(int(h.next-h.floor()), historyIdle)
	size := historyIdle
	for size < n {
		size <<= 1
	}
	if size < len(h.ring) {
		h.resize(size)
	}
}

func (h *History) pkt(i uint64) *sentPacket { return &h.ring[i&h.mask] }

func bitGet(set []uint64, j uint64) bool { return set[j>>6]&(1<<(j&63)) != 0 }

func bitSet(set []uint64, j uint64, on bool) {
	if on {
		set[j>>6] |= 1 << (j & 63)
	} else {
		set[j>>6] &^= 1 << (j & 63)
	}
}

// nextIn returns the first index in [i, end) whose bit is set, or end.
func (h *History) nextIn(set []uint64, i, end uint64) uint64 {
	for i < end {
		j := i & h.mask
		w := set[j>>6] >> (j & 63)
		// A ring smaller than a word wraps inside it.
		step := min(64-(j&63), h.mask+1-j)
		if step < 64 {
			w &= 1<<step - 1
		}
		if w != 0 {
			k := i + uint64(bits.TrailingZeros64(w))
			if k > end {
				return end
			}
			return k
		}
		i += step
	}
	return end
}

// prevIn returns the last index in [lo, end) whose bit is set.
func (h *History) prevIn(set []uint64, lo, end uint64) (uint64, bool) {
	for end > lo {
		i := end - 1
		j := i & h.mask
		// Bit j moves to the top; the bits below it in its word are the
		// indices just before i (a ring smaller than a word starts at bit 0).
		step := min((j&63)+1, end-lo)
		w := set[j>>6] << (63 - (j & 63))
		if step < 64 {
			w &^= 1<<(64-step) - 1
		}
		if w != 0 {
			return i - uint64(bits.LeadingZeros64(w)), true
		}
		end -= step
	}
	return 0, false
}

func (h *History) seqOf(i uint64) uint64 { return (h.seqBase + i) & seqMask }

// indexOf finds the record of the packet sent with seq.
func (h *History) indexOf(seq uint64) (uint64, bool) {
	if h.next == 0 {
		return 0, false
	}
	seq &= seqMask
	if i := h.next - 1; h.pkt(i).seq == seq {
		return i, true // the packet just sent: the usual case
	}
	lo := h.floor()
	d := (seq - h.seqOf(lo)) & seqMask
	if d >= h.next-lo || h.pkt(lo+d).seq != seq {
		return 0, false
	}
	return lo + d, true
}

// Seq is the wire sequence number of record i.
func (h *History) Seq(i uint64) uint64 { return h.pkt(i).seq }

// SentAt is when record i was sent.
func (h *History) SentAt(i uint64) mono.Time { return h.pkt(i).sent }

// Lost reports whether the controller declared record i lost and no
// acknowledgement has shown it arrived since. The tracker declares a loss
// only after the path's observed reordering (RACK, RFC 8985), so a path
// that reorders by itself does not look lossy.
func (h *History) Lost(i uint64) bool { return h.pkt(i).flags&(pktLost|pktAcked) == pktLost }

// Size is the records the ring has room for (memory held).
func (h *History) Size() int { return len(h.ring) }

// Repairs is how many loss-repair entries are kept.
func (h *History) Repairs() int { return int(h.repairCount) }

// End is the index after the newest record.
func (h *History) End() uint64 { return h.next }

// KeepRepair attaches r to the packet just sent with seq. When loss repair
// already holds RepairMax packets, the oldest is given up. It returns a
// buffer the caller gets back: the given-up packet's, or r.B itself when
// seq was not recorded; nil otherwise.
func (h *History) KeepRepair(seq uint64, r Repair) []byte {
	i, ok := h.indexOf(seq)
	if !ok || bitGet(h.repairs, i&h.mask) {
		return r.B
	}
	var out []byte
	if h.repairCount == h.repairCap {
		if h.repairCap < RepairMax {
			h.repairCap = max(2*h.repairCap, repairMin)
		} else {
			e := h.Repair(h.repairHead)
			out = e.B
			e.B, e.N = nil, 0
			h.PopRepair()
		}
	}
	h.pkt(i).repair = r
	bitSet(h.repairs, i&h.mask, true)
	if h.repairCount == 0 {
		h.repairHead = i
	}
	h.repairCount++
	return out
}

// RepairHead is the index of the oldest loss-repair entry, or End.
func (h *History) RepairHead() uint64 {
	if h.repairCount == 0 {
		return h.next
	}
	return h.repairHead
}

// NextRepair is the index of the first loss-repair entry at or after i,
// or End.
func (h *History) NextRepair(i uint64) uint64 {
	return h.nextIn(h.repairs, max(i, h.RepairHead()), h.next)
}

// Repair is the loss-repair entry of record i (one RepairHead or
// NextRepair returned).
func (h *History) Repair(i uint64) *Repair { return &h.pkt(i).repair }

// PopRepair forgets the oldest loss-repair entry; its buffer must have
// been taken back.
func (h *History) PopRepair() {
	if h.repairCount == 0 {
		return
	}
	i := h.repairHead
	bitSet(h.repairs, i&h.mask, false)
	h.pkt(i).repair = Repair{}
	h.repairCount--
	h.repairHead = h.nextIn(h.repairs, i+1, h.next)
}

// ShrinkRepair gives loss repair's share back when it holds nothing, so it
// grows from repairMin again.
func (h *History) ShrinkRepair() {
	if h.repairCount == 0 {
		h.repairCap = 0
	}
}

// NoteAck records that the packet just sent with seq carried Ack Number
// ackNo. The oldest of ackRecords remembered ones is forgotten.
func (h *History) NoteAck(seq, ackNo uint64) {
	i, ok := h.indexOf(seq)
	if !ok {
		return
	}
	if h.ackCount == ackRecords {
		h.dropAcks(h.ackHead)
	}
	h.pkt(i).ackNo = ackNo
	if !bitGet(h.acks, i&h.mask) {
		bitSet(h.acks, i&h.mask, true)
		if h.ackCount == 0 {
			h.ackHead = i
		}
		h.ackCount++
	}
}

// dropAcks forgets the remembered Ack Numbers of the records up to and
// including index last.
func (h *History) dropAcks(last uint64) {
	for h.ackCount > 0 && h.ackHead <= last {
		bitSet(h.acks, h.ackHead&h.mask, false)
		h.ackCount--
		h.ackHead = h.nextIn(h.acks, h.ackHead+1, h.next)
	}
}

// AckOfAck finds the newest remembered ack-carrying packet that the peer
// reports received (by the Ack Number ackNo or the Ack Vector runs),
// returns the Ack Number it carried, and forgets it and all older ones.
func (h *History) AckOfAck(ackNo uint64, runs []AckRun) (uint64, bool) {
	if h.ackCount == 0 {
		return 0, false
	}
	ackNo &= seqMask
	end := h.next
	for {
		i, ok := h.prevIn(h.acks, h.ackHead, end)
		if !ok {
			return 0, false
		}
		end = i
		p := h.pkt(i)
		if wire.SeqDiff(ackNo, p.seq) < 0 {
			continue // not covered by this acknowledgement yet
		}
		if p.seq == ackNo || receivedIn(runs, p.seq) {
			h.dropAcks(i)
			return p.ackNo, true
		}
	}
}

// receivedIn reports whether runs (newest first) say seq was received.
func receivedIn(runs []AckRun, seq uint64) bool {
	for _, r := range runs {
		d := wire.SeqDiff(r.High, seq)
		if d < 0 {
			return false
		}
		if d < int64(r.N) {
			return r.State != NotReceived
		}
	}
	return false
}
