// SPDX-License-Identifier: MIT

//go:build !linux

package netio

import "net/netip"

// Conn is a placeholder off Linux; Open always fails.
type Conn struct{}

// Open is not supported on this OS.
func Open(SocketConfig) (*Conn, error) { return nil, ErrUnsupported }

func (*Conn) LocalAddr() netip.AddrPort              { return netip.AddrPort{} }
func (*Conn) BatchSize() int                         { return 1 }
func (*Conn) GSO() bool                              { return false }
func (*Conn) GRO() bool                              { return false }
func (*Conn) Stats() Stats                           { return Stats{} }
func (*Conn) SetFwmark(uint32) error                 { return ErrUnsupported }
func (*Conn) Close() error                           { return nil }
func (*Conn) ReadBatch(msgs []Message) (int, error)  { return 0, ErrUnsupported }
func (*Conn) WriteBatch(msgs []Message) (int, error) { return 0, ErrUnsupported }
