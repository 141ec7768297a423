package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/seal"
)

// Encryption at rest (docs/design.md §5). The seam is here: the ledger seals the
// columns that hold document text or what is derived from it where it
// writes them, and opens them where it reads them, under the report's data
// key (seal.DataKey, wrapped in report_keys). Nothing above the ledger
// sees a ciphertext or a key.
//
// Whether a stored value is sealed is recorded beside it, in its row's
// sealed column (one bit per sealed column, migration 0022), never guessed
// from its form: a text or note that begins like a sealed value is
// plaintext. A plaintext value (written before encryption was turned on, or
// with it off) reads as it is; `stet rekey` seals it.

// The sealed columns, as table.column: the binding of a sealed value to its
// column (with the row ID) in the additional data.
const (
	colRevisionText     = "revisions.text"
	colRevisionMetadata = "revisions.metadata"
	colArtifactRaw      = "artifacts.raw"
	colArtifactOutput   = "artifacts.output"
	colClassification   = "review_records.classification"
	colNote             = "review_records.note"
)

// The bits of a row's sealed column: which of its sealed columns hold a
// sealed value.
const (
	sealedText           = 1 // revisions.text
	sealedMetadata       = 2 // revisions.metadata
	sealedRaw            = 1 // artifacts.raw
	sealedOutput         = 2 // artifacts.output
	sealedClassification = 1 // review_records.classification
	sealedNote           = 2 // review_records.note
)

// sealedBit is the bit of column col (table.column) in its row's sealed
// column.
func sealedBit(col string) int {
	switch col {
	case colRevisionText, colArtifactRaw, colClassification, colExternalID, colRevisionAudio:
		return 1
	case colRevisionMetadata, colArtifactOutput, colNote:
		return 2
	}
	panic("ledger: " + col + " is not a sealed column")
}

// sealedFlag is the bit of col if a value was sealed under dk (a non-nil
// key and a non-NULL value), else 0.
func sealedFlag(dk *seal.DataKey, col string, v sql.NullString) int {
	if dk == nil || !v.Valid {
		return 0
	}
	return sealedBit(col)
}

// artifactSealed is the sealed column of an artifact written under dk
// (nil: encryption off) with stored raw response raw ("" when there was
// none: packRaw leaves it empty, unsealed).
func artifactSealed(dk *seal.DataKey, raw string) int {
	if dk == nil {
		return 0
	}
	if raw == "" {
		return sealedOutput
	}
	return sealedRaw | sealedOutput
}

// ErrKeyDestroyed means a sealed value belongs to a report whose data key a
// deletion destroyed: it no longer opens, by design.
var ErrKeyDestroyed = fmt.Errorf("the report's data key is destroyed: %w", seal.ErrOpen)

// ErrNoKeyring means the ledger holds sealed values but this process has
// no encryption keys: it refuses instead of showing ciphertext.
var ErrNoKeyring = errors.New("the ledger holds sealed values but encryption: is not configured")

// UseKeyring turns on encryption at rest for this handle: every write of a
// sealed column seals from now on. Call it once, after Open, before use;
// CheckKeys verifies the keys against the ledger.
func (db *DB) UseKeyring(k *seal.Keyring) { db.keys = k }

// Encrypted reports whether this handle seals what it writes.
func (db *DB) Encrypted() bool { return db.keys != nil }

func bind(col, rowID string) string { return col + "/" + rowID }

// newKey is the data key of a report about to be inserted, made before
// its row so that the row carries its external ID already sealed: its key
// (nil with encryption off), the key as report_keys stores it, and the
// external ID and sealed bits the row is inserted with.
type newKey struct {
	dk         *seal.DataKey
	w          seal.WrappedKey
	externalID sql.NullString
	sealed     int // sealedExternalID when the external ID is sealed
}

// prepareReportKey makes the data key of a report about to be inserted
// and seals its external ID (if any) under it. With encryption off the
// external ID is stored as it is. A report that turns out to exist
// discards it.
func (db *DB) prepareReportKey(reportID, externalID string) (newKey, error) {
	if db.keys == nil {
		return newKey{externalID: nullString(externalID)}, nil
	}
	dk, w, err := db.keys.NewDataKey(reportID)
	if err != nil {
		return newKey{}, err
	}
	k := newKey{dk: dk, w: w}
	if externalID != "" {
		ext, err := sealString(dk, colExternalID, reportID, externalID)
		if err != nil {
			return newKey{}, err
		}
		k.externalID, k.sealed = sql.NullString{String: ext, Valid: true}, sealedExternalID
	}
	return k, nil
}

