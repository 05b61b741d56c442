// SPDX-License-Identifier: MIT

package netio

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is one UDP socket with batched I/O. ReadBatch and WriteBatch may run
// concurrently with each other, but each must not run concurrently with
// itself.
type Conn struct {
	udp   *net.UDPConn
	raw   syscall.RawConn
	v6    bool
	local netip.AddrPort
	batch int

	gso atomic.Bool
	gro bool
	// pktinfo: the socket is bound to the wildcard address and reports
	// (and takes) each datagram's local address.
	pktinfo bool

	r reader
	w writer

	rxQueueDrops atomic.Uint32
	rxTruncated  atomic.Uint64
	gsoSends     atomic.Uint64
	groReads     atomic.Uint64
}

// mmsghdr is struct mmsghdr; Go pads it to the C size on 32 and 64 bits.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

const (
	recvOOBSize = 160 // TOS/TCLASS + UDP_GRO + SO_RXQ_OVFL + PKTINFO cmsgs
	sendOOBSize = 96  // TOS/TCLASS + UDP_SEGMENT + PKTINFO
	groBuffers  = 8
	// maxGSOBytes bounds the payload of one GSO send (IPv4: 65535-20-8).
	maxGSOBytes = 65507
)

type reader struct {
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	names4 []unix.RawSockaddrInet4
	names6 []unix.RawSockaddrInet6
	oob    []byte

	vlen  int
	got   int
	errno syscall.Errno
	fn    func(fd uintptr) bool

	// GRO: coalesced datagrams land in big buffers and are split into
	// the caller's messages; what does not fit waits in pending.
	big     [][]byte
	pending []groRun
	pendAt  int
}

// groRun is a received buffer of equal-size segments still to hand out.
type groRun struct {
	buf   []byte // remaining bytes
	seg   int
	addr  netip.AddrPort
	tos   uint8
	local netip.Addr
}

type writer struct {
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	names4 []unix.RawSockaddrInet4
	names6 []unix.RawSockaddrInet6
	oob    []byte
	first  []int // index of each hdr's first message
	count  []int // messages in each hdr

	off   int // first hdr not yet sent
	nhdr  int
	sent  int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Open creates and binds the socket described by cfg.
func Open(cfg SocketConfig) (*Conn, error) {
	network := cfg.Network
	if network == "" {
		network = "udp4"
		if cfg.Local.Addr().Is6() && !cfg.Local.Addr().Is4In6() {
			network = "udp6"
		}
	}
	if network != "udp4" && network != "udp6" {
		return nil, fmt.Errorf("netio: network %q: want udp4 or udp6", network)
	}
	v6 := network == "udp6"
	addr := cfg.Local
	if !addr.Addr().IsValid() {
		if v6 {
			addr = netip.AddrPortFrom(netip.IPv6Unspecified(), cfg.Local.Port())
		} else {
			addr = netip.AddrPortFrom(netip.IPv4Unspecified(), cfg.Local.Port())
		}
	}
	if addr.Addr().Is6() != v6 {
		return nil, fmt.Errorf("netio: local address %s is not %s", addr, network)
	}
	bufSize := cfg.BufferSize
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	batch := cfg.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}

	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = setPreBind(int(fd), cfg, bufSize) })
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("netio: bind %s: %w", addr, err)
	}
	udp := pc.(*net.UDPConn)
	raw, err := udp.SyscallConn()
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("netio: %s: %w", addr, err)
	}
	c := &Conn{udp: udp, raw: raw, v6: v6, batch: batch, local: udp.LocalAddr().(*net.UDPAddr).AddrPort()}
	var serr error
	err = raw.Control(func(fd uintptr) { serr = c.setPostBind(int(fd), cfg) })
	if err == nil {
		err = serr
	}
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("netio: %s: %w", c.local, err)
	}
	c.initReader()
	c.initWriter()
	return c, nil
}

