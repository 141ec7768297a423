// Package postgres is the ledger's PostgreSQL driver: how a scale-out
// ledger opens its pool, classifies its errors, serializes migrations
// across processes, and the migrations and stored functions it applies.
// The ledger (package ledger) picks it for a postgres:// URL; no other
// caller ever asks which database it has.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Migrations are the numbered migrations, migrations/NNNN_name.sql, and
// the stored functions' current bodies, migrations/functions/name.sql,
// one file each.
//
//go:embed migrations/*.sql migrations/functions/*.sql
var Migrations embed.FS

// IsUnique reports whether err is a unique-constraint violation.
func IsUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// IsRetryable reports whether the transaction that failed with err may be
// run again as a whole: a deadlock or a serialization failure between
// processes.
func IsRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// LockMigrations takes a session-level advisory lock, so that processes
// starting at once migrate one after another and the later ones find
// nothing to do. It returns the unlock function.
func LockMigrations(ctx context.Context, db *sql.DB) (func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(7305161)`); err != nil {
		conn.Close()
		return nil, fmt.Errorf("take the migration lock: %w", err)
	}
	return func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7305161)`)
		conn.Close()
	}, nil
}

// MaxConns is the pool size of one process; see docs/deploy.md.
const MaxConns = 20

// Open opens a pgx pool through database/sql, so the ledger and
// River (riverdatabasesql) share each transaction. Every read goes to the
// primary: read replicas are not supported for decisions.
func Open(ctx context.Context, dsn string) (w, r *sql.DB, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The URL may hold a password: never echo it.
		return nil, nil, fmt.Errorf("database: the postgres URL does not parse")
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(MaxConns)
	db.SetMaxIdleConns(MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("database: connect to postgres: %w", err)
	}
	return db, db, nil
}
