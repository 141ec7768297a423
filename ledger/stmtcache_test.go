package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/stetlabs/stet/ledger"
)

// The statement cache reuses a statement only when its rows are closed: the
// same query nested inside its own iteration runs uncached and both answer
// in full.
func TestStatementCacheNestedQuery(t *testing.T) {
	t.Parallel()
	db := open(t, ledger.SQLite)
	for i := 0; i < 3; i++ {
		accept(t, db, fmt.Sprintf("r%d", i), 1, fmt.Sprintf("text %d", i), fmt.Sprintf("d%d", i))
	}
	const q = `SELECT id FROM reports WHERE tenant_id = $1 ORDER BY id`
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		for round := 0; round < 3; round++ { // the second and third rounds reuse the cached statement
			outer, err := tx.Query(q, "demo")
			if err != nil {
				return err
			}
			n := 0
			for outer.Next() {
				n++
				var inner int
				if err := tx.QueryRow(`SELECT COUNT(*) FROM (`+q+`)`, "demo").Scan(&inner); err != nil {
					return err
				}
				rows, err := tx.Query(q, "demo")
				if err != nil {
					return err
				}
				m := 0
				for rows.Next() {
					m++
				}
				rows.Close()
				if m != 3 || inner != 3 {
					return fmt.Errorf("nested query saw %d and %d rows, want 3", m, inner)
				}
			}
			if err := outer.Close(); err != nil {
				return err
			}
			if n != 3 {
				return fmt.Errorf("round %d: outer query saw %d rows, want 3", round, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Workers read from SQLite's read pool all at once. A read connection
// returned to the pool stays open, with its parsed schema and its cached
// statements: none is closed for being idle past a default limit and
// opened again at the next burst.
func TestSQLiteReadersStayOpen(t *testing.T) {
	t.Parallel()
	db := open(t, ledger.SQLite)
	job := accept(t, db, "r", 1, "text", "d").JobID
	ctx := context.Background()
	r := db.Reader()
	// Each reader holds its connection until all of them have one, so a
	// burst uses as many connections as it has readers however the
	// scheduler runs them.
	readers := r.Stats().MaxOpenConnections
	if readers <= 0 || readers > 8 {
		readers = 8
	}
	if readers < 2 {
		t.Fatalf("read pool allows %d connections, want at least 2", readers)
	}
	for round := 0; round < 20; round++ {
		var wg, held sync.WaitGroup
		errs := make(chan error, readers)
		held.Add(readers)
		for range readers {
			wg.Go(func() {
				c, err := r.Conn(ctx)
				held.Done()
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				held.Wait()
				if _, err := db.LoadWork(ctx, c, job); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	if st.OpenConnections < 2 || st.MaxIdleClosed != 0 {
		t.Fatalf("read pool after 20 bursts of 8 reads: %d open, %d closed as idle past the limit; want every one kept (MaxIdleClosed 0)",
			st.OpenConnections, st.MaxIdleClosed)
	}
}
