package ledger

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet/seal"
)

// RekeyParams runs a rekey (stet rekey): every data key not wrapped by the
// sealing (first) key is rewrapped by it, and every plaintext value of a
// sealed column (written before encryption was on) is sealed.
type RekeyParams struct {
	Batch int // rows per transaction; default 200
	Actor string
	Now   func() time.Time
	// Progress, when set, is told after each batch how many rows are done.
	Progress func(done int)
}

// RekeyResult counts what a rekey did.
type RekeyResult struct {
	Rewrapped int // data keys (and the blind-index key) rewrapped by the sealing key
	Sealed    int // rows whose plaintext columns were sealed
	Blinded   int // rows whose plain hash became its blind-index value
}

// sealSpec is a table with sealed columns, how its rows find their report,
// and what their values are bound to (crypt.go).
type sealSpec struct {
	table  string
	cols   []string
	key    string // the row's key column (the table is aliased t)
	report string // SQL for the row's report key
	// bind is SQL for the two values a row's binding is made of: its
	// legacy ID (or '') and a stored value; binding makes the binding of
	// them and the report's public ID.
	bind    string
	binding func(reportID, legacy string, stored []byte) string
}

var sealSpecs = []sealSpec{
	{"revisions", []string{"text", "metadata"}, "t.id", "t.report_id", "COALESCE(t.legacy_id, ''), t.content_sha256",
		func(reportID, legacy string, content []byte) string {
			return RevisionBinding(legacy, reportID, hex.EncodeToString(content))
		}},
	{"artifacts", []string{"raw", "output"}, "t.job_id", "(SELECT j.report_id FROM jobs j WHERE j.id = t.job_id)",
		"COALESCE(t.legacy_id, ''), (SELECT j.public_id FROM jobs j WHERE j.id = t.job_id)",
		func(_, legacy string, job []byte) string {
			id, _ := formatPub(prefixJob, job)
			return ArtifactID(legacy, id)
		}},
	{"review_records", []string{"classification", "note"}, "t.id", "t.report_id", "'', t.public_id",
		func(_, _ string, record []byte) string {
			id, _ := formatPub(prefixRecord, record)
			return id
		}},
	{"decisions", []string{"classification", "note"}, "t.id", "t.report_id", "'', (SELECT r.public_id FROM review_records r WHERE r.id = t.record_id)",
		func(_, _ string, record []byte) string {
			id, _ := formatPub(prefixRecord, record)
			return id
		}},
	{"reports", []string{"external_id"}, "t.id", "t.id", "'', t.public_id",
		func(reportID, _ string, _ []byte) string { return reportID }},
}

// column is the sealed column c of s as its values are bound (crypt.go):
// a decision's classification and note are bound as its record's are, so
// that one binding reads them all.
func (s sealSpec) column(c string) string {
	if s.table == "decisions" {
		return "review_records." + c
	}
	return s.table + "." + c
}

// plaintextWhere selects the rows of s with a value not yet sealed (its
// bit in the row's sealed column clear: the i-th of s.cols has bit 1<<i),
// of a report not deleted (a deleted report's data key must never come
// back).
func (s sealSpec) plaintextWhere() string {
	var or []string
	for i, c := range s.cols {
		or = append(or, fmt.Sprintf("(t.%s IS NOT NULL AND (t.sealed & %d) = 0)", c, 1<<i))
	}
	return "(" + strings.Join(or, " OR ") + ") AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.id = " + s.report + " AND r.deleted_at IS NOT NULL)"
}

