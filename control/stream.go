// SPDX-License-Identifier: MIT

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Streaming methods (`mptun monitor`): after the request line the server
// writes any number of response lines, {"result":...} each, until the
// client closes the connection or the stream ends ({"error":...} when it
// ends with an error). The connection carries nothing else.

// StreamHandler runs one stream: it calls send for each result until ctx
// is done (the client went away or the server is closing).
type StreamHandler func(ctx context.Context, params json.RawMessage, send func(any) error) error

// Streams maps method names to stream handlers.
type Streams map[string]StreamHandler

// SetStreams registers the streaming methods; call it before Serve.
func (s *Server) SetStreams(st Streams) { s.streams = st }

// stream runs line as a streaming request if it names a stream method
// and reports whether it did.
func (s *Server) stream(c net.Conn, line []byte) bool {
	var req Request
	if json.Unmarshal(line, &req) != nil {
		return false
	}
	h, ok := s.streams[req.Method]
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client sends nothing more: a read returns when it hangs up or
	// the server closes the connection.
	c.SetReadDeadline(time.Time{})
	go func() {
		io.Copy(io.Discard, c)
		cancel()
	}()
	enc := json.NewEncoder(c)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: encode: %w", req.Method, err)
		}
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return enc.Encode(Response{Result: b})
	}
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage("null")
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("control stream panicked", "method", req.Method, "panic", r)
				err = fmt.Errorf("internal error")
			}
		}()
		return h(ctx, params, send)
	}()
	if err != nil && ctx.Err() == nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		enc.Encode(Response{Error: fmt.Sprintf("%s: %v", req.Method, err)})
	}
	return true
}

// Stream calls a streaming method of the daemon at path and hands each
// result to fn until ctx is done (nil is returned then), the daemon ends
// the stream, or fn returns an error.
func Stream(ctx context.Context, path, method string, params any, fn func(json.RawMessage) error) error {
	sc, done, err := openRequest(ctx, path, method, params, false, MaxLine)
	if err != nil {
		return err
	}
	defer done()
	for sc.Scan() {
		res, err := parseResponse(sc.Bytes(), path, method)
		if err != nil {
			return err
		}
		if err := fn(res); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("control socket %s: %s: %w", path, method, err)
	}
	return fmt.Errorf("control socket %s: %s: the daemon ended the stream", path, method)
}
