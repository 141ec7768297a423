package ledger

import (
	"cmp"
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

// AuditOutcome is how the request an audit row records ended.
type AuditOutcome string

// Audit outcomes.
const (
	// AuditOK: the request was served (a read answered, a change made).
	AuditOK AuditOutcome = "ok"
	// AuditDenied: the request was refused (401, 403, another tenant's 404).
	AuditDenied AuditOutcome = "denied"
)

// AuditOutcomes lists every outcome; Audit refuses any other.
var AuditOutcomes = []AuditOutcome{AuditOK, AuditDenied}

// AuditRequest is what every audit row of a request records about it: the
// route pattern (or the CLI command), the caller's address and the request
// ID stet answered with.
type AuditRequest struct {
	Route      string
	RemoteAddr string
	RequestID  string
}

type auditRequestKey struct{}

// WithAuditRequest returns ctx carrying req: every audit row appended under
// it (by Audit, AuditMany, AuditAll or a ledger call that audits its own
// change: a decision, a pause, a deletion, a UI session) takes from req the
// route, remote address and request ID it does not set itself.
func WithAuditRequest(ctx context.Context, req AuditRequest) context.Context {
	return context.WithValue(ctx, auditRequestKey{}, req)
}

// withRequest fills e's blank request fields from ctx, and a blank outcome
// with AuditOK.
func withRequest(ctx context.Context, e AuditEntry) AuditEntry {
	if req, ok := ctx.Value(auditRequestKey{}).(AuditRequest); ok {
		e.Route = cmp.Or(e.Route, req.Route)
		e.RemoteAddr = cmp.Or(e.RemoteAddr, req.RemoteAddr)
		e.RequestID = cmp.Or(e.RequestID, req.RequestID)
	}
	if e.Outcome == "" {
		e.Outcome = AuditOK
	}
	return e
}

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
	// Outcome is AuditOK when blank. Rows written before migration 0023
	// have none.
	Outcome AuditOutcome
	Now     time.Time
	// ID, PrevHash and Hash are set on entries read back; Audit ignores
	// them. Count is set by AuditRows: how many times a rolled-up event
	// (AuditRollup) happened; 0 for every other row.
	ID       int64
	PrevHash string
	Hash     string
	Count    int64
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
// as Audit appends one (blank request fields taken from ctx, see
// WithAuditRequest), in three statements however many there are: the
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
		_, err := appendAudit(ctx, q, entries)
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append audit entry: begin: %w", err)
	}
	if _, err := appendAudit(ctx, tx, entries); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append audit entry: commit: %w", err)
	}
	return nil
}

// auditInsertRows bounds one insert of appendAudit: 14 parameters a row,
// well under either dialect's limit on a statement's parameters.
const auditInsertRows = 200

// appendAudit appends entries and returns the last one's id.
func appendAudit(ctx context.Context, q Querier, entries []AuditEntry) (int64, error) {
	var last int64
	var prev string
	err := q.QueryRowContext(ctx, `UPDATE audit_chain SET last_id = last_id + $1 WHERE id = 1 RETURNING last_id, last_hash`,
		len(entries)).Scan(&last, &prev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("append audit entry: the audit chain has no head row (migration 0006)")
	}
	if err != nil {
		return 0, fmt.Errorf("append audit entry: lock the chain: %w", err)
	}
	id := last - int64(len(entries))
	for chunk := range slices.Chunk(entries, auditInsertRows) {
		var b strings.Builder
		b.WriteString(`INSERT INTO audit_log (id, at, tenant_id, actor, action, object_type, object_id, detail,
			route, remote_addr, request_id, outcome, prev_hash, hash) VALUES `)
		args := make([]any, 0, 14*len(chunk))
		for i, e := range chunk {
			id++
			e = withRequest(ctx, e)
			if !slices.Contains(AuditOutcomes, e.Outcome) {
				return 0, fmt.Errorf("append audit entry: unknown outcome %q", e.Outcome)
			}
			e.ID, e.PrevHash, e.Now = id, prev, time.UnixMicro(micros(e.Now)).UTC()
			h := auditHash(e)
			if i > 0 {
				b.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
				n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11, n+12, n+13, n+14)
			args = append(args, id, micros(e.Now), e.Tenant, e.Actor, e.Action, e.ObjectType, e.ObjectID, nullString(e.Detail),
				e.Route, e.RemoteAddr, e.RequestID, string(e.Outcome), prev, h)
			prev = h
		}
		if _, err := q.ExecContext(ctx, b.String(), args...); err != nil {
			return 0, fmt.Errorf("append audit entry: %w", err)
		}
	}
	if _, err := q.ExecContext(ctx, `UPDATE audit_chain SET last_hash = $1 WHERE id = 1`, prev); err != nil {
		return 0, fmt.Errorf("append audit entry: move the head: %w", err)
	}
	return last, nil
}

