package drill

import (
	"cmp"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Result is the drill's outcome table.
type Result struct {
	Seed        int64   `json:"seed"`
	Reports     int     `json:"reports"`
	Workers     int     `json:"workers"`
	FaultRate   float64 `json:"fault_rate"`
	KillsWanted int     `json:"kills_requested"`
	Database    string  `json:"database"`

	// Deliveries.
	Deliveries          int `json:"deliveries"`    // planned messages
	Revisions           int `json:"revisions"`     // planned (report, revision) pairs
	Requests            int `json:"requests"`      // HTTP requests, retries included
	Acknowledged        int `json:"acknowledged"`  // deliveries answered 202 or 200
	Accepted202         int `json:"accepted_202"`  // final answer 202
	Duplicate200        int `json:"duplicate_200"` // final answer 200
	Status5xxDBRestart  int `json:"status_5xx_db_restart"`
	Status5xxOther      int `json:"status_5xx_other"`
	Status503RetryAfter int `json:"status_503_retry_after"` // 503s that carried Retry-After
	ConnErrDBRestart    int `json:"conn_errors_db_restart"`
	ConnErrOther        int `json:"conn_errors_other"`
	Retried             int `json:"retried"`  // requests beyond each delivery's first
	GivenUp             int `json:"given_up"` // deliveries never acknowledged

	// Faults.
	Kills           int     `json:"kills"`
	DBRestarts      int     `json:"db_restarts"`
	DBDownSeconds   float64 `json:"db_down_s"`
	UnexpectedExits int     `json:"unexpected_exits"`
	Events          []Event `json:"events"`

	// Provider.
	ProviderCalls         int            `json:"provider_calls"`
	ProviderCallsByStatus map[string]int `json:"provider_calls_by_status"` // "200", "429", …, "cut" (the caller left)
	AttemptRows           int            `json:"attempt_rows"`
	// AttemptsByStatus counts the attempt rows by status; abandoned ones
	// were cut by a death (outcome unknown, counted once as a call).
	AttemptsByStatus map[string]int `json:"attempts_by_status"`
	// AttemptsStarted are attempts still started after the drain: must be 0.
	AttemptsStarted int `json:"attempts_started"`
	UnmappedCalls   int `json:"unmapped_calls"` // whole requests without a marker
	// ProviderBatchCalls are requests to the Batch API's routes.
	ProviderBatchCalls int `json:"provider_batch_calls"`
	// UnmappedCut are requests whose body the fake could not read whole
	// (the caller was SIGKILLed mid-send): no model saw them; not a failure.
	UnmappedCut int `json:"unmapped_cut_bodies"`

	// Ledger.
	AcknowledgedRevisions int            `json:"acknowledged_revisions"`
	Jobs                  int            `json:"jobs"`
	Committed             int            `json:"committed"`
	Manual                int            `json:"manual"`
	ManualByClass         map[string]int `json:"manual_by_class"`
	NotTerminal           int            `json:"not_terminal"`
	PendingStageJobs      int            `json:"pending_stage_jobs"`
	DiscardedStageJobs    int            `json:"discarded_stage_jobs"`

	// Checks.
	Lost                   int        `json:"lost"`
	Duplicated             int        `json:"duplicated"`
	DuplicatedDetail       Duplicates `json:"duplicated_detail"`
	ExtraCalls             int        `json:"extra_calls"`
	Unaccounted            int        `json:"unaccounted"`
	MisplacedAuthoritative int        `json:"misplaced_authoritative"`
	Phantom                int        `json:"phantom"`
	// Examples names a few offenders per failing check: drill report IDs
	// (synthetic), revisions and job IDs, never text.
	Examples []string `json:"examples,omitempty"`

	// Resume is the time to resume after each worker death.
	Resume ResumeResult `json:"time_to_resume"`

	// Batch is the batch-fault variant's outcome; nil without it.
	Batch *BatchResult `json:"batch,omitempty"`

	// Mix is the outcome of the parts and reroute sources.
	Mix *MixResult `json:"mix,omitempty"`

	// Destination is the destination variant's outcome; nil without it.
	Destination *DestinationResult `json:"destination,omitempty"`

	LoadSeconds  float64  `json:"load_s"`
	DrainSeconds float64  `json:"drain_s"`
	WallSeconds  float64  `json:"wall_s"`
	Pass         bool     `json:"pass"`
	Failures     []string `json:"failures"`
}

// Duplicates breaks "duplicated" down.
type Duplicates struct {
	ArtifactsPerJob        int `json:"jobs_with_several_artifacts"`
	RecordsPerJob          int `json:"jobs_with_several_records"`
	AuthoritativePerReport int `json:"reports_with_several_authoritative"`
	JobsPerRevision        int `json:"revisions_with_several_jobs"`
	Accepted202Twice       int `json:"revisions_answered_202_twice"`
}

func (d Duplicates) total() int {
	return d.ArtifactsPerJob + d.RecordsPerJob + d.AuthoritativePerReport + d.JobsPerRevision + d.Accepted202Twice
}

// Event is one injected fault, as it happened.
type Event struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
}

