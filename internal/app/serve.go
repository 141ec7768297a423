package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve runs the pipeline and the HTTP server until ctx is done, then shuts
// down gracefully: stop taking requests, let running stages finish (or
// cancel them after a grace period, leaving each job to resume), close.
func (a *App) Serve(ctx context.Context, ln net.Listener, role string) error {
	// River's work contexts derive from the context it starts with: start it
	// on one that the signal does not cancel, so that shutdown is Stop's
	// graceful path (running stages finish) rather than a hard cancel.
	if err := a.Pipeline.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	var h http.Handler = a.API
	// web.secure: TLS ends here or at a proxy in front; browsers are told
	// to use HTTPS only either way.
	if a.Config.TLS != nil || a.Config.Web.Secure {
		h = hsts(h)
	}
	srv := NewHTTPServer(h, a.Log)
	errc := make(chan error, 2)
	go func() {
		if a.Config.TLS != nil {
			errc <- srv.ServeTLS(ln, a.Config.TLS.CertFile, a.Config.TLS.KeyFile)
			return
		}
		errc <- srv.Serve(ln)
	}()
	a.Log.Info("stet serving", "addr", ln.Addr().String(), "role", role, "database", a.DB.System(), "tls", a.Config.TLS != nil)
	if a.Config.MetricsListen != "" {
		mln, err := net.Listen("tcp", a.Config.MetricsListen)
		if err != nil {
			_ = srv.Close()
			_ = a.Pipeline.Stop(context.WithoutCancel(ctx))
			return fmt.Errorf("metrics_listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.Metrics.Handler())
		msrv := NewHTTPServer(mux, a.Log)
		go func() { errc <- msrv.Serve(mln) }()
		defer msrv.Close()
		a.Log.Info("metrics serving", "addr", mln.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.Log.Info("stet shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		a.Log.Warn("http shutdown", "err", err)
	}
	if err := a.Pipeline.Stop(shutCtx); err != nil {
		a.Log.Warn("pipeline stop", "err", err)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// NewHTTPServer is every http.Server stet runs: bounded headers (64 KiB)
// and every timeout set, so a slow or oversized client cannot hold a
// connection or memory.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// hsts tells browsers to use HTTPS only, for a year.
func hsts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
		h.ServeHTTP(w, r)
	})
}