func setPreBind(fd int, cfg SocketConfig, bufSize int) error {
	// The FORCE variants ignore net.core.[rw]mem_max but need
	// CAP_NET_ADMIN; fall back to the capped ones without it.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, bufSize)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, bufSize)
	}
	if cfg.ReusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("SO_REUSEPORT: %w", err)
		}
	}
	if cfg.Device != "" {
		if err := unix.BindToDevice(fd, cfg.Device); err != nil {
			return fmt.Errorf("bind to device %s: %w", cfg.Device, err)
		}
	}
	if cfg.Fwmark != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, int(cfg.Fwmark)); err != nil {
			return fmt.Errorf("set fwmark %d: %w", cfg.Fwmark, err)
		}
	}
	return nil
}

func (c *Conn) setPostBind(fd int, cfg SocketConfig) error {
	if c.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return fmt.Errorf("IPV6_RECVTCLASS: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return fmt.Errorf("IP_RECVTOS: %w", err)
		}
	}
	if c.local.Addr().IsUnspecified() {
		var err error
		if c.v6 {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		} else {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		}
		if err != nil {
			return fmt.Errorf("packet info: %w", err)
		}
		c.pktinfo = true
	}
	// Optional features: their absence is not an error.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	if !cfg.DisableGSO && !gsoBroken(kernelRelease()) {
		if _, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT); err == nil {
			c.gso.Store(true)
		}
	}
	if !cfg.DisableGRO {
		c.gro = unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
	}
	return nil
}

// LocalAddr is the bound address.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize is the most messages one ReadBatch or WriteBatch call moves.
func (c *Conn) BatchSize() int { return c.batch }

// GSO reports whether sends are currently segmented by the kernel.
func (c *Conn) GSO() bool { return c.gso.Load() }

// GRO reports whether the kernel may coalesce received datagrams.
func (c *Conn) GRO() bool { return c.gro }

// Stats returns the socket's counters.
func (c *Conn) Stats() Stats {
	return Stats{
		RxQueueDrops: c.rxQueueDrops.Load(),
		RxTruncated:  c.rxTruncated.Load(),
		GSOSends:     c.gsoSends.Load(),
		GROReads:     c.groReads.Load(),
	}
}

// SetFwmark changes the socket's mark (for a config reload).
func (c *Conn) SetFwmark(mark uint32) error {
	var serr error
	err := c.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("netio: %s: set fwmark %d: %w", c.local, mark, err)
	}
	return nil
}

// Close closes the socket; blocked calls return net.ErrClosed.
func (c *Conn) Close() error { return c.udp.Close() }

func (c *Conn) initReader() {
	r := &c.r
	n := c.batch
	r.hdrs = make([]mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.oob = make([]byte, n*recvOOBSize)
	if c.v6 {
		r.names6 = make([]unix.RawSockaddrInet6, n)
	} else {
		r.names4 = make([]unix.RawSockaddrInet4, n)
	}
	if c.gro {
		r.big = make([][]byte, groBuffers)
		for i := range r.big {
			r.big[i] = make([]byte, groBufSize)
		}
		r.pending = make([]groRun, 0, groBuffers)
	}
	r.fn = func(fd uintptr) bool {
		for {
			n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.vlen), 0, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			}
			r.got, r.errno = int(n), e
			return true
		}
	}
}

func (c *Conn) initWriter() {
	w := &c.w
	n := c.batch
	w.hdrs = make([]mmsghdr, n)
	w.iovs = make([]unix.Iovec, n)
	w.oob = make([]byte, n*sendOOBSize)
	w.first = make([]int, n)
	w.count = make([]int, n)
	if c.v6 {
		w.names6 = make([]unix.RawSockaddrInet6, n)
	} else {
		w.names4 = make([]unix.RawSockaddrInet4, n)
	}
	w.fn = func(fd uintptr) bool {
		for {
			n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.off])), uintptr(w.nhdr-w.off), 0, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			}
			w.sent, w.errno = int(n), e
			return true
		}
	}
}

// recv runs recvmmsg for the first vlen headers, blocking until at least
// one datagram is there.
func (c *Conn) recv(vlen int) (int, error) {
	c.r.vlen = vlen
	if err := c.raw.Read(c.r.fn); err != nil {
		return 0, err
	}
	if c.r.errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", c.r.errno)
	}
	return c.r.got, nil
}

