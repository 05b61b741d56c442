// SPDX-License-Identifier: MIT

package metrics

import (
	"bufio"
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mptun/mptun/control"
	"github.com/mptun/mptun/reorder"
)

func concentratorStatus() control.Status {
	hold := make([]uint64, len(reorder.HoldBuckets)+1)
	hold[0], hold[2], hold[len(hold)-1] = 10, 5, 1
	return control.Status{APIVersion: control.APIVersion, Role: "server", UptimeS: 42.5, ResetsSent: 3,
		Dropped: map[string]uint64{"no-conn": 4, "checksum": 2, "malformed": 1, "bad-handshake": 6, "auth": 8,
			"unknown-peer": 31, "rate-limited": 32, "inner-source": 33, "replay": 34, "downgrade": 35},
		Datapath: control.DPStatus{DroppedQueueFull: 9, TimerLateP99us: 250},
		Conns: []control.ConnStatus{
			{State: "open", PeerCI: 0xabc, SentBytes: 1000, DeliveredBytes: 2000, Repaired: 7, Queued: 3, NACKsSent: 21, NACKsReceived: 22,
				Reorder: control.ReorderStats{Buffered: 11, GapsSkipped: 12, GapsLateArrive: 13, HoldHist: hold, PathOrdered: 23,
					Holes: 24, Repaired: 25, RepairGivenUp: 26},
				Paths: []control.PathStatus{
					{ID: 0, State: "open", RTTms: 12.5, MinRTTms: 10, Cwnd: 40, InFlight: 12, RateMbps: 8, PacingMbps: 16,
						PacketsSent: 100, PacketsLost: 5, ECNMarks: 2, BytesSent: 5000, BytesReceived: 6000, DatagramsSent: 120,
						DatagramsReceived: 130, LastHeardMs: 250},
					{ID: 1, State: "open", Failed: true},
				}},
			{State: "closing", PeerCI: 0xdef, Paths: []control.PathStatus{{ID: 0, State: "open"}}},
		}}
}

// sampleRe matches one sample line: name{labels} value.
var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// scrape parses the text format strictly enough for these tests: each
// sample's family has HELP and TYPE first, no series twice.
func scrape(t *testing.T, text string) (types map[string]string, samples map[string]float64) {
	t.Helper()
	types, samples = map[string]string{}, map[string]float64{}
	helped := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			helped[strings.Fields(f)[0]] = true
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			parts := strings.Fields(f)
			if _, dup := types[parts[0]]; dup {
				t.Errorf("family %s twice", parts[0])
			}
			types[parts[0]] = parts[1]
			continue
		}
		m := sampleRe.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("bad line %q", line)
		}
		fam := strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_count")
		if types[fam] == "" || !helped[fam] {
			t.Errorf("sample %s before its HELP/TYPE", m[1])
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("bad value in %q", line)
		}
		key := m[1] + m[2]
		if _, dup := samples[key]; dup {
			t.Errorf("series %s twice", key)
		}
		samples[key] = v
	}
	return types, samples
}

