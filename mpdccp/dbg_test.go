package mpdccp

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestDbgCell(t *testing.T) {
	idx, _ := strconv.Atoi(os.Getenv("CELL"))
	cell := simCells[idx]
	cfg := Config{CCID: "bbr", Retransmit: true, AQM: defaultAQM()}
	h := newHarness(t, harnessConfig{seed: 3, links: cell.links(2), cli: cfg, srv: cfg})
	var flows []*innerTCP
	h.onDeliver = func(side int, c *Conn, b []byte) { routeInner(flows, side, b) }
	c := h.dial(2)
	h.runUntil(10*time.Second, func() bool { return h.openPaths(c) == 2 && h.openPaths(h.serverConn()) == 2 })
	f := newInnerTCP(h, sideClient, 5201, 1400)
	flows = append(flows, f)
	f.start(h.sim.Now().Add(20 * time.Second))
	var lastD [2]uint64
	lastDel := 0
	for i := 0; i < 40; i++ {
		h.run(500 * time.Millisecond)
		sc := h.serverConn()
		rs := sc.reo.Stats()
		var d [2]uint64
		s := ""
		for j, sf := range c.subflows {
			st := sf.cc.State()
			d[j] = sf.stats.DataOut
			s += " | " + strconv.Itoa(j) + ": data/0.5s=" + strconv.Itoa(int(d[j]-lastD[j])) + " pacing=" + strconv.FormatFloat(st.PacingRate*8/1e6, 'f', 1, 64) + " cwnd=" + strconv.Itoa(st.Cwnd) + " infl=" + strconv.Itoa(st.InFlight) + " srtt=" + st.SRTT.Round(time.Millisecond).String() + " lost=" + strconv.Itoa(int(st.PacketsLost)) + " loss=" + strconv.FormatFloat(sf.lossRate, 'f', 3, 64)
		}
		lastD = d
		t.Logf("t=%v aqm=%d/%d in-cwnd=%.0f goodput=%.1f fq=%d | held=%d skipped=%d late=%d po=%d ooo=%d spur=%d%s", h.sim.Now().Sub(0).Round(time.Millisecond), c.fq.Stats().Dropped, c.fq.Stats().Marked, f.cwnd, float64(len(f.deliveredT)-lastDel)*1360*8/0.5/1e6, c.fq.Len(), rs.Buffered, rs.GapsSkipped, rs.GapsLateArrive, rs.PathOrdered, f.oooArrivals, f.spurious, s)
		lastDel = len(f.deliveredT)
	}
}
