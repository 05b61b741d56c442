// SPDX-License-Identifier: MIT

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mptun/mptun/capture"
	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/mpdccp/wire/pcapdccp"
)

// registerRestricted routes the methods that change the daemon or write
// files through the control socket's caller check (SO_PEERCRED): only
// root, the socket's owner or its group may call them.
func registerRestricted(srv *control.Server, d *Daemon) {
	set := d.handlers()[control.MethodSet]
	srv.HandleWithCred(control.MethodSet, func(_ control.Cred, p json.RawMessage) (any, error) { return set(p) }, true)
	srv.HandleWithCred(control.MethodCapture, d.handleCapture, true)
}

// openCaptureFile creates a new capture file for caller. It never opens an
// existing file or follows a symlink (O_EXCL|O_NOFOLLOW), so a capture
// request cannot overwrite anything; a caller other than root may only
// create it in a directory it owns or a sticky world-writable one (such
// as /tmp), and gets the file as its own.
func openCaptureFile(name string, caller control.Cred) (*os.File, error) {
	name = filepath.Clean(name)
	if !caller.Known {
		return nil, errors.New("caller unknown")
	}
	if caller.UID != 0 {
		fi, err := os.Stat(filepath.Dir(name))
		if err != nil {
			return nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		sticky := fi.Mode()&os.ModeSticky != 0 && fi.Mode().Perm()&0o002 != 0
		if !ok || !fi.IsDir() || st.Uid != caller.UID && !sticky {
			return nil, fmt.Errorf("%s: uid %d may only capture into its own directory or a sticky one like /tmp", filepath.Dir(name), caller.UID)
		}
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if caller.UID != 0 {
		if err := f.Chown(int(caller.UID), int(caller.GID)); err != nil {
			// Without CAP_CHOWN (dropped after setup) the caller gets a
			// readable file instead; it holds only sealed tunnel packets.
			if err := f.Chmod(0o644); err != nil {
				f.Close()
				os.Remove(name)
				return nil, err
			}
		}
	}
	return f, nil
}

// newCaptureFile is a capture writing to a file openCaptureFile created.
func newCaptureFile(name string, form pcapdccp.Form, caller control.Cred) (*capture.File, error) {
	f, err := openCaptureFile(name, caller)
	if err != nil {
		return nil, err
	}
	c, err := capture.FromFile(f, form)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// dropPrivileges keeps CAP_NET_ADMIN alone once the device, the sockets
// and the control socket exist (see dropCapabilities).
func (d *Daemon) dropPrivileges() {
	switch err := dropCapabilities(); {
	case err == nil:
		d.log.Info("privileges dropped", "kept", "CAP_NET_ADMIN")
	case errors.Is(err, errCgo):
		d.log.Warn("privileges NOT dropped", "err", err)
	default:
		d.log.Error("privileges NOT dropped", "err", err)
	}
}
