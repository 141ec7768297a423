package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/ledger"
)

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	sla := fs.Duration("sla", time.Hour, "an accepted revision must have a review record within this")
	grace := fs.Duration("lease-grace", time.Minute, "a job held this long past its lease is a violation")
	pauseLimit := fs.Duration("pause-limit", time.Hour, "a dispatch pause older than this is a violation")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	db, code := openLedger(ctx, *cfgPath, stderr)
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
		out := struct {
			OK         bool               `json:"ok"`
			Violations []ledger.Violation `json:"violations"`
		}{OK: len(vs) == 0, Violations: vs}
		if out.Violations == nil {
			out.Violations = []ledger.Violation{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	} else if len(vs) == 0 {
		fmt.Fprintln(stdout, "ok: invariants 1-8 hold")
	} else {
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "invariant\ttenant\tsource\treport\trevision\tjob/batch\tstage\tcount")
		for _, v := range vs {
			fmt.Fprintf(tw, "%d %s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", v.Invariant, v.Name, v.TenantID, dash(v.SourceID), dash(v.ReportID+v.Scope), v.Revision, dash(v.JobID+v.BatchID+v.DeletionID+copySuffix(v.Copy)), dash(v.Stage), v.Count)
		}
		tw.Flush()
	}
	if len(vs) > 0 {
		return exitFailure
	}
	return exitOK
}

func copySuffix(c string) string {
	if c == "" {
		return ""
	}
	return " " + c
}
