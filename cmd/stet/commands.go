package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
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
	if err := migrateRiver(ctx, db); err != nil {
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

// openLedger opens the config's ledger for a read or operate command.
func openLedger(ctx context.Context, cfgPath string, stderr io.Writer) (*ledger.DB, int) {
	cfg, ok := loadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return nil, exitUnhealthy
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, exitUnhealthy
	}
	if err := checkSchema(ctx, db); err != nil {
		db.Close()
		fmt.Fprintln(stderr, "stet:", err)
		return nil, exitUnhealthy
	}
	return db, exitOK
}

// checkSchema says whether the ledger's schema is the one this binary
// knows, and which way to go if not.
func checkSchema(ctx context.Context, db *ledger.DB) error {
	current, known, err := db.SchemaVersions(ctx)
	switch {
	case err != nil:
		return err
	case current > known:
		return fmt.Errorf("ledger schema version %d is newer than this stet knows (%d): upgrade stet", current, known)
	case current < known:
		return fmt.Errorf("ledger schema version %d is older than this stet's (%d): run 'stet migrate'", current, known)
	}
	return nil
}

// ledgerExists reports whether an embedded ledger file exists, so that an
// operator command on a mistyped path says so instead of creating an empty
// ledger there.
func ledgerExists(database string, stderr io.Writer) bool {
	path, ok := strings.CutPrefix(database, "sqlite://")
	if !ok {
		return true
	}
	path = strings.SplitN(path, "?", 2)[0]
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "stet: no ledger at %s; run 'stet migrate' or 'stet serve' first\n", path)
		return false
	}
	return true
}

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet inspect [flags] SOURCE/EXTERNAL_ID | JOB_ID | REPORT_ID\n\nShows the stage timeline and attempts. Never prints document text.")
		fs.PrintDefaults()
	}
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	db, code := openLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	target := fs.Arg(0)

	var jobs []*ledger.JobDetail
	var report *ledger.ReportDetail
	var err error
	switch {
	case strings.HasPrefix(target, "job_"):
		var d *ledger.JobDetail
		d, err = db.GetJobPrimary(ctx, "", target)
		if d != nil {
			jobs = append(jobs, d)
		}
	case strings.HasPrefix(target, "rep_"):
		report, err = db.GetReport(ctx, ledger.ReportLookup{ReportID: target})
	default:
		src, ext, ok := strings.Cut(target, "/")
		if !ok || src == "" || ext == "" {
			fs.Usage()
			return exitUsage
		}
		report, err = db.GetReport(ctx, ledger.ReportLookup{SourceID: src, ExternalID: ext})
	}
	if err == nil && report != nil {
		for _, rv := range report.Revisions {
			d, jerr := db.GetJobPrimary(ctx, "", rv.JobID)
			if jerr != nil {
				err = jerr
				break
			}
			jobs = append(jobs, d)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet inspect:", stet.ErrorMessageOf(err))
		if stet.ErrorCodeOf(err) == stet.ENotFound {
			return exitFailure
		}
		return exitUnhealthy
	}
	if *asJSON {
		out := struct {
			Report *api.ReportView `json:"report,omitempty"`
			Jobs   []api.JobView   `json:"jobs"`
		}{Jobs: []api.JobView{}}
		if report != nil {
			v := api.NewReportView(report)
			out.Report = &v
		}
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, api.NewJobView(j))
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return exitOK
	}
	if report != nil {
		fmt.Fprintf(stdout, "report %s  source %s  revisions %d\n\n", report.Report.ID, report.Report.SourceID, len(report.Revisions))
	}
	for _, d := range jobs {
		printJob(stdout, d)
	}
	return exitOK
}

