package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet inspect [flags] SOURCE/EXTERNAL_ID | JOB_ID | REPORT_ID\n\nShows the stage timeline and attempts. Never prints document text.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	in, err := db.Inspect(ctx, fs.Arg(0))
	if errors.Is(err, ledger.ErrInspectTarget) {
		fs.Usage()
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet inspect:", stet.ErrorMessageOf(err))
		if c := stet.ErrorCodeOf(err); c == stet.ENotFound || c == stet.EGone {
			return exitFailure
		}
		return exitUnhealthy
	}
	// stet inspect is a read like any other: audited, by IDs, before it prints.
	if err := db.AuditAll(ctx, in.AuditEntries("cli", "stet inspect", time.Now().UTC())); err != nil {
		fmt.Fprintln(stderr, "stet inspect: the read could not be audited:", err)
		return exitUnhealthy
	}
	if *asJSON {
		cli.WriteJSON(stdout, api.NewInspectionView(in))
		return exitOK
	}
	in.WriteText(stdout)
	return exitOK
}
