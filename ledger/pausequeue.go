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

// SettleQueued is how old a River job must be before MarkQueuedWaiting's
// settled point moves past it: far longer than an intake transaction lasts.
const SettleQueued = 10 * time.Second

// QueueWalk is where the walk of a paused queue stands, in River job IDs.
// Every queued job at or below Settled is marked waiting. The jobs above it
// up to Scanned were marked too, but the walk reads them again once they
// are settled (see MarkQueuedWaiting). The zero QueueWalk starts at the
// queue's head.
type QueueWalk struct {
	Settled, Scanned int64
}

// MarkQueuedWaiting moves to waiting the accepted jobs whose River job of
// kind waits in queue (not running), walking River job IDs from w, up to
// pages pages of limit each, and returns where the walk stands after. It
// is how a paused River queue, whose jobs no worker claims, still shows its
// jobs as waiting on the pause, as a claim would have. A job a worker holds
// is not accepted and is left alone.
//
// It reads River's own table (river_job): its ID is the only order that
// lets a paused queue be walked once, not scanned again every time.
//
// On PostgreSQL River's IDs come from a sequence, and two intake
// transactions can commit out of ID order: a walk can see the later IDs
// while the earlier ones are not visible yet. So the walk marks every job it
// sees, young or not, and goes on (Scanned), but Settled stops before the
// first River job younger than SettleQueued (by the database's clock).
// Once those are settled the walk reads them again from Settled, and by
// then every transaction that took an ID among them has ended. A pause over
// a burst of new jobs so shows them all waiting at once, and each queued
// job is read about twice, not once a look until it is settled. (SQLite
// has one writer: its IDs become visible in order, and every job is
// settled.)
func (db *DB) MarkQueuedWaiting(ctx context.Context, queue, kind string, w QueueWalk, limit, pages int, now time.Time) (QueueWalk, error) {
	w.Scanned = max(w.Scanned, w.Settled)
	// Read again what was passed while young, as far as it has settled.
	for ; pages > 0 && w.Settled < w.Scanned; pages-- {
		settled, scanned, err := db.markQueuedPage(ctx, queue, kind, w.Settled, limit, now)
		if err != nil {
			return w, err
		}
		if scanned == w.Settled {
			break // no queued job above Settled left to read again
		}
		w.Settled, w.Scanned = settled, max(w.Scanned, scanned)
		if settled != scanned {
			break // a job still settling: read again from there on a later look
		}
	}
	// Then on from the furthest job read.
	for ; pages > 0; pages-- {
		from := w.Scanned
		settled, scanned, err := db.markQueuedPage(ctx, queue, kind, from, limit, now)
		if err != nil {
			return w, err
		}
		if w.Settled == from {
			w.Settled = settled
		}
		w.Scanned = scanned
		if scanned == from {
			break
		}
	}
	return w, nil
}

// markQueuedPage is one page of MarkQueuedWaiting's walk, from the River
// job ID after: it returns the highest ID it read (after, if none) and the
// highest before the first young one (after, if the first is young).
func (db *DB) markQueuedPage(ctx context.Context, queue, kind string, after int64, limit int, now time.Time) (int64, int64, error) {
	jobID, old := `json_extract(args, '$.job_id')`, `1`
	if db.dialect.name == Postgres {
		jobID, old = `args->>'job_id'`, fmt.Sprintf(`created_at < now() - interval '%d milliseconds'`, SettleQueued.Milliseconds())
	}
	rows, err := db.r.QueryContext(ctx, `SELECT id, `+jobID+`, `+old+` FROM river_job
		WHERE id > $1 AND queue = $2 AND kind = $3 AND state IN ('available', 'scheduled', 'retryable')
		ORDER BY id LIMIT $4`, after, queue, kind, limit)
	if err != nil {
		return after, after, fmt.Errorf("list queued jobs: %w", err)
	}
	settledID, scannedID, young := after, after, false
	var ids []any
	for rows.Next() {
		var id int64
		var job *string
		var old bool
		if err := rows.Scan(&id, &job, &old); err != nil {
			rows.Close()
			return after, after, err
		}
		scannedID = id
		young = young || !old
		if !young {
			settledID = id
		}
		if job != nil {
			ids = append(ids, pub(*job))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return after, after, err
	}
	if len(ids) == 0 {
		return settledID, scannedID, nil
	}
	marks := make([]string, len(ids))
	for i := range ids {
		marks[i] = fmt.Sprintf("$%d", i+2)
	}
	args := append([]any{micros(now)}, ids...)
	if _, err := db.w.ExecContext(ctx, `UPDATE jobs SET state = 'waiting', updated_at = $1
		WHERE state = 'accepted' AND public_id IN (`+strings.Join(marks, ", ")+`)`, args...); err != nil {
		return after, after, fmt.Errorf("mark waiting: %w", err)
	}
	return settledID, scannedID, nil
}
