// Package monitor watches the ledger's invariants (docs/design.md §6): a
// periodic River job checks them, sets their gauges, and opens and
// resolves their alerts, with IDs only. It runs beside the stages, never
// inside them.
package monitor

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
)

// QueueBatch is the River queue the check runs on: the one maintenance
// work and provider batches share (governance.QueueBatch).
const QueueBatch = "batch"

// Config is what the monitor needs.
type Config struct {
	DB      *ledger.DB
	Metrics *metrics.Metrics
	Log     *slog.Logger
	Clock   stet.Clock
	// Every is how often the check runs (default 1m); SLA (default 1h)
	// and PauseLimit (default 1h) tune invariants 1 and 7.
	Every, SLA, PauseLimit time.Duration
}

// Monitor checks the invariants.
type Monitor struct {
	cfg      Config
	checking sync.Mutex // one periodic check at a time in this process
	// lastFull is when this process last ran a full check (Unix ns; 0:
	// never).
	lastFull atomic.Int64
}

// New returns a monitor.
func New(cfg Config) *Monitor {
	if cfg.Every == 0 {
		cfg.Every = time.Minute
	}
	if cfg.SLA == 0 {
		cfg.SLA = time.Hour
	}
	if cfg.PauseLimit == 0 {
		cfg.PauseLimit = time.Hour
	}
	return &Monitor{cfg: cfg}
}

// Register adds the check's worker.
func (m *Monitor) Register(workers *river.Workers) {
	river.AddWorker(workers, &invariantsWorker{m: m})
}

// PeriodicJobs is the check every Every, and once at start.
func (m *Monitor) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(m.cfg.Every),
		func() (river.JobArgs, *river.InsertOpts) { return InvariantsArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})}
}

// InvariantsArgs is the periodic invariant check (docs/design.md §6). River enqueues
// periodic jobs from its leader only, so one process checks at a time.
type InvariantsArgs struct{}

// Kind implements river.JobArgs.
func (InvariantsArgs) Kind() string { return "stet_invariants" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (InvariantsArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueBatch} }

type invariantsWorker struct {
	river.WorkerDefaults[InvariantsArgs]
	m *Monitor
}

func (w *invariantsWorker) Work(ctx context.Context, _ *river.Job[InvariantsArgs]) error {
	// A check still running makes this one redundant: on a loaded machine
	// the leader's inserts could otherwise pile checks up on the batch
	// queue, ahead of the batch jobs.
	if !w.m.checking.TryLock() {
		return nil
	}
	defer w.m.checking.Unlock()
	// The same periodic job sweeps review-UI sessions past their idle
	// logoff or maximum age (a lookup refuses them anyway; this drops the rows).
	if _, err := w.m.cfg.DB.SweepWebSessions(ctx, w.m.cfg.Clock.Now()); err != nil {
		return err
	}
	return w.m.Check(ctx)
}

// invariantNames are the gauges set on every check, violated or not.
var invariantNames = []string{ledger.InvNoRecordAfterSLA, ledger.InvManyAuthoritative, ledger.InvHeldPastLease,
	ledger.InvBatchNotApplied, ledger.InvBatchUnknown, ledger.InvDeletionOverdue, ledger.InvPausedTooLong, ledger.InvDeliveryFailed}

// invariantLimit is how many violations of one invariant a check reads.
const invariantLimit = 100

// fullCheckEvery is how often the periodic check also reads the jobs that
// reached committed or manual for invariant 1 (see Check).
const fullCheckEvery = time.Hour

// Check runs the invariant checks once: it sets
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
func (m *Monitor) Check(ctx context.Context) error {
	now := m.cfg.Clock.Now()
	last := m.lastFull.Load()
	full := last == 0 || now.Sub(time.Unix(0, last)) >= fullCheckEvery || now.UnixNano() < last
	vs, err := m.cfg.DB.CheckInvariants(ctx, ledger.CheckParams{Now: now, SLA: m.cfg.SLA,
		LeaseGrace: time.Minute, PauseLimit: m.cfg.PauseLimit, Limit: invariantLimit, InFlight: !full})
	if err != nil {
		return err
	}
	if full {
		m.lastFull.Store(now.UnixNano())
	}
	counts := map[string]int{}
	for _, v := range vs {
		counts[v.Name]++
	}
	for _, name := range invariantNames {
		m.cfg.Metrics.Violations.WithLabelValues(name).Set(float64(counts[name]))
	}
	opened, resolved, err := m.cfg.DB.SyncAlerts(ctx, vs, invariantLimit, now)
	if err != nil {
		return err
	}
	for _, a := range opened {
		args := []any{"invariant", strconv.Itoa(a.Invariant) + " " + a.Name}
		for _, k := range slices.Sorted(maps.Keys(a.IDs)) {
			args = append(args, k, a.IDs[k])
		}
		// An alert is a metric and an error line, as the stages raise theirs.
		m.cfg.Metrics.Alerts.WithLabelValues("invariant_violated").Inc()
		m.cfg.Log.Error("alert", append([]any{"alert", "invariant_violated"}, args...)...)
	}
	for _, a := range resolved {
		m.cfg.Log.Info("alert resolved", "alert", "invariant_resolved", "invariant", strconv.Itoa(a.Invariant)+" "+a.Name, "alert_id", a.ID)
	}
	return nil
}
