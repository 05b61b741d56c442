// SPDX-License-Identifier: MIT

package tun

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/songgao/water"
)

// waterDevice moves one packet per call: water has no offloads or
// batching. It exists for systems where the offloads misbehave.
type waterDevice struct {
	ifce      *water.Interface
	closeOnce sync.Once
}

func openWater(cfg Config) (Device, error) {
	ifce, err := water.New(water.Config{
		DeviceType:             water.TUN,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: cfg.Name},
	})
	if err != nil {
		return nil, err
	}
	d := &waterDevice{ifce: ifce}
	if err := setMTU(ifce.Name(), cfg.MTU); err != nil {
		ifce.Close()
		return nil, err
	}
	return d, nil
}

func (d *waterDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := d.ifce.Read(bufs[0][offset:])
	if err != nil {
		return 0, closedErr(err)
	}
	sizes[0] = n
	return 1, nil
}

func (d *waterDevice) Write(bufs [][]byte, offset int) (int, error) {
	var errs error
	n := 0
	for _, b := range bufs {
		if _, err := d.ifce.Write(b[offset:]); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return n, os.ErrClosed
			}
			errs = errors.Join(errs, err)
			continue
		}
		n++
	}
	return n, errs
}

func (d *waterDevice) BatchSize() int { return 1 }

func (d *waterDevice) MTU() (int, error) {
	ifi, err := net.InterfaceByName(d.ifce.Name())
	if err != nil {
		return 0, fmt.Errorf("mtu of %s: %w", d.ifce.Name(), err)
	}
	return ifi.MTU, nil
}

func (d *waterDevice) Name() (string, error) { return d.ifce.Name(), nil }

func (d *waterDevice) Close() error {
	var err error
	d.closeOnce.Do(func() { err = d.ifce.Close() })
	return err
}

func closedErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return os.ErrClosed
	}
	return err
}
