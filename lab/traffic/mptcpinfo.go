// SPDX-License-Identifier: MIT

package traffic

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mptun/mptun/internal/netns"
)

// Socket options of SOL_MPTCP (linux/mptcp.h).
const (
	mptcpInfoOpt       = 1
	mptcpTCPInfoOpt    = 2
	mptcpSubflowAddrs  = 3
	mptcpFlagFallback  = 1 << 0
	subflowDataHdrSize = 16
	sockaddrStorage    = 128
)

// MPTCPConnInfo is what the kernel says about one MPTCP socket: whether
// the connection really is MPTCP (not a silent fallback to TCP) and what
// each of its subflows carried.
type MPTCPConnInfo struct {
	// MPTCP: the socket is MPTCP and the peer agreed (MP_CAPABLE), i.e.
	// no fallback to plain TCP.
	MPTCP    bool `json:"mptcp"`
	Fallback bool `json:"fallback"`
	// Subflows is the number of subflows the socket has now (the initial
	// one included).
	Subflows     int           `json:"subflows"`
	SubflowStats []SubflowInfo `json:"subflow_stats"`
	Err          string        `json:"error,omitempty"`
}

// SubflowInfo is one subflow's TCP_INFO.
type SubflowInfo struct {
	Local         string  `json:"local"`
	Remote        string  `json:"remote"`
	BytesAcked    uint64  `json:"bytes_acked"`
	BytesReceived uint64  `json:"bytes_received"`
	Retrans       uint32  `json:"retrans"`
	RTTms         float64 `json:"rtt_ms"`
}

// Retrans sums the subflows' retransmitted segments.
func (m *MPTCPConnInfo) Retrans() uint32 {
	var n uint32
	for _, s := range m.SubflowStats {
		n += s.Retrans
	}
	return n
}

// InspectMPTCP reads MPTCP_INFO, MPTCP_TCPINFO and MPTCP_SUBFLOW_ADDRS of
// an MPTCP connection (a *net.TCPConn from an MPTCP dialer or listener).
func InspectMPTCP(c net.Conn) MPTCPConnInfo {
	var info MPTCPConnInfo
	sc, ok := c.(syscall.Conn)
	if !ok {
		info.Err = "not a socket"
		return info
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		info.Err = err.Error()
		return info
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { info, serr = inspectMPTCPFD(int(fd)) }); err != nil {
		serr = err
	}
	if serr != nil {
		info.Err = serr.Error()
	}
	return info
}

func inspectMPTCPFD(fd int) (MPTCPConnInfo, error) {
	var info MPTCPConnInfo
	if proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err == nil && proto != unix.IPPROTO_MPTCP {
		// Go's dialer retries with plain TCP when an MPTCP socket
		// cannot be created.
		info.Fallback, info.Subflows = true, 1
		return info, fmt.Errorf("plain TCP socket (protocol %d), not MPTCP", proto)
	}
	// struct mptcp_info: u8 subflows, 5 more u8, u32 flags at offset 8.
	buf := make([]byte, 256)
	n, err := getsockopt(fd, unix.SOL_MPTCP, mptcpInfoOpt, buf)
	if err == unix.EOPNOTSUPP || err == unix.ENOPROTOOPT {
		// Since 5.16 a connection that fell back to TCP passes
		// SOL_MPTCP options to its one TCP subflow, which refuses.
		info.Fallback, info.Subflows = true, 1
		if ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			info.SubflowStats = []SubflowInfo{{BytesAcked: ti.Bytes_acked, BytesReceived: ti.Bytes_received,
				Retrans: ti.Total_retrans, RTTms: float64(ti.Rtt) / 1000}}
		}
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("MPTCP_INFO: %w", err)
	}
	if n < 12 {
		return info, fmt.Errorf("MPTCP_INFO: %d bytes", n)
	}
	flags := binary.NativeEndian.Uint32(buf[8:])
	info.Fallback = flags&mptcpFlagFallback != 0
	info.MPTCP = !info.Fallback
	subs, err := subflowTCPInfo(fd)
	if err != nil {
		return info, err
	}
	addrs, _ := subflowAddrs(fd)
	for i, ti := range subs {
		s := SubflowInfo{BytesAcked: ti.Bytes_acked, BytesReceived: ti.Bytes_received,
			Retrans: ti.Total_retrans, RTTms: float64(ti.Rtt) / 1000}
		if i < len(addrs) {
			s.Local, s.Remote = addrs[i][0], addrs[i][1]
		}
		info.SubflowStats = append(info.SubflowStats, s)
	}
	info.Subflows = len(subs)
	return info, nil
}

