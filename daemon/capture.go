// SPDX-License-Identifier: MIT

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/mptun/mptun/capture"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// CaptureRequest is the "capture" method's parameters: write the tunnel's
// datagrams as they crossed the wire (IP + UDP + DCCP) to File for Seconds,
// and, if DCCPFile is set, the same datagrams in IP protocol 33 form (the
// UDP header removed) to DCCPFile. Neither form changes a DCCP byte.
type CaptureRequest struct {
	File     string  `json:"file"`
	Seconds  float64 `json:"seconds"`
	DCCPFile string  `json:"dccp_file,omitempty"`
}

const maxCapture = time.Hour

func (d *Daemon) handleCapture(raw json.RawMessage) (any, error) {
	var req CaptureRequest
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("capture: bad params: %w", err)
	}
	if req.File == "" || !filepath.IsAbs(req.File) {
		return nil, errors.New("capture: file must be an absolute path")
	}
	if req.DCCPFile != "" && (!filepath.IsAbs(req.DCCPFile) || req.DCCPFile == req.File) {
		return nil, errors.New("capture: dccp_file must be another absolute path")
	}
	dur := time.Duration(req.Seconds * float64(time.Second))
	if dur <= 0 || dur > maxCapture {
		return nil, fmt.Errorf("capture: seconds must be in (0, %v]", maxCapture.Seconds())
	}
	var files tee
	if d.capFile != nil {
		files = append(files, d.capFile) // the configured capture goes on
	}
	wire, err := capture.Create(req.File, pcapdccp.FormUDP, 0)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	files = append(files, wire)
	if req.DCCPFile != "" {
		native, err := capture.Create(req.DCCPFile, pcapdccp.FormDCCP, 0)
		if err != nil {
			wire.Close()
			return nil, fmt.Errorf("capture: %w", err)
		}
		files = append(files, native)
	}
	d.dp.SetCapture(files)
	time.AfterFunc(dur, func() {
		var keep datapath.Capture
		if d.capFile != nil {
			keep = d.capFile
		}
		d.dp.SetCapture(keep)
		for _, f := range files {
			if f != d.capFile {
				f.Close()
			}
		}
	})
	return req, nil
}

// tee writes each datagram to several captures (each one locks itself).
type tee []*capture.File

func (t tee) WritePacket(at time.Time, src, dst netip.AddrPort, dg []byte) error {
	var first error
	for _, f := range t {
		if err := f.WritePacket(at, src, dst, dg); err != nil && first == nil {
			first = err
		}
	}
	return first
}
