package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

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
	return &cachingConn{conn: conn, stmts: map[stmtKey]*cachedStmt{}}, nil
}

func (c *stmtCacheConnector) Driver() driver.Driver { return c.base.Driver() }

type cachedStmt struct {
	stmt driver.Stmt
	busy bool // rows of this statement are open
}

// cachingConn is a SQLite connection with a statement cache. It forwards
// every optional interface the SQLite connection implements.
type cachingConn struct {
	conn   driver.Conn
	stmts  map[stmtKey]*cachedStmt
	limits map[string][]int // query → its LIMIT parameters' ordinals
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
func (c *cachingConn) cached(ctx context.Context, query string, args []driver.NamedValue) *cachedStmt {
	key := stmtKey{query: query}
	if lim := c.limitParams(query); len(lim) > 0 {
		key.limits = limitValues(lim, args)
	}
	if s := c.stmts[key]; s != nil {
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
	c.stmts[key] = s
	return s
}

// stmtKey is a cached statement's key: its text and, for a statement with
// a parameter LIMIT, the values bound to it (below).
type stmtKey struct {
	query  string
	limits string
}

// SQLite (built with STAT4, as modernc's is) re-prepares a statement whose
// LIMIT is a parameter every time that parameter is bound to a different
// value: the planner used the value. River's fetch (JobGetAvailable) is
// such a statement, its limit the producer's free worker slots, and each
// queue fetches with its own: alternating queues on one connection
// re-prepared the fetch at nearly every call (40 % of a paused process's
// CPU; 39 µs a fetch against 16 µs with the limit held, in a benchmark of
// the statement alone). So a statement with a parameter LIMIT is cached
// once per limit value, each prepared statement always bound to the same
// one.

// limitParams returns the ordinals of the parameters query uses as a LIMIT
// ("LIMIT ?5", "LIMIT $2"), memoized per query.
func (c *cachingConn) limitParams(query string) []int {
	if c.limits == nil {
		c.limits = map[string][]int{}
	}
	if l, ok := c.limits[query]; ok {
		return l
	}
	l := parseLimitParams(query)
	if len(c.limits) < maxCachedStmts {
		c.limits[query] = l
	}
	return l
}

func parseLimitParams(query string) []int {
	var out []int
	rest := query
	for {
		i := strings.Index(strings.ToUpper(rest), "LIMIT")
		if i < 0 {
			return out
		}
		rest = rest[i+len("LIMIT"):]
		p := strings.TrimLeft(rest, " \t\n\r")
		if len(p) < 2 || (p[0] != '?' && p[0] != '$') {
			continue
		}
		n := 0
		j := 1
		for ; j < len(p) && p[j] >= '0' && p[j] <= '9'; j++ {
			n = n*10 + int(p[j]-'0')
		}
		if j > 1 && n > 0 {
			out = append(out, n)
		}
	}
}

// limitValues encodes the values args bind to the LIMIT parameters lim.
func limitValues(lim []int, args []driver.NamedValue) string {
	var b []byte
	for _, n := range lim {
		for _, a := range args {
			if a.Ordinal != n || a.Name != "" {
				continue
			}
			if v, ok := a.Value.(int64); ok {
				b = strconv.AppendInt(b, v, 10)
			} else {
				b = fmt.Append(b, a.Value)
			}
		}
		b = append(b, 0)
	}
	return string(b)
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if s := c.cached(ctx, query, args); s != nil {
		return s.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	}
	return c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s := c.cached(ctx, query, args)
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
