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
	srv := &http.Server{
		Handler:           a.api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("stet serving", "addr", ln.Addr().String(), "role", role, "database", a.db.Dialect())

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
