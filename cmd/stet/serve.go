package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/cli"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
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
	cfg, ok := cli.LoadConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	log := cli.NewLogger(stderr, *logLevel)
	a, err := app.Open(ctx, cfg, app.Options{Role: *role, Logger: log, Migrate: *migrate})
	if err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitUnhealthy
	}
	if !*migrate {
		if err := a.DB.CheckSchema(ctx); err != nil {
			a.Close()
			fmt.Fprintln(stderr, "stet serve:", err)
			return exitUnhealthy
		}
	}
	defer a.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitUnhealthy
	}
	if err := a.Serve(ctx, ln, *role); err != nil {
		fmt.Fprintln(stderr, "stet serve:", err)
		return exitFailure
	}
	return exitOK
}
