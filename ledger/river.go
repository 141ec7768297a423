package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/stetlabs/stet"
)

// River's tables are reached through River's API, except here and in
// accept_pg.go, the one place each: Accept's set-based statements
// (acceptSetTx, acceptCommitted) insert a group's extract jobs with its
// deliveries (PostgreSQL);
// CancelWaitingJobs cancels waiting extract jobs in one statement
// (PostgreSQL); HeldByRiver and PendingRiverJobs read extract jobs by
// their args. The writes write what River's own statements write.

// RiverDriver returns River's driver for this database on the ledger's
// own pool, so stage results and River's job rows share each
// transaction: riversqlite for SQLite, riverdatabasesql (pgx through
// database/sql) for PostgreSQL.
func (db *DB) RiverDriver() riverdriver.Driver[*sql.Tx] {
	switch d := db.dialect.name; d {
	case Postgres:
		return riverdatabasesql.New(db.w)
	case SQLite:
		return sqliteRiver{riversqlite.New(db.w)}
	default:
		// Open makes no other: a new database must be wired here.
		panic(fmt.Sprintf("ledger: no River driver for %q", d))
	}
}

// sqliteRiver is River's SQLite driver without LISTEN/NOTIFY. SQLite has
// none: River's driver emulates it with a table, river_notification, that
// every insert writes to and a listener reads every 50 ms. Those twenty
// reads a second were the largest part of what an idle stet cost on
// SQLite. Without them River polls, as it does on PostgreSQL through
// database/sql: a producer finds new jobs at its fetch poll (the config's
// poll_interval, 200 ms by default) or when one of its jobs finishes, and
// a queue pause or resume made in this process reaches its producers at
// once. A SQLite ledger belongs to one process, so nothing else was
// listening.
type sqliteRiver struct{ *riversqlite.Driver }

func (sqliteRiver) SupportsListener() bool     { return false }
func (sqliteRiver) SupportsListenNotify() bool { return false }

// qCancelWaitingJobs cancels River jobs that are not running, in one
// statement, as River's JobCancel does to such a job: cancelled, finalized
// now, cancel_attempted_at in its metadata. River's statement also
// notifies, which only a running job's producer acts on.
const qCancelWaitingJobs = `UPDATE river_job SET state = 'cancelled', finalized_at = now(),
		metadata = jsonb_set(metadata, '{cancel_attempted_at}', $2::jsonb, true)
	WHERE id = ANY($1) AND state IN ('available', 'scheduled', 'retryable', 'pending') AND finalized_at IS NULL
	RETURNING id`

// CancelWaitingJobs cancels, inside tx, those of the River jobs ids that
// are waiting (not running, not finalized) where the database can do so in
// one statement, and returns which it cancelled. The caller cancels the
// others (a running job, one a producer claims meanwhile, or every one
// where nothing was cancelled here) with River's JobCancelTx.
func (db *DB) CancelWaitingJobs(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]bool, error) {
	done := map[int64]bool{}
	if db.dialect.name != Postgres || len(ids) == 0 {
		return done, nil
	}
	at, err := time.Now().UTC().MarshalJSON()
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, qCancelWaitingJobs, ids, string(at))
	if err != nil {
		return nil, fmt.Errorf("cancel river jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("cancel river jobs: %w", err)
		}
		done[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cancel river jobs: %w", err)
	}
	return done, nil
}

