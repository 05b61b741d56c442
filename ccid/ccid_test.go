// SPDX-License-Identifier: MIT

package ccid

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mptun/mptun/internal/mono"
)

const ms = mono.Time(time.Millisecond)

// vector builds an Ack Vector (newest first) for the received set, from
// hi down to lo; ecn marks which of them carried CE.
func vector(hi, lo uint64, received func(uint64) bool, ecn func(uint64) bool) *Feedback {
	fb := &Feedback{AckNo: hi & seqMask}
	state := func(s uint64) AckState {
		switch {
		case !received(s):
			return NotReceived
		case ecn != nil && ecn(s):
			return ReceivedECNMarked
		}
		return Received
	}
	for s := hi; ; {
		st := state(s)
		n := uint64(1)
		for s-n >= lo && s-n <= s && state(s-n) == st {
			n++
		}
		fb.Runs = append(fb.Runs, AckRun{High: s & seqMask, N: uint32(n), State: st})
		if s-n < lo || s < n {
			break
		}
		s -= n
	}
	return fb
}

func TestRegistry(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"bbr", "ccid2", "none"}) {
		t.Fatalf("Names() = %v", got)
	}
	if _, err := New("cubic", Config{}); err == nil {
		t.Fatal("New(unknown) did not fail")
	}
	for _, n := range Names() {
		c, err := New(n, Config{})
		if err != nil || c.Name() != n {
			t.Fatalf("New(%q) = %v, %v", n, c, err)
		}
	}
	if c, _ := New("bbr", Config{}); c.CCID() != 248 {
		t.Fatalf("bbr CCID %d", c.CCID())
	}
	if c, _ := New("none", Config{}); c.CCID() != 249 { // not 2: it is not RFC 4341
		t.Fatalf("none CCID %d", c.CCID())
	}
}

// TestPacerExact checks sub-millisecond release times: at 12.5 MB/s a
// 1250-byte packet is due every 100 µs, to the nanosecond.
func TestPacerExact(t *testing.T) {
	var p Pacer
	p.SetRate(1, 12.5e6, 1250)
	now := mono.Time(1)
	p.OnSent(now, 1250) // spends the initial burst
	for i := 0; i < 50; i++ {
		at := p.SendTime(now, 1250)
		if want := now.Add(100 * time.Microsecond); at != want && i > 0 {
			t.Fatalf("packet %d: release %v after the previous, want 100µs", i, at.Sub(now))
		}
		now = at
		p.OnSent(now, 1250)
	}
	if st := p.Stats(); st.Samples == 0 || st.LateMax != 0 {
		t.Fatalf("stats %+v: want samples with zero lateness", st)
	}
	// A sender that wakes 30 µs late is measured as such.
	at := p.SendTime(now, 1250)
	p.OnSent(at.Add(30*time.Microsecond), 1250)
	if st := p.Stats(); st.LateMax != 30*time.Microsecond {
		t.Fatalf("LateMax %v, want 30µs", st.LateMax)
	}
}

func TestSequenceWrap(t *testing.T) {
	c := NewCCID2(Config{InitialWindow: 10})
	start := uint64(1<<48 - 5)
	for i := uint64(0); i < 10; i++ {
		c.OnPacketSent(ms*mono.Time(1+i), start+i, 1000, true)
	}
	if c.State().InFlight != 10 {
		t.Fatalf("in flight %d", c.State().InFlight)
	}
	fb := vector(start+9, start, func(uint64) bool { return true }, nil)
	c.OnFeedback(50*ms, fb)
	st := c.State()
	if st.InFlight != 0 || st.PacketsAcked != 10 || st.PacketsLost != 0 {
		t.Fatalf("after wrap: %+v", st)
	}
}

