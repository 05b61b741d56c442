// SPDX-License-Identifier: MIT

package reorder

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

// FuzzReorder feeds arbitrary MP_SEQ / path / DCCP sequence / time steps
// (as from a hostile or broken peer) to every reorderer and checks that
// nothing panics, every accepted packet comes out exactly once, and the
// deadline moves forward after OnTimer.
func FuzzReorder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 2, 1, 200})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5})
	f.Add(make([]byte, 64))
	// Small steps, then a jump of 100 (the window grows past its first 64).
	steps := []byte{}
	for _, seq := range []uint64{0, 2, 1, 100, 3, 50, 99, 4} {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], seq<<16|uint64(len(steps)&3))
		steps = append(steps, b[:]...)
	}
	f.Add(append(steps, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"passive", "fixed", "adaptive", "equalize"} {
			now := mono.Time(0)
			repair := len(data)%5 < 2
			hold := 10 * time.Millisecond
			if repair && len(data)%2 == 0 {
				hold = 0 // derived from the paths
			}
			r, _ := New(name, Config{MaxHold: hold, BufferLimit: 16 << (len(data) % 4), DropLate: len(data)%2 == 0, Repair: repair})
			nk, _ := r.(NACKer)
			nacks := func() {
				for nk != nil {
					if _, ok := nk.PollNACK(now); !ok {
						return
					}
				}
			}
			if len(data)%3 == 0 {
				r.SetPaths([]PathInfo{{ID: 0, Active: true, SRTT: time.Millisecond}, {ID: 3, Active: true, SRTT: 9 * time.Millisecond}})
			}
			accepted := map[uint64]int{}
			out := map[uint64]int{}
			pop := func() {
				for {
					it, ok := r.Pop(now)
					if !ok {
						return
					}
					out[it.Seq]++
				}
			}
			var ps [4]uint64
			for d := data; len(d) >= 8; d = d[8:] {
				seq := binary.BigEndian.Uint64(d[:8]) >> 16 // 48 bits
				path := int(d[7] & 3)
				now += mono.Time(d[6]) * mono.Time(100*time.Microsecond)
				for r.Deadline() <= now {
					r.OnTimer(now)
					nacks()
					pop()
					nacks() // a gap Pop gave up on by timing is asked for at once
					if r.Deadline() <= now {
						t.Fatalf("%s: deadline %v stuck at %v", name, r.Deadline(), now)
					}
				}
				ps[path] += uint64(d[5]&1) + 1
				flows := [2][]byte{{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2},
					{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 3, 0, 4}}
				it := Item{Seq: seq, Path: path, PathSeq: ps[path], Arrival: now, Urgent: d[5]&6 == 6,
					PathOrdered: d[5]&8 != 0, Buf: flows[d[5]>>4&1]}
				if r.Push(now, it) {
					accepted[seq]++
				}
				nacks()
				pop()
				if d[5]&0x20 != 0 {
					r.(Shrinker).Shrink() // as after an idle spell
				}
			}
			// Time goes on (a repair that never comes is given up).
			for i := 0; i < 8; i++ {
				now += mono.Time(2 * time.Second)
				r.OnTimer(now)
				nacks()
				pop()
			}
			// Serial arithmetic cannot tell a duplicate from a seq that
			// came round again, so duplicates are only checked when the
			// seqs stay within a quarter of the space.
			var lo, hi uint64 = seqMask, 0
			for seq := range accepted {
				lo, hi = min(lo, seq), max(hi, seq)
			}
			narrow := hi-lo < 1<<46
			for seq, n := range accepted {
				if out[seq] != n || (narrow && n != 1) {
					t.Fatalf("%s: seq %d accepted %d times, delivered %d", name, seq, n, out[seq])
				}
			}
			if len(out) != len(accepted) {
				t.Fatalf("%s: %d delivered, %d accepted", name, len(out), len(accepted))
			}
		}
	})
}

func BenchmarkPushPop(b *testing.B) {
	for _, name := range []string{"passive", "fixed", "adaptive", "equalize"} {
		b.Run(name, func(b *testing.B) {
			r, _ := New(name, Config{})
			r.SetPaths([]PathInfo{{ID: 0, Active: true, SRTT: 10 * time.Millisecond}, {ID: 1, Active: true, SRTT: 30 * time.Millisecond}})
			buf := make([]byte, 1400)
			var ps [2]uint64
			now := mono.Time(0)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				// Two interleaved paths, path 1 ten packets behind.
				now += mono.Time(10 * time.Microsecond)
				seq := uint64(i)
				path := i & 1
				if path == 1 {
					seq -= 20
				}
				ps[path]++
				r.Push(now, Item{Seq: seq & seqMask, Path: path, PathSeq: ps[path], Arrival: now, Buf: buf})
				for {
					if _, ok := r.Pop(now); !ok {
						break
					}
				}
				if r.Deadline() <= now {
					r.OnTimer(now)
				}
			}
		})
	}
}