func printJob(w io.Writer, d *ledger.JobDetail) {
	j := d.Job
	fmt.Fprintf(w, "job %s  report %s  revision %d  %s  state %s", j.ID, j.ReportID, j.Revision, j.ExtractionVersion, j.State)
	if j.FailureClass != "" {
		fmt.Fprintf(w, "  last failure %s", j.FailureClass)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  policy %s (%s)\n", j.PolicyID, short(j.PolicyHash))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  stage\tat")
	for _, st := range []struct {
		name string
		at   time.Time
	}{{"accepted", j.CreatedAt}, {"extracting", j.ExtractingAt}, {"extracted", j.ExtractedAt}, {"committed", j.CommittedAt}} {
		at := "-"
		if !st.at.IsZero() {
			at = st.at.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", st.name, at)
	}
	tw.Flush()
	if len(d.Attempts) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  n\ttoken\tprocessor\tstatus\tclass\thttp\trequest id\ttokens in/out\tlatency\tinput sha256\tbatch")
		for _, a := range d.Attempts {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%dms\t%s\t%s\n", a.N, a.Token, a.Processor, a.Status,
				dash(string(a.FailureClass)), dash(itoa(a.StatusCode)), dash(a.RequestID), a.InputTokens, a.OutputTokens, a.LatencyMS, short(a.InputSHA256), dash(a.BatchID))
		}
		tw.Flush()
	}
	if a := d.Artifact; a != nil {
		fmt.Fprintf(w, "\n  artifact %s  from attempt %d  processor %s  model %s  schema %s\n", a.ID, a.AttemptN, a.Processor, dash(a.Model), a.SchemaVersion)
	}
	if j.ReviewRecordID != "" {
		fmt.Fprintf(w, "  review record %s\n", j.ReviewRecordID)
	}
	fmt.Fprintln(w)
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func cmdResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "Usage: stet resume [flags] JOB_ID")
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return exitUnhealthy
	}
	a, err := openApp(ctx, cfg, appOptions{})
	if err != nil {
		fmt.Fprintln(stderr, "stet resume:", err)
		return exitUnhealthy
	}
	defer a.close()
	stage, err := a.pipeline.Resume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "stet resume:", stet.ErrorMessageOf(err))
		return exitFailure
	}
	fmt.Fprintf(stdout, "job %s: %s stage enqueued\n", fs.Arg(0), stage)
	return exitOK
}

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
		fmt.Fprintln(stdout, "ok: invariants 1-5 and 7 hold")
	} else {
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "invariant\ttenant\tsource\treport\trevision\tjob/batch\tstage\tcount")
		for _, v := range vs {
			fmt.Fprintf(tw, "%d %s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", v.Invariant, v.Name, v.TenantID, dash(v.SourceID), dash(v.ReportID+v.Scope), v.Revision, dash(v.JobID+v.BatchID), dash(v.Stage), v.Count)
		}
		tw.Flush()
	}
	if len(vs) > 0 {
		return exitFailure
	}
	return exitOK
}

func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer, resume bool) int {
	name := "pause"
	if resume {
		name = "unpause"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	scope := fs.String("scope", "", "all, processor:ID or tenant:ID (pause with no --scope lists the pauses in force)")
	reason := fs.String("reason", "", "why (required to pause; recorded in the ledger and the audit log)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	db, code := openLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	now := time.Now().UTC()
	switch {
	case *scope == "" && !resume:
		pauses, err := db.Pauses(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "stet pause:", err)
			return exitUnhealthy
		}
		if *asJSON {
			if pauses == nil {
				pauses = []ledger.Pause{}
			}
			_ = json.NewEncoder(stdout).Encode(map[string]any{"pauses": pauses})
			return exitOK
		}
		if len(pauses) == 0 {
			fmt.Fprintln(stdout, "dispatch is not paused")
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "scope\tsince\tby\treason")
		for _, p := range pauses {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Scope, p.PausedAt.Format(time.RFC3339), p.PausedBy, p.Reason)
		}
		tw.Flush()
		return exitOK
	case !ledger.ValidScope(*scope):
		fmt.Fprintf(stderr, "stet %s: --scope must be all, processor:ID or tenant:ID\n", name)
		return exitUsage
	case resume:
		if err := db.ClearPause(ctx, *scope, "cli", "*", now); err != nil {
			fmt.Fprintf(stderr, "stet unpause: %s\n", stet.ErrorMessageOf(err))
			return exitFailure
		}
		fmt.Fprintf(stdout, "dispatch resumed for %s; waiting jobs continue from their last durable stage\n", *scope)
		return exitOK
	default:
		if strings.TrimSpace(*reason) == "" {
			fmt.Fprintln(stderr, "stet pause: --reason is required")
			return exitUsage
		}
		if err := db.SetPause(ctx, ledger.Pause{Scope: *scope, Reason: *reason, PausedBy: "cli", PausedAt: now}, "*"); err != nil {
			fmt.Fprintln(stderr, "stet pause:", stet.ErrorMessageOf(err))
			return exitFailure
		}
		fmt.Fprintf(stdout, "dispatch paused for %s; jobs wait without spending attempts until 'stet unpause --scope %s'\n", *scope, *scope)
		return exitOK
	}
}
