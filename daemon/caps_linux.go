// SPDX-License-Identifier: MIT

package daemon

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// keptCaps are the capabilities the daemon keeps once set up: opening
// sockets for new paths (SO_MARK, SO_*BUFFORCE) and changing routes need
// CAP_NET_ADMIN; nothing the running daemon does needs CAP_NET_RAW.
const keptCaps = 1 << unix.CAP_NET_ADMIN

// errCgo: capabilities are per thread, and only a build without cgo can
// change them on every thread of the process at once.
var errCgo = errors.New("cannot drop capabilities in a cgo build (build with CGO_ENABLED=0, as `make build` does)")

// dropCapabilities leaves every thread with CAP_NET_ADMIN alone in its
// permitted and effective sets, an empty inheritable and ambient set,
// a bounding set of CAP_NET_ADMIN (when it may change it), and
// no_new_privs, so nothing executed later can regain anything.
func dropCapabilities() error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		if e == syscall.ENOTSUP {
			return errCgo
		}
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", e)
	}
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		if 1<<c&keptCaps != 0 {
			continue
		}
		_, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0)
		if e == syscall.EPERM {
			break // no CAP_SETPCAP: the bounding set is the parent's (systemd's)
		}
		if e != 0 && e != syscall.EINVAL { // EINVAL: a capability this kernel lacks
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, e)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != syscall.EINVAL {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	keep := data[0].Permitted & keptCaps // never ask for more than we have
	data = [2]unix.CapUserData{{Effective: keep, Permitted: keep}}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}
