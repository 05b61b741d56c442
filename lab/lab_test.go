// SPDX-License-Identifier: MIT

package lab

import (
	"bytes"
	"strings"
	"testing"
)

func TestMainUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"run"}, 2, "usage"},
		{[]string{"run", "a.toml", "b.toml"}, 2, "more than one"},
		{[]string{"run", "--nope", "a.toml"}, 2, "flag provided but not defined"},
		{[]string{"help"}, 0, "mptun lab run"},
	} {
		var out, errb bytes.Buffer
		if code := MainIO(tc.args, &out, &errb); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errb.String())
		}
		if !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.args, out.String()+errb.String(), tc.want)
		}
	}
}

func TestPeersListed(t *testing.T) {
	var out bytes.Buffer
	if MainIO([]string{"peers"}, &out, &out) != 0 {
		t.Fatal(out.String())
	}
	for _, p := range []string{"none", "mptcp", "wireguard-go", "mptun"} {
		if !strings.Contains(out.String(), p) {
			t.Errorf("peer %s not listed: %q", p, out.String())
		}
	}
}
