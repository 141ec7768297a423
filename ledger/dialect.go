package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"strings"

	"modernc.org/sqlite"

	"github.com/stetlabs/stet/ledger/postgres"
	sqlitedriver "github.com/stetlabs/stet/ledger/sqlite"
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

// PostgresMaxConns is the pool size of one process on PostgreSQL; see
// docs/deploy.md.
const PostgresMaxConns = postgres.MaxConns

// dialect is a database's driver, as the ledger calls it: how it opens,
// classifies errors and migrates comes from its package (ledger/sqlite,
// ledger/postgres). Statements the two share live in this package: both
// bind $1…$N by number, and both accept ON CONFLICT … DO NOTHING
// RETURNING and partial unique indexes; the PostgreSQL fast paths
// (accept_pg.go, saveresult_pg.go) are how this package implements its
// calls there.
type dialect struct {
	name Dialect
	// migrations holds migrations/NNNN_name.sql and, where the database
	// has stored functions, migrations/functions/name.sql.
	migrations fs.FS
	open       func(ctx context.Context, dsn string) (w, r *sql.DB, err error)
	isUnique   func(err error) bool
	// isRetryable reports errors after which the whole transaction may be
	// run again: deadlocks and serialization failures between processes.
	isRetryable func(err error) bool
	// lockMigrations serializes migrations across processes starting at
	// once; it returns the unlock function.
	lockMigrations func(ctx context.Context, db *sql.DB) (func(), error)
}

var (
	sqliteDialect = &dialect{name: SQLite, migrations: sqlitedriver.Migrations, open: sqlitedriver.Open,
		isUnique: sqlitedriver.IsUnique, isRetryable: sqlitedriver.IsRetryable, lockMigrations: sqlitedriver.LockMigrations}
	postgresDialect = &dialect{name: Postgres, migrations: postgres.Migrations, open: postgres.Open,
		isUnique: postgres.IsUnique, isRetryable: postgres.IsRetryable, lockMigrations: postgres.LockMigrations}
)

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