// lossSetup sends 20 packets, the peer reports all but seq 5.
func lossSetup(t *testing.T) (*CCID2, mono.Time) {
	c := NewCCID2(Config{InitialWindow: 20})
	for i := uint64(0); i < 20; i++ {
		c.OnPacketSent(mono.Time(i)*ms/10+ms, i, 1000, true)
	}
	now := 60 * ms
	c.OnFeedback(now, vector(19, 0, func(s uint64) bool { return s != 5 }, nil))
	return c, now
}

func TestCCID2LossHalvesOncePerWindow(t *testing.T) {
	c, now := lossSetup(t)
	st := c.State()
	if st.PacketsLost != 1 || st.CongestionEvents != 1 || st.Cwnd != 10 || st.Ssthresh != 10 {
		t.Fatalf("after one loss: %+v", st)
	}
	// A second loss from the same window does not reduce again.
	c2 := NewCCID2(Config{InitialWindow: 20})
	for i := uint64(0); i < 20; i++ {
		c2.OnPacketSent(mono.Time(i)*ms/10+ms, i, 1000, true)
	}
	c2.OnFeedback(now, vector(19, 0, func(s uint64) bool { return s != 5 && s != 9 }, nil))
	if st := c2.State(); st.PacketsLost != 2 || st.CongestionEvents != 1 || st.Cwnd != 10 {
		t.Fatalf("two losses in a window: %+v", st)
	}
}

func TestCCID2SpuriousUndo(t *testing.T) {
	c, now := lossSetup(t)
	// Seq 5 was only late.
	c.OnFeedback(now+5*ms, vector(19, 0, func(uint64) bool { return true }, nil))
	st := c.State()
	if st.SpuriousEvents != 1 || st.Cwnd != 20 || st.Ssthresh != 0 {
		t.Fatalf("after late arrival: %+v (want cwnd 20 restored, ssthresh ∞)", st)
	}
	// Having seen reordering, the detector now waits: a hole is not a loss
	// while the reordering window has not passed.
	for i := uint64(20); i < 40; i++ {
		c.OnPacketSent(now+6*ms+mono.Time(i-20)*ms/10, i, 1000, true)
	}
	c.OnFeedback(now+70*ms, vector(39, 0, func(s uint64) bool { return s != 25 }, nil))
	if st := c.State(); st.PacketsLost != 1 {
		t.Fatalf("hole declared lost at once after reordering was seen: %+v", st)
	}
	if d := c.Deadline(); d == mono.Never || d <= now+70*ms {
		t.Fatalf("no RACK deadline pending: %v", d)
	}
	c.OnTimer(c.Deadline())
	if st := c.State(); st.PacketsLost != 2 || st.CongestionEvents != 2 {
		t.Fatalf("RACK timer did not declare the hole lost: %+v", st)
	}
}

func TestCCID2ECN(t *testing.T) {
	for _, abe := range []bool{false, true} {
		c := NewCCID2(Config{InitialWindow: 20, ABE: abe})
		for i := uint64(0); i < 20; i++ {
			c.OnPacketSent(mono.Time(i)*ms/10+ms, i, 1000, true)
		}
		c.OnFeedback(60*ms, vector(19, 0, func(uint64) bool { return true }, func(s uint64) bool { return s == 7 }))
		st := c.State()
		want := 10
		if abe {
			want = 16
		}
		if st.ECNMarks != 1 || st.CongestionEvents != 1 || st.Cwnd != want || st.PacketsLost != 0 {
			t.Fatalf("ABE=%v: %+v, want cwnd %d", abe, st, want)
		}
	}
}

func TestCCID2RTOBackoff(t *testing.T) {
	c := NewCCID2(Config{})
	c.OnPacketSent(0, 100, 1000, true)
	d1 := c.Deadline()
	if d1 != mono.Time(initRTO) {
		t.Fatalf("first deadline %v, want %v", time.Duration(d1), initRTO)
	}
	c.OnTimer(d1)
	st := c.State()
	if st.Timeouts != 1 || st.Cwnd != 1 || st.InFlight != 0 || c.AckRatio() != 1 {
		t.Fatalf("after RTO: %+v ackratio %d", st, c.AckRatio())
	}
	c.OnPacketSent(d1, 101, 1000, true)
	if d2 := c.Deadline(); d2.Sub(d1) != 2*initRTO {
		t.Fatalf("backed-off RTO %v, want %v", d2.Sub(d1), 2*initRTO)
	}
}

