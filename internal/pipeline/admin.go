package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/adstap/adstap/tap"
)

// adminServer serves the tap's health and readiness, and later its metrics
// and debug pages. It is on loopback unless told otherwise, since what it
// shows is about the mesh's configuration.
type adminServer struct {
	lis       net.Listener
	http      *http.Server
	listening atomic.Bool
}

func startAdmin(addr string, srv *tap.Server, log *slog.Logger, pages map[string]http.Handler) (*adminServer, error) {
	if !isLoopbackHost(addr) {
		log.Warn("the admin address is reachable from outside this host; it shows mesh configuration (serve Prometheus with --metrics-listen instead)", "admin", addr)
	}
	a := &adminServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case srv.Draining():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case !a.listening.Load():
			http.Error(w, "not listening yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	for pattern, h := range pages {
		mux.Handle(pattern, h)
	}
	if err := a.serve(addr, mux, log, "admin server"); err != nil {
		return nil, err
	}
	return a, nil
}

// startMetricsServer serves /metrics alone, for Prometheus to scrape from
// outside the pod while the admin address, with the pages, the captures and
// the retained configuration, stays on loopback. Any other path is 404.
func startMetricsServer(addr string, metrics http.Handler, log *slog.Logger) (*adminServer, error) {
	a := &adminServer{}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	if err := a.serve(addr, mux, log, "metrics server"); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *adminServer) serve(addr string, h http.Handler, log *slog.Logger, name string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	a.lis = lis
	a.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := a.http.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" stopped", "err", err)
		}
	}()
	return nil
}

func (a *adminServer) setListening() { a.listening.Store(true) }

func (a *adminServer) addr() string { return a.lis.Addr().String() }

func (a *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.http.Shutdown(ctx)
}

func isLoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
