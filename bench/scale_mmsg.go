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
// hundreds of sockets with one epoll.
type mmsg struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	bufs  [][]byte
	addrs []netip.AddrPort
	lens  []int
}

// mmsghdr is struct mmsghdr (Go pads it to the C size).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

func newMmsg(n, bufSize int) *mmsg {
	m := &mmsg{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet4, n),
		bufs: make([][]byte, n), addrs: make([]netip.AddrPort, n), lens: make([]int, n)}
	for i := range m.bufs {
		m.bufs[i] = make([]byte, bufSize)
		m.iovs[i].Base = &m.bufs[i][0]
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.Iovlen = 1
		m.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&m.names[i]))
	}
	return m
}

// swap exchanges buffers i and j.
func (m *mmsg) swap(i, j int) {
	m.bufs[i], m.bufs[j] = m.bufs[j], m.bufs[i]
	m.iovs[i].Base, m.iovs[j].Base = &m.bufs[i][0], &m.bufs[j][0]
}

// send sends bufs[:lens[i]] to addrs[i] for i < n on fd and returns how
// many left; a full socket buffer drops the rest, as a NIC queue would.
func (m *mmsg) send(fd, n int) int {
	for i := 0; i < n; i++ {
		a := m.addrs[i]
		m.names[i] = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr().As4()}
		p := (*[2]byte)(unsafe.Pointer(&m.names[i].Port))
		p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
		m.hdrs[i].hdr.Namelen = unix.SizeofSockaddrInet4
		m.iovs[i].SetLen(m.lens[i])
	}
	sent := 0
	for sent < n {
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[sent])),
			uintptr(n-sent), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || r == 0 {
			return sent
		}
		sent += int(r)
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