func TestWriteStatusValues(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteStatus(&buf, concentratorStatus()); err != nil {
		t.Fatal(err)
	}
	_, s := scrape(t, buf.String())
	for series, want := range map[string]float64{
		`mptun_path_srtt_seconds{conn="00000abc",path="0"}`:                     0.0125,
		`mptun_path_min_rtt_seconds{conn="00000abc",path="0"}`:                  0.01,
		`mptun_path_cwnd_packets{conn="00000abc",path="0"}`:                     40,
		`mptun_path_in_flight_packets{conn="00000abc",path="0"}`:                12,
		`mptun_path_delivery_rate_bytes_per_second{conn="00000abc",path="0"}`:   1e6,
		`mptun_path_pacing_rate_bytes_per_second{conn="00000abc",path="0"}`:     2e6,
		`mptun_path_tx_bytes_total{conn="00000abc",path="0"}`:                   5000,
		`mptun_path_rx_bytes_total{conn="00000abc",path="0"}`:                   6000,
		`mptun_path_tx_packets_total{conn="00000abc",path="0"}`:                 120,
		`mptun_path_rx_packets_total{conn="00000abc",path="0"}`:                 130,
		`mptun_path_sent_data_packets_total{conn="00000abc",path="0"}`:          100,
		`mptun_path_lost_packets_total{conn="00000abc",path="0"}`:               5,
		`mptun_path_ecn_ce_packets_total{conn="00000abc",path="0"}`:             2,
		`mptun_path_last_heard_seconds{conn="00000abc",path="0"}`:               0.25,
		`mptun_path_up{conn="00000abc",path="0"}`:                               1,
		`mptun_path_up{conn="00000abc",path="1"}`:                               0,
		`mptun_path_up{conn="00000def",path="0"}`:                               1,
		`mptun_inner_sent_bytes_total{conn="00000abc"}`:                         1000,
		`mptun_inner_delivered_bytes_total{conn="00000abc"}`:                    2000,
		`mptun_repaired_packets_total{conn="00000abc"}`:                         7,
		`mptun_send_queue_packets{conn="00000abc"}`:                             3,
		`mptun_reorder_buffered_packets{conn="00000abc"}`:                       11,
		`mptun_reorder_skipped_gaps_total{conn="00000abc"}`:                     12,
		`mptun_reorder_late_packets_total{conn="00000abc"}`:                     13,
		`mptun_reorder_hold_seconds_bucket{conn="00000abc",le="+Inf"}`:          16,
		`mptun_nacks_sent_total{conn="00000abc"}`:                               21,
		`mptun_nacks_received_total{conn="00000abc"}`:                           22,
		`mptun_reorder_path_ordered_packets_total{conn="00000abc"}`:             23,
		`mptun_reorder_holes_total{conn="00000abc"}`:                            24,
		`mptun_reorder_repaired_holes_total{conn="00000abc"}`:                   25,
		`mptun_reorder_unrepaired_holes_total{conn="00000abc"}`:                 26,
		`mptun_reorder_hold_seconds_count{conn="00000abc"}`:                     16,
		`mptun_dropped_packets_total{direction="rx",reason="unknown_conn"}`:     4,
		`mptun_dropped_packets_total{direction="rx",reason="malformed"}`:        3,
		`mptun_dropped_packets_total{direction="rx",reason="handshake"}`:        6,
		`mptun_dropped_packets_total{direction="rx",reason="unknown_peer"}`:     31,
		`mptun_dropped_packets_total{direction="rx",reason="rate_limited"}`:     32,
		`mptun_dropped_packets_total{direction="rx",reason="inner_source"}`:     33,
		`mptun_dropped_packets_total{direction="rx",reason="replay"}`:           34,
		`mptun_dropped_packets_total{direction="rx",reason="downgrade"}`:        35,
		`mptun_dropped_packets_total{direction="rx",reason="auth"}`:             8,
		`mptun_dropped_packets_total{direction="tx",reason="queue_full"}`:       9,
		`mptun_dropped_packets_total{direction="tx",reason="socket_error"}`:     0,
		`mptun_connections{state="open"}`:                                       1,
		`mptun_connections{state="closing"}`:                                    1,
		`mptun_resets_sent_total`:                                               3,
		`mptun_uptime_seconds`:                                                  42.5,
		`mptun_timer_lateness_p99_seconds`:                                      0.00025,
		`mptun_reorder_hold_seconds_bucket{conn="00000abc",le="` + le(0) + `"}`: 10,
		`mptun_reorder_hold_seconds_bucket{conn="00000abc",le="` + le(1) + `"}`: 10,
		`mptun_reorder_hold_seconds_bucket{conn="00000abc",le="` + le(2) + `"}`: 15,
		`mptun_reorder_hold_seconds_bucket{conn="00000def",le="` + le(0) + `"}`: 0,
		`mptun_reorder_hold_seconds_count{conn="00000def"}`:                     0,
		// -1: absent (that connection has no path 1).
		`mptun_path_up{conn="00000def",path="1"}`: -1,
	} {
		got, ok := s[series]
		if want == -1 {
			if ok {
				t.Errorf("%s present", series)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
}

func le(i int) string { return strconv.FormatFloat(reorder.HoldBuckets[i].Seconds(), 'g', -1, 64) }

// Names and types follow Prometheus' conventions.
func TestWriteStatusConventions(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteStatus(&buf, concentratorStatus()); err != nil {
		t.Fatal(err)
	}
	types, _ := scrape(t, buf.String())
	units := regexp.MustCompile(`_(seconds|bytes|packets|bytes_per_second)(_total)?$|_total$|_up$|^mptun_connections$`)
	for name, typ := range types {
		if !strings.HasPrefix(name, "mptun_") {
			t.Errorf("%s: not in the mptun_ namespace", name)
		}
		if (typ == "counter") != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: a %s; only counters end in _total", name, typ)
		}
		if !units.MatchString(name) {
			t.Errorf("%s: no unit suffix", name)
		}
		for _, bad := range []string{"_ms", "_us", "mbps", "_cwnd_bytes", "_ce_total"} {
			if strings.Contains(name, bad) {
				t.Errorf("%s: %s is not a base unit or an old name", name, bad)
			}
		}
	}
}

// A CPE has one connection, labelled ""; its paths by their names. A
// status without connections has no per-path series at all.
func TestWriteStatusClient(t *testing.T) {
	st := control.Status{Role: "client", Conns: []control.ConnStatus{{State: "open",
		Paths: []control.PathStatus{{ID: 0, Name: "dsl", State: "open"}, {ID: 1, Name: "lte", State: "open"}}}}}
	var buf bytes.Buffer
	if err := WriteStatus(&buf, st); err != nil {
		t.Fatal(err)
	}
	_, s := scrape(t, buf.String())
	for _, series := range []string{`mptun_path_up{conn="",path="dsl"}`, `mptun_path_up{conn="",path="lte"}`, `mptun_repaired_packets_total{conn=""}`} {
		if _, ok := s[series]; !ok {
			t.Errorf("%s missing", series)
		}
	}
	buf.Reset()
	if err := WriteStatus(&buf, control.Status{Role: "client"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `path="`) || strings.Contains(buf.String(), "conn=") {
		t.Errorf("no connection, yet:\n%s", buf.String())
	}
}
