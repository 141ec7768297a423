package ledger

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
)

// This file renders the ledger's reads as the operator's tables (stet
// inspect, check, pause, deletions, destinations, batch list, audit
// verify). Like every read, they show IDs, states and times: never
// document text, prompts, model output or external IDs.

// Inspection is what stet inspect shows: a report with the jobs of its
// revisions, or one job.
type Inspection struct {
	Report *ReportDetail // nil when one job was asked for
	Jobs   []*JobDetail
}

// ErrInspectTarget is returned by Inspect for a target that is neither a
// job ID, a report ID nor SOURCE/EXTERNAL_ID.
var ErrInspectTarget = stet.Errorf(stet.EInvalid, "target is job_…, rep_… or SOURCE/EXTERNAL_ID")

// Inspect reads a job (job_…), a report (rep_…) or a report by
// SOURCE/EXTERNAL_ID with the jobs of its revisions, in any tenant.
func (db *DB) Inspect(ctx context.Context, target string) (*Inspection, error) {
	in := &Inspection{}
	var err error
	switch {
	case strings.HasPrefix(target, "job_"):
		var d *JobDetail
		d, err = db.GetJobAnyTenant(ctx, target)
		if d != nil {
			in.Jobs = append(in.Jobs, d)
		}
	case strings.HasPrefix(target, "rep_"):
		in.Report, err = db.GetReportAnyTenant(ctx, ReportLookup{ReportID: target})
	default:
		src, ext, ok := strings.Cut(target, "/")
		if !ok || src == "" || ext == "" {
			return nil, ErrInspectTarget
		}
		in.Report, err = db.GetReportAnyTenant(ctx, ReportLookup{SourceID: src, ExternalID: ext})
	}
	if err == nil && in.Report != nil {
		for _, rv := range in.Report.Revisions {
			d, jerr := db.GetJobAnyTenant(ctx, rv.JobID)
			if jerr != nil {
				return nil, jerr
			}
			in.Jobs = append(in.Jobs, d)
		}
	}
	if err != nil {
		return nil, err
	}
	return in, nil
}

// AuditEntries are the audit log's entries for showing in: one per job,
// by ID (an external ID given on the command line is not recorded).
func (in *Inspection) AuditEntries(actor, route string, now time.Time) []AuditEntry {
	var entries []AuditEntry
	for _, d := range in.Jobs {
		entries = append(entries, AuditEntry{Tenant: d.Job.TenantID, Actor: actor, Action: "inspect", ObjectType: "job",
			ObjectID: d.Job.ID, Route: route, Now: now})
	}
	return entries
}

// WriteText prints the report line, then each job's timeline.
func (in *Inspection) WriteText(w io.Writer) {
	if r := in.Report; r != nil {
		fmt.Fprintf(w, "report %s  source %s  revisions %d\n\n", r.Report.ID, r.Report.SourceID, len(r.Revisions))
	}
	for _, d := range in.Jobs {
		d.WriteText(w)
	}
}

