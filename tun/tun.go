// SPDX-License-Identifier: MIT

// Package tun gives mptun its TUN devices behind one small, batched
// interface: the Linux device of golang.zx2c4.com/wireguard/tun with
// virtio-net-header offloads, a github.com/songgao/water driver without
// offloads, and an in-memory device for tests.
package tun

import (
	"fmt"

	wgtun "golang.zx2c4.com/wireguard/tun"
)

// Device is a TUN device carrying IPv4 and IPv6 packets (no extra header).
// It is the subset of wireguard-go's tun.Device that mptun needs.
//
// Rules (from the wireguard driver, which the others do not relax on
// purpose so that callers stay portable):
//   - Read and Write leave offset bytes free at the front of every buffer;
//     Write needs offset >= MinOffset.
//   - With offloads, one Read can return up to BatchSize packets split
//     from one TSO/USO super-packet, so every buffer must hold a full
//     packet after offset; Write coalesces packets (GRO) into the spare
//     capacity of the buffers, so give buffers of BufferSize capacity.
//   - Write may reorder the elements of bufs; do not rely on their order
//     afterwards.
//   - Read may return ErrTooManySegments when a super-packet does not fit
//     in bufs; the packets that fitted are returned and reading can go on.
type Device interface {
	// Read reads up to len(bufs) packets into bufs[i][offset:], setting
	// sizes[i], and returns how many it read.
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	// Write writes the packets bufs[i][offset:]. Drivers count
	// differently, so callers should rely on err rather than n.
	Write(bufs [][]byte, offset int) (int, error)
	// BatchSize is the most packets one Read returns; it never changes.
	BatchSize() int
	MTU() (int, error)
	Name() (string, error)
	Close() error
}

// Config selects and creates a device.
type Config struct {
	Name   string
	Driver string // DriverWireGuard (default) or DriverWater
	MTU    int
	// Offload enables the virtio-net header (TSO/USO split on read, GRO on
	// write) for the wireguard driver. Some vendor kernels accept the flag
	// and then reject coalesced writes; turn it off there.
	Offload bool
}

// Driver names as used in config files.
const (
	DriverWireGuard = "wireguard"
	DriverWater     = "water"
)

const (
	// MinOffset is the least headroom Write accepts: the virtio-net
	// header is written in front of the packet.
	MinOffset = 10
	// BufferSize is the buffer capacity to use with offloads: a whole
	// super-packet or coalesced write.
	BufferSize = 65535 + MinOffset
)

// ErrTooManySegments is returned by Read when a super-packet was split
// into more packets than there were buffers.
var ErrTooManySegments = wgtun.ErrTooManySegments

// Open creates the TUN device described by cfg. It does not configure
// addresses; see Configure.
func Open(cfg Config) (Device, error) {
	if cfg.MTU <= 0 {
		cfg.MTU = 1420
	}
	var (
		dev Device
		err error
	)
	switch cfg.Driver {
	case "", DriverWireGuard:
		dev, err = openWireGuard(cfg)
	case DriverWater:
		dev, err = openWater(cfg)
	default:
		return nil, fmt.Errorf("tun %s: unknown driver %q", cfg.Name, cfg.Driver)
	}
	if err != nil {
		return nil, fmt.Errorf("tun %s: %s driver: %w", cfg.Name, cfg.Driver, err)
	}
	return dev, nil
}
