// SPDX-License-Identifier: MIT

package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type echoParams struct {
	Text string `json:"text"`
}

var testHandlers = Handlers{
	"echo": func(p json.RawMessage) (any, error) {
		var ep echoParams
		if err := json.Unmarshal(p, &ep); err != nil {
			return nil, err
		}
		return map[string]string{"text": strings.ToUpper(ep.Text)}, nil
	},
	"fail":  func(json.RawMessage) (any, error) { return nil, errors.New("path dsl is down") },
	"panic": func(json.RawMessage) (any, error) { panic("boom") },
	"null":  func(p json.RawMessage) (any, error) { return string(p), nil },
}

// start serves testHandlers; stop cancels the server and returns Serve's
// result (it runs at cleanup too).
func start(t *testing.T) (path string, stop func() error) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "run", "mptun.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, testHandlers, nil) }()
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			break
		}
		if i > 500 {
			t.Fatal("server did not start")
		}
		time.Sleep(2 * time.Millisecond)
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				err = errors.New("Serve did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return path, stop
}

func TestCall(t *testing.T) {
	path, _ := start(t)
	var res struct{ Text string }
	if err := Call(path, "echo", echoParams{"hi"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Text != "HI" {
		t.Errorf("result %q", res.Text)
	}
	var s string
	if err := Call(path, "null", nil, &s); err != nil || s != "null" {
		t.Errorf("no params: %q, %v", s, err)
	}
}

func TestErrors(t *testing.T) {
	path, _ := start(t)
	for _, tt := range []struct{ method, want string }{
		{"nope", `unknown method "nope" (have echo, fail, null, panic)`},
		{"fail", "fail: path dsl is down"},
		{"panic", "panic: internal error"},
		{"echo", "echo: json: cannot unmarshal number into Go value of type control.echoParams"},
	} {
		var params any
		if tt.method == "echo" {
			params = 42
		}
		err := Call(path, tt.method, params, nil)
		var re *RemoteError
		if !errors.As(err, &re) || re.Msg != tt.want {
			t.Errorf("%s: got %v, want %q", tt.method, err, tt.want)
		}
	}
	// The server survived the panic.
	if err := Call(path, "echo", echoParams{"x"}, nil); err != nil {
		t.Errorf("after panic: %v", err)
	}
}

func TestRawProtocol(t *testing.T) {
	path, _ := start(t)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	sc := bufio.NewScanner(c)
	for _, tt := range []struct{ send, want string }{
		{"this is not json", `{"error":"bad request: invalid character 'h' in literal true (expecting 'r')"}`},
		{`{"params":1}`, `{"error":"bad request: missing \"method\""}`},
		{`{"method":"echo","params":{"text":"ab"}}`, `{"result":{"text":"AB"}}`},
		{"\x00\xff garbage", `{"error":"bad request: invalid character '\\x00' looking for beginning of value"}`},
		{`{"method":"echo","params":{"text":"again"}}`, `{"result":{"text":"AGAIN"}}`},
	} {
		if _, err := c.Write([]byte(tt.send + "\n")); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() {
			t.Fatalf("no response to %q: %v", tt.send, sc.Err())
		}
		if got := sc.Text(); got != tt.want {
			t.Errorf("sent %q\n got %s\nwant %s", tt.send, got, tt.want)
		}
	}
	// An over-long line gets an error and the connection is closed.
	if _, err := c.Write([]byte(strings.Repeat("x", MaxLine+10))); err != nil {
		t.Fatal(err)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), "token too long") {
		t.Errorf("long line: %q %v", sc.Text(), sc.Err())
	}
}

func TestSocketLifecycle(t *testing.T) {
	path, stop := start(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != SocketMode || fi.Mode()&fs.ModeSocket == 0 {
		t.Errorf("mode %v, want socket %v", fi.Mode(), SocketMode)
	}
	// A second server must not steal a live socket.
	if _, err := Listen(path, testHandlers, nil); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Listen: %v", err)
	}
	// An idle client connection does not keep Serve from returning.
	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(10 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still there after shutdown: %v", err)
	}
	if err := Call(path, "echo", nil, nil); err == nil || !strings.Contains(err.Error(), "is mptund running?") {
		t.Errorf("Call to stopped daemon: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves the file behind, like a crashed daemon
	s, err := Listen(path, testHandlers, nil)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	go s.Serve()
	if err := Call(path, "echo", echoParams{"ok"}, nil); err != nil {
		t.Error(err)
	}
	s.Close()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, testHandlers, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file at socket path: %v", err)
	}
}
