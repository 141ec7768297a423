// Package sqlite is the ledger's SQLite driver: how the embedded default
// opens its file, classifies its errors and migrates. The ledger (package
// ledger) picks it for a sqlite:// URL; no other caller ever asks which
// database it has.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Migrations are the numbered migrations, migrations/NNNN_name.sql.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// IsUnique reports whether err is a unique-constraint (or primary-key)
// violation.
func IsUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// IsRetryable reports whether the transaction that failed with err may be
// run again as a whole: the file was busy.
func IsRetryable(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_BUSY)
}

// LockMigrations does nothing: one SQLite file is for one process (a lock
// file enforces it).
func LockMigrations(context.Context, *sql.DB) (func(), error) { return func() {}, nil }

// Open opens the file at path with WAL, synchronous=FULL (an acknowledged
// delivery survives power loss), a busy timeout and foreign keys. The writer
// pool has one connection, as River's SQLite driver asks: SQLite has one
// writer, and one connection keeps River's internal work from failing with
// SQLITE_BUSY. Reads that only display use a separate read-only pool, which
// WAL lets run beside the writer.
func Open(ctx context.Context, path string) (w, r *sql.DB, err error) {
	if path == "" {
		return nil, nil, fmt.Errorf("database: empty sqlite path")
	}
	if path != ":memory:" {
		if err := restrictFolder(filepath.Dir(path)); err != nil {
			return nil, nil, err
		}
		// The file holds patient text: only its owner may read it. SQLite
		// gives the -wal and -shm files the database file's mode.
		if err := restrictFiles(path); err != nil {
			return nil, nil, err
		}
	}
	q := url.Values{}
	// secure_delete: deleted content is overwritten with zeros, not left in
	// free pages.
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)", "secure_delete(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	wc, err := newStmtCacheConnector("file:" + path + "?" + q.Encode())
	if err != nil {
		return nil, nil, fmt.Errorf("database: open: %w", err)
	}
	w = sql.OpenDB(wc)
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("database: open: %w", err)
	}
	rq := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "query_only(1)"} {
		rq.Add("_pragma", p)
	}
	rc, err := newStmtCacheConnector("file:" + path + "?" + rq.Encode())
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("database: open: %w", err)
	}
	r = sql.OpenDB(rc)
	// Keep every read connection open: database/sql keeps two idle by
	// default, and each connection closed past them was opened again at
	// the next burst, reading SQLite's schema and parsing its statements
	// anew (its statement cache goes with it).
	r.SetMaxOpenConns(Readers)
	r.SetMaxIdleConns(Readers)
	return w, r, nil
}

// Readers is the size of the read pool.
const Readers = 4

// restrictFolder creates the database's folder 0700 if it is missing and
// narrows an existing one to 0700: a folder others may enter lets them
// open any file SQLite or an operator leaves there less closed than 0600
// (docs/security.md). A shared folder (the
// sticky bit, as /tmp) or the filesystem root is not stet's to narrow:
// the database needs a folder of its own.
func restrictFolder(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("database: create folder: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("database: folder: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("database: folder: %w", err)
	}
	if fi.Mode()&os.ModeSticky != 0 || filepath.Dir(abs) == abs {
		return fmt.Errorf("database: %s is a shared folder: put the SQLite file in a folder of its own (stet narrows it to mode 0700)", abs)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(abs, 0o700); err != nil {
			return fmt.Errorf("database: restrict folder mode: %w", err)
		}
	}
	return nil
}

// restrictFiles creates the database file 0600 if it is missing and
// narrows an existing one (and its -wal and -shm) to 0600.
func restrictFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("database: open file: %w", err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("database: restrict file mode: %w", err)
		}
	}
	return nil
}
