package pipeline

import (
	"context"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet/ledger"
)

// InvariantsArgs is the periodic invariant check (DESIGN §6). River enqueues
// periodic jobs from its leader only, so one process checks at a time.
type InvariantsArgs struct{}

// Kind implements river.JobArgs.
func (InvariantsArgs) Kind() string { return "stet_invariants" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (InvariantsArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueBatch} }

type invariantsWorker struct {
	river.WorkerDefaults[InvariantsArgs]
	p *Pipeline
}

func (w *invariantsWorker) Work(ctx context.Context, _ *river.Job[InvariantsArgs]) error {
	// The same periodic job sweeps review-UI sessions past their idle
	// logoff or maximum age (a lookup refuses them anyway; this drops the rows).
	if _, err := w.p.db.SweepWebSessions(ctx, w.p.clock.Now()); err != nil {
		return err
	}
	return w.p.CheckInvariants(ctx)
}

// invariantNames are the gauges set on every check, violated or not.
var invariantNames = []string{ledger.InvNoRecordAfterSLA, ledger.InvManyAuthoritative, ledger.InvHeldPastLease,
	ledger.InvBatchNotApplied, ledger.InvBatchUnknown, ledger.InvDeletionOverdue, ledger.InvPausedTooLong}

// CheckInvariants runs the invariant checks once: it sets
// stet_invariant_violations{invariant} and raises one alert per violation
// not seen by the previous check. Alerts carry IDs only: tenant, source,
// report, revision, job, stage, extraction version, batch — never text,
// never the external ID.
func (p *Pipeline) CheckInvariants(ctx context.Context) error {
	vs, err := p.db.CheckInvariants(ctx, ledger.CheckParams{Now: p.clock.Now(), SLA: p.cfg.SLA,
		LeaseGrace: time.Minute, PauseLimit: p.cfg.PauseLimit})
	if err != nil {
		return err
	}
	counts := map[string]int{}
	seen := map[string]bool{}
	for _, v := range vs {
		counts[v.Name]++
		key := v.Name + "|" + v.ReportID + "|" + v.JobID + "|" + v.BatchID + "|" + v.Scope + "|" + v.DeletionID + "|" + v.Copy
		seen[key] = true
		p.mu.Lock()
		known := p.violations[key]
		p.mu.Unlock()
		if known {
			continue
		}
		p.alert(p.log, "invariant_violated", "invariant", strconv.Itoa(v.Invariant)+" "+v.Name, "tenant", v.TenantID,
			"source", v.SourceID, "report_id", v.ReportID, "revision", v.Revision, "job_id", v.JobID, "stage", v.Stage,
			"extraction_version", v.ExtractionVersion, "batch_id", v.BatchID, "processor", v.ProcessorID, "scope", v.Scope, "deletion_id", v.DeletionID, "copy", v.Copy, "count", v.Count)
	}
	for _, name := range invariantNames {
		p.cfg.Metrics.Violations.WithLabelValues(name).Set(float64(counts[name]))
	}
	p.mu.Lock()
	p.violations = seen
	p.mu.Unlock()
	return nil
}