func (c *Conn) setRecvHdr(i int, buf []byte) {
	r := &c.r
	h := &r.hdrs[i]
	r.iovs[i].Base = &buf[0]
	r.iovs[i].SetLen(len(buf))
	h.hdr.Iov = &r.iovs[i]
	h.hdr.SetIovlen(1)
	if c.v6 {
		h.hdr.Name = (*byte)(unsafe.Pointer(&r.names6[i]))
		h.hdr.Namelen = unix.SizeofSockaddrInet6
	} else {
		h.hdr.Name = (*byte)(unsafe.Pointer(&r.names4[i]))
		h.hdr.Namelen = unix.SizeofSockaddrInet4
	}
	h.hdr.Control = &r.oob[i*recvOOBSize]
	h.hdr.SetControllen(recvOOBSize)
	h.hdr.Flags = 0
	h.len = 0
}

func (c *Conn) recvAddr(i int) netip.AddrPort {
	if c.v6 {
		sa := &c.r.names6[i]
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port))
	}
	sa := &c.r.names4[i]
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
}

// ReadBatch blocks until at least one datagram is available and reads up to
// min(len(msgs), BatchSize()) of them, returning how many it filled. Every
// msgs[i].Buf must be non-empty. A datagram longer than its buffer is
// dropped and counted in Stats().RxTruncated.
func (c *Conn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) > c.batch {
		msgs = msgs[:c.batch]
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	if c.gro {
		return c.readGRO(msgs)
	}
	for {
		for i := range msgs {
			c.setRecvHdr(i, msgs[i].Buf)
		}
		got, err := c.recv(len(msgs))
		if err != nil {
			return 0, err
		}
		n := 0
		for i := range got {
			h := &c.r.hdrs[i]
			if h.hdr.Flags&unix.MSG_TRUNC != 0 {
				c.rxTruncated.Add(1)
				continue
			}
			tos, _, local := c.parseRecvOOB(i)
			if n != i {
				// Keep the caller's buffers but close the gap.
				msgs[n].Buf, msgs[i].Buf = msgs[i].Buf, msgs[n].Buf
			}
			msgs[n].N = int(h.len)
			msgs[n].Addr = c.recvAddr(i)
			msgs[n].TOS = tos
			msgs[n].Local = local
			n++
		}
		if n > 0 {
			return n, nil
		}
	}
}

// readGRO reads into the big buffers and splits coalesced datagrams by
// their segment size into msgs.
func (c *Conn) readGRO(msgs []Message) (int, error) {
	r := &c.r
	for {
		if r.pendAt == len(r.pending) {
			r.pending, r.pendAt = r.pending[:0], 0
			vlen := min(len(r.big), len(msgs))
			for i := range vlen {
				c.setRecvHdr(i, r.big[i])
			}
			got, err := c.recv(vlen)
			if err != nil {
				return 0, err
			}
			for i := range got {
				h := &r.hdrs[i]
				if h.hdr.Flags&unix.MSG_TRUNC != 0 {
					c.rxTruncated.Add(1)
					continue
				}
				tos, seg, local := c.parseRecvOOB(i)
				size := int(h.len)
				if seg <= 0 || seg > size {
					seg = size
				}
				if seg < size {
					c.groReads.Add(1)
				}
				r.pending = append(r.pending, groRun{buf: r.big[i][:size], seg: seg, addr: c.recvAddr(i), tos: tos, local: local})
			}
		}
		n := 0
		for n < len(msgs) && r.pendAt < len(r.pending) {
			run := &r.pending[r.pendAt]
			seg := min(run.seg, len(run.buf))
			if seg > len(msgs[n].Buf) {
				c.rxTruncated.Add(1)
			} else {
				msgs[n].N = copy(msgs[n].Buf, run.buf[:seg])
				msgs[n].Addr = run.addr
				msgs[n].TOS = run.tos
				msgs[n].Local = run.local
				n++
			}
			run.buf = run.buf[seg:]
			if len(run.buf) == 0 {
				r.pendAt++
			}
		}
		if n > 0 {
			return n, nil
		}
	}
}

