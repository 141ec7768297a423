package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Invariant names, numbered as in docs/design.md §6.
const (
	InvNoRecordAfterSLA  = "no_record_after_sla" // 1
	InvManyAuthoritative = "many_authoritative"  // 2
	InvHeldPastLease     = "held_past_lease"     // 3
	InvBatchNotApplied   = "batch_not_applied"   // 4
	InvBatchUnknown      = "batch_unknown"       // 5
	InvDeletionOverdue   = "deletion_overdue"    // 6
	InvPausedTooLong     = "paused_too_long"     // 7
	InvDeliveryFailed    = "delivery_failed"     // 8
)

// Violation is one broken invariant. It carries IDs only: never text, never
// the external ID.
type Violation struct {
	Invariant         int    `json:"invariant"`
	Name              string `json:"name"`
	TenantID          string `json:"tenant_id"`
	SourceID          string `json:"source_id"`
	ReportID          string `json:"report_id"`
	Revision          int64  `json:"revision,omitempty"`
	JobID             string `json:"job_id,omitempty"`
	Stage             string `json:"stage,omitempty"`
	ExtractionVersion string `json:"extraction_version,omitempty"`
	Count             int    `json:"count,omitempty"`
	Scope             string `json:"scope,omitempty"`    // a dispatch pause's scope (7), "destination:ID" (8)
	BatchID           string `json:"batch_id,omitempty"` // invariants 4 and 5
	ProcessorID       string `json:"processor_id,omitempty"`
	DeletionID        string `json:"deletion_id,omitempty"` // invariant 6
	Copy              string `json:"copy,omitempty"`        // invariant 6: the task's copy
}

// CheckParams tunes the invariant checks.
type CheckParams struct {
	Now        time.Time
	SLA        time.Duration // an accepted revision must have a record within this
	LeaseGrace time.Duration // a lease expired longer than this is a violation
	PauseLimit time.Duration // a dispatch pause older than this is a violation; 0: not checked
	// BatchSLA replaces SLA for batch-mode jobs (a provider batch may take
	// its whole 24 h window); default 26h.
	BatchSLA time.Duration
	// ApplyGrace: a batch ended at the provider longer ago than this must
	// have all its results applied; default 15m.
	ApplyGrace time.Duration
	Limit      int // at most this many violations per invariant
	// InFlight narrows invariant 1 to jobs still in flight (inFlightStates)
	// and the jobs of its open alerts: the periodic check between full
	// ones. A job that reached committed or manual got its record in the
	// same transaction, so only a defect or an edit outside stet leaves it
	// without one, and finding that means reading every such job.
	InFlight bool
}

// inFlightStates are the job states that wait for a review record;
// settledStates have one, written with the state. (cancelled needs none.)
var (
	inFlightStates = []string{"accepted", "waiting", "extracting", "extracted", "blocked", "batched"}
	settledStates  = []string{"committed", "manual"}
)

// CheckInvariants runs invariants 1–8 of docs/design.md §6 over every tenant, on
// the writer pool (the answer decides alerts): for the periodic check, stet
// check and an admin's GET /v1/invariants.
func (db *DB) CheckInvariants(ctx context.Context, p CheckParams) ([]Violation, error) {
	return db.checkInvariants(ctx, p, "")
}

// CheckTenantInvariants runs the same checks for one tenant: its own
// violations, filtered in SQL (so another tenant's many cannot crowd them
// out of the limit) — for 4 and 5 the batches holding its jobs, counting
// its items only — and the global pauses.
// An empty tenant is refused, never read as every tenant.
func (db *DB) CheckTenantInvariants(ctx context.Context, tenant string, p CheckParams) ([]Violation, error) {
	if tenant == "" {
		return nil, fmt.Errorf("check invariants: empty tenant")
	}
	return db.checkInvariants(ctx, p, tenant)
}

