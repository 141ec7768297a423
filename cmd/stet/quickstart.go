package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/internal/quickstart"
	"github.com/stetlabs/stet/internal/stetclient"
)

func cmdQuickstart(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "examples/quickstart", "the quickstart folder (config, profiles, samples)")
	listen := fs.String("listen", "", "listen address (overrides the config's listen)")
	once := fs.Bool("once", false, "exit after the samples are reviewed instead of serving on")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	quickstart.SetDemoSecrets()
	cfg, ok := cli.LoadConfig(filepath.Join(*dir, "stet.yaml"), stderr)
	if !ok {
		return exitUsage
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	dataDir := filepath.Join(filepath.Dir(cfg.Path), "stet-data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	logPath := filepath.Join(dataDir, "stet.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	defer logFile.Close()
	a, err := app.Open(ctx, cfg, app.Options{Role: "all", Logger: cli.NewLogger(logFile, "info"), Migrate: true, PollInterval: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	defer a.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	base := "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- a.Serve(sctx, ln, "all") }()

	fmt.Fprintf(stdout, "stet quickstart: SQLite at %s, rules processor, listening on %s\n", strings.TrimPrefix(cfg.Database, "sqlite://"), base)
	fmt.Fprintf(stdout, "logs (JSON, IDs only) go to %s\n\n", logPath)

	src := cfg.Sources[0]
	token := os.Getenv(cfg.Tenants[0].Tokens[0].TokenEnv)
	client := &stetclient.Client{Base: base, Secret: src.Secrets[0], Token: token}
	ok, err = quickstart.Run(ctx, quickstart.Params{Client: client, Source: src.ID, Samples: filepath.Join(*dir, "samples"),
		ConfigPath: filepath.Join(*dir, "stet.yaml"), SecretEnv: src.SecretEnv, Stdout: stdout, Stderr: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitFailure
	}
	if *once {
		stop()
		<-served
		if !ok {
			return exitFailure
		}
		return exitOK
	}
	fmt.Fprintln(stdout, "\nstet keeps serving; press Ctrl-C to stop. Running the quickstart again redelivers the samples: every one resolves to its existing job.")
	if err := <-served; err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitFailure
	}
	return exitOK
}
