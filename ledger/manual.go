package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
)

// HeldJob is a job that waits or is blocked: what an operator's manual
// conversion needs to decide on it (IDs and codes only).
type HeldJob struct {
	ID                string
	TenantID          string
	State             stet.JobState
	Attempt           int64
	FailureClass      stet.FailureClass // the job's last class; empty if it only waited on a pause
	ProcessorID       string            // the processor of its last claim, if any
	ExtractionVersion string
	PolicyHash        string
	// Part says the job is one part of a profile with parts.
	Part bool
}

// qHeldJobs lists held jobs in ID order through jobs_held (migration
// 0016), one page at a time. %s is where SQLite is told to use that index
// (its planner, without statistics, would pick jobs_state and sort every
// held job for each page); PostgreSQL's planner chooses it on its own.
const qHeldJobs = `SELECT j.public_id, j.tenant_id, j.state, j.attempt, COALESCE(j.failure_class, ''), COALESCE(j.processor_id, ''),
		j.extraction_version, pv.hash, j.parent_job_id IS NOT NULL
	FROM jobs j %s JOIN revisions v ON v.id = j.revision_id JOIN policy_versions pv ON pv.id = v.policy_version
	WHERE j.state IN ('waiting', 'blocked') AND ($1 = '*any*' OR j.tenant_id = $1)
		AND j.id > COALESCE((SELECT a.id FROM jobs a WHERE a.public_id = $2), 0)
		AND NOT EXISTS (SELECT 1 FROM review_records r WHERE r.job_id = j.id)
	ORDER BY j.id LIMIT $3`

// HeldJobs lists up to limit waiting or blocked jobs without a review
// record, in ID order after the ID after ("" from the start), of one tenant
// (AnyTenant for every tenant: callers decide who may ask for that; an
// empty tenant is refused). Each page reads about limit rows of jobs_held,
// however many jobs are held.
func (db *DB) HeldJobs(ctx context.Context, tenant, after string, limit int) ([]HeldJob, error) {
	if tenant == "" {
		return nil, fmt.Errorf("list held jobs: empty tenant")
	}
	q := fmt.Sprintf(qHeldJobs, "")
	if db.dialect.name == SQLite {
		q = fmt.Sprintf(qHeldJobs, "INDEXED BY jobs_held")
	}
	rows, err := db.r.QueryContext(ctx, q, tenant, blob(pub(after)), limit)
	if err != nil {
		return nil, fmt.Errorf("list held jobs: %w", err)
	}
	defer rows.Close()
	var out []HeldJob
	for rows.Next() {
		var h HeldJob
		var state, class string
		if err := rows.Scan(jobPub(&h.ID), &h.TenantID, &state, &h.Attempt, &class, &h.ProcessorID, &h.ExtractionVersion, &h.PolicyHash, &h.Part); err != nil {
			return nil, fmt.Errorf("list held jobs: %w", err)
		}
		h.State, h.FailureClass = stet.JobState(state), stet.FailureClass(class)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list held jobs: %w", err)
	}
	return out, nil
}

const qManualFromHeld = `UPDATE jobs SET state = 'manual', lease_until = NULL, committed_at = $1, updated_at = $1
	WHERE public_id = $2 AND attempt = $3 AND state IN ('waiting', 'blocked')
	RETURNING id, report_id, tenant_id, source_id, revision, COALESCE(failure_class, ''), parent_job_id`

// manualFromHeld turns a waiting or blocked job into a manual review record
// carrying the job's failure class, fenced on its attempt token. A job that
// moved since it was read (claimed, resumed, converted) is
// stet.ErrLeaseLost and is left alone. A part's job settles its part
// instead (parts.go).
func (db *DB) manualFromHeld(ctx context.Context, tx Querier, jobID string, token int64, now time.Time) (string, error) {
	var p recordParams
	var class string
	var parent sql.NullInt64
	err := tx.QueryRowContext(ctx, qManualFromHeld, micros(now), pub(jobID), token).Scan(&p.jobKey, &p.reportKey, &p.tenantID, &p.sourceID, &p.revision, &class, &parent)
	if errors.Is(err, sql.ErrNoRows) {
		return "", stet.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("manual from held job: %w", err)
	}
	if parent.Valid {
		return db.settlePart(ctx, tx, parent.Int64, now)
	}
	p.jobID, p.kind, p.failureClass, p.now = jobID, stet.RecordManual, stet.FailureClass(class), now
	return insertRecord(ctx, tx, p)
}

