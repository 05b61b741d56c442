// SPDX-License-Identifier: MIT

package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mptun/mptun/control"
)

func sampleStatus() control.Status {
	return control.Status{APIVersion: control.APIVersion, Role: "client", Tunnel: "mptun0", InnerMTU: 1400,
		Conns: []control.ConnStatus{{State: "open", LocalCI: 7, PeerCI: 9, Scheduler: "rr", Reorderer: "equalize",
			Paths: []control.PathStatus{
				{ID: 0, Name: "dsl", State: "open", RTTms: 12.5, BytesSent: 1000, BytesReceived: 5000},
				{ID: 1, Name: "lte", State: "open", RTTms: 41, Failed: true},
			}}}}
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

func TestPageAndAssets(t *testing.T) {
	h := Handler(func(context.Context) (control.Status, error) { return sampleStatus(), nil })
	for path, ctype := range map[string]string{"/": "text/html", "/app.js": "javascript", "/style.css": "text/css"} {
		w := get(t, h, "GET", path)
		if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, w.Code, w.Header().Get("Content-Type"), ctype)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
	page := get(t, h, "GET", "/").Body.String()
	for _, want := range []string{`src="app.js"`, `href="style.css"`, `id="rate-chart"`, `id="rtt-chart"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if w := get(t, h, "HEAD", "/"); w.Code != http.StatusOK {
		t.Errorf("HEAD /: %d", w.Code)
	}
}

// Nothing the page loads comes from elsewhere: no absolute URLs in src,
// href, url() or fetch, and the page's own references are all embedded.
func TestNoExternalAssets(t *testing.T) {
	ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|fetch\(\s*["'](https?:)?//|@import`)
	ref := regexp.MustCompile(`(?:src|href)="([^"]+)"`)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		if m := ext.Find(b); m != nil {
			t.Errorf("%s refers outside the daemon: %q", p, m)
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			if _, err := fs.Stat(assets, "assets/"+m[1]); err != nil && m[1] != "api/status" {
				t.Errorf("%s refers to %q, which is not embedded", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStatusJSON(t *testing.T) {
	want := sampleStatus()
	h := Handler(func(context.Context) (control.Status, error) { return want, nil })
	w := get(t, h, "GET", "/api/status")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /api/status: %d %v", w.Code, w.Header())
	}
	// The same JSON as `mptun status --json` decodes.
	var got control.Status
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Conns) != 1 || len(got.Conns[0].Paths) != 2 || got.Conns[0].Paths[0].BytesReceived != 5000 ||
		got.Conns[0].Paths[1].Name != "lte" || !got.Conns[0].Paths[1].Failed || got.APIVersion != control.APIVersion {
		t.Errorf("decoded %+v", got)
	}
	for _, key := range []string{`"api_version":1`, `"bytes_sent":1000`, `"rtt_ms":12.5`, `"connections":[`} {
		if !strings.Contains(w.Body.String(), key) {
			t.Errorf("JSON lacks %s: %s", key, w.Body.String())
		}
	}
}

func TestStatusError(t *testing.T) {
	h := Handler(func(context.Context) (control.Status, error) {
		return control.Status{}, errors.New("data path stopped")
	})
	w := get(t, h, "GET", "/api/status")
	var body map[string]string
	if w.Code != http.StatusServiceUnavailable || json.Unmarshal(w.Body.Bytes(), &body) != nil || body["error"] != "data path stopped" {
		t.Errorf("got %d %s, want 503 with the error", w.Code, w.Body.String())
	}
}

func TestReadOnly(t *testing.T) {
	var calls atomic.Int32
	h := Handler(func(context.Context) (control.Status, error) { calls.Add(1); return sampleStatus(), nil })
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		for _, p := range []string{"/", "/api/status"} {
			w := get(t, h, m, p)
			if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d, Allow %q", m, p, w.Code, w.Header().Get("Allow"))
			}
		}
	}
	for _, p := range []string{"/api/status/", "/api", "/index.htm", "/../etc/passwd", "/assets/app.js"} {
		// 404, or a redirect to the cleaned path (which is a 404).
		if w := get(t, h, "GET", p); w.Code != http.StatusNotFound && w.Code/100 != 3 {
			t.Errorf("GET %s: %d, want 404", p, w.Code)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("refused requests took %d snapshots", calls.Load())
	}
}

// Requests within minInterval share one snapshot, so open pages cannot
// load the data path's goroutine.
func TestSnapshotShared(t *testing.T) {
	var calls atomic.Int32
	now := time.Unix(1000, 0)
	s := &snapshotter{status: func(context.Context) (control.Status, error) { calls.Add(1); return sampleStatus(), nil },
		now: func() time.Time { return now }}
	for range 20 {
		if _, err := s.get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d snapshots for 20 requests at one instant, want 1", calls.Load())
	}
	now = now.Add(minInterval)
	s.get(context.Background())
	if calls.Load() != 2 {
		t.Fatalf("%d snapshots after minInterval, want 2", calls.Load())
	}
}

// A real listener on loopback serves the page.
func TestListen(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", func(context.Context) (control.Status, error) { return sampleStatus(), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr().String() + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"name":"dsl"`) {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	if _, err := Listen(srv.Addr().String(), nil, nil); err == nil || !strings.Contains(err.Error(), "status page listener") {
		t.Errorf("second listener on the same port: %v", err)
	}
	if !isLoopback(srv.Addr()) || isLoopback(&net.TCPAddr{IP: net.IPv4zero}) || !isLoopback(&net.TCPAddr{IP: net.IPv6loopback}) {
		t.Error("isLoopback")
	}
}
