// SPDX-License-Identifier: MIT

package traffic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/netns"
)

// OWDMethod says what the per-packet one-way delay of captured TCP data
// includes; it goes into reports next to the figures.
const OWDMethod = "kernel receive timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME shared by all namespaces) of " +
	"AF_PACKET taps on the inner-traffic devices at both ends (the TUN device for a tunnel, the path devices " +
	"otherwise): from the first time a TCP data byte left the sender's device to its first arrival at the " +
	"receiver's device, so it includes tunnel processing and queues, the emulated paths, reorder holds, tunnel " +
	"repair and inner TCP retransmissions, but not the sender's socket buffer nor the receiving application. " +
	"One sample per MSS-sized segment (a coalesced packet counts as len/MSS segments)."

// OWDCaptureConfig selects the TCP data to time: segments whose source
// port is Port (the server side of downloads), sent on SendDevs in SendNS
// and received on RecvDevs in RecvNS.
type OWDCaptureConfig struct {
	SendNS   *netns.NS
	SendDevs []string
	RecvNS   *netns.NS
	RecvDevs []string
	Port     uint16
}

// OWDResult is the one-way delay distribution of the captured segments.
type OWDResult struct {
	Method      string    `json:"method"`
	Devices     string    `json:"devices"`
	Samples     int       `json:"samples"`
	Flows       int       `json:"flows"`
	SentPackets int       `json:"sent_packets"`
	RecvPackets int       `json:"recv_packets"`
	Unmatched   int       `json:"unmatched"` // received data never seen leaving the sender
	KernelDrops uint64    `json:"capture_drops"`
	OWDms       Quantiles `json:"owd_ms"`
	Err         string    `json:"error,omitempty"`
	// OWD is sorted (ms), one entry per sample, for CCDF plots.
	OWD []float64 `json:"-"`
}

// capEvent is one captured TCP segment.
type capEvent struct {
	t      int64 // ns, CLOCK_REALTIME
	key    flowKey
	seq    uint32
	len    int
	synAck bool
	mss    int // segment payload size announced in a SYN-ACK
}

type flowKey struct {
	src, dst     [4]byte
	sport, dport uint16
}

// OWDCapture taps the devices until Stop.
type OWDCapture struct {
	cfg   OWDCaptureConfig
	socks []*capSocket
	wg    sync.WaitGroup
}

type capSocket struct {
	f      *os.File
	sender bool
	events []capEvent
	err    error
}

// StartOWDCapture opens the taps (root).
func StartOWDCapture(cfg OWDCaptureConfig) (*OWDCapture, error) {
	c := &OWDCapture{cfg: cfg}
	for _, side := range []struct {
		ns     *netns.NS
		devs   []string
		sender bool
	}{{cfg.SendNS, cfg.SendDevs, true}, {cfg.RecvNS, cfg.RecvDevs, false}} {
		if len(side.devs) == 0 {
			c.close()
			return nil, errors.New("owd capture: no devices")
		}
		for _, dev := range side.devs {
			var f *os.File
			err := side.ns.Do(func() (err error) {
				f, err = openTap(dev, cfg.Port)
				return err
			})
			if err != nil {
				c.close()
				return nil, err
			}
			c.socks = append(c.socks, &capSocket{f: f, sender: side.sender})
		}
	}
	for _, s := range c.socks {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			s.read()
		}()
	}
	return c, nil
}

func (c *OWDCapture) close() {
	for _, s := range c.socks {
		s.f.Close()
	}
}

// Stop closes the taps and matches what they saw.
func (c *OWDCapture) Stop() OWDResult {
	var drops uint64
	for _, s := range c.socks {
		drops += tapDrops(s.f)
	}
	c.close()
	c.wg.Wait()
	var sent, recv []capEvent
	var errs []error
	for _, s := range c.socks {
		if s.sender {
			sent = append(sent, s.events...)
		} else {
			recv = append(recv, s.events...)
		}
		errs = append(errs, s.err)
	}
	r := MatchOWD(sent, recv)
	r.KernelDrops = drops
	r.Devices = fmt.Sprintf("sender %v, receiver %v", c.cfg.SendDevs, c.cfg.RecvDevs)
	if err := errors.Join(errs...); err != nil {
		r.Err = err.Error()
	}
	return r
}

