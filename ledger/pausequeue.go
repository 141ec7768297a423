package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// PauseScopes lists the scopes of the dispatch pauses in force, read on q
// (the read pool is enough: a pause is looked at again every second).
func PauseScopes(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT scope FROM dispatch_pauses ORDER BY scope`)
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
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

// settleQueued is how old a River job must be before MarkQueuedWaiting's
// walk moves past it: far longer than an intake transaction lasts.
const settleQueued = 10 * time.Second

// MarkQueuedWaiting moves to waiting the accepted jobs whose River job of
// kind waits in queue (not running), for River job IDs above after, at
// most limit of them in ID order; it returns the highest River job ID it
// looked at (after, if none). It is how a paused River queue, whose jobs no
// worker claims, still shows its jobs as waiting on the pause, as a claim
// would have. A job a worker holds is not accepted and is left alone.
//
// It reads River's own table (river_job): its ID is the only order that
// lets a paused queue be walked once, not scanned again every time.
//
// On PostgreSQL River's IDs come from a sequence, and two intake
// transactions can commit out of ID order: a walk can see the later IDs
// while the earlier ones are not visible yet. So the ID returned stops
// before the first River job younger than settleQueued (by the database's
// clock); the next walk reads the young ones again, and by then every
// transaction that took an ID below them has ended. (SQLite has one
// writer: its IDs become visible in order.)
func (db *DB) MarkQueuedWaiting(ctx context.Context, queue, kind string, after int64, limit int, now time.Time) (int64, error) {
	jobID, settled := `json_extract(args, '$.job_id')`, `1`
	if db.dialect.name == Postgres {
		jobID, settled = `args->>'job_id'`, fmt.Sprintf(`created_at < now() - interval '%d milliseconds'`, settleQueued.Milliseconds())
	}
	rows, err := db.r.QueryContext(ctx, `SELECT id, `+jobID+`, `+settled+` FROM river_job
		WHERE id > $1 AND queue = $2 AND kind = $3 AND state IN ('available', 'scheduled', 'retryable')
		ORDER BY id LIMIT $4`, after, queue, kind, limit)
	if err != nil {
		return after, fmt.Errorf("list queued jobs: %w", err)
	}
	last, young := after, false
	var ids []any
	for rows.Next() {
		var id int64
		var job *string
		var old bool
		if err := rows.Scan(&id, &job, &old); err != nil {
			rows.Close()
			return after, err
		}
		young = young || !old
		if !young {
			last = id
		}
		if job != nil {
			ids = append(ids, pub(*job))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return after, err
	}
	if len(ids) == 0 {
		return last, nil
	}
	marks := make([]string, len(ids))
	for i := range ids {
		marks[i] = fmt.Sprintf("$%d", i+2)
	}
	args := append([]any{micros(now)}, ids...)
	if _, err := db.w.ExecContext(ctx, `UPDATE jobs SET state = 'waiting', updated_at = $1
		WHERE state = 'accepted' AND public_id IN (`+strings.Join(marks, ", ")+`)`, args...); err != nil {
		return after, fmt.Errorf("mark waiting: %w", err)
	}
	return last, nil
}
