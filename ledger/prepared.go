package ledger

import (
	"context"
	"database/sql"
	"fmt"
)

// Hot-path statements are prepared once per connection instead of parsed on
// every call: SQLite's parser was a fifth of intake's CPU. Statements are
// registered at package init with prepared() and prepared on the writer at
// Open, before any transaction holds the single SQLite connection (a
// prepare inside a transaction on a one-connection pool would wait forever
// for a second connection).
var preparedQueries []string

func prepared(query string) string {
	preparedQueries = append(preparedQueries, query)
	return query
}

func (db *DB) prepareAll(ctx context.Context) error {
	db.stmts = make(map[string]*sql.Stmt, len(preparedQueries))
	for _, q := range preparedQueries {
		s, err := db.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare statement: %w", err)
		}
		db.stmts[q] = s
	}
	return nil
}

// Wrap returns a Querier over tx that runs the ledger's prepared statements.
// Use it for hot paths; plain tx works too.
func (db *DB) Wrap(tx *sql.Tx) Querier {
	if len(db.stmts) == 0 {
		return tx
	}
	return &preparedTx{tx: tx, stmts: db.stmts}
}

type preparedTx struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (p *preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := p.stmts[query]; s != nil {
		return p.tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	}
	return p.tx.ExecContext(ctx, query, args...)
}

func (p *preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := p.stmts[query]; s != nil {
		return p.tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	}
	return p.tx.QueryContext(ctx, query, args...)
}

func (p *preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := p.stmts[query]; s != nil {
		return p.tx.StmtContext(ctx, s).QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

// Primary returns a Querier on the writer pool outside any transaction,
// using the prepared statements: for reads that decide something. Never use
// it while holding a transaction on a one-connection pool.
func (db *DB) Primary() Querier {
	if len(db.stmts) == 0 {
		return db.w
	}
	return &preparedDB{db: db.w, stmts: db.stmts}
}

type preparedDB struct {
	db    *sql.DB
	stmts map[string]*sql.Stmt
}

func (p *preparedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := p.stmts[query]; s != nil {
		return s.ExecContext(ctx, args...)
	}
	return p.db.ExecContext(ctx, query, args...)
}

func (p *preparedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := p.stmts[query]; s != nil {
		return s.QueryContext(ctx, args...)
	}
	return p.db.QueryContext(ctx, query, args...)
}

func (p *preparedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := p.stmts[query]; s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return p.db.QueryRowContext(ctx, query, args...)
}
