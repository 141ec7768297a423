package ledger

import (
	"context"
	"database/sql/driver"
	"errors"
	"reflect"

	"modernc.org/sqlite"
)

// SQLite parses a statement every time database/sql runs it with arguments,
// and parsing was most of stet's CPU: River's completion statement alone
// cost more than the rest of a stage. stmtCacheConnector wraps the SQLite
// driver so each connection prepares a statement once and reuses it. It is
// safe because database/sql never uses one connection from two goroutines,
// and a statement whose rows are still open is never reused: that query
// runs uncached instead. A multi-statement script (a migration) is safe to
// cache too: SQLite's driver keeps only single statements compiled and runs
// a script statement by statement each time.
type stmtCacheConnector struct {
	base driver.Connector
}

// maxCachedStmts bounds each connection's cache; queries past it run uncached.
const maxCachedStmts = 512

func newStmtCacheConnector(dsn string) (driver.Connector, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &stmtCacheConnector{base: c}, nil
}

func (c *stmtCacheConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cachingConn{conn: conn, stmts: map[string]*cachedStmt{}}, nil
}

func (c *stmtCacheConnector) Driver() driver.Driver { return c.base.Driver() }

type cachedStmt struct {
	stmt driver.Stmt
	busy bool // rows of this statement are open
}

// cachingConn is a SQLite connection with a statement cache. It forwards
// every optional interface the SQLite connection implements.
type cachingConn struct {
	conn  driver.Conn
	stmts map[string]*cachedStmt
}

var (
	_ driver.ConnBeginTx        = (*cachingConn)(nil)
	_ driver.ConnPrepareContext = (*cachingConn)(nil)
	_ driver.ExecerContext      = (*cachingConn)(nil)
	_ driver.QueryerContext     = (*cachingConn)(nil)
	_ driver.Pinger             = (*cachingConn)(nil)
	_ driver.SessionResetter    = (*cachingConn)(nil)
	_ driver.Validator          = (*cachingConn)(nil)
)

func (c *cachingConn) Prepare(query string) (driver.Stmt, error) { return c.conn.Prepare(query) }

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *cachingConn) Begin() (driver.Tx, error) {
	return c.conn.(driver.ConnBeginTx).BeginTx(context.Background(), driver.TxOptions{})
}

func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *cachingConn) Close() error {
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.stmt.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.conn.Close())...)
}

func (c *cachingConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

func (c *cachingConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *cachingConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }

// cached returns the connection's prepared statement for query, or nil if
// the query must run uncached.
func (c *cachingConn) cached(ctx context.Context, query string) *cachedStmt {
	if s := c.stmts[query]; s != nil {
		if s.busy {
			return nil
		}
		return s
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil
	}
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil // the uncached path reports the error
	}
	s := &cachedStmt{stmt: st}
	c.stmts[query] = s
	return s
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if s := c.cached(ctx, query); s != nil {
		return s.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	}
	return c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s := c.cached(ctx, query)
	if s == nil {
		return c.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	}
	rows, err := s.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &cachedRows{Rows: rows, s: s}, nil
}

// cachedRows frees its statement for reuse when closed.
type cachedRows struct {
	driver.Rows
	s *cachedStmt
}

func (r *cachedRows) Close() error {
	r.s.busy = false
	return r.Rows.Close()
}

// The column-type interfaces of SQLite's rows, forwarded.

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	return r.Rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
}

func (r *cachedRows) ColumnTypeLength(i int) (int64, bool) {
	return r.Rows.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
}

func (r *cachedRows) ColumnTypeNullable(i int) (bool, bool) {
	return r.Rows.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	return r.Rows.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
}

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	return r.Rows.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
}
