// SPDX-License-Identifier: MIT

package control

import (
	"bufio"
	"encoding/json"

	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Cred is the connecting process, from SO_PEERCRED.
type Cred struct {
	PID, UID, GID uint32
	Known         bool // false where the kernel could not tell
}

// CredHandler answers a method that needs to know its caller.
type CredHandler func(caller Cred, params json.RawMessage) (any, error)

// HandleWithCred registers a method whose handler gets the caller's
// credentials. A restricted method (one that changes the daemon or writes
// files) is refused unless the caller is root, the socket's owner or in
// the socket's group: the socket's file mode is the first gate, this the
// second, should the socket be reached some other way (a passed
// descriptor, a looser directory).
func (s *Server) HandleWithCred(method string, h CredHandler, restricted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.credHandlers == nil {
		s.credHandlers = map[string]credEntry{}
	}
	s.credHandlers[method] = credEntry{h: h, restricted: restricted}
}

type credEntry struct {
	h          CredHandler
	restricted bool
}

// peerCred reads the credentials of the process at the other end of c.
func peerCred(c net.Conn) Cred {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}
	}
	var cred Cred
	_ = raw.Control(func(fd uintptr) {
		u, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			cred = Cred{PID: uint32(u.Pid), UID: u.Uid, GID: u.Gid, Known: true}
		}
	})
	return cred
}

// authorize checks a restricted method's caller against the socket file.
func (s *Server) authorize(method string, c Cred) error {
	if !c.Known {
		return fmt.Errorf("%s: caller unknown (no SO_PEERCRED)", method)
	}
	if c.UID == 0 {
		return nil
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read the socket's owner", method)
	}
	if c.UID == st.Uid || c.GID == st.Gid || inGroup(c.PID, st.Gid) {
		return nil
	}
	return fmt.Errorf("%s: permission denied for uid %d (needs root, uid %d or group %d)", method, c.UID, st.Uid, st.Gid)
}

// inGroup reports whether process pid has gid among its supplementary groups.
func inGroup(pid, gid uint32) bool {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		for _, g := range strings.Fields(rest) {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) == gid {
				return true
			}
		}
		return false
	}
	return false
}