// tapFilter accepts IPv4 TCP first fragments with source port port and
// truncates them to 128 bytes (headers only). Offsets are from the network
// header: the socket is SOCK_DGRAM.
func tapFilter(port uint16) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 9},                    // 0: A = protocol
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 6, Jt: 0, Jf: 6},     // 1: TCP?
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 6},                    // 2: A = flags, fragment offset
		{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: 0x1fff, Jt: 4},      // 3: later fragment: drop
		{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 0},                   // 4: X = IP header length
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 0},                    // 5: A = source port
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(port), Jf: 1}, // 6
		{Code: unix.BPF_RET | unix.BPF_K, K: 128},                                // 7: accept
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},                                  // 8: drop
	}
}

// openTap opens a SOCK_DGRAM AF_PACKET socket on dev with kernel
// timestamps and the filter. It binds ETH_P_ALL: the kernel shows a
// device's outgoing packets only to such taps. Must run inside the
// namespace.
func openTap(dev string, port uint16) (*os.File, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("owd capture: %s: %w", dev, err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("owd capture: %s: socket: %w", dev, err)
	}
	fail := func(what string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("owd capture: %s: %s: %w", dev, what, err)
	}
	filter := tapFilter(port)
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("filter", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return os.NewFile(uintptr(fd), "tap:"+dev), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tapDrops reads and resets the socket's drop counter.
func tapDrops(f *os.File) uint64 {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var drops uint64
	_ = rc.Control(func(fd uintptr) {
		var st unix.TpacketStats
		l := uint32(unsafe.Sizeof(st))
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_PACKET, unix.PACKET_STATISTICS,
			uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e == 0 {
			drops = uint64(st.Drops)
		}
	})
	return drops
}

func (s *capSocket) read() {
	rc, err := s.f.SyscallConn()
	if err != nil {
		s.err = err
		return
	}
	buf := make([]byte, 256)
	oob := make([]byte, 128)
	for {
		var n, oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_TRUNC)
			return rerr != unix.EAGAIN
		})
		if err != nil || rerr != nil {
			return // closed
		}
		t := cmsgTime(oob[:oobn])
		if ev, ok := parseTCPSegment(buf[:min(n, len(buf))], n); ok && t != 0 {
			ev.t = t
			s.events = append(s.events, ev)
		}
	}
}

// cmsgTime returns the SCM_TIMESTAMPNS time in ns, or 0.
func cmsgTime(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return sec*1e9 + nsec
		}
	}
	return 0
}