// qHeldByRiver reads the next $3 River extract jobs after River ID $1, in
// ID order, each with its ledger job when that job is held (waiting or
// blocked, no review record yet) and of tenant $2 (or any), and the River
// job pending (a running one is included: a worker about to snooze it;
// River cancels it when that execution ends). The page of River jobs is
// chosen first, by the kind index from $1 on (SQLite's river_job_kind is
// in ID order within a kind; PostgreSQL walks the primary key), and only
// its rows look up their ledger job by public ID (stet_ulid turns River's
// text argument into its stored form, on both dialects). A page therefore costs
// about $3 rows however many are held; asking for held jobs in the same
// WHERE let PostgreSQL's planner join every held job to every River job
// after $1 and sort them, for each page. `->>` reads River's args the same
// way on both dialects.
const qHeldByRiver = `SELECT rj.id, CASE WHEN j.id IS NULL THEN '' ELSE rj.job_id END, COALESCE(j.tenant_id, ''), COALESCE(j.state, ''),
		COALESCE(j.attempt, 0), COALESCE(j.failure_class, ''), COALESCE(j.processor_id, ''), COALESCE(j.extraction_version, ''),
		COALESCE(pv.hash, ''), COALESCE(j.parent_job_id IS NOT NULL, FALSE)
	FROM (SELECT id, state, args ->> 'job_id' AS job_id FROM river_job
			WHERE kind = 'stet_extract' AND id > $1 ORDER BY id LIMIT $3) rj
		LEFT JOIN jobs j ON j.public_id = stet_ulid(rj.job_id) AND rj.state IN ('available', 'scheduled', 'retryable', 'pending', 'running')
			AND j.state IN ('waiting', 'blocked') AND ($2 = '*any*' OR j.tenant_id = $2)
			AND NOT EXISTS (SELECT 1 FROM review_records r WHERE r.job_id = j.id)
		LEFT JOIN revisions v ON v.id = j.revision_id
		LEFT JOIN policy_versions pv ON pv.id = v.policy_version
	ORDER BY rj.id`

// RiverHeldJob is a held ledger job found by its River extract job.
type RiverHeldJob struct {
	HeldJob
	RiverID int64
}

// HeldByRiver reads one page of qHeldByRiver: the held jobs of tenant
// (AnyTenant: every tenant) among the next limit River extract jobs after
// River ID after, and the last River job read (after, when the page was
// empty: the end).
func (db *DB) HeldByRiver(ctx context.Context, tenant string, after int64, limit int) ([]RiverHeldJob, int64, error) {
	rows, err := db.r.QueryContext(ctx, qHeldByRiver, after, tenant, limit)
	if err != nil {
		return nil, after, fmt.Errorf("list held jobs by river job: %w", err)
	}
	defer rows.Close()
	var out []RiverHeldJob
	last := after
	for rows.Next() {
		var h RiverHeldJob
		var state, class string
		if err := rows.Scan(&h.RiverID, &h.ID, &h.TenantID, &state, &h.Attempt, &class, &h.ProcessorID, &h.ExtractionVersion, &h.PolicyHash, &h.Part); err != nil {
			return nil, after, fmt.Errorf("list held jobs by river job: %w", err)
		}
		last = h.RiverID
		if h.ID == "" {
			continue // not held, another tenant's, or the River job has ended
		}
		h.State, h.FailureClass = stet.JobState(state), stet.FailureClass(class)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("list held jobs by river job: %w", err)
	}
	return out, last, nil
}

// qPendingExtract finds a ledger job's pending River extract jobs inserted
// after River job $2 (the first pass saw the ones before), reading River's
// kind index from $2 on: the few inserted since, not every extract job.
const qPendingExtract = `SELECT id FROM river_job WHERE kind = 'stet_extract' AND id > $2 AND args ->> 'job_id' = $1
	AND state IN ('available', 'scheduled', 'retryable', 'pending', 'running')`

// PendingRiverJobs returns, inside tx, the River extract jobs of ledger
// job jobID inserted after River job after that have not ended.
func (db *DB) PendingRiverJobs(ctx context.Context, tx *sql.Tx, jobID string, after int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, qPendingExtract, jobID, after)
	if err != nil {
		return nil, fmt.Errorf("find river jobs of %s: %w", jobID, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("find river jobs of %s: %w", jobID, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find river jobs of %s: %w", jobID, err)
	}
	return ids, nil
}
