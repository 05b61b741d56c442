// SPDX-License-Identifier: MIT

//go:build !linux

package tun

import (
	"errors"
	"net/netip"
)

var errUnsupported = errors.New("not supported on this OS")

func openWireGuard(Config) (Device, error) { return nil, errUnsupported }
func openWater(Config) (Device, error)     { return nil, errUnsupported }

// Configure is not supported on this OS.
func Configure(string, int, []netip.Prefix, []netip.Prefix) error { return errUnsupported }