// WriteText prints a job's stage timeline, attempts, artifact and
// outbound deliveries.
func (d *JobDetail) WriteText(w io.Writer) {
	j := d.Job
	fmt.Fprintf(w, "job %s  report %s  revision %d  %s  state %s", j.ID, j.ReportID, j.Revision, j.ExtractionVersion, j.State)
	if j.FailureClass != "" {
		fmt.Fprintf(w, "  last failure %s", j.FailureClass)
	}
	fmt.Fprintln(w)
	if j.State == stet.JobBlocked {
		fmt.Fprintf(w, "  blocked: class %s (%s); no processor call until an operator acts\n", dash(string(j.FailureClass)), blockedWhy(j.FailureClass))
		if j.BlockedReason != "" {
			fmt.Fprintf(w, "  blocked for processor %s: %s (stet reroute moves it to one the policy in force permits)\n", dash(j.BlockedProcessor), j.BlockedReason)
		}
	}
	fmt.Fprintf(w, "  policy %s (%s)\n", j.PolicyID, short(j.PolicyHash))
	if a := d.Audio; a.AudioSHA256 != "" {
		if a.Transcriber == "" {
			fmt.Fprintf(w, "  audio %s: not transcribed yet\n", short(a.AudioSHA256))
		} else {
			fmt.Fprintf(w, "  audio %s transcribed by %s (%s): transcript %s\n", short(a.AudioSHA256), a.Transcriber, dash(a.Model), short(a.TranscriptSHA256))
		}
	}
	for _, b := range d.Decisions {
		fmt.Fprintf(w, "  boundary decision %s by %s: %s -> %s under policy %s (%s); reason: %s\n",
			b.At.Format(time.RFC3339), b.Actor, dash(b.From), b.To, b.PolicyID, short(b.PolicyHash), b.Reason)
	}
	if !d.TextPurgedAt.IsZero() {
		fmt.Fprintf(w, "  text_purged_at %s\n", d.TextPurgedAt.Format(time.RFC3339Nano))
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "  stage\tat")
	for _, st := range []struct {
		name string
		at   time.Time
	}{{"accepted", j.CreatedAt}, {"extracting", j.ExtractingAt}, {"extracted", j.ExtractedAt}, {endStage(j.State), j.CommittedAt}} {
		at := "-"
		if !st.at.IsZero() {
			at = st.at.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", st.name, at)
	}
	tw.Flush()
	writeAttempts(w, "  ", d.Attempts)
	// A profile with parts: each part's job, with its own attempts.
	for _, p := range d.Parts {
		fmt.Fprintf(w, "\n  part %s  job %s  processor %s  state %s\n", p.PartID, p.JobID, dash(p.Processor), p.State)
		writeAttempts(w, "    ", p.Attempts)
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
	if r := d.Record; r != nil {
		fmt.Fprintf(w, "  review record %s  kind %s  authoritative %t", r.ID, r.Kind, r.Authoritative)
		if r.FailureClass != "" {
			fmt.Fprintf(w, "  class %s", r.FailureClass)
		}
		if !j.CommittedAt.IsZero() {
			fmt.Fprintf(w, "  time to record %s", j.CommittedAt.Sub(j.CreatedAt).Round(time.Millisecond))
		}
		fmt.Fprintln(w)
		if total, ok := d.Cost(); ok {
			fmt.Fprintf(w, "  cost $%.6f over %d calls\n", total, d.Calls())
		}
	} else if j.ReviewRecordID != "" {
		fmt.Fprintf(w, "  review record %s\n", j.ReviewRecordID)
	}
	writeDeliveries(w, d.Deliveries)
	fmt.Fprintln(w)
}

// writeAttempts prints an attempts table, each line indented by indent.
func writeAttempts(w io.Writer, indent string, as []stet.Attempt) {
	if len(as) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, indent+"n\ttoken\tprocessor\tstatus\tclass\thttp\trequest id\ttokens in/out\tcost\tlatency\tinput sha256\tbatch")
	for _, a := range as {
		fmt.Fprintf(tw, indent+"%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%dms\t%s\t%s\n", a.N, a.Token, a.Processor, a.Status,
			dash(string(a.FailureClass)), dash(itoa(a.StatusCode)), dash(a.RequestID), a.InputTokens, a.OutputTokens, usd(a.CostUSD),
			a.LatencyMS, short(a.InputSHA256), dash(a.BatchID))
	}
	tw.Flush()
}

// usd prints a cost in dollars, or "-" without a price.
func usd(c *float64) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("$%.6f", *c)
}

// endStage labels the time a job's review record was written: "manual"
// for a manual record, "committed" for an extracted one.
func endStage(s stet.JobState) string {
	if s == stet.JobManual {
		return "manual"
	}
	return "committed"
}

// blockedWhy says what a blocked job's class stands for.
func blockedWhy(c stet.FailureClass) string {
	switch c {
	case stet.FailureBoundary:
		return "the recorded policy no longer permits the processor, or it is not configured"
	case stet.FailureUnsupported:
		return "the job's profile is not configured"
	}
	return "see the job_blocked alert in the log"
}

// writeDeliveries lists a job's outbound deliveries.
func writeDeliveries(w io.Writer, ds []Delivery) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "  destination\tevent\tsequence\tstate\tattempts\tlast status\twebhook id")
	for _, d := range ds {
		last := dash(itoa(d.LastStatus))
		if d.LastStatus == 0 && d.LastError != "" {
			last = d.LastError
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%d\t%s\t%s\n", d.DestinationID, d.Event, d.Sequence, d.State, d.Attempts, last, d.WebhookID)
	}
	tw.Flush()
}

// WriteViolations prints stet check's verdict: that invariants 1-8 hold,
// or one row per violation.
func WriteViolations(w io.Writer, vs []Violation) {
	if len(vs) == 0 {
		fmt.Fprintln(w, "ok: invariants 1-8 hold")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "invariant\ttenant\tsource\treport\trevision\tjob/batch\tscope\tstage\tcount")
	for _, v := range vs {
		copySuffix := ""
		if v.Copy != "" {
			copySuffix = " " + v.Copy
		}
		rev := "-"
		if v.Revision != 0 {
			rev = fmt.Sprint(v.Revision)
		}
		fmt.Fprintf(tw, "%d %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Invariant, v.Name, v.TenantID, dash(v.SourceID), dash(v.ReportID), rev,
			dash(v.JobID+v.BatchID+v.DeletionID+copySuffix), dash(v.Scope), dash(v.Stage), violationCount(v))
	}
	tw.Flush()
}

// violationCount is the count column: authoritative records (2), items
// not applied (4), items (5), delivery attempts (8); "-" for the
// invariants that count nothing.
func violationCount(v Violation) string {
	switch v.Invariant {
	case 2, 4, 5, 8:
		return fmt.Sprint(v.Count)
	}
	return "-"
}

