// SPDX-License-Identifier: MIT

package scenario

import (
	"strings"
	"testing"

	"github.com/mptun/mptun/lab/traffic"
)

func TestCheckMPTCP(t *testing.T) {
	two := traffic.MPTCPConnInfo{MPTCP: true, Subflows: 2, SubflowStats: []traffic.SubflowInfo{{BytesAcked: 300}, {BytesAcked: 100}}}
	c := checkMPTCP([]traffic.MPTCPConnInfo{two}, 2)
	if !c.Verified || c.Subflows != 2 || len(c.Share) != 2 || c.Share[0] != 0.75 || c.Share[1] != 0.25 {
		t.Fatalf("%+v", c)
	}
	one := traffic.MPTCPConnInfo{MPTCP: true, Subflows: 1, SubflowStats: []traffic.SubflowInfo{{BytesAcked: 100}}}
	if c := checkMPTCP([]traffic.MPTCPConnInfo{two, one}, 2); c.Verified || c.Subflows != 1 || !strings.Contains(c.Detail, "1 subflows, expected 2") {
		t.Errorf("missing subflow: %+v", c)
	}
	fb := traffic.MPTCPConnInfo{Fallback: true, Subflows: 1}
	if c := checkMPTCP([]traffic.MPTCPConnInfo{fb}, 2); c.Verified || !c.Fallback || !strings.Contains(c.Detail, "fell back") {
		t.Errorf("fallback: %+v", c)
	}
	if c := checkMPTCP(nil, 2); c.Verified || !strings.Contains(c.Detail, "no bulk connection") {
		t.Errorf("nothing inspected: %+v", c)
	}
	bad := traffic.MPTCPConnInfo{MPTCP: true, Subflows: 2, Err: "MPTCP_TCPINFO: boom"}
	if c := checkMPTCP([]traffic.MPTCPConnInfo{bad}, 2); c.Verified {
		t.Errorf("inspection error: %+v", c)
	}
}

func TestFieldAfter(t *testing.T) {
	if d := fieldAfter("10.99.0.1 dev mptun0 src 10.99.0.2 uid 0 \\    cache", "dev"); d != "mptun0" {
		t.Fatal(d)
	}
	if d := fieldAfter("unreachable", "dev"); d != "" {
		t.Fatal(d)
	}
}
