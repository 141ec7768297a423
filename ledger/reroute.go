package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Boundary decisions (docs/design.md §5.8): a blocked job waits for a
// person. An operator's decision moves it to a processor the policy now
// in force permits; the decision is kept with the job, and the job's next
// attempts go to that processor.

// BoundaryDecision is one operator's decision to move a blocked job to
// another processor.
type BoundaryDecision struct {
	JobID      string
	Actor      string
	Reason     string // the operator's, as given (a ticket, an approval)
	From, To   string // the processor the job was blocked for; the one it moves to
	PolicyID   string // the policy in force that permits To
	PolicyHash string
	At         time.Time
}

// BlockedJob is a job a reroute's scope names.
type BlockedJob struct {
	ID, TenantID         string
	State                stet.JobState
	PolicyID, PolicyHash string // the policy recorded at acceptance
	Processor            string // the processor the gate blocked it for
	Reason               string // the gate's reason code
}

// ScopeJobs reads the jobs a reroute's scope names, of tenant (AnyTenant:
// every tenant's): job:ID (that job, whatever its state: the caller says
// why it cannot move), policy:ID (the blocked jobs accepted under that
// policy) or processor:ID (the jobs blocked for that processor); at most
// limit, oldest first. An unknown job is stet.ENotFound, a malformed
// scope stet.EInvalid.
func (db *DB) ScopeJobs(ctx context.Context, tenant, scope string, limit int) ([]BlockedJob, error) {
	kind, id, _ := strings.Cut(scope, ":")
	var where string
	var arg any = id
	switch {
	case id == "":
		return nil, errScope
	case kind == "job":
		b := pub(id)
		if b == nil {
			return nil, notFound("job")
		}
		where, arg = "j.public_id = $1", b
	case kind == "policy":
		where = "pv.policy_id = $1 AND j.state = 'blocked'"
	case kind == "processor":
		where = "j.blocked_processor = $1 AND j.state = 'blocked'"
	default:
		return nil, errScope
	}
	rows, err := db.w.QueryContext(ctx, `SELECT j.public_id, j.tenant_id, j.state, pv.policy_id, pv.hash,
			COALESCE(j.blocked_processor, ''), COALESCE(j.blocked_reason, '')
		FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN policy_versions pv ON pv.id = v.policy_version
		WHERE `+where+` AND ($2 = '*any*' OR j.tenant_id = $2)
		ORDER BY j.id LIMIT $3`, arg, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("read blocked jobs: %w", err)
	}
	defer rows.Close()
	var out []BlockedJob
	for rows.Next() {
		var b BlockedJob
		var state string
		if err := rows.Scan(jobPub(&b.ID), &b.TenantID, &state, &b.PolicyID, &b.PolicyHash, &b.Processor, &b.Reason); err != nil {
			return nil, fmt.Errorf("read blocked jobs: %w", err)
		}
		b.State = stet.JobState(state)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read blocked jobs: %w", err)
	}
	if kind == "job" && len(out) == 0 {
		return nil, notFound("job")
	}
	return out, nil
}

var errScope = &stet.Error{Code: stet.EInvalid, Message: "scope must be job:ID, policy:ID or processor:ID"}

// ErrNotBlocked is Reroute's answer for a job no longer blocked (another
// operator, or stet resume, moved it first): nothing was written.
var ErrNotBlocked = errors.New("the job is not blocked")

// Reroute records d inside tx and moves its job from blocked to accepted,
// routed to d.To: the extract stage sends its next attempts there (the
// caller enqueues that stage in tx). A job no longer blocked is
// ErrNotBlocked.
func Reroute(ctx context.Context, tx Querier, d BoundaryDecision) error {
	var key int64
	err := tx.QueryRowContext(ctx, `UPDATE jobs SET state = 'accepted', routed_to = $1, blocked_processor = NULL, blocked_reason = NULL,
			updated_at = $2
		WHERE public_id = $3 AND state = 'blocked' RETURNING id`, d.To, micros(d.At), pub(d.JobID)).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotBlocked
	}
	if err != nil {
		return fmt.Errorf("reroute job: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO boundary_decisions (job_id, actor, reason, from_processor, to_processor, policy_id, policy_hash, decided_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, key, d.Actor, d.Reason, d.From, d.To, d.PolicyID, d.PolicyHash, micros(d.At)); err != nil {
		return fmt.Errorf("record boundary decision: %w", err)
	}
	return nil
}

// boundaryDecisions returns the boundary decisions of the job with key
// jobKey (public ID jobID), oldest first.
func boundaryDecisions(ctx context.Context, q Querier, jobKey int64, jobID string) ([]BoundaryDecision, error) {
	rows, err := q.QueryContext(ctx, `SELECT actor, reason, from_processor, to_processor, policy_id, policy_hash, decided_at
		FROM boundary_decisions WHERE job_id = $1 ORDER BY id`, jobKey)
	if err != nil {
		return nil, fmt.Errorf("read boundary decisions: %w", err)
	}
	defer rows.Close()
	var out []BoundaryDecision
	for rows.Next() {
		d := BoundaryDecision{JobID: jobID}
		var at int64
		if err := rows.Scan(&d.Actor, &d.Reason, &d.From, &d.To, &d.PolicyID, &d.PolicyHash, &at); err != nil {
			return nil, fmt.Errorf("read boundary decisions: %w", err)
		}
		d.At = time.UnixMicro(at).UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}

// RerouteParams is an operator's boundary decision over a scope of blocked
// jobs (stet reroute, POST /v1/dispatch/reroute).
type RerouteParams struct {
	Tenant string // the caller's tenant; AnyTenant for an admin or the CLI
	Scope  string // job:ID | policy:ID | processor:ID
	To     string // the processor to move them to
	Reason string
	Actor  string
	DryRun bool
}

// Rerouted is a reroute's answer: the jobs moved, or on a dry run the jobs
// that would be.
type Rerouted struct {
	Scope  string        `json:"scope"`
	To     string        `json:"to"`
	DryRun bool          `json:"dry_run"`
	Jobs   []ReroutedJob `json:"jobs"`
}

// ReroutedJob is one job of a reroute and the processor it was blocked for.
type ReroutedJob struct {
	JobID string `json:"job_id"`
	From  string `json:"from"`
}
