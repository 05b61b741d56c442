// SPDX-License-Identifier: MIT

package tun

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// Configure sets the MTU (if > 0), brings the interface up, and adds
// addresses and routes through it. It replaces existing entries, so it can
// run again on reload. IPv6 addresses skip duplicate address detection,
// which would otherwise hold them "tentative" for a second or more.
//
// It runs ip(8) from iproute2 in the caller's network namespace.
func Configure(name string, mtu int, addrs, routes []netip.Prefix) error {
	if mtu > 0 {
		if err := setMTU(name, mtu); err != nil {
			return err
		}
	}
	// No IPv6 link-local address: a tunnel has no use for it, and while
	// the kernel runs DAD on it the device drops IPv6 input for up to a
	// second or two. It also keeps router solicitations out of the tunnel.
	if err := ip("link", "set", "dev", name, "addrgenmode", "none"); err != nil {
		return err
	}
	if err := ip("link", "set", "dev", name, "up"); err != nil {
		return err
	}
	for _, a := range addrs {
		args := []string{"addr", "replace", a.String(), "dev", name}
		if a.Addr().Is6() {
			args = append(args, "nodad")
		}
		if err := ip(args...); err != nil {
			return err
		}
	}
	for _, r := range routes {
		if err := ip("route", "replace", r.Masked().String(), "dev", name); err != nil {
			return err
		}
	}
	return nil
}

func ip(args ...string) error {
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// setMTU uses SIOCSIFMTU, which needs no helper binary.
func setMTU(name string, mtu int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set mtu of %s: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("set mtu of %s: %w", name, err)
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("set mtu of %s to %s: %w", name, strconv.Itoa(mtu), err)
	}
	return nil
}
