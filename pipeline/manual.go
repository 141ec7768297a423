package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// manualBatch bounds one conversion transaction.
const manualBatch = 200

// Manual converts the waiting and blocked jobs of p.Scope into manual
// review records carrying each job's failure class, in transactions of at
// most manualBatch jobs. Each conversion is fenced on the job's attempt
// token (a job a worker claimed meanwhile is left alone), cancels the job's
// pending River extract job in the same transaction so it never runs, and
// appends its audit entry there too. A job that already has a review record
// is skipped, so running it again converts nothing new. It returns how many
// jobs it converted.
//
// It works in two passes, each reading a page at a time in index order, so
// a million held jobs cost a million rows read, not a million per page:
// first the pending River extract jobs in River ID order, with the held
// ledger job each one is for (that River job is the one cancelled); then
// the held jobs the first pass did not convert (a blocked job's River job
// has ended), from jobs_held, each looking only at River jobs inserted
// after the first pass ended. A River job the passes do not see (a ledger
// job's second pending one, or one for a job that was not held when the
// first pass read it) stays pending; when it runs it finds the job manual
// and does nothing.
func (p *Pipeline) Manual(ctx context.Context, mp ledger.ManualParams) (int, error) {
	if !ledger.ValidScope(mp.Scope) {
		return 0, stet.Errorf(stet.EInvalid, "scope must be all, processor:ID or tenant:ID")
	}
	kind, id, _ := strings.Cut(mp.Scope, ":")
	tenant, processorID := ledger.AnyTenant, ""
	switch kind {
	case "tenant":
		tenant = id
	case "processor":
		processorID = id
	}
	inScope := func(held []heldJob) ([]heldJob, error) {
		var todo []heldJob
		for _, h := range held {
			r, err := p.manualRoute(ctx, h.HeldJob)
			if err != nil {
				return nil, err
			}
			if processorID == "" || r.processor == processorID {
				todo = append(todo, h)
			}
		}
		return todo, nil
	}
	converted := 0
	// lastRiver is the first pass's cursor. When a page finds no River
	// extract job after it, the pass has seen every one up to it, and the
	// second pass looks only at those inserted since.
	var lastRiver int64
	for {
		held, last, err := p.heldByRiver(ctx, tenant, lastRiver)
		if err != nil {
			return converted, err
		}
		if last == lastRiver {
			break // no River job after lastRiver
		}
		lastRiver = last
		todo, err := inScope(held)
		if err != nil {
			return converted, err
		}
		n, err := p.convertHeld(ctx, todo, 0, mp)
		converted += n
		if err != nil {
			return converted, err
		}
	}
	for after := ""; ; {
		jobs, err := p.db.HeldJobs(ctx, tenant, after, manualBatch)
		if err != nil || len(jobs) == 0 {
			return converted, err
		}
		after = jobs[len(jobs)-1].ID
		held := make([]heldJob, len(jobs))
		for i, j := range jobs {
			held[i] = heldJob{HeldJob: j}
		}
		todo, err := inScope(held)
		if err != nil {
			return converted, err
		}
		n, err := p.convertHeld(ctx, todo, lastRiver, mp)
		converted += n
		if err != nil {
			return converted, err
		}
	}
}

// heldJob is a held ledger job and, from the first pass, the pending River
// extract job it was found by (riverID 0 from the second).
type heldJob struct {
	ledger.HeldJob
	riverID int64
}

