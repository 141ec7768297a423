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

// Pause is one dispatch pause.
type Pause struct {
	Scope    string    `json:"scope"` // "all", "processor:ID" or "tenant:ID"
	Reason   string    `json:"reason"`
	PausedBy string    `json:"paused_by"`
	PausedAt time.Time `json:"paused_at"`
}

// ValidScope reports whether scope is "all", "processor:ID" or "tenant:ID".
func ValidScope(scope string) bool {
	if scope == "all" {
		return true
	}
	if strings.Contains(scope, "\n") {
		return false // LoadWork reads the scopes in force as one newline-separated value
	}
	kind, id, ok := strings.Cut(scope, ":")
	return ok && id != "" && (kind == "processor" || kind == "tenant")
}

// SetPause pauses dispatch for scope (or updates the reason of an existing
// pause), with its audit entry, in one transaction.
func (db *DB) SetPause(ctx context.Context, p Pause, tenant string) error {
	if !ValidScope(p.Scope) {
		return stet.Errorf(stet.EInvalid, "scope must be all, processor:ID or tenant:ID")
	}
	return db.InTx(ctx, func(tx *sql.Tx) error { return setPause(ctx, tx, p, tenant) })
}

func setPause(ctx context.Context, tx Querier, p Pause, tenant string) error {
	if !ValidScope(p.Scope) {
		return stet.Errorf(stet.EInvalid, "scope must be all, processor:ID or tenant:ID")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO dispatch_pauses (scope, reason, paused_by, paused_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (scope) DO UPDATE SET reason = excluded.reason, paused_by = excluded.paused_by`,
		p.Scope, p.Reason, p.PausedBy, micros(p.PausedAt)); err != nil {
		return fmt.Errorf("pause dispatch: %w", err)
	}
	return Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: p.PausedBy, Action: "dispatch.pause", ObjectType: "dispatch", ObjectID: p.Scope, Now: p.PausedAt})
}

// ClearPause resumes dispatch for scope. It returns stet.ErrNotFound (as
// ENotFound) if scope was not paused. Jobs waiting on it resume from their
// last durable stage at their next look.
func (db *DB) ClearPause(ctx context.Context, scope, actor, tenant string, now time.Time) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM dispatch_pauses WHERE scope = $1`, scope)
		if err != nil {
			return fmt.Errorf("resume dispatch: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("dispatch pause")
		}
		return Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: actor, Action: "dispatch.resume", ObjectType: "dispatch", ObjectID: scope, Now: now})
	})
}

// Pauses lists the dispatch pauses in force.
func (db *DB) Pauses(ctx context.Context) ([]Pause, error) {
	rows, err := db.w.QueryContext(ctx, `SELECT scope, reason, paused_by, paused_at FROM dispatch_pauses ORDER BY scope`)
	if err != nil {
		return nil, fmt.Errorf("list pauses: %w", err)
	}
	defer rows.Close()
	var out []Pause
	for rows.Next() {
		var p Pause
		var at int64
		if err := rows.Scan(&p.Scope, &p.Reason, &p.PausedBy, &at); err != nil {
			return nil, err
		}
		p.PausedAt = time.UnixMicro(at).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// ActivePause returns the pause that stops dispatch of a job of tenant to
// processorID, or nil.
func ActivePause(ctx context.Context, q Querier, tenant, processorID string) (*Pause, error) {
	var p Pause
	var at int64
	err := q.QueryRowContext(ctx, `SELECT scope, reason, paused_by, paused_at FROM dispatch_pauses
		WHERE scope IN ('all', $1, $2) ORDER BY scope LIMIT 1`, "processor:"+processorID, "tenant:"+tenant).
		Scan(&p.Scope, &p.Reason, &p.PausedBy, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	p.PausedAt = time.UnixMicro(at).UTC()
	return &p, nil
}

// MarkWaiting moves a job that no worker holds to waiting: dispatch is
// paused, so no attempt is claimed or spent.
func MarkWaiting(ctx context.Context, q Querier, jobID string, expected int64, now time.Time) error {
	_, err := q.ExecContext(ctx, `UPDATE jobs SET state = 'waiting', updated_at = $1
		WHERE public_id = $2 AND attempt = $3 AND state = 'accepted'`, micros(now), pub(jobID), expected)
	if err != nil {
		return fmt.Errorf("mark waiting: %w", err)
	}
	return nil
}