func getsockopt(fd, level, opt int, buf []byte) (int, error) {
	l := uint32(len(buf))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return int(l), nil
}

// subflowData runs one of the getsockopts that return a struct
// mptcp_subflow_data header followed by one element per subflow.
func subflowData(fd, opt, elemSize, maxSubflows int) ([][]byte, error) {
	buf := make([]byte, subflowDataHdrSize+elemSize*maxSubflows)
	binary.NativeEndian.PutUint32(buf[0:], subflowDataHdrSize)
	binary.NativeEndian.PutUint32(buf[12:], uint32(elemSize))
	n, err := getsockopt(fd, unix.SOL_MPTCP, opt, buf)
	if err != nil {
		return nil, err
	}
	num := int(binary.NativeEndian.Uint32(buf[4:]))
	sizeUser := int(binary.NativeEndian.Uint32(buf[12:]))
	var out [][]byte
	for i := 0; i < num && subflowDataHdrSize+(i+1)*sizeUser <= n; i++ {
		off := subflowDataHdrSize + i*sizeUser
		out = append(out, buf[off:off+sizeUser])
	}
	return out, nil
}

func subflowTCPInfo(fd int) ([]unix.TCPInfo, error) {
	size := int(unsafe.Sizeof(unix.TCPInfo{}))
	elems, err := subflowData(fd, mptcpTCPInfoOpt, size, 16)
	if err != nil {
		return nil, fmt.Errorf("MPTCP_TCPINFO: %w", err)
	}
	out := make([]unix.TCPInfo, len(elems))
	for i, e := range elems {
		var ti unix.TCPInfo
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&ti)), size), e)
		out[i] = ti
	}
	return out, nil
}

func subflowAddrs(fd int) ([][2]string, error) {
	elems, err := subflowData(fd, mptcpSubflowAddrs, 2*sockaddrStorage, 16)
	if err != nil {
		return nil, fmt.Errorf("MPTCP_SUBFLOW_ADDRS: %w", err)
	}
	var out [][2]string
	for _, e := range elems {
		out = append(out, [2]string{sockaddrString(e[:sockaddrStorage]), sockaddrString(e[sockaddrStorage:])})
	}
	return out, nil
}

// sockaddrString formats a struct sockaddr_in or sockaddr_in6.
func sockaddrString(b []byte) string {
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		a := netip.AddrFrom4([4]byte(b[4:8]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:])).String()
	case unix.AF_INET6:
		a := netip.AddrFrom16([16]byte(b[8:24]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:])).String()
	}
	return ""
}

// MPTCPCounters returns the non-zero MPTcpExt counters of a namespace
// (what `nstat` shows as MPTcpExt*), e.g. MPCapableSYNACKRX and
// MPJoinSynAckRx on the client; nil if unreadable.
func MPTCPCounters(ns *netns.NS) map[string]uint64 {
	out, err := ns.Output(context.Background(), "cat", "/proc/net/netstat")
	if err != nil {
		return nil
	}
	return parseNetstat(string(out), "MPTcpExt:")
}

// parseNetstat returns the non-zero counters of one /proc/net/netstat
// section (a header line of names and a line of values).
func parseNetstat(text, section string) map[string]uint64 {
	var names []string
	m := map[string]uint64{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != section {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, n := range names {
			if i+1 < len(f) {
				if v, _ := strconv.ParseUint(f[i+1], 10, 64); v != 0 {
					m[n] = v
				}
			}
		}
		break
	}
	return m
}
