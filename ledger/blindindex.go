package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet/seal"
)

// The blind index. With encryption on, a hash that a guessed value could be
// confirmed against — a report's identity hash (of its external ID), a
// revision's content SHA-256, a delivery's body SHA-256, a tombstone — is
// stored as its blind-index value: the HMAC-SHA256 of the plain hash under
// the ledger's index key (seal.IndexKey). Lookups compute the same
// value from what they are given. Without encryption the plain hashes are
// stored, as before.
//
// A ledger that turned encryption on later holds plain hashes from before:
// until `stet rekey` has converted them all (index_key.converted_at),
// every lookup matches both forms (db.mixed), and new rows are written in
// the blind form. Bit 4 of a row's sealed column says its hash is blind.

// sealedBlind is the bit of a row's sealed column that says its hash
// (identity, content, body or tombstone) is a blind-index value.
const sealedBlind = 4

// sealedExternalID is the bit of a report's sealed column that says its
// external ID is sealed.
const sealedExternalID = 1

// colExternalID is the sealed column of a report's external ID.
const colExternalID = "reports.external_id"

// The kinds of hash the blind index keeps apart.
const (
	hashIdentity  = "identity"
	hashContent   = "content"
	hashBody      = "body"
	hashTombstone = "tombstone"
)

// blind returns what the ledger stores for the plain hash h of kind: its
// blind-index value with an index key, else h. An empty h stays empty.
func (db *DB) blind(kind, h string) string {
	if db.index == nil || h == "" {
		return h
	}
	return db.index.Sum(kind, h)
}

// blindBit is sealedBlind when this handle writes blind hashes, else 0.
func (db *DB) blindBit() int {
	if db.index == nil {
		return 0
	}
	return sealedBlind
}

// forms returns the stored forms a lookup of the plain hash h of kind must
// match: the stored form, and the plain hash too while the ledger may
// still hold plain hashes. Without a second form both are the same.
func (db *DB) forms(kind, h string) (stored, plain string) {
	s := db.blind(kind, h)
	if db.index != nil && db.mixed.Load() {
		return s, h
	}
	return s, s
}

// matches reports whether stored, a hash read from a row, is the plain
// hash h of kind in either form forms accepts.
func (db *DB) matches(kind, stored, h string) bool {
	a, b := db.forms(kind, h)
	return stored == a || stored == b
}

// tombstoneOf returns the stored tombstone of an identity (its plain hash)
// of tenant and source.
func (db *DB) tombstoneOf(tenant, source, identity string) string {
	return db.blind(hashTombstone, TombstoneHash(tenant, source, identity))
}

// loadIndexKey reads the ledger's blind-index key, or makes and stores it
// (derived from the sealing master key) when the ledger has none. A ledger
// that has no reports, deliveries or tombstones yet is converted from the
// start. Called by CheckKeys when encryption is on.
func (db *DB) loadIndexKey(ctx context.Context, now time.Time) error {
	for try := 0; try < 2; try++ {
		var w seal.WrappedKey
		var converted sql.NullInt64
		err := db.w.QueryRowContext(ctx, `SELECT key_id, wrapped, converted_at FROM index_key WHERE id = 1`).
			Scan(&w.KeyID, &w.Wrapped, &converted)
		switch {
		case err == nil:
			w.DataKeyID = "index"
			k, err := db.keys.UnwrapIndexKey(w)
			if err != nil {
				return err
			}
			db.index = k
			db.mixed.Store(!converted.Valid)
			return nil
		case errors.Is(err, sql.ErrNoRows):
		default:
			return fmt.Errorf("read the blind-index key (run 'stet migrate'?): %w", err)
		}
		_, w, err = db.keys.NewIndexKey()
		if err != nil {
			return err
		}
		// A ledger with nothing hashed yet needs no conversion. Two
		// processes racing here store one key: the second insert does
		// nothing, and both read the stored one.
		if _, err := db.w.ExecContext(ctx, `INSERT INTO index_key (id, key_id, wrapped, created_at, converted_at)
			SELECT 1, $1, $2, CAST($3 AS BIGINT), CASE WHEN EXISTS (SELECT 1 FROM reports) OR EXISTS (SELECT 1 FROM deliveries)
				OR EXISTS (SELECT 1 FROM tombstones) THEN NULL ELSE CAST($4 AS BIGINT) END
			WHERE true
			ON CONFLICT (id) DO NOTHING`, w.KeyID, w.Wrapped, micros(now), micros(now)); err != nil {
			return fmt.Errorf("store the blind-index key: %w", err)
		}
	}
	return errors.New("store the blind-index key: not found after insert")
}

