// SPDX-License-Identifier: MIT

package control

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeParams(t *testing.T) {
	var sr SetRequest
	for _, tt := range []struct{ raw, want string }{
		{"", "params required"},
		{"null", "params required"},
		{`{"sched":"rr"}`, `unknown field "sched"`},
		{`{"scheduler":"rr"} {}`, "trailing data"},
		{`{"scheduler":3}`, "bad params"},
	} {
		err := DecodeParams(json.RawMessage(tt.raw), &sr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.raw, err, tt.want)
		}
	}
	if err := DecodeParams(json.RawMessage(`{"scheduler":"otias","path":2,"prio":3}`), &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Scheduler != "otias" || *sr.Path != 2 || *sr.Prio != 3 {
		t.Errorf("decoded %+v", sr)
	}
}

func TestRequestsValidate(t *testing.T) {
	two, three := 2, uint8(3)
	for _, tt := range []struct {
		req  SetRequest
		want string
	}{
		{SetRequest{}, "nothing to set"},
		{SetRequest{Path: &two}, "path and prio go together"},
		{SetRequest{Prio: &three}, "path and prio go together"},
		{SetRequest{Path: &two, Prio: &three}, ""},
		{SetRequest{Reorderer: "fixed"}, ""},
	} {
		err := tt.req.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.want)
		}
	}
	for _, tt := range []struct {
		req  CaptureRequest
		want string
	}{
		{CaptureRequest{File: "x.pcap", Seconds: 1}, "absolute path"},
		{CaptureRequest{Seconds: 1}, "absolute path"},
		{CaptureRequest{File: "/tmp/x.pcap"}, "seconds must be in"},
		{CaptureRequest{File: "/tmp/x.pcap", Seconds: 3601}, "seconds must be in"},
		{CaptureRequest{File: "/tmp/x.pcap", Seconds: 1, DCCPFile: "y.pcap"}, "dccp_file"},
		{CaptureRequest{File: "/tmp/x.pcap", Seconds: 1, DCCPFile: "/tmp/x.pcap"}, "dccp_file"},
		{CaptureRequest{File: "/tmp/x.pcap", Seconds: 0.5}, ""},
	} {
		err := tt.req.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.want)
		}
	}
}

// The status JSON keys are the public interface; a rename fails here.
func TestStatusJSONKeys(t *testing.T) {
	b, err := json.Marshal(Status{APIVersion: APIVersion, Conns: []ConnStatus{{Paths: []PathStatus{{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"api_version":1`, `"role"`, `"tunnel"`, `"inner_mtu"`, `"uptime_s"`, `"connections"`,
		`"datapath"`, `"dropped_datagrams"`, `"resets_sent"`, `"local_ci"`, `"scheduler"`, `"reorderer"`, `"queued"`,
		`"sent_packets"`, `"delivered_bytes"`, `"queue_drops"`, `"repaired"`, `"reorder":{"Delivered"`, `"GapsSkipped"`,
		`"HoldHist"`, `"aqm":{"Enqueued"`, `"MaxSojourn"`, `"scheduler_picks"`, `"rtt_ms"`, `"min_rtt_ms"`, `"cwnd"`,
		`"pacing_mbps"`, `"loss_pct"`, `"ecn_marks"`, `"spurious_events"`, `"last_heard_ms_ago"`, `"pacing_late_max_us"`,
		`"tun_read"`, `"udp_send_calls"`, `"dropped_ecn"`, `"marked_ce"`, `"timer_lateness_p99_us"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("status JSON lacks %s:\n%s", k, b)
		}
	}
}