// parseRecvOOB walks message i's control messages without allocating and
// returns the TOS byte, the GRO segment size (0 if none) and the local
// address the datagram was sent to (invalid if not reported).
func (c *Conn) parseRecvOOB(i int) (tos uint8, seg int, local netip.Addr) {
	h := &c.r.hdrs[i].hdr
	oob := c.r.oob[i*recvOOBSize : i*recvOOBSize+min(int(h.Controllen), recvOOBSize)]
	for len(oob) >= unix.SizeofCmsghdr {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if int(cm.Len) < unix.SizeofCmsghdr || int(cm.Len) > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):cm.Len]
		switch {
		case cm.Level == unix.IPPROTO_IP && cm.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case cm.Level == unix.IPPROTO_IPV6 && cm.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		case cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && len(data) >= 4:
			seg = int(*(*int32)(unsafe.Pointer(&data[0])))
		case cm.Level == unix.SOL_SOCKET && cm.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			c.rxQueueDrops.Store(*(*uint32)(unsafe.Pointer(&data[0])))
		case cm.Level == unix.IPPROTO_IP && cm.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			local = netip.AddrFrom4(pi.Addr) // the header's destination
		case cm.Level == unix.IPPROTO_IPV6 && cm.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			local = netip.AddrFrom16(pi.Addr)
		}
		space := unix.CmsgSpace(int(cm.Len) - unix.CmsgLen(0))
		if space > len(oob) {
			break
		}
		oob = oob[space:]
	}
	return tos, seg, local
}

// WriteBatch sends msgs[i].Buf[:msgs[i].N] to msgs[i].Addr with TOS for
// every message, blocking while the socket buffer is full. It returns the
// number of messages sent. On error, n is the index of the message that
// failed (its GSO run, if any, was not sent either); the caller may drop
// msgs[n] and call again with msgs[n+1:].
func (c *Conn) WriteBatch(msgs []Message) (int, error) {
	done := 0
	for done < len(msgs) {
		n, err := c.writeChunk(msgs[done:])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// writeChunk sends as many of msgs as fit in the preallocated headers.
func (c *Conn) writeChunk(msgs []Message) (int, error) {
	w := &c.w
	gso := c.gso.Load()
	nhdr, used := 0, 0
	for used < len(msgs) && nhdr < len(w.hdrs) && used < len(w.iovs) {
		cnt, err := c.buildSend(nhdr, used, msgs[used:], gso)
		if err != nil {
			if nhdr == 0 {
				return 0, err
			}
			break // send what we have; the bad message comes first next time
		}
		w.first[nhdr], w.count[nhdr] = used, cnt
		used += cnt
		nhdr++
	}
	w.off, w.nhdr = 0, nhdr
	for w.off < w.nhdr {
		if err := c.raw.Write(w.fn); err != nil {
			return w.first[w.off], err
		}
		if w.errno != 0 {
			failed := w.first[w.off]
			if w.errno == unix.EIO && w.count[w.off] > 1 && c.gso.Load() {
				// The egress device cannot checksum segmented packets;
				// fall back to one datagram per entry from here on.
				c.gso.Store(false)
				return failed, nil
			}
			return failed, fmt.Errorf("netio: send to %s: %w", msgs[failed].Addr, os.NewSyscallError("sendmmsg", w.errno))
		}
		for k := w.off; k < w.off+w.sent; k++ {
			if w.count[k] > 1 {
				c.gsoSends.Add(1)
			}
		}
		w.off += w.sent
	}
	return used, nil
}

// buildSend fills header k with the run of messages starting at msgs[0]
// that can go as one GSO send, returning its length. Each message takes one
// iovec; the header's run starts at iovec iov.
func (c *Conn) buildSend(k, iov int, msgs []Message, gso bool) (int, error) {
	w := &c.w
	m := &msgs[0]
	if m.N <= 0 || m.N > len(m.Buf) {
		return 0, fmt.Errorf("netio: message to %s: bad length %d (buffer %d)", m.Addr, m.N, len(m.Buf))
	}
	if m.Addr.Addr().Is6() != c.v6 || m.Addr.Addr().Is4In6() {
		return 0, fmt.Errorf("netio: address %s does not match the socket family of %s", m.Addr, c.local)
	}
	cnt, total := 1, m.N
	if gso {
		for cnt < len(msgs) && cnt < MaxGSOSegments && iov+cnt < len(w.iovs) {
			nx := &msgs[cnt]
			if nx.Addr != m.Addr || nx.TOS != m.TOS || nx.Local != m.Local || nx.N <= 0 || nx.N > m.N || nx.N > len(nx.Buf) ||
				total+nx.N > maxGSOBytes || msgs[cnt-1].N != m.N {
				break
			}
			total += nx.N
			cnt++
		}
	}
	for j := range cnt {
		w.iovs[iov+j].Base = &msgs[j].Buf[0]
		w.iovs[iov+j].SetLen(msgs[j].N)
	}
	h := &w.hdrs[k]
	h.hdr.Iov = &w.iovs[iov]
	h.hdr.SetIovlen(cnt)
	if c.v6 {
		sa := &w.names6[k]
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: m.Addr.Addr().As16()}
		sa.Port = htons(m.Addr.Port())
		h.hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.hdr.Namelen = unix.SizeofSockaddrInet6
	} else {
		sa := &w.names4[k]
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: m.Addr.Addr().As4()}
		sa.Port = htons(m.Addr.Port())
		h.hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.hdr.Namelen = unix.SizeofSockaddrInet4
	}
	oob := w.oob[k*sendOOBSize : (k+1)*sendOOBSize]
	l := putCmsgInt32(oob, c.tosLevel(), c.tosType(), int32(m.TOS))
	if cnt > 1 {
		l += putCmsgUint16(oob[l:], unix.SOL_UDP, unix.UDP_SEGMENT, uint16(m.N))
	}
	if c.pktinfo && m.Local.IsValid() && !m.Local.IsUnspecified() && m.Local.Unmap().Is4() != c.v6 {
		l += c.putPktinfo(oob[l:], m.Local)
	}
	h.hdr.Control = &oob[0]
	h.hdr.SetControllen(l)
	h.hdr.Flags = 0
	h.len = 0
	w.count[k] = cnt
	return cnt, nil
}

