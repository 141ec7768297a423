package sqlite

import (
	"context"
	"database/sql/driver"
	"io"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseLimitParams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		query string
		want  []int
	}{
		{`SELECT id FROM t WHERE q = ?2 ORDER BY id LIMIT ?5`, []int{5}},
		{"SELECT id FROM t limit\n\t$3", []int{3}},
		{`SELECT id FROM (SELECT id FROM t LIMIT $1) LIMIT $2 OFFSET $3`, []int{1, 2}},
		{`SELECT id FROM t LIMIT 10`, nil},
		{`SELECT limit_value FROM t WHERE id = $1`, nil},
		{`SELECT id FROM t`, nil},
	} {
		if got := parseLimitParams(tt.query); !slices.Equal(got, tt.want) {
			t.Errorf("parseLimitParams(%q) = %v, want %v", tt.query, got, tt.want)
		}
	}
}

// A statement whose LIMIT is a parameter is cached once per limit value,
// so that SQLite never re-prepares it for a new value, and each answers
// with its own limit.
func TestStatementCacheKeysOnLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cn, err := newStmtCacheConnector("file:" + filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cn.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := raw.(*cachingConn)
	t.Cleanup(func() { c.Close() })
	if _, err := c.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t (id) VALUES (1), (2), (3), (4)`, nil); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT id FROM t WHERE id > ?1 ORDER BY id LIMIT ?2`
	for _, lim := range []int64{1, 3, 1, 3, 2} {
		rows, err := c.QueryContext(ctx, q, []driver.NamedValue{{Ordinal: 1, Value: int64(0)}, {Ordinal: 2, Value: lim}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		dest := make([]driver.Value, 1)
		for rows.Next(dest) != io.EOF {
			n++
		}
		rows.Close()
		if int64(n) != lim {
			t.Errorf("LIMIT %d answered %d rows", lim, n)
		}
	}
	var keys int
	for k := range c.stmts {
		if k.query == q {
			keys++
		}
	}
	if keys != 3 {
		t.Errorf("cached statements for the query = %d, want 3 (one per limit value)", keys)
	}
}
