// SPDX-License-Identifier: MIT

// Package control is mptund's local API: JSON over a Unix socket, one
// request and one response per line.
//
//	→ {"method":"status","params":{...}}
//	← {"result":{...}}            or  {"error":"unknown method \"x\" ..."}
//
// A connection may carry any number of requests, answered in order.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Handler answers one method. params is the raw "params" value (null when
// absent); the result is marshalled as "result".
type Handler func(params json.RawMessage) (any, error)

// Handlers maps method names to handlers.
type Handlers map[string]Handler

// Request and Response are the wire format.
type Request struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

const (
	// MaxLine bounds a request line.
	MaxLine = 1 << 20
	// MaxResponse bounds a response line: a concentrator's status lists
	// every connection (about 1.5 KB each, so 10,000 CPEs are 15 MB).
	MaxResponse = 512 << 20
	// SocketMode lets the daemon's group use the socket.
	SocketMode  fs.FileMode = 0o660
	idleTimeout             = 5 * time.Minute
)

// Server is a listening control socket.
type Server struct {
	path     string
	ln       *net.UnixListener
	handlers Handlers
	streams  Streams
	log      *slog.Logger

	mu           sync.Mutex
	conns        map[net.Conn]struct{}
	closed       bool
	wg           sync.WaitGroup
	credHandlers map[string]credEntry // peercred.go
}

// Listen creates the socket at path (mode 0660, parent directory created
// if needed). A stale socket left by a dead daemon is replaced; a live one
// is an error.
func Listen(path string, handlers Handlers, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &Server{path: path, ln: ln, handlers: handlers, log: log, conns: map[net.Conn]struct{}{}}, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("control socket %s: exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("control socket %s: in use by another process", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("control socket %s: remove stale: %w", path, err)
	}
	return nil
}

// Serve listens at path and answers requests until ctx is done, then closes
// all connections and removes the socket.
func Serve(ctx context.Context, path string, handlers Handlers, log *slog.Logger) error {
	s, err := Listen(path, handlers, log)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Serve()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Serve accepts connections until Close.
func (s *Server) Serve() error {
	defer s.Close()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("control socket %s: accept: %w", s.path, err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops the server, closes its connections, waits for running
// handlers and removes the socket file.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close() // also unlinks the socket file
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Path is the socket's file name.
func (s *Server) Path() string { return s.path }

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), MaxLine)
	enc := json.NewEncoder(c)
	cred := peerCred(c)
	for {
		c.SetReadDeadline(time.Now().Add(idleTimeout))
		if !sc.Scan() {
			if err := sc.Err(); err != nil && !errors.Is(err, net.ErrClosed) {
				var ne net.Error
				if !(errors.As(err, &ne) && ne.Timeout()) {
					enc.Encode(Response{Error: "bad request: " + err.Error()})
				}
			}
			return
		}
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if s.stream(c, line) {
			return // the connection belonged to the stream
		}
		resp := s.handle(line, cred)
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

func (s *Server) handle(line []byte, cred Cred) (resp Response) {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return Response{Error: "bad request: " + err.Error()}
	}
	if req.Method == "" {
		return Response{Error: `bad request: missing "method"`}
	}
	s.mu.Lock()
	ce, withCred := s.credHandlers[req.Method]
	s.mu.Unlock()
	h, ok := s.handlers[req.Method]
	if withCred {
		if ce.restricted {
			if err := s.authorize(req.Method, cred); err != nil {
				return Response{Error: err.Error()}
			}
		}
		h, ok = func(p json.RawMessage) (any, error) { return ce.h(cred, p) }, true
	}
	if !ok {
		return Response{Error: fmt.Sprintf("unknown method %q (have %s)", req.Method, strings.Join(s.methods(), ", "))}
	}
	defer func() {
		// A bug in one handler must not take the daemon down.
		if r := recover(); r != nil {
			s.log.Error("control handler panicked", "method", req.Method, "panic", r)
			resp = Response{Error: fmt.Sprintf("%s: internal error", req.Method)}
		}
	}()
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage("null")
	}
	result, err := h(params)
	if err != nil {
		return Response{Error: fmt.Sprintf("%s: %v", req.Method, err)}
	}
	b, err := json.Marshal(result)
	if err != nil {
		return Response{Error: fmt.Sprintf("%s: encode result: %v", req.Method, err)}
	}
	return Response{Result: b}
}

func (s *Server) methods() []string {
	names := make([]string, 0, len(s.handlers)+len(s.streams))
	for k := range s.handlers {
		names = append(names, k)
	}
	for k := range s.streams {
		names = append(names, k)
	}
	s.mu.Lock()
	for k := range s.credHandlers {
		if _, dup := s.handlers[k]; !dup {
			names = append(names, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	return names
}

// RemoteError is an error reported by the daemon.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return e.Msg }

// Call sends one request to the daemon at path and decodes the result
// into result (which may be nil), with a 10 s timeout.
func Call(path, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return CallContext(ctx, path, method, params, result)
}

// CallContext is Call with a context.
func CallContext(ctx context.Context, path, method string, params, result any) error {
	sc, done, err := openRequest(ctx, path, method, params, true, MaxResponse)
	if err != nil {
		return err
	}
	defer done()
	if !sc.Scan() {
		err := sc.Err()
		if err == nil {
			err = errors.New("connection closed")
		}
		return fmt.Errorf("control socket %s: %s: %w", path, method, err)
	}
	res, err := parseResponse(sc.Bytes(), path, method)
	if err != nil {
		return err
	}
	if result != nil && len(res) > 0 {
		if err := json.Unmarshal(res, result); err != nil {
			return fmt.Errorf("%s: decode result: %w", method, err)
		}
	}
	return nil
}

// openRequest sends one request for method to the daemon at path and
// returns a scanner over the answer's lines of up to maxLine bytes; done
// closes the connection. Until then the end of ctx unblocks any read or
// write; withDeadline also gives the connection ctx's deadline (a stream
// ends at ctx's end without an I/O timeout error).
func openRequest(ctx context.Context, path, method string, params any, withDeadline bool, maxLine int) (sc *bufio.Scanner, done func(), err error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("control socket %s: %w (is mptund running?)", path, err)
	}
	if dl, ok := ctx.Deadline(); ok && withDeadline {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	done = func() { stop(); c.Close() }
	req := Request{Method: method}
	if params != nil {
		if req.Params, err = json.Marshal(params); err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: encode params: %w", method, err)
		}
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		done()
		return nil, nil, fmt.Errorf("control socket %s: send: %w", path, err)
	}
	sc = bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), maxLine)
	return sc, done, nil
}

// parseResponse decodes one response line: its result, or the daemon's
// error as a *RemoteError.
func parseResponse(line []byte, path, method string) (json.RawMessage, error) {
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("control socket %s: %s: bad response: %w", path, method, err)
	}
	if resp.Error != "" {
		return nil, &RemoteError{Msg: resp.Error}
	}
	return resp.Result, nil
}
