package ledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// AuditEntry is one append-only audit log entry: who did what to which
// object, through which route, from where. It carries IDs only: never text,
// never an external ID.
type AuditEntry struct {
	Tenant     string
	Actor      string
	Action     string
	ObjectType string
	ObjectID   string
	Detail     string
	Route      string // the route pattern ("GET /v1/jobs/{job_id}"), or the CLI command
	RemoteAddr string
	RequestID  string
	Now        time.Time
	// ID, PrevHash and Hash are set on entries read back; Audit ignores them.
	ID       int64
	PrevHash string
	Hash     string
}

// Audit appends an entry to the hash chain. There is no update or delete
// path. On a *sql.DB it runs in a transaction of its own; on a *sql.Tx it
// joins the caller's, which then holds the chain's head row until it ends —
// keep such transactions short, and append the audit entry last.
//
// Concurrent writers are serialized by the head row of audit_chain: the
// UPDATE that claims the next id takes its row lock (PostgreSQL, any number
// of processes) or runs under SQLite's single writer.
func Audit(ctx context.Context, q Querier, e AuditEntry) error {
	return AuditMany(ctx, q, []AuditEntry{e})
}

// AuditMany appends entries to the hash chain in their order, each exactly
// as Audit appends one, in three statements however many there are: the
// head row claims their IDs at once, the entries are written by multi-row
// inserts, and the head moves to the last entry's hash. On a *sql.DB it
// runs in a transaction of its own; on a *sql.Tx it joins the caller's,
// which holds the chain's head row from here until it ends.
func AuditMany(ctx context.Context, q Querier, entries []AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	db, ok := q.(*sql.DB)
	if !ok {
		return appendAudit(ctx, q, entries)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append audit entry: begin: %w", err)
	}
	if err := appendAudit(ctx, tx, entries); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append audit entry: commit: %w", err)
	}
	return nil
}

// auditInsertRows bounds one insert of appendAudit: 13 parameters a row,
// well under either dialect's limit on a statement's parameters.
const auditInsertRows = 200

func appendAudit(ctx context.Context, q Querier, entries []AuditEntry) error {
	var last int64
	var prev string
	err := q.QueryRowContext(ctx, `UPDATE audit_chain SET last_id = last_id + $1 WHERE id = 1 RETURNING last_id, last_hash`,
		len(entries)).Scan(&last, &prev)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("append audit entry: the audit chain has no head row (migration 0006)")
	}
	if err != nil {
		return fmt.Errorf("append audit entry: lock the chain: %w", err)
	}
	id := last - int64(len(entries))
	for chunk := range slices.Chunk(entries, auditInsertRows) {
		var b strings.Builder
		b.WriteString(`INSERT INTO audit_log (id, at, tenant_id, actor, action, object_type, object_id, detail,
			route, remote_addr, request_id, prev_hash, hash) VALUES `)
		args := make([]any, 0, 13*len(chunk))
		for i, e := range chunk {
			id++
			e.ID, e.PrevHash, e.Now = id, prev, time.UnixMicro(micros(e.Now)).UTC()
			h := auditHash(e)
			if i > 0 {
				b.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
				n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11, n+12, n+13)
			args = append(args, id, micros(e.Now), e.Tenant, e.Actor, e.Action, e.ObjectType, e.ObjectID, nullString(e.Detail),
				e.Route, e.RemoteAddr, e.RequestID, prev, h)
			prev = h
		}
		if _, err := q.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("append audit entry: %w", err)
		}
	}
	if _, err := q.ExecContext(ctx, `UPDATE audit_chain SET last_hash = $1 WHERE id = 1`, prev); err != nil {
		return fmt.Errorf("append audit entry: move the head: %w", err)
	}
	return nil
}

