package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	sla := fs.Duration("sla", time.Hour, "an accepted revision must have a review record within this")
	grace := fs.Duration("lease-grace", time.Minute, "a job held this long past its lease is a violation")
	pauseLimit := fs.Duration("pause-limit", time.Hour, "a dispatch pause older than this is a violation")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: time.Now().UTC(), SLA: *sla, LeaseGrace: *grace, PauseLimit: *pauseLimit})
	if err != nil {
		fmt.Fprintln(stderr, "stet check:", err)
		return exitUnhealthy
	}
	if *asJSON {
		if vs == nil {
			vs = []ledger.Violation{}
		}
		cli.WriteJSON(stdout, map[string]any{"ok": len(vs) == 0, "violations": vs})
	} else {
		ledger.WriteViolations(stdout, vs)
	}
	if len(vs) > 0 {
		return exitFailure
	}
	return exitOK
}
