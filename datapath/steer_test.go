// SPDX-License-Identifier: MIT

package datapath

import (
	"net/netip"
	"testing"

	"github.com/mptun/mptun/mpdccp/wire"
)

func TestCILayout(t *testing.T) {
	for n, want := range map[int]uint8{1: 0, 2: 1, 3: 2, 4: 2, 5: 3, 64: 6, 256: 8} {
		if got := ShardBitsFor(n); got != want {
			t.Errorf("ShardBitsFor(%d) = %d, want %d", n, got, want)
		}
	}
	l := CILayout{ServerBits: 4, ShardBits: 3, Server: 9}
	for s := 0; s < 8; s++ {
		prefix, bits := l.Prefix(s)
		if bits != 7 {
			t.Fatalf("prefix bits %d", bits)
		}
		ci := prefix<<(32-bits) | 0x1ffffff&0xabcdef
		if l.Shard(ci) != s || l.ServerOf(ci) != 9 {
			t.Errorf("CI %#08x: shard %d server %d, want %d and 9", ci, l.Shard(ci), l.ServerOf(ci), s)
		}
	}
	if (CILayout{}).Shard(0xffffffff) != 0 {
		t.Error("one shard: not 0")
	}
}

// request builds a Request from port src, joining token when join is set.
func request(t *testing.T, src uint16, token uint32, join bool) []byte {
	t.Helper()
	var b wire.Builder
	buf := make([]byte, 256)
	if err := b.Begin(buf, &wire.Header{SrcPort: src, DstPort: 6511, Type: wire.TypeRequest, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if join {
		if err := b.MP(&wire.MPOption{Type: wire.MPJoin, AddrID: 1, Token: token, Nonce: 5}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.Finish(nil)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func TestSteerTable(t *testing.T) {
	l := CILayout{ShardBits: 2}
	st := NewSteer(4, l)
	tab := st.newTable()
	a := netip.MustParseAddrPort("192.0.2.1:4000")
	b := netip.MustParseAddrPort("192.0.2.2:4000")
	data := func(port uint16) []byte {
		return []byte{byte(port >> 8), byte(port), 0x19, 0x6f, 4, 0, 0, byte(wire.TypeData) << 1}
	}

	// Subflows the owners report are steered to them, after update.
	st.Indexer(3)(a, 1111, true)
	if got := tab.shardFor(data(1111), a); got == 3 && !tab.q.has.Load() {
		t.Log("(hash happened to pick 3)")
	}
	tab.update()
	if got := tab.shardFor(data(1111), a); got != 3 {
		t.Errorf("known subflow steered to %d, want 3", got)
	}
	// A join goes where its token says, whatever its source.
	prefix, bits := l.Prefix(2)
	if got := tab.shardFor(request(t, 2222, prefix<<(32-bits)|0x123, true), b); got != 2 {
		t.Errorf("join steered to %d, want 2", got)
	}
	// A first Request: by source, the same every time.
	first := tab.shardFor(request(t, 2222, 0, false), b)
	for range 3 {
		if got := tab.shardFor(request(t, 2222, 0, false), b); got != first {
			t.Fatalf("first Request steered to %d then %d", first, got)
		}
	}
	// From a new address (NAT rebinding), the owner of the DCCP port.
	c := netip.MustParseAddrPort("198.51.100.9:999")
	if got := tab.shardFor(data(1111), c); got != 3 {
		t.Errorf("rebinding subflow steered to %d, want 3", got)
	}
	// Two owners with that port: offered to both.
	st.Indexer(1)(b, 1111, true)
	tab.update()
	if got := tab.shardFor(data(1111), c); got != -1 {
		t.Errorf("ambiguous port steered to %d, want -1", got)
	}
	if got := tab.candidates(data(1111), nil); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("candidates %v, want [1 3]", got)
	}
	// Removal forgets the subflow and the port.
	st.Indexer(3)(a, 1111, false)
	st.Indexer(1)(b, 1111, false)
	tab.update()
	if len(tab.subflows) != 0 || len(tab.ports) != 0 {
		t.Errorf("after removal: %d subflows, %d ports", len(tab.subflows), len(tab.ports))
	}
	// Short garbage still gets an owner (which drops it).
	if got := tab.shardFor([]byte{1}, a); got < 0 || got > 3 {
		t.Errorf("garbage steered to %d", got)
	}
}

func TestHashShardSpreads(t *testing.T) {
	counts := make([]int, 4)
	for i := 0; i < 4000; i++ {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(30000+i))
		counts[hashShard(a, 4)]++
	}
	for s, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("shard %d got %d of 4000 sources", s, n)
		}
	}
}