// WritePauses prints the dispatch pauses in force.
func WritePauses(w io.Writer, pauses []Pause) {
	if len(pauses) == 0 {
		fmt.Fprintln(w, "dispatch is not paused")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "scope\tsince\tby\treason")
	for _, p := range pauses {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Scope, p.PausedAt.Format(time.RFC3339), p.PausedBy, p.Reason)
	}
	tw.Flush()
}

// WriteDestinations prints each destination's state and outbox counts.
func WriteDestinations(w io.Writer, ds []DestinationState) {
	tw := newTable(w)
	fmt.Fprintln(tw, "source\tdestination\tstate\tpending\tdelivered\tfailed\tdisabled\tfailures")
	for _, d := range ds {
		state := "enabled"
		switch {
		case !d.Configured:
			state = "not configured"
		case !d.DisabledAt.IsZero():
			state = fmt.Sprintf("disabled (%d)", d.DisabledStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", d.SourceID, d.DestinationID, state, d.Counts[DeliveryPending],
			d.Counts[DeliveryDelivered], d.Counts[DeliveryFailed], d.Counts[DeliveryDisabled], d.Failures)
	}
	tw.Flush()
}

// WriteDeletions prints one line per deletion with its tasks done.
func WriteDeletions(w io.Writer, ds []*stet.Deletion) {
	tw := newTable(w)
	fmt.Fprintln(tw, "deletion\treport\ttenant\tsource\tstate\trequested\tdone\ttasks done/all")
	for _, d := range ds {
		done := 0
		for _, t := range d.Tasks {
			if t.State == stet.DeletionDone {
				done++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\n", d.ID, d.ReportID, d.TenantID, d.SourceID, d.State,
			d.RequestedAt.Format(time.RFC3339), dash(timestamp(d.DoneAt)), done, len(d.Tasks))
	}
	tw.Flush()
}

// WriteDeletion prints one deletion with a row per task.
func WriteDeletion(w io.Writer, d *stet.Deletion) {
	fmt.Fprintf(w, "deletion %s  report %s  source %s  state %s  requested %s\n", d.ID, d.ReportID, d.SourceID, d.State, d.RequestedAt.Format(time.RFC3339))
	tw := newTable(w)
	fmt.Fprintln(tw, "  copy\tstate\tdue\tdone\texpires\treason")
	for _, t := range d.Tasks {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", t.Copy, t.State, timestamp(t.DueAt), dash(timestamp(t.DoneAt)), dash(timestamp(t.ExpiresAt)), dash(t.Reason))
	}
	tw.Flush()
	for _, t := range d.Tasks {
		if t.ConfirmedBy != "" {
			fmt.Fprintf(w, "  %s confirmed by %s: %s\n", t.Copy, t.ConfirmedBy, t.Evidence)
		}
	}
}

// WriteBatches prints the ledger's batches, one a row.
func WriteBatches(w io.Writer, bs []*Batch) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tPROCESSOR\tSTATE\tPROVIDER STATE\tITEMS\tAPPLIED\tPOLLS\tNEXT POLL\tCREATED")
	for _, b := range bs {
		next := "-"
		if !b.NextPollAt.IsZero() {
			next = b.NextPollAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.ID, b.ProcessorID, b.State, dash(b.ProviderState),
			b.ItemCount, b.AppliedCount, b.PollCount, next, b.CreatedAt.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// WriteText prints whether the audit chain is intact, or its first break.
func (r *ChainReport) WriteText(w io.Writer) {
	if r.Broken != nil {
		fmt.Fprintf(w, "broken: row %d: %s (%d rows checked before it)\n", r.Broken.ID, r.Broken.Reason, r.Checked)
		return
	}
	fmt.Fprintf(w, "ok: %d chained rows intact; head row %d hash %s", r.Checked, r.HeadID, r.HeadHash)
	if r.Unchained > 0 {
		fmt.Fprintf(w, "; %d older rows predate the chain", r.Unchained)
	}
	fmt.Fprintln(w)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

// dash is s, or "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}

// Calls counts the job's processor calls, its parts' included.
func (d *JobDetail) Calls() int {
	n := len(d.Attempts)
	for _, p := range d.Parts {
		n += len(p.Attempts)
	}
	return n
}

// Cost adds up what the job's calls cost, its parts' included; ok is
// false when a call's processor had no price.
func (d *JobDetail) Cost() (float64, bool) {
	total, ok := 0.0, true
	add := func(as []stet.Attempt) {
		for _, a := range as {
			if a.CostUSD == nil {
				ok = false
				continue
			}
			total += *a.CostUSD
		}
	}
	add(d.Attempts)
	for _, p := range d.Parts {
		add(p.Attempts)
	}
	return total, ok && d.Calls() > 0
}
