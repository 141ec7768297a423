package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	role := fs.String("role", "all", "what this process runs: api (intake and reads), worker (stage workers and maintenance), or all")
	listen := fs.String("listen", "", "listen address (overrides the config's listen)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	migrate := fs.Bool("migrate", true, "apply migrations at start; with --migrate=false the ledger must already be current (run 'stet migrate' as a deploy step) and the database role needs no DDL rights")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	switch *role {
	case "api", "worker", "all":
	default:
		fmt.Fprintf(stderr, "stet serve: --role must be api, worker or all\n")
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	log := newLogger(stderr, *logLevel)
	a, err := openApp(ctx, cfg, appOptions{role: *role, logger: log, migrate: *migrate})
	if err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitUnhealthy
	}
	if !*migrate {
		if err := checkSchema(ctx, a.db); err != nil {
			a.close()
			fmt.Fprintln(stderr, "stet serve:", err)
			return exitUnhealthy
		}
	}
	defer a.close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitUnhealthy
	}
	if err := a.serve(ctx, ln, *role); err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitFailure
	}
	return exitOK
}

// serve runs the pipeline and the HTTP server until ctx is done, then shuts
// down gracefully: stop taking requests, let running stages finish (or
// cancel them after a grace period, leaving each job to resume), close.
func (a *app) serve(ctx context.Context, ln net.Listener, role string) error {
	// River's work contexts derive from the context it starts with: start it
	// on one that the signal does not cancel, so that shutdown is Stop's
	// graceful path (running stages finish) rather than a hard cancel.
	if err := a.pipeline.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	var h http.Handler = a.api
	if a.cfg.TLS != nil {
		h = hsts(h)
	}
	srv := newHTTPServer(h, a.log)
	errc := make(chan error, 2)
	go func() {
		if a.cfg.TLS != nil {
			errc <- srv.ServeTLS(ln, a.cfg.TLS.CertFile, a.cfg.TLS.KeyFile)
			return
		}
		errc <- srv.Serve(ln)
	}()
	a.log.Info("stet serving", "addr", ln.Addr().String(), "role", role, "database", a.db.Dialect(), "tls", a.cfg.TLS != nil)
	if a.cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", a.cfg.MetricsListen)
		if err != nil {
			_ = srv.Close()
			_ = a.pipeline.Stop(context.WithoutCancel(ctx))
			return fmt.Errorf("metrics_listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics.Handler())
		msrv := newHTTPServer(mux, a.log)
		go func() { errc <- msrv.Serve(mln) }()
		defer msrv.Close()
		a.log.Info("metrics serving", "addr", mln.Addr().String())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.log.Info("stet shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		a.log.Warn("http shutdown", "err", err)
	}
	if err := a.pipeline.Stop(shutCtx); err != nil {
		a.log.Warn("pipeline stop", "err", err)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// newHTTPServer is every http.Server stet runs: bounded headers (64 KiB)
// and every timeout set, so a slow or oversized client cannot hold a
// connection or memory.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
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