func TestCCID2IdleRestart(t *testing.T) {
	c := NewCCID2(Config{InitialWindow: 40})
	for i := uint64(0); i < 40; i++ {
		c.OnPacketSent(ms, i, 1000, true)
	}
	c.OnFeedback(51*ms, vector(39, 0, func(uint64) bool { return true }, nil))
	before := c.State().Cwnd
	// Idle for 2 s (several RTOs), then send again.
	c.OnPacketSent(2051*ms, 40, 1000, true)
	after := c.State().Cwnd
	if after >= before || after < c.iw {
		t.Fatalf("cwnd after idle %d (before %d, iw %d)", after, before, c.iw)
	}
}

func TestAckRatioBound(t *testing.T) {
	c := NewCCID2(Config{})
	for cwnd := 1; cwnd < 5000; cwnd++ {
		c.cwnd = cwnd
		r := c.AckRatio()
		if r < 1 || r > (cwnd+1)/2 && cwnd > 1 {
			t.Fatalf("cwnd %d: Ack Ratio %d exceeds ceil(cwnd/2)", cwnd, r)
		}
	}
}

func TestNoneRateCap(t *testing.T) {
	c := NewNone(Config{RateLimit: 8e6, MSS: 1000}) // 1 MB/s: 1 ms per 1000 B
	now := mono.Time(1)
	var sent []mono.Time
	for i := uint64(0); i < 20; i++ {
		if !c.CanSend(now) {
			t.Fatal("none refused to send")
		}
		now = mono.Max(now, c.SendTime(now))
		c.OnPacketSent(now, i, 1000, true)
		sent = append(sent, now)
	}
	if span := sent[19].Sub(sent[2]); span < 16*time.Millisecond || span > 18*time.Millisecond {
		t.Fatalf("17 packets took %v at 1 MB/s, want ~17 ms", span)
	}
}

// TestPerPacketAllocs: steady-state send and acknowledge without
// allocating.
func TestPerPacketAllocs(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr", "none"} {
		c, _ := New(name, Config{})
		var seq uint64
		now := mono.Time(1)
		fb := &Feedback{Runs: make([]AckRun, 1)}
		step := func() {
			now += 100 * mono.Time(time.Microsecond)
			seq++
			c.OnPacketSent(now, seq, 1400, true)
			if seq > 10 {
				fb.AckNo = seq - 10
				fb.Runs[0] = AckRun{High: seq - 10, N: 2, State: Received}
				c.OnFeedback(now, fb)
			}
			_ = c.CanSend(now)
			_ = c.SendTime(now)
		}
		for i := 0; i < 5000; i++ {
			step()
		}
		if a := testing.AllocsPerRun(2000, step); a != 0 {
			t.Errorf("%s: %.2f allocations per packet", name, a)
		}
	}
}

