package governance

import (
	"context"
	"database/sql"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet/ledger"
)

// SweepArgs is the retention sweeper (docs/design.md §5), a periodic job River
// enqueues from its leader only, every SweepInterval.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "stet_sweep" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (SweepArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueBatch} }

type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	g *Governance
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.g.Sweep(ctx)
	return err
}

// Sweep runs one bounded retention sweep: for every recorded policy
// version, it purges text and metadata, artifacts' raw and normalized
// output, decided records' classification and note (when the policy sets
// records retention), and delivery receipts past the replay horizon; then
// expired tombstones and transcribed audio past its retention. Each batch
// of SweepBatch rows is its own transaction, and each kind stops after
// SweepBatches batches, so a run's work is bounded and the next run
// carries on. It also re-enqueues deletions whose
// worker was lost. It returns the rows purged by kind.
func (g *Governance) Sweep(ctx context.Context) (map[ledger.Purge]int, error) {
	now := g.cfg.Clock.Now()
	pols, err := ledger.RecordedPolicies(ctx, g.cfg.DB.Writer())
	if err != nil {
		return nil, err
	}
	counts := map[ledger.Purge]int{}
	run := func(kind ledger.Purge, hash string, keep time.Duration) error {
		for i := 0; i < g.cfg.SweepBatches; i++ {
			var n int
			err := g.cfg.DB.InTx(ctx, func(tx *sql.Tx) error {
				var err error
				n, err = ledger.PurgeBatch(ctx, tx, kind, hash, now.Add(-keep), now, g.cfg.SweepBatch)
				return err
			})
			if err != nil {
				return err
			}
			counts[kind] += n
			if n < g.cfg.SweepBatch {
				return nil
			}
		}
		return nil
	}
	for hash, pol := range pols {
		horizon := pol.ReplayHorizon
		if horizon == 0 {
			horizon = ledger.DefaultReplayHorizon
		}
		for _, k := range []struct {
			kind ledger.Purge
			keep time.Duration
		}{{ledger.PurgeText, pol.TextRetention}, {ledger.PurgeArtifacts, pol.ArtifactRetention},
			{ledger.PurgeRecords, pol.RecordsRetention}, {ledger.PurgeReceipts, horizon}} {
			if k.keep <= 0 {
				continue // no retention set: kept
			}
			if err := run(k.kind, hash, k.keep); err != nil {
				return counts, err
			}
		}
	}
	for _, kind := range []ledger.Purge{ledger.PurgeTombstones, ledger.PurgeAudio} {
		if err := run(kind, "", 0); err != nil {
			return counts, err
		}
	}
	// A provider's copy held under its declared retention is gone once
	// that retention ends: its task closes itself.
	var settled []string
	if err := g.cfg.DB.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		settled, err = ledger.CloseExpiredRetention(ctx, tx, now)
		return err
	}); err != nil {
		return counts, err
	}
	if len(settled) > 0 {
		g.cfg.Log.Info("provider copies closed at the end of their declared retention", "deletions", len(settled))
	}
	// A deletion untouched for a while lost its worker (discarded after its
	// retries, or deleted by hand): enqueue it again. A duplicate is
	// harmless (unique by args, and every task is idempotent).
	ids, err := ledger.OpenDeletions(ctx, g.cfg.DB.Writer(), now.Add(-10*g.cfg.SweepInterval), 100)
	if err != nil {
		return counts, err
	}
	for _, id := range ids {
		if _, err := g.river.Insert(ctx, DeleteArgs{DeletionID: id}, nil); err != nil {
			return counts, err
		}
	}
	for kind, n := range counts {
		if n > 0 {
			g.cfg.Log.Info("retention sweep", "purge", string(kind), "count", n)
		}
	}
	return counts, nil
}
