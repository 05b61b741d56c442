// SPDX-License-Identifier: MIT

package mpdccp

import (
	"slices"
	"sync"

	"github.com/mptun/mptun/ccid"
	"github.com/mptun/mptun/mpdccp/wire"
)

// CCID negotiation (RFC 4340 §10 and §6.3.1).
//
// The CCID is a server-priority feature located at each half-connection's
// sender: a sender offers a preference list with Change L(CCID, ...), the
// receiver answers Confirm R(CCID, value, its own list). The value is the
// first entry of the DCCP server's list that the client's list also has;
// with none in common the feature keeps its value, the default 2.
//
//   - A sender offers its controller's own CCID and then 2 (bbr: 248, 2),
//     so that a peer which knows only RFC 4341 still connects. "none" is not
//     congestion control and offers only its own, 249: it must not claim
//     CCID 2. A peer that does not know 249 leaves the default, 2.
//   - The sender runs the controller of the value the peer confirms, so
//     both ends agree on the congestion control in force: a bbr subflow
//     whose peer confirms 2 runs ccid2.
//   - As a receiver mptun runs the same Ack Vector feedback for every CCID
//     it has a controller for (2, 248, 249), so it has no preference of its
//     own and takes the first of the sender's list it knows, in either role.

// ccidRFC4341 is CCID 2, TCP-like congestion control (RFC 4341), the
// feature's default value (RFC 4340 §10).
const ccidRFC4341 = 2

// maxCCIDList bounds the preference lists (the feature option's room).
const maxCCIDList = 5

// ccidTable maps each CCID number to the registered controllers that
// negotiate it, in name order ("ccid2" comes before any test or fallback
// controller that also says 2).
var ccidTable = sync.OnceValue(func() map[uint8][]string {
	m := make(map[uint8][]string)
	for _, name := range ccid.Names() { // sorted
		if c, err := ccid.New(name, ccid.Config{}); err == nil {
			m[c.CCID()] = append(m[c.CCID()], name)
		}
	}
	return m
})

// controllerFor names the controller to run for CCID id: preferred when it
// has that number, else the first registered one; "" if none has it.
func controllerFor(id uint8, preferred string) string {
	names := ccidTable()[id]
	if slices.Contains(names, preferred) {
		return preferred
	}
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// knownCCIDs lists the CCIDs mptun has a controller (and so a receiver) for.
func knownCCIDs() []uint8 {
	var ids []uint8
	for id := range ccidTable() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ccidOffer is the preference list a controller offers for its
// half-connection.
func ccidOffer(cc ccid.Controller) []uint8 {
	own := cc.CCID()
	if own == ccidRFC4341 || own == ccid.CCIDNone {
		return []uint8{own}
	}
	return []uint8{own, ccidRFC4341}
}

// reconcileSP is RFC 4340 §6.3.1's server-priority rule: the first entry of
// the server's list that the client's list also has.
func reconcileSP(server, client []uint8) (uint8, bool) {
	for _, v := range server {
		if slices.Contains(client, v) {
			return v, true
		}
	}
	return 0, false
}

// confirmList is a Confirm's value list: the chosen value, then the
// confirmer's preference list.
func confirmList(dst []byte, chosen uint8, prefs []uint8) []byte {
	dst = append(dst, chosen)
	for _, v := range prefs {
		if len(dst) > maxCCIDList {
			break
		}
		dst = append(dst, v)
	}
	return dst
}

// peerCCIDChange answers the peer's Change L(CCID, list) for the peer's own
// half-connection: the first entry of its list we can receive, or the
// unchanged default 2.
func (sf *subflow) peerCCIDChange(vals []byte) {
	known := knownCCIDs()
	chosen := uint8(ccidRFC4341)
	for _, v := range vals {
		if slices.Contains(known, v) {
			chosen = v
			break
		}
	}
	sf.peerCCID = chosen
	var buf [maxCCIDList + 1]byte
	sf.addConfirm(wire.OptConfirmR, wire.FeatCCID, confirmList(buf[:0], chosen, known))
}

// ownCCIDChange answers the peer's Change R(CCID, list), a request that we
// change our half-connection's CCID: server-priority reconciliation of our
// offer and its list; the value stays as it is if they share nothing.
func (sf *subflow) ownCCIDChange(vals []byte) {
	offer := ccidOffer(sf.cc)
	server, client := offer, []uint8(vals)
	if sf.conn.ep.cfg.Role == Client {
		server, client = client, server
	}
	chosen, ok := reconcileSP(server, client)
	if !ok || !sf.useCCID(chosen) {
		chosen = sf.cc.CCID()
	}
	sf.clearChange(wire.OptChangeL, wire.FeatCCID)
	var buf [maxCCIDList + 1]byte
	sf.addConfirm(wire.OptConfirmL, wire.FeatCCID, confirmList(buf[:0], chosen, offer))
}

// ownCCIDConfirmed takes the peer's Confirm R(CCID, value, ...) answering
// our Change L: the value must be one we offered, or the default 2 (no
// value in common, or an empty Confirm from a peer that knows no list); the
// subflow then runs that CCID's controller. It reports false for a value
// we cannot accept.
func (sf *subflow) ownCCIDConfirmed(vals []byte) bool {
	if !sf.changePending(wire.OptChangeL, wire.FeatCCID) {
		return true // a repeated Confirm: already settled
	}
	chosen := uint8(ccidRFC4341)
	if len(vals) > 0 {
		chosen = vals[0]
	}
	if chosen != ccidRFC4341 && !slices.Contains(sf.ccidOffered[:sf.ccidOfferedN], chosen) || !sf.useCCID(chosen) {
		return false
	}
	sf.clearChange(wire.OptChangeL, wire.FeatCCID)
	return true
}

// useCCID makes sf run the controller for CCID id, replacing the current
// one when it has another number. A switch happens during the handshake,
// before any data: the new controller starts afresh.
func (sf *subflow) useCCID(id uint8) bool {
	if sf.cc.CCID() == id {
		return true
	}
	name := controllerFor(id, sf.cc.Name())
	if name == "" {
		return false
	}
	cfg := sf.conn.ep.cfg.CC
	if cfg.MSS == 0 {
		cfg.MSS = sf.conn.ep.cfg.MaxPacket
	}
	cfg.History = sf.hist
	cc, err := ccid.New(name, cfg)
	if err != nil {
		return false
	}
	sf.cc = cc
	return true
}
