package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

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
		d, err = db.GetJobAnyTenant(ctx, target)
		if d != nil {
			jobs = append(jobs, d)
		}
	case strings.HasPrefix(target, "rep_"):
		report, err = db.GetReportAnyTenant(ctx, ledger.ReportLookup{ReportID: target})
	default:
		src, ext, ok := strings.Cut(target, "/")
		if !ok || src == "" || ext == "" {
			fs.Usage()
			return exitUsage
		}
		report, err = db.GetReportAnyTenant(ctx, ledger.ReportLookup{SourceID: src, ExternalID: ext})
	}
	if err == nil && report != nil {
		for _, rv := range report.Revisions {
			d, jerr := db.GetJobAnyTenant(ctx, rv.JobID)
			if jerr != nil {
				err = jerr
				break
			}
			jobs = append(jobs, d)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet inspect:", stet.ErrorMessageOf(err))
		if c := stet.ErrorCodeOf(err); c == stet.ENotFound || c == stet.EGone {
			return exitFailure
		}
		return exitUnhealthy
	}
	// stet inspect is a read like any other: audited, by IDs, before it
	// prints (an external ID given on the command line is not recorded).
	var entries []ledger.AuditEntry
	for _, d := range jobs {
		entries = append(entries, ledger.AuditEntry{Tenant: d.Job.TenantID, Actor: "cli", Action: "inspect", ObjectType: "job",
			ObjectID: d.Job.ID, Route: "stet inspect", Now: time.Now().UTC()})
	}
	if err := db.AuditAll(ctx, entries); err != nil {
		fmt.Fprintln(stderr, "stet inspect: the read could not be audited:", err)
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
	if !d.TextPurgedAt.IsZero() {
		fmt.Fprintf(w, "  text_purged_at %s\n", d.TextPurgedAt.Format(time.RFC3339Nano))
	}
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
		if !a.OutputPurgedAt.IsZero() {
			fmt.Fprintf(w, "  output_purged_at %s\n", a.OutputPurgedAt.Format(time.RFC3339Nano))
		}
		if !a.RawPurgedAt.IsZero() {
			fmt.Fprintf(w, "  raw_purged_at %s\n", a.RawPurgedAt.Format(time.RFC3339Nano))
		}
	}
	if j.ReviewRecordID != "" {
		fmt.Fprintf(w, "  review record %s\n", j.ReviewRecordID)
	}
	printDeliveries(w, d.Deliveries)
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