func FuzzOnFeedback(f *testing.F) {
	f.Add(uint64(0), []byte{0, 5, 0, 3, 2, 3, 1, 1, 0})
	f.Add(uint64(1<<48-3), []byte{0, 40, 0})
	f.Add(uint64(77), []byte{3, 255, 255, 1, 0, 1})
	f.Fuzz(func(t *testing.T, start uint64, cells []byte) {
		for _, name := range []string{"ccid2", "bbr", "none"} {
			c, _ := New(name, Config{})
			now := mono.Time(1)
			rng := rand.New(rand.NewPCG(start, 1))
			seq := start
			for round := 0; round < 4; round++ {
				for i := 0; i < 16; i++ {
					now += mono.Time(time.Millisecond)
					c.OnPacketSent(now, seq, 1000, i%5 != 0)
					seq++
				}
				fb := &Feedback{AckNo: (seq - uint64(rng.IntN(20))) & seqMask, Elapsed: time.Duration(rng.IntN(5)) * time.Millisecond}
				hi := fb.AckNo
				for i := 0; i+2 < len(cells); i += 3 {
					n := uint32(cells[i+1])<<8 | uint32(cells[i+2])
					fb.Runs = append(fb.Runs, AckRun{High: hi & seqMask, N: n, State: AckState(cells[i] & 3)})
					hi -= uint64(n)
				}
				now += 20 * mono.Time(time.Millisecond)
				c.OnFeedback(now, fb)
				if d := c.Deadline(); d <= now+mono.Time(time.Minute) {
					c.OnTimer(mono.Max(now, d))
				}
				st := c.State()
				if st.InFlight < 0 || uint64(st.InFlight) > st.PacketsSent {
					t.Fatalf("%s: in flight %d of %d sent", name, st.InFlight, st.PacketsSent)
				}
			}
		}
	})
}

func BenchmarkCCID2PerPacket(b *testing.B) { benchPerPacket(b, "ccid2") }
func BenchmarkBBRPerPacket(b *testing.B)   { benchPerPacket(b, "bbr") }

func benchPerPacket(b *testing.B, name string) {
	c, _ := New(name, Config{})
	fb := &Feedback{Runs: make([]AckRun, 1)}
	now := mono.Time(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		seq := uint64(i)
		now += 10 * mono.Time(time.Microsecond)
		c.OnPacketSent(now, seq, 1400, true)
		if seq > 100 && seq%2 == 0 {
			fb.AckNo = seq - 100
			fb.Runs[0] = AckRun{High: seq - 100, N: 200, State: Received}
			c.OnFeedback(now, fb)
		}
	}
}

// TestECNInSim: a stretch of CE marks (no loss) makes both controllers back
// off, and they recover after it.
func TestECNInSim(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr"} {
		sp := pathSpec{RateBps: 20e6, RTT: 40 * time.Millisecond, CEFrom: 4 * time.Second, CETo: 5 * time.Second}
		n := newSimNet(1, sp)
		f := n.addFlow(name, Config{HyStart: true}, 0)
		n.run(4 * time.Second)
		before := f.cc.State()
		n.run(5 * time.Second)
		during := f.cc.State()
		n.run(10 * time.Second)
		// CCID2 restarts from cwnd 1 after a second of marks; by 3 s later
		// its linear growth has refilled the 71-packet pipe.
		after := f.rcv.goodput(8*time.Second, 10*time.Second)
		marked := f.rcv.goodput(4500*time.Millisecond, 5*time.Second)
		t.Logf("%s: goodput while all packets CE-marked %.2f Mbit/s, after %.2f; ECN marks %d, events %d→%d, lost %d→%d",
			name, marked/1e6, after/1e6, during.ECNMarks, before.CongestionEvents, during.CongestionEvents, before.PacketsLost, during.PacketsLost)
		if during.ECNMarks == 0 || during.CongestionEvents <= before.CongestionEvents {
			t.Errorf("%s: CE marks not treated as congestion", name)
		}
		if marked > 0.8*sp.RateBps {
			t.Errorf("%s: did not back off under CE (%.2f Mbit/s)", name, marked/1e6)
		}
		if after < 0.9*sp.RateBps {
			t.Errorf("%s: did not recover after CE (%.2f Mbit/s)", name, after/1e6)
		}
	}
}

