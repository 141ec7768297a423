// Package ledger is stet's durable ledger over database/sql: reports,
// revisions, deliveries, jobs, attempts, artifacts, review records and the
// audit log, in SQLite (embedded default) or PostgreSQL (scale-out).
//
// The ledger is the memo of every stage result. Its unique constraints, not
// read-then-write checks, decide identity: two racing writers always resolve
// to one row. Stage writes are fenced on the job's attempt token.
//
// Statements are shared between the databases. What each does its own way
// lives in its driver package (ledger/sqlite, ledger/postgres: opening,
// errors, migrations, stored functions), picked in dialect.go, and in the
// PostgreSQL fast paths (accept_pg.go, saveresult_pg.go), which are how
// this package implements a call there, never a path a caller picks. The
// ledger never logs, and it never puts document text in an error.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/seal"
)

// Querier is what the ledger's statements run on: a *sql.DB or a *sql.Tx.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is an open ledger.
type DB struct {
	// w is the pool for writes and for reads that decide something (read
	// your writes). For SQLite it has one connection, shared with River.
	w *sql.DB
	// r serves reads that only display (API reads). For SQLite it is a
	// separate pool of read connections; for PostgreSQL it is w.
	r       *sql.DB
	dialect *dialect
	url     string
	// keys, when set, seal the text columns (crypt.go); nil stores plaintext.
	keys *seal.Keyring
	// index, loaded by CheckKeys with keys, replaces stored hashes with
	// their blind-index values (blindindex.go); nil stores plain SHA-256.
	index *seal.IndexKey
	// mixed is true while rows written before the index key may still hold
	// plain hashes: lookups then match both forms.
	mixed atomic.Bool
	// destSources are the sources with a destination, as SyncDestinations
	// last recorded them (nil before it ran).
	destSources atomic.Pointer[map[string]bool]
	// merge merges a profile's parts (SetMergeParts); nil until set.
	merge atomic.Pointer[MergeParts]
}

// Open opens the ledger at url ("sqlite:///path/stet.db", "sqlite://rel.db",
// "postgres://…"). It does not migrate.
func Open(ctx context.Context, url string) (*DB, error) {
	d, dsn, err := dialectFor(url)
	if err != nil {
		return nil, err
	}
	w, r, err := d.open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &DB{w: w, r: r, dialect: d, url: url}, nil
}

// Close closes both pools.
func (db *DB) Close() error {
	err := db.w.Close()
	if db.r != db.w {
		err = errors.Join(err, db.r.Close())
	}
	return err
}

// Writer returns the pool that writes, shared with River.
func (db *DB) Writer() *sql.DB { return db.w }

// Reader returns the read-only pool, for display reads.
func (db *DB) Reader() *sql.DB { return db.r }

// Dialect returns the dialect the ledger speaks: SQLite or Postgres. Only
// the ledger's own code and tests ask it; callers ask what the database
// does (OneWriter) or name it (System).
func (db *DB) Dialect() Dialect { return db.dialect.name }

// System names the database for traces and logs: "sqlite" or "postgres".
func (db *DB) System() string { return string(db.dialect.name) }

// OneWriter reports whether the database takes one writing transaction at
// a time (SQLite): writers then do best to share transactions (group
// commit) and to finish River's jobs inside them. Otherwise (PostgreSQL)
// each transaction commits on a connection of its own, in parallel with
// the others, a lone statement commits without BEGIN and COMMIT, and River
// completes many jobs in one statement of its own.
func (db *DB) OneWriter() bool { return db.dialect.name == SQLite }

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.w.PingContext(ctx) }

// InTx runs fn in a transaction on the writer and commits it if fn returns
// nil. Keep fn short: never call a processor inside it.
func (db *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// IsRetryable reports whether a transaction that failed with err may be run
// again as a whole (a deadlock or serialization failure).
func (db *DB) IsRetryable(err error) bool { return db.dialect.isRetryable(err) }

// IsUniqueViolation reports whether err is a unique-constraint violation.
func (db *DB) IsUniqueViolation(err error) bool { return db.dialect.isUnique(err) }

func micros(t time.Time) int64 { return t.UTC().UnixMicro() }

func fromMicros(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMicro(n.Int64).UTC()
}

func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: micros(t), Valid: true}
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullFloat(f *float64) sql.NullFloat64 {
	if f == nil {
		return sql.NullFloat64{}
	}
	return sql.NullFloat64{Float64: *f, Valid: true}
}

func notFound(what string) error {
	return &stet.Error{Code: stet.ENotFound, Message: what + " not found", Cause: stet.ErrNotFound}
}