// auditHash is the SHA-256 (hex) of an entry's content and the previous
// row's hash: a JSON array, so no field can bleed into the next.
func auditHash(e AuditEntry) string {
	b, _ := json.Marshal([]any{e.ID, micros(e.Now), e.Tenant, e.Actor, e.Action, e.ObjectType, e.ObjectID, e.Detail,
		e.Route, e.RemoteAddr, e.RequestID, e.PrevHash})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Audit appends an entry in a transaction of its own.
func (db *DB) Audit(ctx context.Context, e AuditEntry) error { return Audit(ctx, db.w, e) }

const auditColumns = `id, at, tenant_id, actor, action, object_type, object_id, COALESCE(detail, ''),
	route, remote_addr, request_id, COALESCE(prev_hash, ''), COALESCE(hash, '')`

func scanAudit(rows *sql.Rows) (AuditEntry, bool, error) {
	var e AuditEntry
	var at int64
	var hash sql.NullString
	if err := rows.Scan(&e.ID, &at, &e.Tenant, &e.Actor, &e.Action, &e.ObjectType, &e.ObjectID, &e.Detail,
		&e.Route, &e.RemoteAddr, &e.RequestID, &e.PrevHash, &hash); err != nil {
		return e, false, err
	}
	e.Now, e.Hash = time.UnixMicro(at).UTC(), hash.String
	return e, hash.String != "", nil
}

// AuditEntries lists the audit log of a tenant, oldest first.
func (db *DB) AuditEntries(ctx context.Context, tenant string) ([]AuditEntry, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT `+auditColumns+` FROM audit_log WHERE tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		e, _, err := scanAudit(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ChainReport is the outcome of VerifyAuditChain.
type ChainReport struct {
	Checked   int    `json:"checked"`   // chained rows whose link and hash were checked
	Unchained int    `json:"unchained"` // rows written before the chain began (migration 0006)
	HeadID    int64  `json:"head_id"`
	HeadHash  string `json:"head_hash"` // record it elsewhere to anchor the chain
	// Broken is the first broken link; nil when the chain is intact.
	Broken *ChainBreak `json:"broken,omitempty"`
}

// ChainBreak is the first row at which the chain does not hold.
type ChainBreak struct {
	ID     int64  `json:"id"`
	Reason string `json:"reason"`
}

// VerifyAuditChain walks the audit log in id order and reports the first
// broken link: a row whose content no longer matches its hash (edited), a
// row whose prev_hash is not its predecessor's hash or a missing id
// (removed), or a head that names a row that is not the last (rows removed
// from the end). Rows appended while it runs are not checked.
func (db *DB) VerifyAuditChain(ctx context.Context) (*ChainReport, error) {
	rep := &ChainReport{}
	if err := db.w.QueryRowContext(ctx, `SELECT last_id, last_hash FROM audit_chain WHERE id = 1`).Scan(&rep.HeadID, &rep.HeadHash); err != nil {
		return nil, fmt.Errorf("read the audit chain head: %w", err)
	}
	rows, err := db.w.QueryContext(ctx, `SELECT `+auditColumns+` FROM audit_log WHERE id <= $1 ORDER BY id`, rep.HeadID)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	started := false
	var lastID int64
	lastHash := ""
	brk := func(id int64, format string, args ...any) {
		if rep.Broken == nil {
			rep.Broken = &ChainBreak{ID: id, Reason: fmt.Sprintf(format, args...)}
		}
	}
	for rows.Next() && rep.Broken == nil {
		e, chained, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("read audit entry: %w", err)
		}
		switch {
		case !chained && !started:
			rep.Unchained++
			lastID = e.ID
			continue
		case !chained:
			brk(e.ID, "the row has no hash: it was edited")
			continue
		}
		switch {
		case started && e.ID != lastID+1:
			brk(lastID+1, "row %d is missing: it was removed", lastID+1)
		case e.PrevHash != lastHash:
			brk(e.ID, "prev_hash is not the hash of the row before: a row before it was removed or edited")
		case auditHash(e) != e.Hash:
			brk(e.ID, "the row's content does not match its hash: it was edited")
		}
		started = true
		lastID, lastHash = e.ID, e.Hash
		rep.Checked++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if rep.Broken == nil && started && (lastID != rep.HeadID || lastHash != rep.HeadHash) {
		brk(lastID+1, "the chain's head names row %d, but the last row is %d: rows were removed from the end", rep.HeadID, lastID)
	}
	if rep.Broken == nil && !started && rep.HeadHash != "" {
		brk(rep.HeadID, "the chain's head names row %d, but no chained row is left: rows were removed", rep.HeadID)
	}
	return rep, nil
}

// AuditAll appends entries in one transaction: all or none.
func (db *DB) AuditAll(ctx context.Context, entries []AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	return db.InTx(ctx, func(tx *sql.Tx) error { return appendAudit(ctx, tx, entries) })
}
