// SPDX-License-Identifier: MIT

package bench

import (
	"crypto/rand"
	"fmt"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/mpdccp/noise"
)

// benchSecurity returns the [connection] key lines and the [[peer]]
// section of the server and the client: fresh keys per run, or
// security = "none" for the unencrypted mode.
func benchSecurity(encrypted bool) (srv, cli string, err error) {
	if !encrypted {
		return `security = "none"`, `security = "none"`, nil
	}
	var priv, pub [2]noise.Key
	for i := range priv {
		if priv[i], err = noise.GeneratePrivateKey(rand.Reader); err != nil {
			return "", "", err
		}
		if pub[i], err = noise.PublicKey(priv[i]); err != nil {
			return "", "", err
		}
	}
	// A [[peer]] table must follow the [connection] keys, so each side's
	// text ends with it; the [[listen]]/[[path]] tables come after.
	srv = fmt.Sprintf("private_key = %q\n[[peer]]\npublic_key = %q\nallowed_ips = [\"%s/32\"]", priv[0], pub[1], mptCli)
	cli = fmt.Sprintf("private_key = %q\n[[peer]]\npublic_key = %q\nallowed_ips = [\"0.0.0.0/0\"]", priv[1], pub[0])
	return srv, cli, nil
}

// MptunMode says how mptun ran, for the text report.
func (r ThroughputResult) MptunMode() string {
	if !r.Encrypted {
		return "unencrypted"
	}
	if r.MptunAEAD != "" {
		return r.MptunAEAD
	}
	return "encrypted"
}

// mptunAEAD asks the client daemon which AEAD its connection uses.
func mptunAEAD(sock string) string {
	var st control.Status
	if control.Call(sock, "status", nil, &st) != nil || len(st.Conns) == 0 {
		return ""
	}
	return st.Conns[0].AEAD
}