// storeReportKey stores the prepared data key of a report inserted in this
// transaction (its key) and returns the key (nil with encryption off).
func (db *DB) storeReportKey(ctx context.Context, q Querier, reportKey int64, k newKey, now time.Time) (*seal.DataKey, error) {
	if k.dk == nil {
		return nil, nil
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO report_keys (report_id, data_key_id, key_id, wrapped, created_at)
		VALUES ($1, $2, $3, $4, $5)`, reportKey, k.w.DataKeyID, k.w.KeyID, k.w.Wrapped, micros(now)); err != nil {
		return nil, fmt.Errorf("store data key: %w", err)
	}
	return k.dk, nil
}

// writeKey returns the data key to seal a write of the report: its stored
// key, or a new one for a report accepted before encryption was on. It
// returns nil when encryption is off.
func (db *DB) writeKey(ctx context.Context, q Querier, reportID string, now time.Time) (*seal.DataKey, error) {
	if db.keys == nil {
		return nil, nil
	}
	dk, err := db.readKey(ctx, q, reportID)
	if err != nil || dk != nil {
		return dk, err
	}
	dk, w, err := db.keys.NewDataKey(reportID)
	if err != nil {
		return nil, err
	}
	// A concurrent writer may store one first: then use its key.
	var got int64
	err = q.QueryRowContext(ctx, `INSERT INTO report_keys (report_id, data_key_id, key_id, wrapped, created_at)
		VALUES (`+reportKeySQL("$1")+`, $2, $3, $4, $5) ON CONFLICT (report_id) DO NOTHING RETURNING report_id`,
		pub(reportID), w.DataKeyID, w.KeyID, w.Wrapped, micros(now)).Scan(&got)
	switch {
	case err == nil:
		return dk, nil
	case errors.Is(err, sql.ErrNoRows):
		dk, err := db.readKey(ctx, q, reportID)
		if err == nil && dk == nil {
			err = fmt.Errorf("store data key: lost and not found")
		}
		return dk, err
	default:
		return nil, fmt.Errorf("store data key: %w", err)
	}
}

// writeKeyOf is writeKey for the report with key reportKey.
func (db *DB) writeKeyOf(ctx context.Context, q Querier, reportKey int64, now time.Time) (*seal.DataKey, error) {
	if db.keys == nil {
		return nil, nil
	}
	var reportID string
	if err := q.QueryRowContext(ctx, `SELECT public_id FROM reports WHERE id = $1`, reportKey).Scan(reportPub(&reportID)); err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	return db.writeKey(ctx, q, reportID, now)
}

// readKey returns the report's unwrapped data key, or nil if it has none
// (never had, or destroyed).
func (db *DB) readKey(ctx context.Context, q Querier, reportID string) (*seal.DataKey, error) {
	var w seal.WrappedKey
	err := q.QueryRowContext(ctx, `SELECT data_key_id, key_id, wrapped FROM report_keys WHERE report_id = `+reportKeySQL("$1"), pub(reportID)).
		Scan(&w.DataKeyID, &w.KeyID, &w.Wrapped)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read data key: %w", err)
	}
	if db.keys == nil {
		return nil, ErrNoKeyring
	}
	dk, err := db.keys.Unwrap(reportID, w)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", reportID, err)
	}
	return dk, nil
}

// sealValue seals s for column col of row rowID; a nil key (encryption off)
// leaves it plaintext. An invalid (NULL) value stays NULL.
func sealValue(dk *seal.DataKey, col, rowID string, s sql.NullString) (sql.NullString, error) {
	if dk == nil || !s.Valid {
		return s, nil
	}
	v, err := dk.Seal([]byte(s.String), bind(col, rowID))
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: v, Valid: true}, nil
}

func sealString(dk *seal.DataKey, col, rowID, s string) (string, error) {
	v, err := sealValue(dk, col, rowID, sql.NullString{String: s, Valid: true})
	return v.String, err
}

// opener opens the sealed values of one read, unwrapping each report's data
// key once.
type opener struct {
	db   *DB
	q    Querier
	keys map[string]*seal.DataKey
}

func (db *DB) opener(q Querier) *opener {
	return &opener{db: db, q: q, keys: map[string]*seal.DataKey{}}
}

// open returns the plaintext of a stored value of column col, bound to rowID,
// of report reportID, given its row's sealed column: opened if sealed, then
// decompressed if the column is packed (compress.go). A plaintext value is
// returned as it is.
func (o *opener) open(ctx context.Context, reportID, col, rowID string, v sql.NullString, flags int) (sql.NullString, error) {
	if !v.Valid {
		return v, nil
	}
	s, sealed := v.String, flags&sealedBit(col) != 0
	if sealed {
		b, err := o.unseal(ctx, reportID, col, rowID, s)
		if err != nil {
			return sql.NullString{}, err
		}
		s = string(b)
	}
	if packed(col) {
		var err error
		if s, err = unpack(s, sealed); err != nil {
			return sql.NullString{}, fmt.Errorf("%s of report %s: %w", col, reportID, err)
		}
	}
	return sql.NullString{String: s, Valid: true}, nil
}

// unseal opens sealed value v under its report's data key, read once per
// opener.
func (o *opener) unseal(ctx context.Context, reportID, col, rowID, v string) ([]byte, error) {
	if o.db.keys == nil {
		return nil, ErrNoKeyring
	}
	dk, ok := o.keys[reportID]
	if !ok {
		var err error
		dk, err = o.db.readKey(ctx, o.q, reportID)
		if err != nil {
			return nil, err
		}
		o.keys[reportID] = dk
	}
	if dk == nil {
		return nil, ErrKeyDestroyed
	}
	b, err := dk.Open(v, bind(col, rowID))
	if err != nil {
		// Not the binding: a revision's holds its content's SHA-256, which
		// could confirm a guessed text.
		return nil, fmt.Errorf("%s of report %s: %w", col, reportID, err)
	}
	return b, nil
}

// unsealRecord opens a scanned review record's classification and note,
// given the record's sealed column.
func (o *opener) unsealRecord(ctx context.Context, r *stet.ReviewRecord, flags int) error {
	if r == nil {
		return nil
	}
	if len(r.Classification) > 0 {
		c, err := o.open(ctx, r.ReportID, colClassification, r.ID, sql.NullString{String: string(r.Classification), Valid: true}, flags)
		if err != nil {
			return err
		}
		r.Classification = []byte(c.String)
	}
	if r.Note != "" {
		n, err := o.open(ctx, r.ReportID, colNote, r.ID, sql.NullString{String: r.Note, Valid: true}, flags)
		if err != nil {
			return err
		}
		r.Note = n.String
	}
	return nil
}

// OpenSealed opens one stored value of a sealed column as the ledger
// would read it, given whether it is sealed (its row's sealed column has
// the column's bit), a packed column's value decompressed too: for tests
// and drills that check a raw copy (it fails with ErrKeyDestroyed once the
// report's data key is gone). column is table.column, such as
// "revisions.text".
func (db *DB) OpenSealed(ctx context.Context, reportID, column, rowID, stored string, sealed bool) (string, error) {
	flags := 0
	if sealed {
		flags = sealedBit(column)
	}
	v, err := db.opener(db.w).open(ctx, reportID, column, rowID, sql.NullString{String: stored, Valid: true}, flags)
	return v.String, err
}

// CheckKeys verifies this handle's keys against the ledger at start-up, so
// a wrong or missing key is a clear error instead of values that do not
// open later:
//   - a key id the ledger knows with another key check value is refused;
//   - a key id that still wraps data keys but is not configured is refused;
//   - sealed data (any data key) with no keyring at all is refused.
//
// A configured key id the ledger does not know yet is registered.
func (db *DB) CheckKeys(ctx context.Context, now time.Time) error {
	known := map[string]string{}
	rows, err := db.w.QueryContext(ctx, `SELECT key_id, check_value FROM encryption_keys`)
	if err != nil {
		return fmt.Errorf("read encryption keys (run 'stet migrate'?): %w", err)
	}
	for rows.Next() {
		var id, cv string
		if err := rows.Scan(&id, &cv); err != nil {
			rows.Close()
			return fmt.Errorf("read encryption keys: %w", err)
		}
		known[id] = cv
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read encryption keys: %w", err)
	}
	if db.keys == nil {
		var any bool
		if err := db.w.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM report_keys) OR EXISTS (SELECT 1 FROM index_key)`).Scan(&any); err != nil {
			return fmt.Errorf("read data keys: %w", err)
		}
		if any {
			return fmt.Errorf("encryption: %w: configure the keys it was sealed with", ErrNoKeyring)
		}
		return nil
	}
	for _, id := range db.keys.IDs() {
		cv, ok := known[id]
		switch {
		case !ok:
			if _, err := db.w.ExecContext(ctx, `INSERT INTO encryption_keys (key_id, check_value, created_at) VALUES ($1, $2, $3)
				ON CONFLICT (key_id) DO NOTHING`, id, db.keys.CheckValue(id), micros(now)); err != nil {
				return fmt.Errorf("register encryption key %s: %w", id, err)
			}
		case cv != db.keys.CheckValue(id):
			return fmt.Errorf("encryption: key %s is not the key this ledger knows under that id (its key check value differs): wrong key", id)
		}
	}
	for id := range known {
		if db.keys.Has(id) {
			continue
		}
		var used bool
		if err := db.w.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM report_keys WHERE key_id = $1) OR EXISTS (SELECT 1 FROM index_key WHERE key_id = $1)`, id).Scan(&used); err != nil {
			return fmt.Errorf("read data keys: %w", err)
		}
		if used {
			return fmt.Errorf("encryption: data keys are wrapped by key %s, which is not configured: add it back (after the sealing key) and run 'stet rekey' before removing it", id)
		}
	}
	return db.loadIndexKey(ctx, now)
}
