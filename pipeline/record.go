package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
)

type recordWorker struct {
	river.WorkerDefaults[RecordArgs]
	p *Pipeline
}

// NextRetry retries a failed commit from the saved artifact with backoff.
func (w *recordWorker) NextRetry(job *river.Job[RecordArgs]) time.Time {
	return w.p.clock.Now().Add(w.p.backoff(job.Attempt))
}

// Work writes the review record and the job's committed marker in one
// transaction with the River completion. A failure here retries only this
// stage, from the artifact: the processor is never called again.
func (w *recordWorker) Work(ctx context.Context, job *river.Job[RecordArgs]) error {
	p := w.p
	start := time.Now() // elapsed time for the metric: the monotonic clock
	var recordID string
	err := p.inTx(ctx, "commit", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		recordID, err = p.db.WriteRecord(ctx, tx, job.Args.JobID, p.clock.Now())
		if errors.Is(err, ledger.ErrNothingToCommit) {
			return nil // the extract stage owns the job; it enqueues a commit when an artifact exists
		}
		if err != nil {
			return err
		}
		if err := completeTx(ctx, tx, job); err != nil {
			return err
		}
		crash.Point(crash.MidCommit)
		return nil
	})
	outcome := "committed"
	if err != nil {
		outcome = "store_failed"
		p.log.Warn("commit failed; retrying from the artifact", "job_id", job.Args.JobID, "stage", "commit",
			"failure_class", "store", "attempt", job.Attempt)
		err = fmt.Errorf("commit job %s: %w", job.Args.JobID, err)
	} else if recordID != "" && recordID != ledger.PartSettled {
		p.log.Info("review record committed", "job_id", job.Args.JobID, "review_record_id", recordID, "stage", "commit")
	}
	p.cfg.Metrics.StageDuration.WithLabelValues("commit", outcome).Observe(time.Since(start).Seconds())
	return err
}