// auditHash is the SHA-256 (hex) of an entry's content and the previous
// row's hash: a JSON array, so no field can bleed into the next. A row
// written since migration 0023 always has an outcome, and its hash covers
// it (the array is one longer); a row written before has none and keeps the
// hash it was written with. Blanking a new row's outcome, or setting an old
// row's, changes which array is hashed, so the row no longer matches.
func auditHash(e AuditEntry) string {
	fields := []any{e.ID, micros(e.Now), e.Tenant, e.Actor, e.Action, e.ObjectType, e.ObjectID, e.Detail,
		e.Route, e.RemoteAddr, e.RequestID, e.PrevHash}
	if e.Outcome != "" {
		fields = append(fields, string(e.Outcome))
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Audit appends an entry in a transaction of its own.
func (db *DB) Audit(ctx context.Context, e AuditEntry) error { return Audit(ctx, db.w, e) }

const auditColumns = `id, at, tenant_id, actor, action, object_type, object_id, COALESCE(detail, ''),
	route, remote_addr, request_id, outcome, COALESCE(prev_hash, ''), COALESCE(hash, '')`

func scanAudit(rows *sql.Rows) (AuditEntry, bool, error) {
	var e AuditEntry
	var at int64
	var outcome string
	var hash sql.NullString
	if err := rows.Scan(&e.ID, &at, &e.Tenant, &e.Actor, &e.Action, &e.ObjectType, &e.ObjectID, &e.Detail,
		&e.Route, &e.RemoteAddr, &e.RequestID, &outcome, &e.PrevHash, &hash); err != nil {
		return e, false, err
	}
	e.Now, e.Hash, e.Outcome = time.UnixMicro(at).UTC(), hash.String, AuditOutcome(outcome)
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
	return db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := appendAudit(ctx, tx, entries)
		return err
	})
}