// RekeyPending counts what a rekey has left to do: data keys wrapped by
// another key than the sealing one, and rows with plaintext values.
func (db *DB) RekeyPending(ctx context.Context) (int, error) {
	if db.keys == nil {
		return 0, ErrNoKeyring
	}
	var total int
	if err := db.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM report_keys WHERE key_id <> $1`, db.keys.SealingKeyID()).Scan(&total); err != nil {
		return 0, fmt.Errorf("count data keys: %w", err)
	}
	for _, s := range sealSpecs {
		var n int
		if err := db.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+s.table+` t WHERE `+s.plaintextWhere()).Scan(&n); err != nil {
			return 0, fmt.Errorf("count plaintext %s: %w", s.table, err)
		}
		total += n
	}
	var n int
	if err := db.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM index_key WHERE key_id <> $1`, db.keys.SealingKeyID()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the blind-index key: %w", err)
	}
	total += n
	if db.index != nil && db.mixed.Load() {
		n, err := db.blindPending(ctx)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Rekey rewraps every data key under the sealing key and seals every
// plaintext value, in bounded batches, each its own short transaction: it
// is resumable (a rerun carries on where one stopped, since done rows no
// longer match) and safe beside a running stet (each update is fenced on
// the value it read). The start and the end are audited. After it, the
// other keys wrap nothing and may be removed from the config.
func (db *DB) Rekey(ctx context.Context, p RekeyParams) (RekeyResult, error) {
	var res RekeyResult
	if db.keys == nil {
		return res, ErrNoKeyring
	}
	if p.Batch <= 0 {
		p.Batch = 200
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	sealing := db.keys.SealingKeyID()
	audit := func(action, detail string) error {
		return Audit(ctx, db.w, AuditEntry{Tenant: "*", Actor: p.Actor, Action: action, ObjectType: "encryption_key",
			ObjectID: sealing, Detail: detail, Route: "stet rekey", Now: p.Now()})
	}
	if err := audit("encryption.rekey.start", ""); err != nil {
		return res, err
	}
	progress := func() {
		if p.Progress != nil {
			p.Progress(res.Rewrapped + res.Sealed + res.Blinded)
		}
	}
	for after := int64(0); ; {
		n, last, err := db.rewrapBatch(ctx, sealing, after, p.Batch, p.Now())
		res.Rewrapped += n
		if err != nil {
			return res, err
		}
		progress()
		if last == 0 {
			break
		}
		after = last
	}
	n, err := db.rewrapIndexKey(ctx, sealing, p.Now())
	res.Rewrapped += n
	if err != nil {
		return res, err
	}
	// The hashes before the plaintext: a revision's text is sealed bound
	// to its content hash as stored, the blind one.
	if db.index != nil && db.mixed.Load() {
		if _, err := db.convertHashes(ctx, p.Batch, p.Now, func(n int) { res.Blinded += n; progress() }); err != nil {
			return res, err
		}
	}
	for _, s := range sealSpecs {
		after := int64(0)
		for {
			n, last, err := db.sealBatch(ctx, s, after, p.Batch, p.Now())
			res.Sealed += n
			if err != nil {
				return res, err
			}
			progress()
			if last == 0 {
				break
			}
			after = last
		}
	}
	return res, audit("encryption.rekey", fmt.Sprintf("rewrapped=%d sealed=%d blinded=%d", res.Rewrapped, res.Sealed, res.Blinded))
}

// rewrapIndexKey rewraps the blind-index key under the sealing key when
// another key wraps it. It returns 1 when it did.
func (db *DB) rewrapIndexKey(ctx context.Context, sealing string, now time.Time) (int, error) {
	var w seal.WrappedKey
	err := db.w.QueryRowContext(ctx, `SELECT key_id, wrapped FROM index_key WHERE id = 1 AND key_id <> $1`, sealing).Scan(&w.KeyID, &w.Wrapped)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the blind-index key: %w", err)
	}
	w.DataKeyID = "index"
	nw, err := db.keys.RewrapIndexKey(w)
	if err != nil {
		return 0, fmt.Errorf("rewrap the blind-index key: %w", err)
	}
	res, err := db.w.ExecContext(ctx, `UPDATE index_key SET key_id = $1, wrapped = $2, rewrapped_at = $3
		WHERE id = 1 AND key_id = $4 AND wrapped = $5`, nw.KeyID, nw.Wrapped, micros(now), w.KeyID, w.Wrapped)
	if err != nil {
		return 0, fmt.Errorf("store the rewrapped blind-index key: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// rewrapBatch rewraps up to limit data keys not wrapped by sealing, of
// reports after the report key after (in primary key order, so a run reads
// the table once). It returns the last report key read, 0 when none is left.
func (db *DB) rewrapBatch(ctx context.Context, sealing string, after int64, limit int, now time.Time) (int, int64, error) {
	done, last := 0, int64(0)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		done, last = 0, 0
		rows, err := tx.QueryContext(ctx, `SELECT k.report_id, rp.public_id, k.data_key_id, k.key_id, k.wrapped
			FROM report_keys k JOIN reports rp ON rp.id = k.report_id
			WHERE k.report_id > $1 AND k.key_id <> $2 ORDER BY k.report_id LIMIT $3`, after, sealing, limit)
		if err != nil {
			return fmt.Errorf("read data keys: %w", err)
		}
		type row struct {
			key    int64
			report string
			w      seal.WrappedKey
		}
		var todo []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.key, reportPub(&r.report), &r.w.DataKeyID, &r.w.KeyID, &r.w.Wrapped); err != nil {
				rows.Close()
				return fmt.Errorf("read data keys: %w", err)
			}
			todo = append(todo, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read data keys: %w", err)
		}
		for _, r := range todo {
			last = r.key
			nw, err := db.keys.Rewrap(r.report, r.w)
			if err != nil {
				return fmt.Errorf("rewrap the data key of report %s: %w", r.report, err)
			}
			res, err := tx.ExecContext(ctx, `UPDATE report_keys SET key_id = $1, wrapped = $2, rewrapped_at = $3
				WHERE report_id = $4 AND key_id = $5 AND wrapped = $6`, nw.KeyID, nw.Wrapped, micros(now), r.key, r.w.KeyID, r.w.Wrapped)
			if err != nil {
				return fmt.Errorf("store rewrapped data key: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				done++
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return done, last, nil
}

// sealBatch seals the plaintext values of up to limit rows of s after the
// row key after. It returns the last row key read, 0 when none is left.
func (db *DB) sealBatch(ctx context.Context, s sealSpec, after int64, limit int, now time.Time) (int, int64, error) {
	done, last := 0, int64(0)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		done, last = 0, 0
		rows, err := tx.QueryContext(ctx, `SELECT `+s.key+`, (SELECT rp.public_id FROM reports rp WHERE rp.id = `+s.report+`), `+s.bind+`,
				t.sealed, t.`+strings.Join(s.cols, ", t.")+` FROM `+s.table+` t
			WHERE `+s.key+` > $1 AND `+s.plaintextWhere()+` ORDER BY `+s.key+` LIMIT $2`, after, limit)
		if err != nil {
			return fmt.Errorf("read plaintext %s: %w", s.table, err)
		}
		type row struct {
			key             int64
			report, binding string
			sealed          int
			vals            []sql.NullString
		}
		var todo []row
		for rows.Next() {
			r := row{vals: make([]sql.NullString, len(s.cols))}
			var legacy string
			var stored []byte
			dest := []any{&r.key, reportPub(&r.report), &legacy, &stored, &r.sealed}
			for i := range r.vals {
				dest = append(dest, &r.vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("read plaintext %s: %w", s.table, err)
			}
			r.binding = s.binding(r.report, legacy, stored)
			todo = append(todo, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read plaintext %s: %w", s.table, err)
		}
		for _, r := range todo {
			last = r.key
			dk, err := db.writeKey(ctx, tx, r.report, now)
			if err != nil {
				return err
			}
			var set, fence []string
			var args []any
			bits := 0
			for i, c := range s.cols {
				v := r.vals[i]
				if !v.Valid || r.sealed&(1<<i) != 0 {
					continue
				}
				bits |= 1 << i
				sv, err := sealStored(dk, s.column(c), r.binding, v)
				if err != nil {
					return err
				}
				args = append(args, sv, v)
				set = append(set, fmt.Sprintf("%s = $%d", c, len(args)-1))
				fence = append(fence, fmt.Sprintf("%s = $%d", c, len(args)))
			}
			// The values and their bits together, fenced on the values read
			// and on their bits still clear.
			set = append(set, fmt.Sprintf("sealed = sealed | %d", bits))
			fence = append(fence, fmt.Sprintf("(sealed & %d) = 0", bits))
			args = append(args, r.key)
			res, err := tx.ExecContext(ctx, `UPDATE `+s.table+` SET `+strings.Join(set, ", ")+
				fmt.Sprintf(` WHERE %s = $%d AND `, strings.TrimPrefix(s.key, "t."), len(args))+strings.Join(fence, " AND "), args...)
			if err != nil {
				return fmt.Errorf("seal %s: %w", s.table, err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				done++
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return done, last, nil
}
