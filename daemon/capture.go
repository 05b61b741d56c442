// SPDX-License-Identifier: MIT

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/mptun/mptun/control"

	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// CaptureRequest is the "capture" method's parameters: write the tunnel's
// datagrams to File (pcap, IP protocol 33) for Seconds.
type CaptureRequest struct {
	File    string  `json:"file"`
	Seconds float64 `json:"seconds"`
}

const maxCapture = time.Hour

// handleCapture runs for callers that passed the control socket's
// restricted-method check; the file is created for caller (see
// openCaptureFile), never an existing one overwritten.
func (d *Daemon) handleCapture(caller control.Cred, raw json.RawMessage) (any, error) {
	var req CaptureRequest
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("capture: bad params: %w", err)
	}
	if req.File == "" || !filepath.IsAbs(req.File) {
		return nil, errors.New("capture: file must be an absolute path")
	}
	dur := time.Duration(req.Seconds * float64(time.Second))
	if dur <= 0 || dur > maxCapture {
		return nil, fmt.Errorf("capture: seconds must be in (0, %v]", maxCapture.Seconds())
	}
	f, err := openCaptureFile(req.File, caller)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	w, err := pcapdccp.NewWriter(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %w", err)
	}
	lc := &lockedCapture{w: w}
	d.dp.SetCapture(lc)
	time.AfterFunc(dur, func() {
		d.dp.SetCapture(nil)
		lc.mu.Lock()
		f.Close()
		lc.mu.Unlock()
	})
	return req, nil
}
