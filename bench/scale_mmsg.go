// SPDX-License-Identifier: MIT

package bench

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsg moves batches of IPv4 datagrams on non-blocking sockets with
// sendmmsg/recvmmsg, with headers and buffers allocated once. It is the
// load generator's own small socket layer: netio.Conn blocks in Go's
// poller (one goroutine per socket), while a CPE worker waits for
// hundreds of sockets with one epoll. Runs of equal-size datagrams to
// one address leave as one UDP GSO send, as netio sends them: the
// generator should spend its CPU on the engines, not the kernel.
type mmsg struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	oob   []byte
	bufs  [][]byte
	addrs []netip.AddrPort
	lens  []int
	segs  []int // datagrams in each sent header
}

// mmsghdr is struct mmsghdr (Go pads it to the C size).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

const (
	gsoMaxSegs  = 64
	gsoMaxBytes = 65000
	udpSegment  = 103 // UDP_SEGMENT
)

var oobSpace = unix.CmsgSpace(2)

func newMmsg(n, bufSize int) *mmsg {
	m := &mmsg{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet4, n),
		oob: make([]byte, n*oobSpace), bufs: make([][]byte, n), addrs: make([]netip.AddrPort, n), lens: make([]int, n),
		segs: make([]int, n)}
	for i := range m.bufs {
		m.bufs[i] = make([]byte, bufSize)
		m.iovs[i].Base = &m.bufs[i][0]
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.Iovlen = 1
		m.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&m.names[i]))
	}
	return m
}

// send sends bufs[:lens[i]] to addrs[i] for i < n on fd and returns how
// many left; a full socket buffer drops the rest, as a NIC queue would.
func (m *mmsg) send(fd, n int) int {
	h := 0
	for i := 0; i < n; h++ {
		j, total := i+1, m.lens[i]
		for j < n && j-i < gsoMaxSegs && m.lens[j] == m.lens[i] && m.addrs[j] == m.addrs[i] && total+m.lens[j] <= gsoMaxBytes {
			total += m.lens[j]
			j++
		}
		for k := i; k < j; k++ {
			m.iovs[k].SetLen(m.lens[k])
		}
		hd := &m.hdrs[h].hdr
		hd.Iov, hd.Iovlen = &m.iovs[i], uint64(j-i)
		a := m.addrs[i]
		m.names[h] = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr().As4()}
		p := (*[2]byte)(unsafe.Pointer(&m.names[h].Port))
		p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
		hd.Name, hd.Namelen = (*byte)(unsafe.Pointer(&m.names[h])), unix.SizeofSockaddrInet4
		hd.Control, hd.Controllen = nil, 0
		if j-i > 1 {
			oob := m.oob[h*oobSpace : (h+1)*oobSpace]
			c := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			c.Level, c.Type = unix.SOL_UDP, udpSegment
			c.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = uint16(m.lens[i])
			hd.Control, hd.Controllen = &oob[0], uint64(oobSpace)
		}
		m.segs[h] = j - i
		i = j
	}
	sent, done := 0, 0
	for done < h {
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[done])),
			uintptr(h-done), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || r == 0 {
			break
		}
		for k := done; k < done+int(r); k++ {
			sent += m.segs[k]
		}
		done += int(r)
	}
	// The receive side uses one iovec per header again.
	for k := 0; k < h; k++ {
		m.hdrs[k].hdr.Iov, m.hdrs[k].hdr.Iovlen = &m.iovs[k], 1
		m.hdrs[k].hdr.Name = (*byte)(unsafe.Pointer(&m.names[k]))
	}
	return sent
}

// recv reads up to len(bufs) datagrams from fd without blocking; lens and
// addrs describe them.
func (m *mmsg) recv(fd int) int {
	for i := range m.hdrs {
		m.iovs[i].SetLen(len(m.bufs[i]))
		m.hdrs[i].hdr.Namelen = unix.SizeofSockaddrInet4
		m.hdrs[i].hdr.Flags = 0
		m.hdrs[i].hdr.Control, m.hdrs[i].hdr.Controllen = nil, 0
	}
	for {
		r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])),
			uintptr(len(m.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0
		}
		n := int(r)
		for i := 0; i < n; i++ {
			m.lens[i] = int(m.hdrs[i].len)
			p := (*[2]byte)(unsafe.Pointer(&m.names[i].Port))
			m.addrs[i] = netip.AddrPortFrom(netip.AddrFrom4(m.names[i].Addr), uint16(p[0])<<8|uint16(p[1]))
		}
		return n
	}
}

// swap exchanges buffers i and j.
func (m *mmsg) swap(i, j int) {
	m.bufs[i], m.bufs[j] = m.bufs[j], m.bufs[i]
	m.iovs[i].Base, m.iovs[j].Base = &m.bufs[i][0], &m.bufs[j][0]
}

// udpSocket opens a non-blocking IPv4 UDP socket bound to local (port 0:
// any) and returns it with the address it got.
func udpSocket(local netip.AddrPort) (int, netip.AddrPort, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, local, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}); err != nil {
		unix.Close(fd)
		return -1, local, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, local, err
	}
	return fd, netip.AddrPortFrom(local.Addr(), uint16(sa.(*unix.SockaddrInet4).Port)), nil
}