// AuditRollup records an event that may repeat many times a minute (a
// flood of badly signed deliveries) as one row per key: the first time key
// is seen it appends e to the chain with a count of 1, and every later time
// it adds 1 to that row's count and appends nothing. The caller puts the
// minute in key. The count is kept beside the chain, in audit_counts
// (migration 0023), whose rows a trigger lets only grow: the chain proves
// the first occurrence, its hash does not cover the count.
func (db *DB) AuditRollup(ctx context.Context, key string, e AuditEntry) error {
	var err error
	for range 3 {
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `UPDATE audit_counts SET hits = hits + 1 WHERE rollup_key = $1`, key)
			if err != nil {
				return fmt.Errorf("count audit entry: %w", err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				return nil
			}
			id, err := appendAudit(ctx, tx, []AuditEntry{e})
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO audit_counts (audit_id, rollup_key, hits) VALUES ($1, $2, 1)`, id, key); err != nil {
				return fmt.Errorf("count audit entry: %w", err)
			}
			return nil
		})
		// A concurrent first occurrence won the key: count on its row.
		if err == nil || !db.dialect.isUnique(err) && !db.dialect.isRetryable(err) {
			return err
		}
	}
	return err
}

// MaxAuditPage is the most rows one page of AuditRows holds.
const MaxAuditPage = 1000

// AuditFilter selects rows of the audit log for AuditRows.
type AuditFilter struct {
	// Tenant is the tenant whose rows are read: AnyTenant for every
	// tenant's (an admin's or the CLI's read); an empty tenant is refused.
	Tenant string
	// Object keeps the rows about this object: its ID, or the
	// "sha256:<hex>" of it a denied request records.
	Object  string
	Since   time.Time // rows at or after; zero: from the first
	After   int64     // the cursor: the last id of the previous page
	Through int64     // the last id to read (AuditHead); 0: no bound
	Limit   int       // 1..MaxAuditPage; default 100
}

// AuditHead is the id of the audit log's last row, 0 when it is empty: a
// reader that audits its own read first lists up to it.
func (db *DB) AuditHead(ctx context.Context) (int64, error) {
	var id int64
	if err := db.w.QueryRowContext(ctx, `SELECT last_id FROM audit_chain WHERE id = 1`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the audit chain head: %w", err)
	}
	return id, nil
}

// AuditRows reads a page of the audit log in chain (id) order, and the
// cursor of the next page (0 after the last). A row written before
// migration 0023 has no stored outcome; it is read as AuditDenied for a
// denied.* or web.denied action and AuditOK otherwise.
func (db *DB) AuditRows(ctx context.Context, f AuditFilter) ([]AuditEntry, int64, error) {
	if f.Tenant == "" {
		return nil, 0, fmt.Errorf("read audit log: empty tenant")
	}
	if f.Limit <= 0 || f.Limit > MaxAuditPage {
		f.Limit = 100
	}
	after := f.After
	if !f.Since.IsZero() && after <= 0 {
		// The first page starts at the first row at or after since (by the
		// index on at), so the rows before it are not read one by one.
		var first sql.NullInt64
		if err := db.r.QueryRowContext(ctx, `SELECT MIN(id) FROM audit_log WHERE at >= $1`, micros(f.Since)).Scan(&first); err != nil {
			return nil, 0, fmt.Errorf("read audit log: %w", err)
		}
		if !first.Valid {
			return nil, 0, nil
		}
		after = first.Int64 - 1
	}
	args := []any{after}
	where := []string{"a.id > $1"}
	add := func(cond string, v ...any) {
		ph := make([]any, len(v))
		for i := range v {
			args = append(args, v[i])
			ph[i] = len(args)
		}
		where = append(where, fmt.Sprintf(cond, ph...))
	}
	if !f.Since.IsZero() {
		add("a.at >= $%d", micros(f.Since))
	}
	if f.Through > 0 {
		add("a.id <= $%d", f.Through)
	}
	if f.Tenant != AnyTenant {
		add("a.tenant_id = $%d", f.Tenant)
	}
	if f.Object != "" {
		sum := sha256.Sum256([]byte(f.Object))
		add("a.object_id IN ($%d, $%d)", f.Object, "sha256:"+hex.EncodeToString(sum[:]))
	}
	args = append(args, f.Limit+1)
	rows, err := db.r.QueryContext(ctx, `SELECT a.id, a.at, a.tenant_id, a.actor, a.action, a.object_type, a.object_id, COALESCE(a.detail, ''),
			a.route, a.remote_addr, a.request_id, a.outcome, COALESCE(c.hits, 0)
		FROM audit_log a LEFT JOIN audit_counts c ON c.audit_id = a.id
		WHERE `+strings.Join(where, " AND ")+fmt.Sprintf(` ORDER BY a.id LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var outcome string
		if err := rows.Scan(&e.ID, &at, &e.Tenant, &e.Actor, &e.Action, &e.ObjectType, &e.ObjectID, &e.Detail,
			&e.Route, &e.RemoteAddr, &e.RequestID, &outcome, &e.Count); err != nil {
			return nil, 0, fmt.Errorf("read audit log: %w", err)
		}
		e.Now, e.Outcome = time.UnixMicro(at).UTC(), AuditOutcome(outcome)
		if e.Outcome == "" {
			e.Outcome = AuditOK
			if strings.HasPrefix(e.Action, "denied.") || e.Action == "web.denied" {
				e.Outcome = AuditDenied
			}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read audit log: %w", err)
	}
	var next int64
	if len(out) > f.Limit {
		out = out[:f.Limit]
		next = out[len(out)-1].ID
	}
	return out, next, nil
}