// blindPendingQueries count, per table, the rows whose hash is still plain.
var blindPendingQueries = []string{
	`SELECT COUNT(*) FROM reports WHERE (sealed & 4) = 0 AND deleted_at IS NULL`,
	`SELECT COUNT(*) FROM revisions WHERE (sealed & 4) = 0 AND content_sha256 IS NOT NULL`,
	`SELECT COUNT(*) FROM deliveries WHERE (sealed & 4) = 0`,
	`SELECT COUNT(*) FROM tombstones WHERE (sealed & 4) = 0`,
}

// blindPending counts the rows whose hash a rekey has yet to convert.
func (db *DB) blindPending(ctx context.Context) (int, error) {
	total := 0
	for _, q := range blindPendingQueries {
		var n int
		if err := db.w.QueryRowContext(ctx, q).Scan(&n); err != nil {
			return 0, fmt.Errorf("count plain hashes: %w", err)
		}
		total += n
	}
	return total, nil
}

// convertHashes replaces every plain hash with its blind-index value, in
// batches of limit rows, each its own short transaction fenced on the
// value it read, and then records the ledger converted (index_key), from
// when lookups match the blind form alone. It returns the rows converted.
func (db *DB) convertHashes(ctx context.Context, limit int, now func() time.Time, progress func(int)) (int, error) {
	if db.index == nil {
		return 0, errors.New("rekey: the blind-index key is not loaded (CheckKeys)")
	}
	total := 0
	for _, batch := range []func(context.Context, *sql.Tx, *blindCursor, int) (int, error){
		db.blindReports, db.blindRevisions, db.blindDeliveries, db.blindTombstones,
	} {
		var c blindCursor
		for {
			before, n := c, 0
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				c = before // a retried transaction reads the batch again
				var err error
				n, err = batch(ctx, tx, &c, limit)
				return err
			})
			if err != nil {
				return total, err
			}
			total += n
			if progress != nil {
				progress(n)
			}
			if c == before {
				break // nothing left after the cursor
			}
		}
	}
	left, err := db.blindPending(ctx)
	if err != nil {
		return total, err
	}
	if left > 0 {
		// Rows a concurrent writer changed under a fence: a rerun takes them.
		return total, fmt.Errorf("rekey: %d plain hashes changed while converting; run stet rekey again", left)
	}
	if _, err := db.w.ExecContext(ctx, `UPDATE index_key SET converted_at = $1 WHERE id = 1 AND converted_at IS NULL`, micros(now())); err != nil {
		return total, fmt.Errorf("record the blind index converted: %w", err)
	}
	db.mixed.Store(false)
	return total, nil
}

// blindCursor is where a conversion batch carries on: the last key read.
type blindCursor struct {
	id           int64
	text1, text2 string
}

