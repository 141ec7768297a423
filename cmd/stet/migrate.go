package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg, ok := cli.LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	defer db.Close()
	applied, err := db.Migrate(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	for _, m := range applied {
		fmt.Fprintln(stdout, "applied", m)
	}
	v, _ := db.LatestVersion()
	fmt.Fprintf(stdout, "ledger at version %d; river migrated\n", v)
	return exitOK
}
