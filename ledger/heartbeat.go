package ledger

import (
	"context"
	"fmt"
	"time"
)

// Heartbeat records that worker process id is alive at now and returns how
// many worker processes have been alive within window (itself included).
func (db *DB) Heartbeat(ctx context.Context, id string, now time.Time, window time.Duration) (int, error) {
	if err := db.Beat(ctx, id, now); err != nil {
		return 0, err
	}
	var n int
	if err := db.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM worker_heartbeats WHERE heartbeat_at > $1`,
		micros(now.Add(-window))).Scan(&n); err != nil {
		return 0, fmt.Errorf("count live workers: %w", err)
	}
	// A silent process's row stays until TakeOverDead takes back what it
	// held and deletes it: the row is the proof that its leases are dead.
	return max(n, 1), nil
}

// Beat records worker process id as alive at now, without counting the
// others: what a process alone on its database writes.
func (db *DB) Beat(ctx context.Context, id string, now time.Time) error {
	if _, err := db.w.ExecContext(ctx, `INSERT INTO worker_heartbeats (process_id, started_at, heartbeat_at) VALUES ($1, $2, $2)
		ON CONFLICT (process_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, id, micros(now)); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// ForgetOtherWorkers deletes every heartbeat but self's, in tx: for a
// process that holds its database alone (the SQLite lock file) and has just
// released every lease, so that no earlier process's row is left behind.
func ForgetOtherWorkers(ctx context.Context, tx Querier, self string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM worker_heartbeats WHERE process_id <> $1`, self); err != nil {
		return fmt.Errorf("forget earlier workers: %w", err)
	}
	return nil
}

// Unregister removes a stopping worker's heartbeat so the others take its
// share at once.
func (db *DB) Unregister(ctx context.Context, id string) error {
	_, err := db.w.ExecContext(ctx, `DELETE FROM worker_heartbeats WHERE process_id = $1`, id)
	return err
}