func (db *DB) blindReports(ctx context.Context, tx *sql.Tx, c *blindCursor, limit int) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, tenant_id, source_id, identity_hash FROM reports
		WHERE id > $1 AND (sealed & 4) = 0 AND deleted_at IS NULL ORDER BY id LIMIT $2`, c.id, limit)
	if err != nil {
		return 0, fmt.Errorf("read plain identity hashes: %w", err)
	}
	type row struct {
		key                   int64
		tenant, source, plain string
	}
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.key, &r.tenant, &r.source, shaScan{&r.plain}); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read plain identity hashes: %w", err)
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read plain identity hashes: %w", err)
	}
	done := 0
	for _, r := range todo {
		c.id = r.key
		res, err := tx.ExecContext(ctx, `UPDATE reports SET identity_hash = $1, tombstone_hash = $2, sealed = sealed | 4
			WHERE id = $3 AND identity_hash = $4 AND (sealed & 4) = 0 AND deleted_at IS NULL`,
			sha(db.blind(hashIdentity, r.plain)), sha(db.tombstoneOf(r.tenant, r.source, r.plain)), r.key, sha(r.plain))
		if err != nil {
			return done, fmt.Errorf("convert identity hash: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			done++
		}
	}
	return done, nil
}

// blindRevisions converts content hashes. A revision's sealed text and
// metadata are bound to its content hash (RevisionBinding): those sealed
// under the plain hash are sealed again under the blind one, in the same
// update. A revision from before 0019 is bound to its legacy ID and keeps
// its values as they are.
func (db *DB) blindRevisions(ctx context.Context, tx *sql.Tx, c *blindCursor, limit int) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT t.id, rp.public_id, COALESCE(t.legacy_id, ''), t.content_sha256, t.sealed, t.text, t.metadata
		FROM revisions t JOIN reports rp ON rp.id = t.report_id
		WHERE t.id > $1 AND (t.sealed & 4) = 0 AND t.content_sha256 IS NOT NULL ORDER BY t.id LIMIT $2`, c.id, limit)
	if err != nil {
		return 0, fmt.Errorf("read plain content hashes: %w", err)
	}
	type row struct {
		key                     int64
		report, legacy, content string
		sealed                  int
		text, metadata          sql.NullString
	}
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.key, reportPub(&r.report), &r.legacy, shaScan{&r.content}, &r.sealed, &r.text, &r.metadata); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read plain content hashes: %w", err)
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read plain content hashes: %w", err)
	}
	done := 0
	for _, r := range todo {
		c.id = r.key
		blind := db.blind(hashContent, r.content)
		text, metadata := r.text, r.metadata
		if r.legacy == "" && r.sealed&(sealedText|sealedMetadata) != 0 {
			var err error
			if text, metadata, err = db.rebind(ctx, tx, r.report, r.content, blind, r.sealed, text, metadata); err != nil {
				return done, err
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE revisions SET content_sha256 = $1, text = $2, metadata = $3, sealed = sealed | 4
			WHERE id = $4 AND content_sha256 = $5 AND (sealed & 4) = 0 AND COALESCE(text, '') = $6 AND COALESCE(metadata, '') = $7`,
			sha(blind), text, metadata, r.key, sha(r.content), r.text.String, r.metadata.String)
		if err != nil {
			return done, fmt.Errorf("convert content hash: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			done++
		}
	}
	return done, nil
}

// rebind opens a revision's sealed text and metadata, bound to its plain
// content hash, and seals them again bound to the blind one. A report
// whose data key is destroyed keeps its values: they open no more either
// way.
func (db *DB) rebind(ctx context.Context, tx *sql.Tx, reportID, plain, blind string, sealed int, text, metadata sql.NullString) (sql.NullString, sql.NullString, error) {
	dk, err := db.readKey(ctx, tx, reportID)
	if err != nil || dk == nil {
		return text, metadata, err
	}
	from, to := RevisionBinding("", reportID, plain), RevisionBinding("", reportID, blind)
	out := []sql.NullString{text, metadata}
	for i, col := range []string{colRevisionText, colRevisionMetadata} {
		v := out[i]
		if !v.Valid || sealed&sealedBit(col) == 0 {
			continue
		}
		b, err := dk.Open(v.String, bind(col, from))
		if err != nil {
			return text, metadata, fmt.Errorf("%s of report %s: %w", col, reportID, err)
		}
		if out[i].String, err = dk.Seal(b, bind(col, to)); err != nil {
			return text, metadata, err
		}
	}
	return out[0], out[1], nil
}

func (db *DB) blindDeliveries(ctx context.Context, tx *sql.Tx, c *blindCursor, limit int) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT source_id, delivery_key, body_sha256 FROM deliveries
		WHERE (source_id, delivery_key) > ($1, $2) AND (sealed & 4) = 0 ORDER BY source_id, delivery_key LIMIT $3`,
		c.text1, c.text2, limit)
	if err != nil {
		return 0, fmt.Errorf("read plain body hashes: %w", err)
	}
	type row struct{ source, key, body string }
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.source, &r.key, shaScan{&r.body}); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read plain body hashes: %w", err)
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read plain body hashes: %w", err)
	}
	done := 0
	for _, r := range todo {
		c.text1, c.text2 = r.source, r.key
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET body_sha256 = $1, sealed = sealed | 4
			WHERE source_id = $2 AND delivery_key = $3 AND body_sha256 = $4 AND (sealed & 4) = 0`,
			sha(db.blind(hashBody, r.body)), r.source, r.key, sha(r.body))
		if err != nil {
			return done, fmt.Errorf("convert body hash: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			done++
		}
	}
	return done, nil
}

// blindTombstones converts tombstones: a tombstone keeps only its blind
// value, the one intake computes for the identity (tombstoneOf).
func (db *DB) blindTombstones(ctx context.Context, tx *sql.Tx, c *blindCursor, limit int) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT identity_hash FROM tombstones
		WHERE identity_hash > $1 AND (sealed & 4) = 0 ORDER BY identity_hash LIMIT $2`, c.text1, limit)
	if err != nil {
		return 0, fmt.Errorf("read plain tombstones: %w", err)
	}
	var todo []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read plain tombstones: %w", err)
		}
		todo = append(todo, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read plain tombstones: %w", err)
	}
	done := 0
	for _, h := range todo {
		c.text1 = h
		res, err := tx.ExecContext(ctx, `UPDATE tombstones SET identity_hash = $1, sealed = sealed | 4
			WHERE identity_hash = $2 AND (sealed & 4) = 0`, db.blind(hashTombstone, h), h)
		if err != nil {
			return done, fmt.Errorf("convert tombstone: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			done++
		}
	}
	return done, nil
}
