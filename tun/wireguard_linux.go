// SPDX-License-Identifier: MIT

package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// wgDevice wraps the wireguard-go device. Its events (the TUN device up
// or down, MTU changes) are drained: nothing in mptun acts on them.
type wgDevice struct {
	wgtun.Device
}

func openWireGuard(cfg Config) (Device, error) {
	var (
		dev wgtun.Device
		err error
	)
	if cfg.Offload {
		dev, err = wgtun.CreateTUN(cfg.Name, cfg.MTU)
	} else {
		dev, err = createPlainTUN(cfg.Name, cfg.MTU)
	}
	if err != nil {
		return nil, err
	}
	go func() {
		for range dev.Events() {
		}
	}()
	return wgDevice{dev}, nil
}

// createPlainTUN opens the device without IFF_VNET_HDR, which is how the
// wireguard driver runs without offloads (batch size 1). Upstream has no
// switch for it.
func createPlainTUN(name string, mtu int) (wgtun.Device, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	// Non-blocking before the netpoller sees the fd.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return wgtun.CreateTUNFromFile(os.NewFile(uintptr(fd), "/dev/net/tun"), mtu)
}
