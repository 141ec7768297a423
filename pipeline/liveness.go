package pipeline

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/stetlabs/stet/ledger"
)

// Leases tied to worker liveness (docs/architecture.md, "Crash recovery").
// Every worker process writes a heartbeat every workers.heartbeat and, on
// the same tick, runs takeOverDead: a process whose heartbeat is older than
// workers.dead_after is dead, and in one transaction its extraction and
// batch leases are taken back, its cut attempts become abandoned, its
// heartbeat row is deleted (so the sweep runs once per death, whichever
// worker gets there first) and its stage jobs River still shows as running
// under its client ID are enqueued again. River's rescuer
// (workers.rescue_after) stays the backstop for anything this misses.

// holder is the lease holder this process names in its claims: its
// heartbeat's process ID, or "" when it writes no heartbeat (an api process
// or an operator command), whose leases then only expire.
func (p *Pipeline) holder() string {
	if p.cfg.Work {
		return p.processID
	}
	return ""
}

// batchLeaseFor is a batch run's lease, renewed every heartbeat while the
// run lasts: short, so that a holder nobody can declare dead (one without
// heartbeats) still frees its batch within seconds.
func (p *Pipeline) batchLeaseFor() time.Duration {
	return max(p.cfg.DeadAfter, 3*p.cfg.Heartbeat)
}

// takeOverDead runs the liveness sweep once. It returns how many stage jobs
// it enqueued again.
func (p *Pipeline) takeOverDead(ctx context.Context) (int, error) {
	var to *ledger.Takeover
	var inserts []river.InsertManyParams
	err := p.inTx(ctx, "liveness.take_over", func(ctx context.Context, tx *sql.Tx) error {
		inserts = inserts[:0]
		var err error
		to, err = ledger.TakeOverDead(ctx, tx, p.processID, p.clock.Now(), p.cfg.DeadAfter)
		if err != nil || to.Empty() {
			return err
		}
		running, err := p.river.JobListTx(ctx, tx, river.NewJobListParams().States(rivertype.JobStateRunning).First(10000))
		if err != nil {
			return fmt.Errorf("list running jobs: %w", err)
		}
		for _, j := range running.Jobs {
			if len(j.AttemptedBy) == 0 || !slices.Contains(to.Dead, j.AttemptedBy[len(j.AttemptedBy)-1]) {
				continue
			}
			if args := stageArgs(j); args != nil {
				inserts = append(inserts, river.InsertManyParams{Args: args, InsertOpts: resumedOpts(args)})
			}
		}
		if len(inserts) == 0 {
			return nil
		}
		_, err = p.river.InsertManyTx(ctx, tx, inserts)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("take over dead workers: %w", err)
	}
	if !to.Empty() {
		p.log.Warn("took over the work of dead worker processes", "processes", len(to.Dead), "process_ids", to.Dead, "jobs", len(to.Jobs),
			"abandoned_attempts", to.Abandoned, "batches", len(to.Batches), "stages_enqueued", len(inserts))
	}
	return len(inserts), nil
}

// stageArgs returns a new River job's args for a stage job found running
// under a dead process, or nil for a job that is not a stage.
func stageArgs(j *rivertype.JobRow) river.JobArgs {
	switch j.Kind {
	case ExtractArgs{}.Kind():
		var a ExtractArgs
		if json.Unmarshal(j.EncodedArgs, &a) == nil {
			return a
		}
	case RecordArgs{}.Kind():
		var a RecordArgs
		if json.Unmarshal(j.EncodedArgs, &a) == nil {
			return a
		}
	case BatchArgs{}.Kind():
		var a BatchArgs
		if json.Unmarshal(j.EncodedArgs, &a) == nil {
			return a
		}
	}
	return nil
}