// HeldRef names a held job to convert and the attempt token it was read
// with.
type HeldRef struct {
	JobID string
	Token int64
	Part  bool // HeldJob.Part
}

// qManualFromHeldPage is migration 0017's function: a page of conversions
// in one statement.
const qManualFromHeldPage = `SELECT out_job, out_record, out_report, out_tenant, out_source FROM stet_manual_from_held($1, $2, $3, $4)`

// ManualFromHeldPage converts a page of held jobs inside tx, in the page's
// order, each exactly as manualFromHeld does (fenced on its token; a job
// that moved since it was read is left out). It returns the review record
// of each job it converted, by job ID. On PostgreSQL the conversions are
// one statement (stet_manual_from_held, migration 0017) and the outbox
// events follow, each source's destinations read once; on SQLite, where a
// statement costs no round trip, each job is converted in turn.
func (db *DB) ManualFromHeldPage(ctx context.Context, tx Querier, page []HeldRef, now time.Time) (map[string]string, error) {
	out := make(map[string]string, len(page))
	one := func(h HeldRef) error {
		recordID, err := db.manualFromHeld(ctx, tx, h.JobID, h.Token, now)
		if errors.Is(err, stet.ErrLeaseLost) {
			return nil
		}
		if err == nil {
			out[h.JobID] = recordID
		}
		return err
	}
	if db.dialect.name != Postgres {
		for _, h := range page {
			if err := one(h); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// Parts settle one by one (their parent's record waits for every
	// part); the rest go in one statement.
	var whole []HeldRef
	for _, h := range page {
		if !h.Part {
			whole = append(whole, h)
		} else if err := one(h); err != nil {
			return nil, err
		}
	}
	page = whole
	if len(page) == 0 {
		return out, nil
	}
	jobs, tokens, records := make([]string, len(page)), make([]int64, len(page)), make([]string, len(page))
	for i, h := range page {
		jobs[i], tokens[i], records[i] = h.JobID, h.Token, stet.NewID(prefixRecord, now)
	}
	rows, err := tx.QueryContext(ctx, qManualFromHeldPage, pubs(jobs), tokens, pubs(records), micros(now))
	if err != nil {
		return nil, fmt.Errorf("manual from held jobs: %w", err)
	}
	var events []recordEvent
	for rows.Next() {
		e := recordEvent{event: EventCommitted, now: now}
		if err := rows.Scan(jobPub(&e.jobID), recordPub(&e.recordID), reportPub(&e.reportID), &e.tenantID, &e.sourceID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("manual from held jobs: %w", err)
		}
		events = append(events, e)
		out[e.jobID] = e.recordID
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("manual from held jobs: %w", err)
	}
	dests := map[string][]destRow{}
	for _, e := range events {
		d, ok := dests[e.sourceID]
		if !ok {
			if d, err = configuredDestinations(ctx, tx, e.sourceID); err != nil {
				return nil, err
			}
			dests[e.sourceID] = d
		}
		if _, err := enqueueRecordEventTo(ctx, tx, e, d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ManualParams asks for an operator's manual conversion: every waiting or
// blocked job in Scope becomes a manual review record, for the approved
// human process while dispatch is paused. Who may name which scope is the
// caller's decision (the API's roles; the CLI runs on the host).
type ManualParams struct {
	Scope string // "all", "processor:ID" or "tenant:ID"
	// The audit entry of each converted job: who, with which reason (an
	// operator's words, never document text), through which route.
	Actor       string
	AuditTenant string // "*" for an admin or the CLI
	Reason      string
	Route       string
	RemoteAddr  string
	RequestID   string
}