// WriteText prints the outcome table for a reader, with the replay command
// of o.
func (r *Result) WriteText(w io.Writer, o Options) {
	fmt.Fprintf(w, "stetlab drill chaos — seed %d\n", r.Seed)
	fmt.Fprintf(w, "replay:   %s\n", o.Replay())
	fmt.Fprintf(w, "database: %s\n\n", r.Database)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(name string, n any, note string) { fmt.Fprintf(tw, "  %s\t%v\t%s\n", name, n, note) }
	ok := func(n int) string {
		if n == 0 {
			return "ok"
		}
		return "FAIL"
	}
	fmt.Fprintln(tw, "deliveries\t\t")
	row("sent", r.Deliveries, fmt.Sprintf("for %d reports, %d revisions; %d HTTP requests", r.Reports, r.Revisions, r.Requests))
	row("acknowledged", r.Acknowledged, fmt.Sprintf("202: %d, 200 (duplicate): %d", r.Accepted202, r.Duplicate200))
	row("5xx during the db restart", r.Status5xxDBRestart, fmt.Sprintf("503 with Retry-After: %d (all phases)", r.Status503RetryAfter))
	row("5xx otherwise", r.Status5xxOther, "")
	row("connection errors, db restart", r.ConnErrDBRestart, "")
	row("connection errors otherwise", r.ConnErrOther, "")
	row("retried", r.Retried, "requests beyond each delivery's first")
	row("given up", r.GivenUp, ok(r.GivenUp))
	fmt.Fprintln(tw, "faults\t\t")
	row("worker SIGKILLs", r.Kills, fmt.Sprintf("requested %d, %d workers", r.KillsWanted, r.Workers))
	row("db restarts (-m immediate)", r.DBRestarts, fmt.Sprintf("intake unavailable %.1fs", r.DBDownSeconds))
	row("unexpected process exits", r.UnexpectedExits, "restarted")
	rs := r.Resume
	row("time to resume, sync stages", rs.Sync, fmt.Sprintf("%s (bound %gs; %d deaths, %d jobs held)", okIf(rs.Sync.Max <= rs.BoundSeconds), rs.BoundSeconds, rs.Deaths, rs.Jobs))
	row("  of which until claimable", rs.SyncFreed, "rescued by River and the ledger lease ended; the rest is queueing behind other work")
	row("time to resume, batches", rs.Batch, fmt.Sprintf("%s (bound %gs)", okIf(rs.Batch.Max <= rs.BatchBoundSeconds), rs.BatchBoundSeconds))
	row("held jobs never resumed", rs.NotResumed, fmt.Sprintf("%s (batch jobs %d) %s", ok(rs.NotResumed), rs.NotResumedBatch, statusSummary(rs.How)))
	row("provider calls", r.ProviderCalls, statusSummary(r.ProviderCallsByStatus))
	row("attempt rows", r.AttemptRows, statusSummary(r.AttemptsByStatus))
	row("attempts left started", r.AttemptsStarted, ok(r.AttemptsStarted))
	fmt.Fprintln(tw, "ledger\t\t")
	row("acknowledged revisions", r.AcknowledgedRevisions, "")
	row("jobs", r.Jobs, strings.TrimSpace(fmt.Sprintf("revisions' jobs: committed %d, manual %d %s", r.Committed, r.Manual, statusSummary(r.ManualByClass)))+
		"; the rest are part jobs")
	row("not terminal", r.NotTerminal, ok(r.NotTerminal))
	row("stage jobs pending", r.PendingStageJobs, fmt.Sprintf("%s (discarded by River: %d)", ok(r.PendingStageJobs), r.DiscardedStageJobs))
	fmt.Fprintln(tw, "checks\t\t")
	row("lost", r.Lost, ok(r.Lost))
	d := r.DuplicatedDetail
	row("duplicated", r.Duplicated, fmt.Sprintf("%s (artifacts/job %d, records/job %d, authoritative/report %d, jobs/revision %d, 202 twice %d)",
		ok(r.Duplicated), d.ArtifactsPerJob, d.RecordsPerJob, d.AuthoritativePerReport, d.JobsPerRevision, d.Accepted202Twice))
	row("extra calls", r.ExtraCalls, ok(r.ExtraCalls))
	row("unaccounted", r.Unaccounted, ok(r.Unaccounted))
	row("misplaced authoritative", r.MisplacedAuthoritative, ok(r.MisplacedAuthoritative))
	row("phantom jobs", r.Phantom, ok(r.Phantom))
	row("unmapped calls", r.UnmappedCalls, ok(r.UnmappedCalls)+" (whole requests without a document marker)")
	row("bodies cut mid-send", r.UnmappedCut, "requests the fake could not read whole (a kill mid-send); not counted as calls")
	if b := r.Batch; b != nil {
		fmt.Fprintln(tw, "batches\t\t")
		row("crash points armed", statusSummary(b.Armed), "worker processes restarted with STET_CRASH_AT")
		row("crash points reached", statusSummary(b.Crashes), "")
		row("batch jobs", b.Jobs, fmt.Sprintf("committed %d, manual %d", b.JobsCommitted, b.JobsManual))
		row("ledger batches", b.Ledger, statusSummary(b.LedgerByState))
		row("provider batch creates", b.Creates, fmt.Sprintf("%d create calls, %d distinct stet batches, Batch API requests %d", b.CreateCalls, b.Distinct, r.ProviderBatchCalls))
		row("batches created twice", b.CreatedTwice, ok(b.CreatedTwice))
		row("provider batches unknown to the ledger", b.Unknown, ok(b.Unknown))
		row("batches unfinished", b.Unfinished, ok(b.Unfinished))
		row("operator reconciles", cmp.Or(statusSummary(b.Reconciled), "0"), "unknown batches decided from the provider's records (docs/batches.md), as an operator would")
	}
	if m := r.Mix; m != nil {
		fmt.Fprintln(tw, "parts and reroute\t\t")
		row("two-part revisions", m.PartsRevisions, fmt.Sprintf("records %d, with provenance %d, part jobs %d %s",
			m.PartsRecords, m.WithProvenance, m.PartJobs, okIf(m.PartsRecords == m.PartsRevisions && m.WithProvenance == m.PartsRecords)))
		row("revision jobs without two parts", m.PartJobsWrong, ok(m.PartJobsWrong))
		row("reroute revisions", m.RerouteRevisions, fmt.Sprintf("blocked (pending retention), moved by the operator: %d jobs in %d stet reroute runs (%d failed), %d decisions recorded",
			m.Rerouted, m.RerouteRuns, m.RerouteFailed, m.Decisions))
		row("calls to the pending processor", m.PendingCalls, ok(m.PendingCalls))
		row("extracted without a decision", m.UndecidedReroutes, ok(m.UndecidedReroutes))
	}
	if d := r.Destination; d != nil {
		fmt.Fprintln(tw, "destination\t\t")
		row("record events", d.Events, fmt.Sprintf("received %d distinct webhook-ids, %d POSTs answered 200", d.Received, d.POSTs200))
		row("redelivered", d.Redelivered, "same webhook-id, acknowledged again (at least once)")
		row("answered 500 on purpose", d.Status500, "")
		row("bad signatures", d.BadSignatures, ok(d.BadSignatures))
		row("lost events", d.Lost, ok(d.Lost))
		row("outbox rows not delivered", d.NotDelivered, ok(d.NotDelivered))
	}
	fmt.Fprintln(tw, "time\t\t")
	row("load", fmt.Sprintf("%.1fs", r.LoadSeconds), "")
	row("drain", fmt.Sprintf("%.1fs", r.DrainSeconds), "")
	row("wall", fmt.Sprintf("%.1fs", r.WallSeconds), "")
	tw.Flush()
	if r.Pass {
		fmt.Fprintln(w, "\nPASS")
		return
	}
	fmt.Fprintf(w, "\nFAIL: %s\n", strings.Join(r.Failures, "; "))
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  e.g. %s\n", e)
	}
	for _, e := range r.Resume.Examples {
		fmt.Fprintf(w, "  e.g. %s\n", e)
	}
	fmt.Fprintf(w, "replay with: %s --keep\n", o.Replay())
}

func okIf(b bool) string {
	if b {
		return "ok"
	}
	return "FAIL"
}

// statusSummary prints a count map in key order: "(200: 90, 429: 3)".
func statusSummary(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