// manualRoute is the gate's decision for an operator's manual conversion:
// routeManual, for the processor the gate would send the job to, carrying
// the job's failure class.
func (p *Pipeline) manualRoute(ctx context.Context, h ledger.HeldJob) (route, error) {
	recorded, err := p.recordedPolicy(ctx, h.PolicyHash)
	if err != nil {
		return route{}, err
	}
	id := p.chooseProcessor(recorded, p.policies[recorded.ID], h.ProcessorID, h.FailureClass)
	return route{kind: routeManual, processor: id, class: h.FailureClass, reason: reasonOperatorManual, recorded: recorded}, nil
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
		COALESCE(pv.hash, '')
	FROM (SELECT id, state, args ->> 'job_id' AS job_id FROM river_job
			WHERE kind = 'stet_extract' AND id > $1 ORDER BY id LIMIT $3) rj
		LEFT JOIN jobs j ON j.public_id = stet_ulid(rj.job_id) AND rj.state IN ('available', 'scheduled', 'retryable', 'pending', 'running')
			AND j.state IN ('waiting', 'blocked') AND ($2 = '*any*' OR j.tenant_id = $2)
			AND NOT EXISTS (SELECT 1 FROM review_records r WHERE r.job_id = j.id)
		LEFT JOIN revisions v ON v.id = j.revision_id
		LEFT JOIN policy_versions pv ON pv.id = v.policy_version
	ORDER BY rj.id`

// heldByRiver reads one page of qHeldByRiver: the held jobs found, and the
// last River job read (after, when the page was empty: the end).
func (p *Pipeline) heldByRiver(ctx context.Context, tenant string, after int64) ([]heldJob, int64, error) {
	rows, err := p.db.Reader().QueryContext(ctx, qHeldByRiver, after, tenant, manualBatch)
	if err != nil {
		return nil, after, fmt.Errorf("list held jobs by river job: %w", err)
	}
	defer rows.Close()
	var out []heldJob
	last := after
	for rows.Next() {
		var h heldJob
		var state, class string
		if err := rows.Scan(&h.riverID, &h.ID, &h.TenantID, &state, &h.Attempt, &class, &h.ProcessorID, &h.ExtractionVersion, &h.PolicyHash); err != nil {
			return nil, after, fmt.Errorf("list held jobs by river job: %w", err)
		}
		last = h.riverID
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

// convertHeld converts one batch in one transaction and returns how many
// jobs it converted: the conversions first (ledger.ManualFromHeldPage, one
// statement on PostgreSQL), then each converted job's River extract jobs
// cancelled (the one it was found by, or those after riverSeen; on
// PostgreSQL those not running in one statement), then the
// audit entries, one per conversion in the batch's order, appended last.
func (p *Pipeline) convertHeld(ctx context.Context, jobs []heldJob, riverSeen int64, mp ledger.ManualParams) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	page := make([]ledger.HeldRef, len(jobs))
	for i, h := range jobs {
		page[i] = ledger.HeldRef{JobID: h.ID, Token: h.Attempt}
	}
	n := 0
	err := p.inTx(ctx, "manual.convert", func(ctx context.Context, tx *sql.Tx) error {
		now := p.clock.Now()
		records, err := p.db.ManualFromHeldPage(ctx, tx, page, now)
		if err != nil {
			return err
		}
		converted := make([]heldJob, 0, len(records))
		entries := make([]ledger.AuditEntry, 0, len(records))
		for _, h := range jobs {
			recordID, ok := records[h.ID]
			if !ok {
				continue // claimed, resumed or converted since it was read
			}
			delete(records, h.ID) // a job listed twice (two River jobs) converts once
			converted = append(converted, h)
			entries = append(entries, ledger.AuditEntry{Tenant: cmpOr(mp.AuditTenant, "*"), Actor: mp.Actor,
				Action: "job.manual", ObjectType: "job", ObjectID: h.ID,
				Detail: manualDetail(mp.Scope, h.FailureClass, recordID, mp.Reason),
				Route:  mp.Route, RemoteAddr: mp.RemoteAddr, RequestID: mp.RequestID, Now: now})
		}
		if err := p.cancelExtracts(ctx, tx, converted, riverSeen); err != nil {
			return err
		}
		n = len(entries)
		return ledger.AuditMany(ctx, tx, entries)
	})
	if err != nil {
		return 0, fmt.Errorf("convert held jobs to manual: %w", err)
	}
	return n, nil
}

// qCancelWaitingExtract cancels, on PostgreSQL, a batch's River extract
// jobs that are not running, in one statement, as River's JobCancel does
// to such a job: cancelled, finalized now, cancel_attempted_at in its
// metadata. River's statement also notifies, which only a running job's
// producer acts on. A job that is running (a worker about to snooze it),
// or that a producer claims meanwhile, is not returned and goes to River's
// JobCancelTx.
const qCancelWaitingExtract = `UPDATE river_job SET state = 'cancelled', finalized_at = now(),
		metadata = jsonb_set(metadata, '{cancel_attempted_at}', $2::jsonb, true)
	WHERE id = ANY($1) AND state IN ('available', 'scheduled', 'retryable', 'pending') AND finalized_at IS NULL
	RETURNING id`

// cancelExtracts cancels the River extract jobs of a batch's converted
// jobs inside tx. On PostgreSQL those found by their River job that are
// not running are cancelled in one statement (a call per job was most of
// a batch's round trips); every other goes to cancelExtract.
func (p *Pipeline) cancelExtracts(ctx context.Context, tx *sql.Tx, jobs []heldJob, riverSeen int64) error {
	done := map[int64]bool{}
	var ids []int64
	for _, h := range jobs {
		if h.riverID != 0 {
			ids = append(ids, h.riverID)
		}
	}
	if p.db.Dialect() == ledger.Postgres && len(ids) > 0 {
		at, err := time.Now().UTC().MarshalJSON()
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, qCancelWaitingExtract, ids, string(at))
		if err != nil {
			return fmt.Errorf("cancel river jobs: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("cancel river jobs: %w", err)
			}
			done[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cancel river jobs: %w", err)
		}
	}
	for _, h := range jobs {
		if h.riverID != 0 && done[h.riverID] {
			continue
		}
		if err := p.cancelExtract(ctx, tx, h, riverSeen); err != nil {
			return err
		}
	}
	return nil
}

// cancelExtract cancels h's pending River extract jobs inside tx: the one
// it was found by, or else any inserted after River job riverSeen.
func (p *Pipeline) cancelExtract(ctx context.Context, tx *sql.Tx, h heldJob, riverSeen int64) error {
	if h.riverID != 0 {
		if _, err := p.river.JobCancelTx(ctx, tx, h.riverID); err != nil {
			return fmt.Errorf("cancel river job of %s: %w", h.ID, err)
		}
		return nil
	}
	var ids []int64
	rows, err := tx.QueryContext(ctx, qPendingExtract, h.ID, riverSeen)
	if err != nil {
		return fmt.Errorf("find river jobs of %s: %w", h.ID, err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("find river jobs of %s: %w", h.ID, err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find river jobs of %s: %w", h.ID, err)
	}
	for _, id := range ids {
		if _, err := p.river.JobCancelTx(ctx, tx, id); err != nil {
			return fmt.Errorf("cancel river job of %s: %w", h.ID, err)
		}
	}
	return nil
}

func manualDetail(scope string, class stet.FailureClass, recordID, reason string) string {
	d := "scope=" + scope + " review_record=" + recordID
	if class != "" {
		d += " failure_class=" + string(class)
	}
	if reason != "" {
		d += " reason=" + reason
	}
	return d
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