// outage sends a window, acks it, sends another one into a blackhole and
// lets three timeouts fire; it returns the time after them.
func outage(c Controller, n int) (mono.Time, int) {
	for i := 0; i < n; i++ {
		c.OnPacketSent(ms, uint64(i), 1000, true)
	}
	c.OnFeedback(41*ms, vector(uint64(n-1), 0, func(uint64) bool { return true }, nil))
	before := c.State().Cwnd
	seq := uint64(n)
	now := 50 * ms
	for i := 0; i < n; i++ {
		c.OnPacketSent(now, seq, 1000, true)
		seq++
	}
	for k := 0; k < 3; k++ {
		now = c.Deadline()
		c.OnTimer(now)
		c.OnPacketSent(now, seq, 1000, true) // the probe after the timeout, lost too
		seq++
	}
	return now, before
}

// After an outage the engine tells the controller the path is back: it
// must send again at once, at about its old window, not from one packet
// behind a backed-off timer.
func TestPathRestored(t *testing.T) {
	for _, name := range []string{"ccid2", "bbr"} {
		c, _ := New(name, Config{InitialWindow: 40})
		now, before := outage(c, 40)
		if c.State().Timeouts < 3 {
			t.Fatalf("%s: %d timeouts", name, c.State().Timeouts)
		}
		c.(PathRestorer).OnPathRestored(now + ms)
		st := c.State()
		if st.InFlight != 0 || !c.CanSend(now+ms) {
			t.Errorf("%s: after restore in flight %d, can send %v", name, st.InFlight, c.CanSend(now+ms))
		}
		c.OnPacketSent(now+ms, uint64(2*40+3), 1000, true)
		if d := c.Deadline(); d.Sub(now+ms) > 2*initRTO {
			t.Errorf("%s: next timeout %v after a send, still backed off", name, d.Sub(now+ms))
		}
		switch name {
		case "ccid2":
			if st.Ssthresh < before {
				t.Errorf("ccid2: ssthresh %d after restore, want ≥ the pre-outage window %d", st.Ssthresh, before)
			}
		case "bbr":
			if st.Phase != "startup" || st.Cwnd < before {
				t.Errorf("bbr: phase %q cwnd %d after restore, want startup with ≥ %d", st.Phase, st.Cwnd, before)
			}
		}
	}
}

// BBR's Ack Ratio: about 32 acks per window on slow paths; at high packet
// rates stretched towards ackRateTarget acks per second, but never above
// 64, ceil(cwnd/2) (RFC 4341 §6.1.2), nor to fewer than minAcksPerWindow
// acks per window.
func TestBBRAckRatioStretch(t *testing.T) {
	b := NewBBR(Config{MSS: 1400})
	mss := float64(b.mss)
	for _, c := range []struct {
		cwnd int     // packets
		pps  float64 // delivery rate
		want int
	}{
		{cwnd: 100, pps: 8500, want: 2},     // 100 Mbit/s: 32 acks per window
		{cwnd: 650, pps: 8500, want: 16},    // a large window at a slow rate: 32 per window
		{cwnd: 650, pps: 100000, want: 64},  // 1.1 Gbit/s, the veth benchmark
		{cwnd: 250, pps: 100000, want: 16},  // at least 8 acks per window
		{cwnd: 650, pps: 50000, want: 32},   // about 2000 acks/s
		{cwnd: 5000, pps: 500000, want: 64}, // never above 64
	} {
		b.cwnd, b.bw = float64(c.cwnd)*mss, c.pps*mss
		if got := b.AckRatio(); got != c.want {
			t.Errorf("cwnd %d, %.0f pps: Ack Ratio %d, want %d", c.cwnd, c.pps, got, c.want)
		}
	}
	for cwnd := 1; cwnd < 3000; cwnd++ {
		for _, pps := range []float64{0, 1e4, 1e5, 1e6} {
			b.cwnd, b.bw = float64(cwnd)*mss, pps*mss
			r := b.AckRatio()
			if r < 1 || r > 64 || cwnd > 1 && r > (cwnd+1)/2 {
				t.Fatalf("cwnd %d, %.0f pps: Ack Ratio %d out of bounds", cwnd, pps, r)
			}
			if r > 2 && cwnd/r < minAcksPerWindow {
				t.Fatalf("cwnd %d, %.0f pps: Ack Ratio %d leaves %d acks per window", cwnd, pps, r, cwnd/r)
			}
		}
	}
}

