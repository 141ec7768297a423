package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/stetlabs/stet/ledger"
)

// recoverOrphans runs at start when this process is the only one on its
// database (the embedded SQLite default, held by a lock file). Every stage
// job River still shows as running, and every ledger lease, then belongs to
// a process that died: rather than wait for River's rescuer
// (rescue_after + up to 30 s), each orphaned stage is enqueued again and the
// leases are released (the synchronous attempts they covered become
// abandoned, as TakeOverDead marks a dead worker's). The orphaned River rows are rescued later and find
// their work done; duplicates are harmless because every stage fences on
// the attempt token. It must never run where other processes share the
// database.
func (p *Pipeline) recoverOrphans(ctx context.Context) (int, error) {
	running, err := p.river.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateRunning).First(10000))
	if err != nil {
		return 0, fmt.Errorf("list running jobs: %w", err)
	}
	var inserts []river.InsertManyParams
	for _, j := range running.Jobs {
		if args := stageArgs(j); args != nil {
			inserts = append(inserts, river.InsertManyParams{Args: args, InsertOpts: resumedOpts(args)})
		}
	}
	err = p.inTx(ctx, "recover_orphans", func(ctx context.Context, tx *sql.Tx) error {
		if err := ledger.ReleaseLeases(ctx, tx, p.clock.Now()); err != nil {
			return err
		}
		if err := ledger.ReleaseBatchLeases(ctx, tx); err != nil {
			return err
		}
		if err := ledger.ReleaseDeliveryLeases(ctx, tx); err != nil {
			return err
		}
		if err := ledger.ForgetOtherWorkers(ctx, tx, p.processID); err != nil {
			return err
		}
		if len(inserts) == 0 {
			return nil
		}
		_, err := p.river.InsertManyTx(ctx, tx, inserts)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("recover orphaned stages: %w", err)
	}
	return len(inserts), nil
}
