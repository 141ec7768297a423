package pipeline

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet/ledger"
)

// InvariantsArgs is the periodic invariant check (docs/design.md §6). River enqueues
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
	// A check still running makes this one redundant: on a loaded machine
	// the leader's inserts could otherwise pile checks up on the batch
	// queue, ahead of the batch jobs.
	if !w.p.checking.TryLock() {
		return nil
	}
	defer w.p.checking.Unlock()
	// The same periodic job sweeps review-UI sessions past their idle
	// logoff or maximum age (a lookup refuses them anyway; this drops the rows).
	if _, err := w.p.db.SweepWebSessions(ctx, w.p.clock.Now()); err != nil {
		return err
	}
	return w.p.CheckInvariants(ctx)
}

// invariantNames are the gauges set on every check, violated or not.
var invariantNames = []string{ledger.InvNoRecordAfterSLA, ledger.InvManyAuthoritative, ledger.InvHeldPastLease,
	ledger.InvBatchNotApplied, ledger.InvBatchUnknown, ledger.InvDeletionOverdue, ledger.InvPausedTooLong, ledger.InvDeliveryFailed}

// invariantLimit is how many violations of one invariant a check reads.
const invariantLimit = 100

// fullCheckEvery is how often the periodic check also reads the jobs that
// reached committed or manual for invariant 1 (see CheckInvariants).
const fullCheckEvery = time.Hour

// CheckInvariants runs the invariant checks once: it sets
// stet_invariant_violations{invariant}, and records the violations as
// alerts in the ledger — in the same transaction, a violation first seen
// opens an alert (and writes its invariant.violated row for the alert
// webhook), one gone resolves it (invariant.resolved) — and logs one alert
// line per alert opened. Alerts carry IDs only: tenant, source, report,
// revision, job, stage, extraction version, batch — never text, never the
// external ID.
//
// The first check of a process, and one an hour after, is full; the ones
// between read invariant 1 among jobs still in flight and the jobs of its
// open alerts (ledger.CheckParams.InFlight), so a check reads about the
// same rows with a million documents in the ledger as with a hundred.
func (p *Pipeline) CheckInvariants(ctx context.Context) error {
	now := p.clock.Now()
	last := p.lastFullCheck.Load()
	full := last == 0 || now.Sub(time.Unix(0, last)) >= fullCheckEvery || now.UnixNano() < last
	vs, err := p.db.CheckInvariants(ctx, ledger.CheckParams{Now: now, SLA: p.cfg.SLA,
		LeaseGrace: time.Minute, PauseLimit: p.cfg.PauseLimit, Limit: invariantLimit, InFlight: !full})
	if err != nil {
		return err
	}
	if full {
		p.lastFullCheck.Store(now.UnixNano())
	}
	counts := map[string]int{}
	for _, v := range vs {
		counts[v.Name]++
	}
	for _, name := range invariantNames {
		p.cfg.Metrics.Violations.WithLabelValues(name).Set(float64(counts[name]))
	}
	opened, resolved, err := p.db.SyncAlerts(ctx, vs, invariantLimit, now)
	if err != nil {
		return err
	}
	for _, a := range opened {
		args := []any{"invariant", strconv.Itoa(a.Invariant) + " " + a.Name}
		for _, k := range slices.Sorted(maps.Keys(a.IDs)) {
			args = append(args, k, a.IDs[k])
		}
		p.alert(p.log, "invariant_violated", args...)
	}
	for _, a := range resolved {
		p.log.Info("alert resolved", "alert", "invariant_resolved", "invariant", strconv.Itoa(a.Invariant)+" "+a.Name, "alert_id", a.ID)
	}
	return nil
}