// On a path whose delay never varies (a satellite link, an emulated one)
// RTTVAR decays to zero. The retransmission timeout must still outlast
// one round trip plus the peer's ack delay: when it did not, the first
// packet sent after a quiet spell timed out just before its (delayed)
// ack, every packet in flight was declared lost and the window fell to
// one packet; UDP at 80 % of 20 + 10 Mbit/s over 8 + 300 ms with 2 %
// loss on the satellite lost 13-20 % end to end.
func TestRTOOutlastsASteadyRoundTripAndTheAckDelay(t *testing.T) {
	const rtt, ackDelay = 600 * time.Millisecond, 5 * time.Millisecond
	for _, name := range []string{"ccid2", "bbr"} {
		c, err := New(name, Config{})
		if err != nil {
			t.Fatal(err)
		}
		now, seq := mono.Time(0), uint64(0)
		// Forty rounds of one packet, each acked exactly one RTT later.
		for i := 0; i < 40; i++ {
			c.OnPacketSent(now, seq, 1000, true)
			now = now.Add(rtt)
			c.OnFeedback(now, vector(seq, 0, func(uint64) bool { return true }, nil))
			seq++
		}
		if st := c.State(); st.RTTVar > time.Millisecond {
			t.Fatalf("%s: RTTVAR %v after constant samples; the test needs it near zero", name, st.RTTVar)
		}
		// Quiet for a second, then one packet whose ack the peer delays.
		now = now.Add(time.Second)
		c.OnPacketSent(now, seq, 1000, true)
		ackAt := now.Add(rtt + ackDelay)
		if d := c.Deadline(); d <= ackAt {
			t.Errorf("%s: timer at +%v fires before the delayed ack at +%v", name, d.Sub(now), rtt+ackDelay)
			c.OnTimer(d)
		}
		c.OnFeedback(ackAt, vector(seq, 0, func(uint64) bool { return true }, nil))
		if st := c.State(); st.Timeouts != 0 || st.PacketsLost != 0 {
			t.Errorf("%s: %d timeouts, %d packets lost on a lossless steady path", name, st.Timeouts, st.PacketsLost)
		}
	}
}

// A path's handshake round trip sizes BBR's first window: a long path
// starts at InitialRateFloor × RTT (a GEO satellite at 600 ms: about 100
// packets of 1,250 bytes, not 10), paced over that round trip; a short one
// keeps RFC 6928's ten packets.
func TestSeedRTTSizesALongPathsFirstWindow(t *testing.T) {
	for _, c := range []struct {
		rtt  time.Duration
		want float64 // cwnd, bytes
	}{
		{20 * time.Millisecond, 10 * 1250},
		{600 * time.Millisecond, 2e6 / 8 * 0.6},
	} {
		b := NewBBR(Config{MSS: 1250})
		b.SeedRTT(0, c.rtt)
		st := b.State()
		if got := float64(st.Cwnd * 1250); math.Abs(got-c.want) > 1250 {
			t.Errorf("RTT %v: first window %.0f bytes, want %.0f", c.rtt, got, c.want)
		}
		if rate := st.PacingRate * c.rtt.Seconds(); rate < float64(st.Cwnd*1250) {
			t.Errorf("RTT %v: pacing %.0f B/s sends less than the window in a round trip", c.rtt, st.PacingRate)
		}
	}
	off := DefaultBBRParams()
	off.InitialRateFloor = 0
	b := NewBBR(Config{MSS: 1250, BBR: &off})
	b.SeedRTT(0, 600*time.Millisecond)
	if st := b.State(); st.Cwnd != 10 {
		t.Errorf("floor off: first window %d packets, want 10", st.Cwnd)
	}
}
