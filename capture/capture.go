// SPDX-License-Identifier: MIT

// Package capture writes the tunnel's datagrams to a pcap file (through
// mpdccp/wire/pcapdccp, as on the wire or in IP protocol 33 form) that is
// safe for concurrent use, buffered, and rotated when it reaches a size
// limit so a forgotten capture cannot fill the disk.
package capture

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// File is a pcap capture file. When MaxSize is set and a write would take
// the file past it, the file is renamed to PATH.1 (replacing an older one)
// and a new PATH is started, so at most about 2×MaxSize is kept.
type File struct {
	mu      sync.Mutex
	path    string
	form    pcapdccp.Form
	maxSize int64
	f       *os.File
	bw      *bufio.Writer
	w       *pcapdccp.Writer
	size    int64 // bytes written to the current file
	closed  bool
}

const (
	bufSize = 64 << 10
	// perPacket is the most a record adds to a datagram's length.
	perPacket = pcapdccp.MaxOverhead
	// fileHeader is the pcap global header.
	fileHeader = 24
	// MinSize is the smallest usable limit.
	MinSize = 64 << 10
)

// Create starts a capture at path (truncating it) in the given form.
// maxSize 0 means no limit; otherwise it must be at least MinSize.
func Create(path string, form pcapdccp.Form, maxSize int64) (*File, error) {
	if maxSize != 0 && maxSize < MinSize {
		return nil, fmt.Errorf("capture %s: size limit %d below %d bytes", path, maxSize, MinSize)
	}
	c := &File{path: path, form: form, maxSize: maxSize}
	if err := c.open(); err != nil {
		return nil, err
	}
	return c, nil
}

// FromFile is Create for a file the caller opened itself (say, with
// O_EXCL|O_NOFOLLOW, so that nothing existing is overwritten): no size
// limit, no rotation.
func FromFile(f *os.File, form pcapdccp.Form) (*File, error) {
	c := &File{path: f.Name(), form: form, f: f}
	c.bw = bufio.NewWriterSize(f, bufSize)
	var err error
	if c.w, err = pcapdccp.NewWriter(c.bw, form); err != nil {
		return nil, fmt.Errorf("capture %s: %w", c.path, err)
	}
	c.size = fileHeader
	return c, nil
}

func (c *File) open() error {
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	c.f = f
	c.bw = bufio.NewWriterSize(f, bufSize)
	if c.w, err = pcapdccp.NewWriter(c.bw, c.form); err != nil {
		f.Close()
		return fmt.Errorf("capture %s: %w", c.path, err)
	}
	c.size = fileHeader
	return nil
}

// WritePacket records one datagram (its UDP payload, a DCCP packet) sent
// from src to dst at t, unchanged.
func (c *File) WritePacket(t time.Time, src, dst netip.AddrPort, dccp []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return os.ErrClosed
	}
	n := int64(len(dccp) + perPacket)
	if c.maxSize > 0 && c.size+n > c.maxSize && c.size > fileHeader {
		if err := c.rotate(); err != nil {
			return err
		}
	}
	if err := c.w.WritePacket(t, src, dst, dccp); err != nil {
		return err
	}
	c.size += n
	return nil
}

func (c *File) rotate() error {
	if err := c.finish(); err != nil {
		return err
	}
	if err := os.Rename(c.path, c.path+".1"); err != nil {
		return fmt.Errorf("capture: rotate: %w", err)
	}
	return c.open()
}

// finish flushes and closes the current file.
func (c *File) finish() error {
	err := c.bw.Flush()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("capture %s: %w", c.path, err)
	}
	return nil
}

// Flush writes buffered packets to the file.
func (c *File) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("capture %s: %w", c.path, err)
	}
	return nil
}

// Close flushes and closes the file; later writes return os.ErrClosed.
func (c *File) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("capture: already closed")
	}
	c.closed = true
	return c.finish()
}
