package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect names the SQL dialect a ledger speaks. The list is closed: SQLite
// and Postgres.
type Dialect string

// The dialects.
const (
	SQLite   Dialect = "sqlite"   // the embedded default: one file, one writer
	Postgres Dialect = "postgres" // scale-out: any number of stet processes
)

// String returns the dialect's name, as configuration and logs spell it.
func (d Dialect) String() string { return string(d) }

// dialect holds everything that differs between SQLite and PostgreSQL.
// Statements themselves are shared: both bind $1…$N by number, and both
// accept ON CONFLICT … DO NOTHING RETURNING and partial unique indexes.
type dialect struct {
	name          Dialect
	migrationsDir string
	// functionsDir holds the stored functions' current bodies, one file
	// each ("": the database has none).
	functionsDir string
	open         func(ctx context.Context, dsn string) (w, r *sql.DB, err error)
	isUnique     func(err error) bool
	// isRetryable reports errors after which the whole transaction may be
	// run again: deadlocks and serialization failures between processes.
	isRetryable func(err error) bool
	// lockMigrations serializes migrations across processes starting at
	// once; it returns the unlock function.
	lockMigrations func(ctx context.Context, db *sql.DB) (func(), error)
}

func dialectFor(u string) (*dialect, string, error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		return sqliteDialect, strings.TrimPrefix(u, "sqlite://"), nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return postgresDialect, u, nil
	default:
		return nil, "", fmt.Errorf("database: unsupported URL scheme (want sqlite:// or postgres://)")
	}
}

func init() {
	// stet_ulid decodes a text ID ("job_01M8…") to the 16 bytes of its ULID,
	// NULL for anything else: migration 0019 stores public IDs so.
	sqlite.MustRegisterDeterministicScalarFunction("stet_ulid", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		s, ok := args[0].(string)
		if !ok {
			return nil, nil
		}
		if b := pub(s); b != nil {
			return b, nil
		}
		return nil, nil
	})
}

var sqliteDialect = &dialect{
	name:          SQLite,
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
	isRetryable: func(err error) bool {
		var se *sqlite.Error
		return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_BUSY)
	},
	// One SQLite file is for one process (a lock file enforces it).
	lockMigrations: func(context.Context, *sql.DB) (func(), error) { return func() {}, nil },
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
	// Keep every read connection open: database/sql keeps two idle by
	// default, and each connection closed past them was opened again at
	// the next burst, reading SQLite's schema and parsing its statements
	// anew (its statement cache goes with it).
	r.SetMaxOpenConns(sqliteReaders)
	r.SetMaxIdleConns(sqliteReaders)
	return w, r, nil
}

// sqliteReaders is the size of SQLite's read pool.
const sqliteReaders = 4

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

var postgresDialect = &dialect{
	name:          Postgres,
	migrationsDir: "migrations/postgres",
	functionsDir:  "migrations/postgres/functions",
	open:          openPostgres,
	isUnique: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	},
	isRetryable: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
	},
	lockMigrations: func(ctx context.Context, db *sql.DB) (func(), error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		// A session-level advisory lock: processes starting at once migrate
		// one after another, and the later ones find nothing to do.
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(7305161)`); err != nil {
			conn.Close()
			return nil, fmt.Errorf("take the migration lock: %w", err)
		}
		return func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7305161)`)
			conn.Close()
		}, nil
	},
}

// PostgresMaxConns is the pool size of one process; see docs/deploy.md.
const PostgresMaxConns = 20

// openPostgres opens a pgx pool through database/sql, so the ledger and
// River (riverdatabasesql) share each transaction. Every read goes to the
// primary: read replicas are not supported for decisions.
func openPostgres(ctx context.Context, dsn string) (*sql.DB, *sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The URL may hold a password: never echo it.
		return nil, nil, fmt.Errorf("database: the postgres URL does not parse")
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(PostgresMaxConns)
	db.SetMaxIdleConns(PostgresMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("database: connect to postgres: %w", err)
	}
	return db, db, nil
}