func (c *Conn) tosLevel() int32 {
	if c.v6 {
		return unix.IPPROTO_IPV6
	}
	return unix.IPPROTO_IP
}

func (c *Conn) tosType() int32 {
	if c.v6 {
		return unix.IPV6_TCLASS
	}
	return unix.IP_TOS
}

func putCmsgInt32(b []byte, level, typ int32, v int32) int {
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	cm.Level, cm.Type = level, typ
	cm.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = v
	return unix.CmsgSpace(4)
}

// putPktinfo makes a datagram leave from local (its source address; the
// route still picks the interface).
func (c *Conn) putPktinfo(b []byte, local netip.Addr) int {
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	data := unsafe.Pointer(&b[unix.CmsgLen(0)])
	if c.v6 {
		cm.Level, cm.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
		cm.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
		*(*unix.Inet6Pktinfo)(data) = unix.Inet6Pktinfo{Addr: local.As16()}
		return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
	}
	cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
	cm.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	*(*unix.Inet4Pktinfo)(data) = unix.Inet4Pktinfo{Spec_dst: local.Unmap().As4()}
	return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
}

func putCmsgUint16(b []byte, level, typ int32, v uint16) int {
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	cm.Level, cm.Type = level, typ
	cm.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = v
	return unix.CmsgSpace(2)
}

// ntohs and htons convert a sockaddr port, stored in network byte order.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

func htons(p uint16) uint16 {
	var out uint16
	b := (*[2]byte)(unsafe.Pointer(&out))
	b[0], b[1] = byte(p>>8), byte(p)
	return out
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// gsoBroken reports kernels whose UDP GSO mangles UDP headers and checksums
// when all segments have the same length: the bug came with 7.0-rc1 and was
// fixed in 7.1-rc5 (see tailscale commit 8b58bd6c). Equal segments are
// what mptun sends, so GSO stays off there.
func gsoBroken(release string) bool {
	var major, minor int
	var rest string
	if n, _ := fmt.Sscanf(release, "%d.%d%s", &major, &minor, &rest); n < 2 {
		return false
	}
	if major != 7 {
		return false
	}
	if minor == 0 {
		return true
	}
	if minor == 1 {
		var rc int
		if _, err := fmt.Sscanf(rest, "-rc%d", &rc); err == nil && rc < 5 {
			return true
		}
	}
	return false
}
