// SPDX-License-Identifier: MIT

package mpdccp

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/mptun/mptun/mpdccp/wire"
)

// mpOptions lists a packet's Multipath options as raw TLVs, in order, with
// whether each directly follows the previous one (no other option, no
// padding between them).
type rawMP struct {
	tlv      []byte // 46, Length, MP_OPT, value
	adjacent bool   // starts where the previous Multipath option ended
}

func mpOptions(t *testing.T, b []byte) []rawMP {
	t.Helper()
	var p wire.Packet
	if err := wire.Parse(b, &p); err != nil {
		t.Fatal(err)
	}
	var out []rawMP
	prevEnd := -1
	for i := 0; i < len(p.Options); {
		typ := p.Options[i]
		if typ < 32 { // single-byte options
			i++
			continue
		}
		n := int(p.Options[i+1])
		if typ == wire.OptMultipath {
			out = append(out, rawMP{tlv: p.Options[i : i+n], adjacent: prevEnd == i})
			prevEnd = i + n
		}
		i += n
	}
	return out
}

// TestControlPlacementAndConfirm: every MP_PRIO / MP_ADDADDR / MP_REMOVEADDR
// directly follows an MP_SEQ (the reference implementation copies the 9
// bytes before the option when it confirms it), and every MP_CONFIRM the
// peer sends back holds exactly one entry, that MP_SEQ and the option
// verbatim, which fits the reference's 31-byte parse buffer for options of
// the reference's own sizes.
func TestControlPlacementAndConfirm(t *testing.T) {
	n := newNATPipe(t, false)
	var sentCtrl [][]byte // MP_SEQ + control option, as the client sent them
	confirms := 0
	n.corrupt = func(side int, b []byte) { // a tap: nothing is changed
		opts := mpOptions(t, b)
		for i, o := range opts {
			switch wire.MPType(o.tlv[2]) {
			case wire.MPPrio, wire.MPAddAddr, wire.MPRemoveAddr:
				if i == 0 || !o.adjacent || wire.MPType(opts[i-1].tlv[2]) != wire.MPSeq {
					t.Errorf("side %d: %s not directly after an MP_SEQ", side, wire.MPType(o.tlv[2]))
					continue
				}
				if side == sideClient {
					sentCtrl = append(sentCtrl, append(append([]byte(nil), opts[i-1].tlv...), o.tlv...))
				}
			case wire.MPConfirm:
				if side != sideServer {
					continue
				}
				confirms++
				entry := o.tlv[3:]
				if len(entry) < wire.MPSeqLen+3 || entry[2] != byte(wire.MPSeq) ||
					wire.MPSeqLen+int(entry[wire.MPSeqLen+1]) != len(entry) {
					t.Errorf("MP_CONFIRM %x is not one MP_SEQ + one option", entry)
					continue
				}
				found := false
				for _, s := range sentCtrl {
					found = found || bytes.Equal(s, entry)
				}
				if !found {
					t.Errorf("MP_CONFIRM entry %x echoes nothing sent", entry)
				}
				if typ := wire.MPType(entry[wire.MPSeqLen+2]); typ == wire.MPPrio && len(entry) > 31 {
					t.Errorf("MP_PRIO confirm entry of %d bytes", len(entry))
				}
			}
		}
	}
	// Several control items due at once, on a data-carrying subflow.
	if err := n.conn.SetPrio(n.now, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := n.conn.AdvertiseAddr(n.now, 7, netip.MustParseAddrPort("192.0.2.77:0")); err != nil {
		t.Fatal(err)
	}
	if err := n.conn.AdvertiseAddr(n.now, 8, netip.MustParseAddrPort("[2001:db8::8]:4444")); err != nil {
		t.Fatal(err)
	}
	n.exchange(t, 30)
	n.run(3 * time.Second)
	if len(sentCtrl) < 3 || confirms < 3 {
		t.Fatalf("%d control options sent, %d MP_CONFIRMs back", len(sentCtrl), confirms)
	}
	if pending := len(n.conn.ctrl); pending != 0 {
		t.Fatalf("%d control items never confirmed", pending)
	}
	// The ADDADDR without a port announces the subflow's own port.
	var peers []netip.AddrPort
	for {
		ev, ok := n.ep[1].PollEvent()
		if !ok {
			break
		}
		if ev.Kind == EventPeerAddr {
			peers = append(peers, ev.Remote)
		}
	}
	v4 := netip.MustParseAddr("192.0.2.77")
	want := map[netip.AddrPort]bool{ // the port of whichever subflow carried it
		netip.AddrPortFrom(v4, n.public[0].Port()): true, netip.AddrPortFrom(v4, n.public[1].Port()): true,
		netip.MustParseAddrPort("[2001:db8::8]:4444"): true}
	ok := len(peers) == 2
	for _, p := range peers {
		ok = ok && want[p]
	}
	if !ok {
		t.Fatalf("peer addresses %v, want %v (port 0 = the subflow's port)", peers, want)
	}
}

// TestAddAddrExplicitPortZero: RFC 9897's example ADDADDR with an explicit
// port 0 parses, authenticates as an absent port does, and is re-encoded
// byte for byte (so that MP_CONFIRM echoes it verbatim).
func TestAddAddrExplicitPortZero(t *testing.T) {
	raw := []byte{byte(wire.MPAddAddr), 1, 0xca, 0xfe, 0xba, 0xbe, 192, 0, 2, 1, 0, 0}
	var o wire.MPOption
	if err := wire.ParseMP(raw, &o); err != nil {
		t.Fatalf("explicit port 0 rejected: %v", err)
	}
	if o.Port != 0 || !o.HasPort {
		t.Fatalf("parsed %+v", o)
	}
	absent := wire.MPOption{Type: wire.MPAddAddr, AddrID: 1, Nonce: 0xcafebabe, Addr: netip.MustParseAddr("192.0.2.1")}
	if !bytes.Equal(wire.HMACInput(nil, &o), wire.HMACInput(nil, &absent)) {
		t.Fatal("explicit port 0 authenticates differently from an absent port")
	}
	buf := make([]byte, 32)
	m, err := wire.PutMP(buf, &o)
	if err != nil || !bytes.Equal(buf[2:m], raw) {
		t.Fatalf("re-encoded as %x, received %x", buf[2:m], raw)
	}
}

// FuzzConfirmEntry: confirmEntryLen never reads past its input, and what it
// accepts is one MP_SEQ followed by one whole option.
func FuzzConfirmEntry(f *testing.F) {
	f.Add([]byte{46, 9, 4, 0, 0, 0, 0, 0, 7, 46, 4, 9, 3})
	f.Add([]byte{46, 9, 4, 0, 0, 0, 0, 0, 7, 46, 40})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, q []byte) {
		n := confirmEntryLen(q)
		if n == 0 {
			return
		}
		if n > len(q) {
			t.Fatalf("entry of %d bytes in %d", n, len(q))
		}
		var o wire.MPOption
		if err := wire.ParseMP(q[2:wire.MPSeqLen], &o); err != nil || o.Type != wire.MPSeq {
			t.Fatalf("entry does not start with MP_SEQ: %x", q[:n])
		}
		if int(q[wire.MPSeqLen+1]) != n-wire.MPSeqLen {
			t.Fatalf("second option's length %d, entry %d", q[wire.MPSeqLen+1], n)
		}
	})
}
