// SPDX-License-Identifier: MIT

package daemon

import (
	"encoding/json"
	"os"
	"time"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

func (d *Daemon) handleCapture(raw json.RawMessage) (any, error) {
	var req control.CaptureRequest
	if err := control.DecodeParams(raw, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	dur := req.Duration()
	f, err := os.OpenFile(req.File, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, err
	}
	w, err := pcapdccp.NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
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
