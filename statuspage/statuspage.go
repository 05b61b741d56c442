// SPDX-License-Identifier: MIT

// Package statuspage serves mptund's read-only status page ([web] listen):
// one HTML page with the connections, each path's state, rates and RTT and
// live charts, and the JSON it polls, /api/status: the control.Status that
// `mptun status --json` prints. Everything the page needs is embedded; it
// loads nothing from elsewhere.
package statuspage

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mptun/mptun/control"
)

//go:embed assets
var assets embed.FS

// StatusFunc returns the daemon's status (daemon.Daemon.Status).
type StatusFunc func(context.Context) (control.Status, error)

// minInterval is how long one status snapshot answers every request: the
// snapshot runs in the data path's goroutine, so any number of open pages
// costs it at most a few snapshots a second.
const minInterval = 250 * time.Millisecond

// statusTimeout bounds one snapshot.
const statusTimeout = 2 * time.Second

// Security headers of every response: the page runs only its own script
// and talks only to its own origin.
var headers = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"X-Frame-Options":         "DENY",
}

// Handler serves the page and /api/status. Only GET and HEAD are allowed.
func Handler(status StatusFunc) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	snap := &snapshotter{status: status}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", snap.serve)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
	for _, name := range []string{"app.js", "style.css"} {
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// snapshotter shares one status snapshot between the requests of
// minInterval.
type snapshotter struct {
	status StatusFunc
	now    func() time.Time // time.Now; tests set it

	mu   sync.Mutex // held during a snapshot, so they never run in parallel
	at   time.Time
	body []byte
}

func (s *snapshotter) get(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	if s.body != nil && now().Sub(s.at) < minInterval {
		return s.body, nil
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	s.body, s.at = body, now()
	return body, nil
}

func (s *snapshotter) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	body, err := s.get(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	w.Write(body)
}

// Server is the status page's HTTP listener.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen serves the page at http://addr/. Binding errors are returned here
// rather than from a goroutine. A listener that is not on loopback is
// logged as a warning: the page has no login.
func Listen(addr string, status StatusFunc, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("status page listener %s: %w", addr, err)
	}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(status),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          errLog,
		},
		ln: ln,
	}
	if !isLoopback(ln.Addr()) {
		log.Warn("status page listens beyond loopback and has no login: keep it on a trusted network", "addr", ln.Addr().String())
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("status page listener stopped", "addr", addr, "err", err)
		}
	}()
	return s, nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the listener and open connections.
func (s *Server) Close() error { return s.srv.Close() }
