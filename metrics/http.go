// SPDX-License-Identifier: MIT

package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPServer serves /metrics.
type HTTPServer struct {
	srv *http.Server
	ln  net.Listener
}

// ListenHTTP starts serving the gatherer's metrics at http://addr/metrics.
// Binding errors are returned here rather than from a goroutine.
func ListenHTTP(addr string, g prometheus.Gatherer, log *slog.Logger) (*HTTPServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	s := &HTTPServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln:  ln,
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
