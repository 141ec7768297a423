package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stetlabs/stet"
)

// Closing the copies stet cannot delete itself (docs/design.md §5.5): an
// operator confirms with evidence that a provider's copy is gone, and a
// provider_retention task closes itself once the retention its processor
// declared has run out.

// ReasonExpired is the reason a provider_retention task closes itself
// with: the copy was held under the processor's declared retention, and
// that retention has ended.
const ReasonExpired = "expired_under_declared_retention"

// ReasonConfirmed is the reason of a task an operator confirmed done; the
// evidence and the actor are kept beside it.
const ReasonConfirmed = "confirmed by an operator"

// MaxEvidence is the longest evidence ConfirmTask keeps, in bytes.
const MaxEvidence = 2000

// ConfirmParams is an operator's confirmation that one copy of a deletion
// is gone.
type ConfirmParams struct {
	Tenant     string // the caller's tenant; AnyTenant for the CLI
	DeletionID string
	Copy       string // the task's copy, as GET /v1/deletions/{id} names it
	Actor      string
	// Evidence is what shows the copy is gone: a provider's ticket, a
	// support reply's reference. It is kept on the task and shown with
	// it, never logged or audited; it must not hold document text.
	Evidence string
	Now      time.Time
}

// ConfirmTask marks an unresolved task of a deletion done with the actor
// and the evidence, settles the deletion's state and audits it
// (deletion.confirm, the copy's kind and processor as the detail, never
// the evidence), all in one transaction. It returns the deletion as it now
// stands. An unknown deletion or copy (or another tenant's) is
// stet.ENotFound; a task still pending (its worker has it) or already done
// is stet.EConflict; evidence that is blank, too long or not plain text is
// stet.EInvalid.
func (db *DB) ConfirmTask(ctx context.Context, p ConfirmParams) (*stet.Deletion, error) {
	ev := strings.TrimSpace(p.Evidence)
	switch {
	case ev == "":
		return nil, &stet.Error{Code: stet.EInvalid, Message: "evidence is required: what shows the copy is gone (a provider's ticket or reference)"}
	case len(ev) > MaxEvidence:
		return nil, &stet.Error{Code: stet.EInvalid, Message: fmt.Sprintf("evidence is longer than %d bytes", MaxEvidence)}
	case !plainText(ev):
		return nil, &stet.Error{Code: stet.EInvalid, Message: "evidence must be UTF-8 text without control characters"}
	}
	if p.Tenant == "" {
		return nil, fmt.Errorf("confirm deletion task: empty tenant")
	}
	var d *stet.Deletion
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var tenant, state string
		err := tx.QueryRowContext(ctx, `SELECT d.tenant_id, t.state FROM deletion_tasks t JOIN deletions d ON d.id = t.deletion_id
			WHERE t.deletion_id = $1 AND t.copy = $2 AND ($3 = '*any*' OR d.tenant_id = $3)`, p.DeletionID, p.Copy, p.Tenant).Scan(&tenant, &state)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("deletion task")
		}
		if err != nil {
			return fmt.Errorf("read deletion task: %w", err)
		}
		switch stet.DeletionState(state) {
		case stet.DeletionUnresolved:
		case stet.DeletionDone:
			return &stet.Error{Code: stet.EConflict, Message: "the task is already done"}
		default:
			return &stet.Error{Code: stet.EConflict, Message: "the task is " + state + ": the deletion's worker still handles it"}
		}
		now := micros(p.Now)
		if _, err := tx.ExecContext(ctx, `UPDATE deletion_tasks SET state = 'done', reason = $1, done_at = $2, updated_at = $2,
				confirmed_by = $3, evidence = $4
			WHERE deletion_id = $5 AND copy = $6 AND state = 'unresolved'`,
			ReasonConfirmed, now, p.Actor, ev, p.DeletionID, p.Copy); err != nil {
			return fmt.Errorf("confirm deletion task: %w", err)
		}
		if _, err := FinishDeletion(ctx, tx, p.DeletionID, p.Now); err != nil {
			return err
		}
		if err := Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: p.Actor, Action: "deletion.confirm", ObjectType: "deletion",
			ObjectID: p.DeletionID, Detail: copyKind(p.Copy), Now: p.Now}); err != nil {
			return err
		}
		d, err = getDeletion(ctx, tx, p.Tenant, p.DeletionID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// copyKind is a copy's name without a provider's own ID:
// "provider_file:openai" for "provider_file:openai/file-abc".
func copyKind(c string) string {
	kind, _, _ := strings.Cut(c, "/")
	return kind
}

func plainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// CloseExpiredRetention closes, inside q, the provider_retention tasks
// whose declared retention ended at or before now: the provider no longer
// holds the copy by its own terms. Each is done with ReasonExpired, and its
// deletion's state is settled. It returns the deletions it settled.
func CloseExpiredRetention(ctx context.Context, q Querier, now time.Time) ([]string, error) {
	rows, err := q.QueryContext(ctx, `UPDATE deletion_tasks SET state = 'done', reason = $1, done_at = $2, updated_at = $2
		WHERE state = 'unresolved' AND copy LIKE '`+PrefixProviderRetention+`%' AND expires_at IS NOT NULL AND expires_at <= $2
		RETURNING deletion_id`, ReasonExpired, micros(now))
	if err != nil {
		return nil, fmt.Errorf("close expired retention tasks: %w", err)
	}
	seen := map[string]bool{}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("close expired retention tasks: %w", err)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("close expired retention tasks: %w", err)
	}
	for _, id := range ids {
		if _, err := FinishDeletion(ctx, q, id, now); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