// parseTCPSegment reads an IPv4 TCP header. Its length is the IP header's
// total length: the capture keeps only the headers, and the tap filter's
// trim to 128 bytes is all the socket reports (wireLen), so wireLen stands
// in only for a GSO packet whose length field is 0 (over 64 KiB). Taking
// wireLen for every packet longer than it made each capture 76 bytes of
// payload: a sender's two-segment GSO packet covered only its first
// segment, and the receiver's second segment went unmatched (40 % of a
// tunnel's web samples), while a coalesced arrival counted once.
func parseTCPSegment(b []byte, wireLen int) (capEvent, bool) {
	var ev capEvent
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 6 {
		return ev, false
	}
	ihl := int(b[0]&0xf) * 4
	if ihl < 20 || len(b) < ihl+20 {
		return ev, false
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total == 0 { // a GSO packet over 64 KiB
		total = wireLen
	}
	tcp := b[ihl:]
	doff := int(tcp[12]>>4) * 4
	if doff < 20 {
		return ev, false
	}
	copy(ev.key.src[:], b[12:16])
	copy(ev.key.dst[:], b[16:20])
	ev.key.sport = binary.BigEndian.Uint16(tcp[0:])
	ev.key.dport = binary.BigEndian.Uint16(tcp[2:])
	ev.seq = binary.BigEndian.Uint32(tcp[4:])
	ev.len = max(0, total-ihl-doff)
	flags := tcp[13]
	if flags&0x12 == 0x12 { // SYN and ACK
		ev.synAck = true
		ev.mss = synMSS(tcp[:min(doff, len(tcp))])
	}
	return ev, ev.synAck || ev.len > 0
}

// synMSS returns the payload size of a full segment announced by a SYN's
// options: the MSS, less 12 bytes when timestamps are on; 0 if absent.
func synMSS(tcp []byte) int {
	mss, ts := 0, false
	o := tcp[20:]
	for len(o) > 0 && o[0] != 0 { // 0: end of options
		if o[0] == 1 { // no-op
			o = o[1:]
			continue
		}
		if len(o) < 2 || int(o[1]) < 2 || int(o[1]) > len(o) {
			break // malformed
		}
		switch {
		case o[0] == 2 && o[1] == 4:
			mss = int(binary.BigEndian.Uint16(o[2:]))
		case o[0] == 8:
			ts = true
		}
		o = o[o[1]:]
	}
	if mss > 0 && ts {
		mss -= 12
	}
	return mss
}

type sentRange struct {
	start, end uint32 // relative to the first data byte
	t          int64
}

type flowID struct {
	key flowKey
	isn uint32
}

// MatchOWD pairs received segments with the first transmission of their
// first byte (see OWDMethod). Events of each side need not be sorted.
func MatchOWD(sent, recv []capEvent) OWDResult {
	r := OWDResult{Method: OWDMethod}
	byTime := func(a, b capEvent) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(sent, byTime)
	slices.SortStableFunc(recv, byTime)

	isn := map[flowKey]uint32{}
	mss := map[flowID]int{}
	ranges := map[flowID][]sentRange{}
	for _, e := range sent {
		if e.synAck {
			isn[e.key] = e.seq
			mss[flowID{e.key, e.seq}] = e.mss
			continue
		}
		base, ok := isn[e.key]
		if !ok {
			continue // the flow started before the capture
		}
		r.SentPackets++
		rel := e.seq - base - 1
		id := flowID{e.key, base}
		ranges[id] = append(ranges[id], sentRange{rel, rel + uint32(e.len), e.t})
	}
	clear(isn)
	seen := map[flowID]map[uint32]bool{}
	flows := map[flowID]bool{}
	var owd []float64
	for _, e := range recv {
		if e.synAck {
			isn[e.key] = e.seq
			continue
		}
		base, ok := isn[e.key]
		if !ok {
			continue
		}
		r.RecvPackets++
		id := flowID{e.key, base}
		rel := e.seq - base - 1
		if seen[id] == nil {
			seen[id] = map[uint32]bool{}
		}
		if seen[id][rel] {
			continue // a duplicate: only the first arrival counts
		}
		seen[id][rel] = true
		first := int64(-1)
		for _, s := range ranges[id] {
			if s.start <= rel && rel < s.end && (first < 0 || s.t < first) {
				first = s.t
			}
		}
		if first < 0 {
			r.Unmatched++
			continue
		}
		flows[id] = true
		d := float64(e.t-first) / 1e6
		n := 1
		if m := mss[id]; m > 0 {
			n = max(1, (e.len+m-1)/m)
		}
		for range n {
			owd = append(owd, d)
		}
	}
	slices.Sort(owd)
	r.OWD = owd
	r.Samples = len(owd)
	r.Flows = len(flows)
	r.OWDms = Quantiles{P50: Q(owd, .5), P90: Q(owd, .9), P99: Q(owd, .99), P999: Q(owd, .999), P9999: Q(owd, .9999), P99999: Q(owd, .99999), Max: Q(owd, 1)}
	return r
}