// checkInvariants checks every tenant when tenant is "", else one.
func (db *DB) checkInvariants(ctx context.Context, p CheckParams, tenant string) ([]Violation, error) {
	// and adds "AND <col> = $n" for a tenant check; n is the next placeholder.
	and := func(col string, n int) string {
		if tenant == "" {
			return ""
		}
		return fmt.Sprintf(" AND %s = $%d", col, n)
	}
	withTenant := func(args ...any) []any {
		if tenant == "" {
			return args
		}
		return append(args, tenant)
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	if p.BatchSLA <= 0 {
		p.BatchSLA = 26 * time.Hour
	}
	if p.ApplyGrace <= 0 {
		p.ApplyGrace = 15 * time.Minute
	}
	var out []Violation
	scan := func(inv int, name, query string, args ...any) error {
		rows, err := db.w.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		defer rows.Close()
		for rows.Next() {
			v := Violation{Invariant: inv, Name: name}
			if err := rows.Scan(&v.TenantID, &v.SourceID, reportPub(&v.ReportID), &v.Revision, jobPub(&v.JobID), &v.Stage, &v.ExtractionVersion, &v.Count); err != nil {
				return fmt.Errorf("check %s: %w", name, err)
			}
			out = append(out, v)
		}
		return rows.Err()
	}
	// 1: per state, the oldest jobs past the SLA with no record, by
	// jobs_state (state, created_at): each state reads at most Limit
	// entries past its cutoff, whatever the ledger's size. The cutoffs: a
	// sync job's SLA ($1), a batch job's longer one ($3, never later).
	branch := func(state string) string {
		return `SELECT * FROM (SELECT j.id, j.created_at FROM jobs j
			WHERE j.state = '` + state + `' AND j.created_at < $1 AND (j.mode = 'sync' OR j.created_at < $3)` + and("j.tenant_id", 4) + `
			  AND j.parent_job_id IS NULL AND NOT EXISTS (SELECT 1 FROM review_records r WHERE r.job_id = j.id)
			ORDER BY j.created_at LIMIT $2) AS s_` + state
	}
	inFlight := p.InFlight && tenant == "" // a tenant's check is on demand: always full
	states := inFlightStates
	if !inFlight {
		states = append(slices.Clip(states), settledStates...)
	}
	branches := make([]string, len(states))
	for i, st := range states {
		branches[i] = branch(st)
	}
	sync, batch := micros(p.Now.Add(-p.SLA)), micros(p.Now.Add(-max(p.BatchSLA, p.SLA)))
	err := scan(1, InvNoRecordAfterSLA, `SELECT j.tenant_id, j.source_id, (SELECT rp.public_id FROM reports rp WHERE rp.id = j.report_id),
			j.revision, j.public_id, j.state, j.extraction_version, 0
		FROM (`+strings.Join(branches, " UNION ALL ")+`) c JOIN jobs j ON j.id = c.id
		ORDER BY c.created_at, j.id LIMIT $2`, withTenant(sync, p.Limit, batch)...)
	if err != nil {
		return nil, err
	}
	if inFlight {
		// The jobs of open alerts, whatever their state: an alert stays
		// open until its job has a record, not until the job leaves the
		// states read above.
		if err := db.recheckOpenNoRecord(ctx, sync, batch, &out); err != nil {
			return nil, err
		}
	}
	// 2: a report with more than one authoritative record. The unique
	// index review_records_one_authoritative refuses a second one, so
	// while it is in place the answer is known without reading every
	// record; without it (dropped, or left invalid by a failed build) the
	// records are read.
	enforced, err := db.authoritativeEnforced(ctx)
	if err != nil {
		return nil, err
	}
	if !enforced {
		err = scan(2, InvManyAuthoritative, `SELECT g.tenant_id, g.source_id, (SELECT rp.public_id FROM reports rp WHERE rp.id = g.report_id),
			g.revision, NULL, '', '', g.n
		FROM (SELECT MIN(tenant_id) AS tenant_id, MIN(source_id) AS source_id, report_id, MAX(revision) AS revision, COUNT(*) AS n
			FROM review_records WHERE authoritative`+and("tenant_id", 2)+` GROUP BY report_id HAVING COUNT(*) > 1 LIMIT $1) g`,
			withTenant(p.Limit)...)
		if err != nil {
			return nil, err
		}
	}
	err = scan(3, InvHeldPastLease, `SELECT j.tenant_id, j.source_id, (SELECT rp.public_id FROM reports rp WHERE rp.id = j.report_id),
			j.revision, j.public_id, j.state, j.extraction_version, 0
		FROM jobs j WHERE j.state = 'extracting' AND j.lease_until < $1`+and("j.tenant_id", 3)+` ORDER BY j.lease_until LIMIT $2`,
		withTenant(micros(p.Now.Add(-p.LeaseGrace)), p.Limit)...)
	if err != nil {
		return nil, err
	}
	batches := func(inv int, name, query string, args ...any) error {
		rows, err := db.w.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		defer rows.Close()
		for rows.Next() {
			v := Violation{Invariant: inv, Name: name, TenantID: "*", Stage: "batch"}
			if tenant != "" {
				v.TenantID = tenant
			}
			if err := rows.Scan(&v.BatchID, &v.ProcessorID, &v.Count); err != nil {
				return fmt.Errorf("check %s: %w", name, err)
			}
			out = append(out, v)
		}
		return rows.Err()
	}
	// A provider batch holds the jobs of any tenant. For one tenant, 4
	// reports only the batches holding its unapplied items and 5 those
	// holding any of its items, each counting only its items, so neither
	// another tenant's batches nor its volume show.
	ownItems := func(n int, cond string) string {
		return fmt.Sprintf(`(SELECT COUNT(*) FROM batch_items i JOIN jobs j ON j.id = i.job_id
			WHERE i.batch_id = batches.id AND j.tenant_id = $%d%s)`, n, cond)
	}
	unapplied, total, ownUnapplied, ownAny := `item_count - applied_count`, `item_count`, "", ""
	if tenant != "" {
		unapplied, total = ownItems(4, " AND i.applied_at IS NULL"), ownItems(2, "")
		ownUnapplied, ownAny = " AND "+unapplied+" > 0", " AND "+total+" > 0"
	}
	// 4: ended at the provider, results not all applied (after a grace, or
	// at once when the provider's retention of the results has passed).
	err = batches(4, InvBatchNotApplied, `SELECT id, processor_id, `+unapplied+` FROM batches
		WHERE state IN ('completed', 'failed', 'expired', 'cancelled') AND applied_at IS NULL
		  AND (ended_at < $1 OR results_expire_at < $2)`+ownUnapplied+`
		ORDER BY created_at LIMIT $3`, withTenant(micros(p.Now.Add(-p.ApplyGrace)), micros(p.Now), p.Limit)...)
	if err != nil {
		return nil, err
	}
	err = batches(5, InvBatchUnknown, `SELECT id, processor_id, `+total+` FROM batches WHERE state = 'unknown'`+ownAny+`
		ORDER BY created_at LIMIT $1`, withTenant(p.Limit)...)
	if err != nil {
		return nil, err
	}
	// 6: a deletion task not done past its due time, or, for a copy a
	// provider holds, past the end of its declared retention.
	if err := db.checkDeletions(ctx, p, tenant, &out); err != nil {
		return nil, err
	}
	// 8: an outbound delivery failed for good (past its destination's
	// max_age), or is still pending past it (no sweep has run since).
	rows, err := db.w.QueryContext(ctx, `SELECT tenant_id, source_id, destination_id, COALESCE(report_id, ''), COALESCE(job_id, ''), attempts
		FROM outbox WHERE (state = 'failed' OR (state = 'pending' AND expires_at < $1))`+and("tenant_id", 3)+`
		ORDER BY created_at LIMIT $2`, withTenant(micros(p.Now), p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("check %s: %w", InvDeliveryFailed, err)
	}
	for rows.Next() {
		v := Violation{Invariant: 8, Name: InvDeliveryFailed, Stage: "deliver"}
		var dest string
		if err := rows.Scan(&v.TenantID, &v.SourceID, &dest, &v.ReportID, &v.JobID, &v.Count); err != nil {
			rows.Close()
			return nil, fmt.Errorf("check %s: %w", InvDeliveryFailed, err)
		}
		v.Scope = "destination:" + dest
		out = append(out, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check %s: %w", InvDeliveryFailed, err)
	}
	if p.PauseLimit > 0 {
		// A tenant sees the global pauses and its own, never another's.
		own := ""
		if tenant != "" {
			own = ` AND (scope NOT LIKE 'tenant:%' OR scope = 'tenant:' || $3)`
		}
		rows, err := db.w.QueryContext(ctx, `SELECT scope FROM dispatch_pauses WHERE paused_at < $1`+own+` ORDER BY scope LIMIT $2`,
			withTenant(micros(p.Now.Add(-p.PauseLimit)), p.Limit)...)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", InvPausedTooLong, err)
		}
		defer rows.Close()
		for rows.Next() {
			v := Violation{Invariant: 7, Name: InvPausedTooLong, TenantID: "*"}
			if err := rows.Scan(&v.Scope); err != nil {
				return nil, err
			}
			if t, ok := strings.CutPrefix(v.Scope, "tenant:"); ok {
				v.TenantID = t
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkDeletions adds invariant 6's violations, of every tenant when
// tenant is "", else of that one: a task not done past its due time, or
// past the expiry of the copy it names — except a provider_retention
// task, which closes itself at its expiry (CloseExpiredRetention).
func (db *DB) checkDeletions(ctx context.Context, p CheckParams, tenant string, out *[]Violation) error {
	args := []any{micros(p.Now), p.Limit}
	own := ""
	if tenant != "" {
		own = " AND d.tenant_id = $3"
		args = append(args, tenant)
	}
	rows, err := db.w.QueryContext(ctx, `SELECT d.tenant_id, d.source_id, d.report_id, d.id, t.copy
		FROM deletion_tasks t JOIN deletions d ON d.id = t.deletion_id
		WHERE t.state <> 'done' AND ((t.expires_at IS NULL AND t.due_at < $1)
			OR (t.expires_at < $1 AND t.copy NOT LIKE '`+PrefixProviderRetention+`%'))`+own+`
		ORDER BY t.due_at LIMIT $2`, args...)
	if err != nil {
		return fmt.Errorf("check %s: %w", InvDeletionOverdue, err)
	}
	defer rows.Close()
	for rows.Next() {
		v := Violation{Invariant: 6, Name: InvDeletionOverdue, Stage: "deletion"}
		if err := rows.Scan(&v.TenantID, &v.SourceID, &v.ReportID, &v.DeletionID, &v.Copy); err != nil {
			return fmt.Errorf("check %s: %w", InvDeletionOverdue, err)
		}
		*out = append(*out, v)
	}
	return rows.Err()
}

// recheckOpenNoRecord adds invariant 1's violations among the jobs of its
// open alerts, each read by its key. It reads every open alert, not only
// the check's limit of them: SyncAlerts resolves an open alert the check
// did not report.
func (db *DB) recheckOpenNoRecord(ctx context.Context, sync, batch int64, out *[]Violation) error {
	rows, err := db.w.QueryContext(ctx, `SELECT alert_key FROM alerts WHERE resolved_at IS NULL AND name = $1 ORDER BY first_seen, id`, InvNoRecordAfterSLA)
	if err != nil {
		return fmt.Errorf("check %s: open alerts: %w", InvNoRecordAfterSLA, err)
	}
	var jobs []string
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			rows.Close()
			return fmt.Errorf("check %s: open alerts: %w", InvNoRecordAfterSLA, err)
		}
		// ViolationKey: name|report|job|…
		if f := strings.Split(key, "|"); len(f) > 2 && f[2] != "" {
			jobs = append(jobs, f[2])
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check %s: open alerts: %w", InvNoRecordAfterSLA, err)
	}
	seen := map[string]bool{}
	for _, v := range *out {
		if v.Invariant == 1 {
			seen[v.JobID] = true
		}
	}
	for _, id := range jobs {
		if seen[id] {
			continue
		}
		v := Violation{Invariant: 1, Name: InvNoRecordAfterSLA}
		err := db.w.QueryRowContext(ctx, `SELECT j.tenant_id, j.source_id, (SELECT rp.public_id FROM reports rp WHERE rp.id = j.report_id),
				j.revision, j.public_id, j.state, j.extraction_version
			FROM jobs j WHERE j.public_id = $1 AND j.state <> 'cancelled' AND j.created_at < $2 AND (j.mode = 'sync' OR j.created_at < $3)
			  AND j.parent_job_id IS NULL AND NOT EXISTS (SELECT 1 FROM review_records r WHERE r.job_id = j.id)`, pub(id), sync, batch).
			Scan(&v.TenantID, &v.SourceID, reportPub(&v.ReportID), &v.Revision, jobPub(&v.JobID), &v.Stage, &v.ExtractionVersion)
		if errors.Is(err, sql.ErrNoRows) {
			continue // resolved, or its job is gone
		}
		if err != nil {
			return fmt.Errorf("check %s: %w", InvNoRecordAfterSLA, err)
		}
		seen[v.JobID] = true
		*out = append(*out, v)
	}
	return nil
}

// authoritativeEnforced reports whether the unique index that allows one
// authoritative record per report is in place and valid.
func (db *DB) authoritativeEnforced(ctx context.Context) (bool, error) {
	q := `SELECT COUNT(*) FROM pragma_index_list('review_records') WHERE name = 'review_records_one_authoritative' AND "unique" = 1`
	if db.dialect.name == Postgres {
		q = `SELECT COUNT(*) FROM pg_index i WHERE i.indexrelid = to_regclass('review_records_one_authoritative')
			AND i.indrelid = to_regclass('review_records') AND i.indisunique AND i.indisvalid`
	}
	var n int
	if err := db.w.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return false, fmt.Errorf("check %s: read the unique index: %w", InvManyAuthoritative, err)
	}
	return n == 1, nil
}
