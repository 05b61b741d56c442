// SPDX-License-Identifier: MIT

package daemon

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/mptun/mptun/capture"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/datapath"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// handleCapture writes the tunnel's datagrams as they crossed the wire
// (IP + UDP + DCCP) to File for Seconds and, if DCCPFile is set, the same
// datagrams in IP protocol 33 form to DCCPFile. Neither form changes a
// DCCP byte. A capture configured in the file goes on meanwhile. It runs
// for callers that passed the control socket's restricted-method check;
// the files are created for caller (openCaptureFile), never an existing
// one overwritten.
func (d *Daemon) handleCapture(caller control.Cred, raw json.RawMessage) (any, error) {
	var req control.CaptureRequest
	if err := control.DecodeParams(raw, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var files tee
	if d.capFile != nil {
		files = append(files, d.capFile)
	}
	onWire, err := newCaptureFile(req.File, pcapdccp.FormUDP, caller)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	files = append(files, onWire)
	if req.DCCPFile != "" {
		native, err := newCaptureFile(req.DCCPFile, pcapdccp.FormDCCP, caller)
		if err != nil {
			onWire.Close()
			return nil, fmt.Errorf("capture: %w", err)
		}
		files = append(files, native)
	}
	d.dp.SetCapture(files)
	time.AfterFunc(req.Duration(), func() {
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
