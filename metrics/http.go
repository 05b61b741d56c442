// SPDX-License-Identifier: MIT

package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// HTTPServer serves /metrics.
type HTTPServer struct {
	srv *http.Server
	ln  net.Listener
}

// maxScrapes bounds concurrent scrapes; more get 503.
const maxScrapes = 4

// ListenHTTP starts serving what write produces at http://addr/metrics.
// Binding errors are returned here rather than from a goroutine.
func ListenHTTP(addr string, write func(io.Writer) error, log *slog.Logger) (*HTTPServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	slots := make(chan struct{}, maxScrapes)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(w, "too many scrapes at once", http.StatusServiceUnavailable)
			return
		}
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			log.Warn("metrics: gathering failed", "err", err)
			http.Error(w, "gathering metrics failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
		if r.Method == http.MethodGet {
			w.Write(buf.Bytes())
		}
	})
	s := &HTTPServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln: ln,
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "addr", addr, "err", err)
		}
	}()
	return s, nil
}

// Addr is the bound address (useful with port 0).
func (s *HTTPServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the listener and open connections.
func (s *HTTPServer) Close() error { return s.srv.Close() }
