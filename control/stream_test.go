// SPDX-License-Identifier: MIT

package control

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func startStreams(t *testing.T, st Streams) (string, *Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(path, testHandlers, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetStreams(st)
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return path, srv
}

// A stream sends results until the client hangs up; the handler then
// sees its context end. Requests on other connections go on meanwhile.
func TestStream(t *testing.T) {
	var running atomic.Int32
	ended := make(chan struct{})
	path, srv := startStreams(t, Streams{
		"count": func(ctx context.Context, p json.RawMessage, send func(any) error) error {
			running.Add(1)
			defer close(ended)
			for i := 0; ; i++ {
				if err := send(map[string]int{"n": i}); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(5 * time.Millisecond):
				}
			}
		},
		"broken": func(ctx context.Context, p json.RawMessage, send func(any) error) error {
			send("one")
			return errors.New("source gone")
		},
	})
	stop := errors.New("enough")
	var got []int
	err := Stream(context.Background(), path, "count", nil, func(r json.RawMessage) error {
		var v struct{ N int }
		if err := json.Unmarshal(r, &v); err != nil {
			return err
		}
		got = append(got, v.N)
		if len(got) == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || len(got) != 5 || got[4] != 4 {
		t.Fatalf("stream: %v, got %v", err, got)
	}
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("handler still running after the client hung up")
	}
	// Plain calls still work while streams run.
	var res map[string]string
	if err := Call(path, "echo", echoParams{Text: "hi"}, &res); err != nil || res["text"] != "HI" {
		t.Errorf("echo: %v %v", res, err)
	}
	// A stream that ends with an error reports it.
	n := 0
	err = Stream(context.Background(), path, "broken", nil, func(json.RawMessage) error { n++; return nil })
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "source gone") || n != 1 {
		t.Errorf("broken stream: %v after %d results", err, n)
	}
	// Cancelling the client's context ends Stream without an error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := Stream(ctx, path, "count", nil, func(json.RawMessage) error { return nil }); err != nil {
		t.Errorf("cancelled stream: %v", err)
	}
	// Closing the server ends a running stream.
	done := make(chan error, 1)
	go func() {
		done <- Stream(context.Background(), path, "count", nil, func(json.RawMessage) error { return nil })
	}()
	time.Sleep(30 * time.Millisecond)
	srv.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "ended the stream") {
			t.Errorf("after server close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("stream still open after the server closed")
	}
	if running.Load() != 3 {
		t.Errorf("%d count streams ran", running.Load())
	}
	// Unknown methods are listed with the streams.
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		t.Error("server still accepting")
	}
}

func TestUnknownMethodListsStreams(t *testing.T) {
	path, _ := startStreams(t, Streams{"monitor": func(context.Context, json.RawMessage, func(any) error) error { return nil }})
	err := Call(path, "nosuch", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "monitor") {
		t.Errorf("unknown method error does not list streams: %v", err)
	}
}
