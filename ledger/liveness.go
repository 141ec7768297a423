package ledger

import (
	"context"
	"fmt"
	"time"
)

// Takeover is what one TakeOverDead took back.
type Takeover struct {
	// Dead are the worker processes found dead; their heartbeat rows are
	// gone, so a second sweep finds nothing.
	Dead []string
	// Jobs are the jobs whose extraction lease was taken back; Abandoned
	// counts the attempts this marked abandoned.
	Jobs      []string
	Abandoned int
	// Batches are the batches whose lease was cleared.
	Batches []string
}

// Empty reports whether the sweep found no dead process.
func (t *Takeover) Empty() bool { return len(t.Dead) == 0 }

// TakeOverDead finds the worker processes whose heartbeat is older than
// deadAfter (never self) and, in tx, takes back everything they held: their
// extracting jobs' leases end (the job can be claimed at once; a claim bumps
// the attempt token, so a holder that was only slow is fenced out), the
// synchronous attempts those leases covered become abandoned (outcome
// unknown: the provider may have billed the call), and their batch leases
// are cleared (the next run reconciles). Their heartbeat rows are deleted in
// the same transaction, which makes the sweep idempotent and lets two
// sweepers run at once: the second waits on the rows and finds them gone.
// A holder with no heartbeat row at all (a process that never beats, such
// as an operator command) is left to its lease's expiry.
func TakeOverDead(ctx context.Context, tx Querier, self string, now time.Time, deadAfter time.Duration) (*Takeover, error) {
	t := &Takeover{}
	ts := micros(now)
	rows, err := tx.QueryContext(ctx, `DELETE FROM worker_heartbeats WHERE heartbeat_at < $1 AND process_id <> $2 RETURNING process_id`,
		micros(now.Add(-deadAfter)), self)
	if err != nil {
		return nil, fmt.Errorf("find dead workers: %w", err)
	}
	t.Dead, err = scanStrings(rows)
	if err != nil {
		return nil, fmt.Errorf("find dead workers: %w", err)
	}
	for _, id := range t.Dead {
		res, err := tx.ExecContext(ctx, `UPDATE attempts SET status = 'abandoned', finished_at = $1
			WHERE status = 'started' AND batch_id IS NULL AND EXISTS (SELECT 1 FROM jobs j
				WHERE j.id = attempts.job_id AND j.attempt = attempts.token AND j.state = 'extracting' AND j.lease_holder = $2)`,
			ts, id)
		if err != nil {
			return nil, fmt.Errorf("abandon attempts of a dead worker: %w", err)
		}
		n, _ := res.RowsAffected()
		t.Abandoned += int(n)
		rows, err := tx.QueryContext(ctx, `UPDATE jobs SET lease_until = NULL, lease_holder = NULL, updated_at = $1
			WHERE state = 'extracting' AND lease_holder = $2 RETURNING public_id`, ts, id)
		if err != nil {
			return nil, fmt.Errorf("take back leases of a dead worker: %w", err)
		}
		for rows.Next() {
			var job string
			if err := rows.Scan(jobPub(&job)); err != nil {
				rows.Close()
				return nil, fmt.Errorf("take back leases of a dead worker: %w", err)
			}
			t.Jobs = append(t.Jobs, job)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("take back leases of a dead worker: %w", err)
		}
		rows, err = tx.QueryContext(ctx, `UPDATE batches SET lease_until = NULL, lease_holder = NULL WHERE lease_holder = $1 RETURNING id`, id)
		if err != nil {
			return nil, fmt.Errorf("take back batch leases of a dead worker: %w", err)
		}
		batches, err := scanStrings(rows)
		if err != nil {
			return nil, fmt.Errorf("take back batch leases of a dead worker: %w", err)
		}
		t.Batches = append(t.Batches, batches...)
	}
	return t, nil
}

// scanStrings reads one string column from rows and closes them.
func scanStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
