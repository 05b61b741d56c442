// SPDX-License-Identifier: MIT

package tun

import (
	"os"
	"sync"
)

// ChannelDevice is an in-memory Device for tests. Packets sent on Inbound
// are what the "kernel" hands to Read; packets given to Write appear on
// Outbound as fresh copies.
type ChannelDevice struct {
	Inbound  chan []byte
	Outbound chan []byte

	name  string
	mtu   int
	batch int

	done      chan struct{}
	closeOnce sync.Once
}

// NewChannel returns an in-memory device. batch is its BatchSize (at least 1).
func NewChannel(name string, mtu, batch int) *ChannelDevice {
	return &ChannelDevice{
		Inbound:  make(chan []byte, 1024),
		Outbound: make(chan []byte, 1024),
		name:     name,
		mtu:      mtu,
		batch:    max(batch, 1),
		done:     make(chan struct{}),
	}
}

// Read blocks for one packet, then takes whatever else is queued, up to
// min(len(bufs), BatchSize()). Packets longer than their buffer are
// truncated, as the kernel would.
func (d *ChannelDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case p := <-d.Inbound:
		sizes[0] = copy(bufs[0][offset:], p)
	case <-d.done:
		return 0, os.ErrClosed
	}
	n := 1
	for n < len(bufs) && n < d.batch {
		select {
		case p := <-d.Inbound:
			sizes[n] = copy(bufs[n][offset:], p)
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

// Write copies each packet to Outbound, blocking while it is full.
func (d *ChannelDevice) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		p := append([]byte(nil), b[offset:]...)
		select {
		case d.Outbound <- p:
		case <-d.done:
			return i, os.ErrClosed
		}
	}
	return len(bufs), nil
}

func (d *ChannelDevice) BatchSize() int        { return d.batch }
func (d *ChannelDevice) MTU() (int, error)     { return d.mtu, nil }
func (d *ChannelDevice) Name() (string, error) { return d.name, nil }

// Close makes blocked and later calls return os.ErrClosed.
func (d *ChannelDevice) Close() error {
	d.closeOnce.Do(func() { close(d.done) })
	return nil
}

var _ Device = (*ChannelDevice)(nil)
