// Package governance runs the data lifecycle beside the stage workers:
// the retention sweep (a periodic River job) and the deletion workflow
// (one River job per deletion, one task per copy, the data key shredded
// first). Sealing at rest and rekeying are the ledger's and seal's; what
// may leave for a processor is boundary's.
package governance

import (
	"database/sql"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// QueueBatch is the River queue governance's jobs run on: the one that
// maintenance work and provider batches share (on SQLite every extra queue
// is one more poller on the single writer).
const QueueBatch = "batch"

// Config is what governance needs; the pipeline fills it from its own.
type Config struct {
	DB         *ledger.DB
	Clock      stet.Clock
	Log        *slog.Logger
	Processors map[string]stet.Processor // by ID: their copies are deleted through stet.CopyDeleter
	// Transcribers declare, by ID, the boundary of those that heard audio
	// reports: their retention closes provider_retention tasks.
	Transcribers map[string]stet.ProcessorInfo
	Encryption   bool          // the ledger seals text under per-report data keys
	JobTimeout   time.Duration // bounds one provider delete call
	// SweepInterval is how often the leader's sweep runs; SweepBatch rows
	// are purged per transaction, at most SweepBatches transactions per
	// kind and run.
	SweepInterval time.Duration
	SweepBatch    int
	SweepBatches  int
	Backoff       func(attempt int) time.Duration // a failed deletion's next try
}

// Governance is the lifecycle's workers and calls.
type Governance struct {
	cfg   Config
	river *river.Client[*sql.Tx]
}

// New returns governance for cfg. Register its workers before the River
// client is made, then give it the client (Use).
func New(cfg Config) *Governance { return &Governance{cfg: cfg} }

// Register adds the deletion and sweep workers.
func (g *Governance) Register(workers *river.Workers) {
	river.AddWorker(workers, &deleteWorker{g: g})
	river.AddWorker(workers, &sweepWorker{g: g})
}

// PeriodicJobs is the sweep, every SweepInterval, from River's leader.
func (g *Governance) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(g.cfg.SweepInterval),
		func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})}
}

// Use gives governance the River client its workers run on, for the jobs
// it enqueues.
func (g *Governance) Use(client *river.Client[*sql.Tx]) { g.river = client }
