// SPDX-License-Identifier: MIT

package noise

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/mptun/mptun/internal/netsim"
)

func pair(t testing.TB, seed uint64) (*Identity, *Identity, io.Reader) {
	rnd := netsim.RandReader(rand.New(rand.NewPCG(seed, 1)))
	a, _ := GeneratePrivateKey(rnd)
	b, _ := GeneratePrivateKey(rnd)
	ia, err := NewIdentity(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := NewIdentity(b)
	if err != nil {
		t.Fatal(err)
	}
	return ia, ib, rnd
}

func TestHandshake(t *testing.T) {
	cli, srv, rnd := pair(t, 1)
	psk := Key{7}
	pay := make([]byte, InitPayloadLen)
	pay[0] = 42
	in, err := Initiate(rnd, cli, srv.Public, psk, []byte("prologue"), pay)
	if err != nil {
		t.Fatal(err)
	}
	msg := in.Message()
	if len(msg) != InitiationLen || !srv.CheckMAC1(msg) {
		t.Fatalf("mac1 of a good message refused")
	}
	if bytes.Contains(msg, cli.Public[:]) {
		t.Fatal("initiator's static key in the clear (IK hides it)")
	}
	p, err := srv.ConsumeInitiation(msg, []byte("prologue"))
	if err != nil {
		t.Fatal(err)
	}
	if p.PeerStatic != cli.Public || p.Payload[0] != 42 {
		t.Fatalf("peer %v payload %v", p.PeerStatic, p.Payload)
	}
	resp, ss, err := p.Respond(nil, rnd, psk, []byte{9})
	if err != nil {
		t.Fatal(err)
	}
	cs, rp, err := in.ConsumeResponse(resp, make([]byte, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if rp[0] != 9 || cs.Send != ss.Recv || cs.Recv != ss.Send || cs.Hash != ss.Hash || cs.Send == cs.Recv {
		t.Fatalf("sessions differ: %+v %+v", cs, ss)
	}
	if ss.PeerStatic != cli.Public || cs.PeerStatic != srv.Public {
		t.Fatal("peer statics")
	}
}

func TestHandshakeFailures(t *testing.T) {
	cli, srv, rnd := pair(t, 2)
	pay := make([]byte, InitPayloadLen)
	in, _ := Initiate(rnd, cli, srv.Public, Key{}, []byte("p"), pay)
	msg := append([]byte(nil), in.Message()...)
	if _, err := srv.ConsumeInitiation(msg, []byte("other prologue")); err == nil {
		t.Fatal("prologue mismatch accepted")
	}
	for i := 0; i < InitiationLen-32; i += 7 {
		bad := append([]byte(nil), msg...)
		bad[i] ^= 1
		if _, err := srv.ConsumeInitiation(bad, []byte("p")); err == nil {
			t.Fatalf("tampered byte %d accepted", i)
		}
		if srv.CheckMAC1(bad) {
			t.Fatalf("tampered byte %d passes mac1", i)
		}
	}
	// Another responder key: mac1 fails, decryption fails.
	_, other, _ := pair(t, 3)
	if other.CheckMAC1(msg) {
		t.Fatal("mac1 for another responder")
	}
	p, _ := srv.ConsumeInitiation(msg, []byte("p"))
	// A wrong preshared key on one side fails the response.
	resp, _, _ := p.Respond(nil, rnd, Key{1}, []byte{0})
	if _, _, err := in.ConsumeResponse(resp, nil); err == nil {
		t.Fatal("psk mismatch accepted")
	}
	// The state survives a forged response: the real one still works.
	p2, _ := srv.ConsumeInitiation(msg, []byte("p"))
	resp2, _, _ := p2.Respond(nil, rnd, Key{}, []byte{0})
	if _, _, err := in.ConsumeResponse(resp2, nil); err != nil {
		t.Fatalf("real response after a forged one: %v", err)
	}
}

func TestCookie(t *testing.T) {
	cli, srv, rnd := pair(t, 4)
	var jar Cookies
	in, _ := Initiate(rnd, cli, srv.Public, Key{}, nil, make([]byte, InitPayloadLen))
	src := []byte{10, 0, 0, 1, 0x9c, 0x40}
	if jar.CheckMAC2(rnd, 0, in.Message(), src) {
		t.Fatal("mac2 without a cookie")
	}
	reply := jar.Reply(nil, rnd, 0, srv, in.Message(), src)
	if len(reply) != CookieReplyLen {
		t.Fatalf("reply %d bytes", len(reply))
	}
	bad := append([]byte(nil), reply...)
	bad[30] ^= 1
	if in.ConsumeCookieReply(bad) == nil {
		t.Fatal("tampered cookie reply accepted")
	}
	if err := in.ConsumeCookieReply(reply); err != nil {
		t.Fatal(err)
	}
	if !srv.CheckMAC1(in.Message()) || !jar.CheckMAC2(rnd, 1, in.Message(), src) {
		t.Fatal("message with cookie refused")
	}
	if jar.CheckMAC2(rnd, 1, in.Message(), []byte{10, 0, 0, 2, 0x9c, 0x40}) {
		t.Fatal("cookie valid for another source")
	}
	if jar.CheckMAC2(rnd, int64(CookieLifetime)+1, in.Message(), src) {
		t.Fatal("cookie outlived its secret")
	}
}

func TestKeyText(t *testing.T) {
	_, _, rnd := pair(t, 5)
	k, _ := GeneratePrivateKey(rnd)
	back, err := ParseKey(k.String())
	if err != nil || back != k || len(k.String()) != 44 {
		t.Fatalf("%v %v", back, err)
	}
	for _, bad := range []string{"", "abc", k.String()[:40], "!!!!" + k.String()[4:]} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func BenchmarkHandshake(b *testing.B) {
	cli, srv, rnd := pair(b, 6)
	pay := make([]byte, InitPayloadLen)
	for b.Loop() {
		in, _ := Initiate(rnd, cli, srv.Public, Key{}, nil, pay)
		p, _ := srv.ConsumeInitiation(in.Message(), nil)
		resp, _, _ := p.Respond(nil, rnd, Key{}, []byte{0})
		if _, _, err := in.ConsumeResponse(resp, nil); err != nil {
			b.Fatal(err)
		}
	}
}
