package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect holds everything that differs between SQLite and PostgreSQL.
// Statements themselves are shared: both bind $1…$N by number, and both
// accept ON CONFLICT … DO NOTHING RETURNING and partial unique indexes.
type dialect struct {
	name          string
	migrationsDir string
	open          func(ctx context.Context, dsn string) (w, r *sql.DB, err error)
	isUnique      func(err error) bool
}

func dialectFor(u string) (*dialect, string, error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		return sqliteDialect, strings.TrimPrefix(u, "sqlite://"), nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return nil, "", fmt.Errorf("database: the postgres dialect is not built yet")
	default:
		return nil, "", fmt.Errorf("database: unsupported URL scheme (want sqlite:// or postgres://)")
	}
}

var sqliteDialect = &dialect{
	name:          "sqlite",
	migrationsDir: "migrations/sqlite",
	open:          openSQLite,
	isUnique: func(err error) bool {
		var se *sqlite.Error
		if errors.As(err, &se) {
			c := se.Code()
			return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
		}
		return false
	},
}

// openSQLite opens the file with WAL, synchronous=FULL (an acknowledged
// delivery survives power loss), a busy timeout and foreign keys. The writer
// pool has one connection, as River's SQLite driver asks: SQLite has one
// writer, and one connection keeps River's internal work from failing with
// SQLITE_BUSY. Reads that only display use a separate read-only pool, which
// WAL lets run beside the writer.
func openSQLite(ctx context.Context, path string) (*sql.DB, *sql.DB, error) {
	if path == "" {
		return nil, nil, fmt.Errorf("database: empty sqlite path")
	}
	if path != ":memory:" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, nil, fmt.Errorf("database: create folder: %w", err)
		}
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	wc, err := newStmtCacheConnector("file:" + path + "?" + q.Encode())
	if err != nil {
		return nil, nil, fmt.Errorf("database: open: %w", err)
	}
	w := sql.OpenDB(wc)
	if err != nil {
		return nil, nil, fmt.Errorf("database: open: %w", err)
	}
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
	r := sql.OpenDB(rc)
	r.SetMaxOpenConns(4)
	return w, r, nil
}
