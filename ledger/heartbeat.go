package ledger

import (
	"context"
	"fmt"
	"time"
)

// Heartbeat records that worker process id is alive at now and returns how
// many worker processes have been alive within window (itself included)
// and how many others have been silent for longer than window: the ones a liveness sweep (TakeOverDead with the same
// window) would take over, so that a process sweeps only when there is one.
// On PostgreSQL it is one statement.
//
// A silent process's row stays until TakeOverDead takes back what it held
// and deletes it: the row is the proof that its leases are dead.
func (db *DB) Heartbeat(ctx context.Context, id string, now time.Time, window time.Duration) (live, silent int, err error) {
	const count = `SELECT 1 + COUNT(*) FILTER (WHERE heartbeat_at > $2), COUNT(*) FILTER (WHERE heartbeat_at < $2)
		FROM worker_heartbeats WHERE process_id <> $1`
	cutoff := micros(now.Add(-window))
	if db.dialect.name == Postgres {
		// A data-modifying WITH runs once whether or not the query reads
		// it; the count below sees the table as it was, so self is the 1.
		err = db.w.QueryRowContext(ctx, `WITH beat AS (
				INSERT INTO worker_heartbeats (process_id, started_at, heartbeat_at) VALUES ($1, $3, $3)
				ON CONFLICT (process_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at)
			`+count, id, cutoff, micros(now)).Scan(&live, &silent)
		if err != nil {
			return 0, 0, fmt.Errorf("heartbeat: %w", err)
		}
		return live, silent, nil
	}
	if err := db.HeartbeatAlone(ctx, id, now); err != nil {
		return 0, 0, err
	}
	if err := db.w.QueryRowContext(ctx, count, id, cutoff).Scan(&live, &silent); err != nil {
		return 0, 0, fmt.Errorf("count live workers: %w", err)
	}
	return live, silent, nil
}

// HeartbeatAlone records worker process id as alive at now, without
// counting the others: what a process alone on its database writes.
func (db *DB) HeartbeatAlone(ctx context.Context, id string, now time.Time) error {
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
