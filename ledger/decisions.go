package ledger

// Decisions as rows, and reopening a decided record (docs/design.md §17).
// Decide (read.go) writes a decision's row beside the record's own
// decision columns, which hold the latest; Reopen puts a decided record
// back to pending and keeps every row.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// readDecisions reads the decisions on record r, oldest first, their
// sealed values opened.
func (db *DB) readDecisions(ctx context.Context, q Querier, r *stet.ReviewRecord) ([]stet.RecordDecision, error) {
	rows, err := q.QueryContext(ctx, `SELECT decision, classification, note, actor, decided_at, sealed FROM decisions
		WHERE record_id = `+recordKeySQL("$1")+` ORDER BY id`, pub(r.ID))
	if err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	type row struct {
		d           stet.RecordDecision
		class, note sql.NullString
		sealed      int
	}
	var rs []row
	for rows.Next() {
		var x row
		var decision string
		var at int64
		if err := rows.Scan(&decision, &x.class, &x.note, &x.d.Actor, &at, &x.sealed); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read decisions: %w", err)
		}
		x.d.Decision, x.d.At = stet.Decision(decision), time.UnixMicro(at).UTC()
		rs = append(rs, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	o := db.opener(q)
	out := make([]stet.RecordDecision, 0, len(rs))
	for _, x := range rs {
		c, err := o.open(ctx, r.ReportID, colClassification, r.ID, x.class, x.sealed)
		if err != nil {
			return nil, fmt.Errorf("read decision: %w", err)
		}
		n, err := o.open(ctx, r.ReportID, colNote, r.ID, x.note, x.sealed)
		if err != nil {
			return nil, fmt.Errorf("read decision: %w", err)
		}
		if c.Valid {
			x.d.Classification = json.RawMessage(c.String)
		}
		x.d.Note = n.String
		out = append(out, x.d)
	}
	return out, nil
}

// ReopenParams is an operator's reopening of a decided record.
type ReopenParams struct {
	Tenant   string
	RecordID string
	Actor    string
	// Reason is the operator's words, kept in the audit log; never
	// document text.
	Reason string
	Now    time.Time
	// Route, RemoteAddr and RequestID describe the API request, for the
	// audit log; empty from the CLI.
	Route, RemoteAddr, RequestID string
}

// Reopen puts a decided record of p.Tenant back to pending: its decision
// columns are cleared, its decisions' rows stay, destinations get
// record.reopened (and record.decided again at the next decision), and
// the audit log says who and why. A record that is not decided is a
// conflict (EConflict), one of a deleted report gone (ErrGone).
func (db *DB) Reopen(ctx context.Context, p ReopenParams) (*stet.ReviewRecord, error) {
	if strings.TrimSpace(p.Reason) == "" {
		return nil, stet.Errorf(stet.EInvalid, "a reopen needs a reason")
	}
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var state string
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT rr.state, rp.deleted_at FROM review_records rr JOIN reports rp ON rp.id = rr.report_id
			WHERE rr.public_id = $1 AND rr.tenant_id = $2`, pub(p.RecordID), p.Tenant).Scan(&state, &deleted)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("review record")
		}
		if err != nil {
			return fmt.Errorf("read review record: %w", err)
		}
		if deleted.Valid {
			return ErrGone
		}
		var reopens int
		err = tx.QueryRowContext(ctx, `UPDATE review_records SET state = 'pending', decision = NULL, decided_by = NULL, decided_at = NULL,
				note = NULL, sealed = sealed & 1, reopens = reopens + 1
			WHERE public_id = $1 AND state = 'decided' RETURNING reopens`, pub(p.RecordID)).Scan(&reopens)
		if errors.Is(err, sql.ErrNoRows) {
			return stet.Errorf(stet.EConflict, "review record %s is not decided: only a decided record can be reopened", p.RecordID)
		}
		if err != nil {
			return fmt.Errorf("reopen: %w", err)
		}
		if err := enqueueDecided(ctx, tx, p.RecordID, EventReopened, reopens, p.Now); err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{Tenant: p.Tenant, Actor: p.Actor, Action: "review.reopen", ObjectType: "review_record",
			ObjectID: p.RecordID, Detail: "reason=" + p.Reason, Route: p.Route, RemoteAddr: p.RemoteAddr, RequestID: p.RequestID, Now: p.Now})
	})
	if err != nil {
		return nil, err
	}
	return db.GetReviewPrimary(ctx, p.Tenant, p.RecordID)
}
