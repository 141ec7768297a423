package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/stetlabs/stet/ledger"
)

// A failed step inside a savepoint is undone and the transaction goes on:
// the work before it and after it commits; a step that succeeds stays.
func TestSavepoint(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		errStep := errors.New("step failed")
		insert := func(tx *sql.Tx, id string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (at, tenant_id, actor, action, object_type, object_id)
				VALUES (0, 'demo', 'test', 'savepoint', 'test', $1)`, id)
			return err
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if err := insert(tx, "before"); err != nil {
				return err
			}
			if err := ledger.Savepoint(ctx, tx, "kept", func() error { return insert(tx, "kept") }); err != nil {
				return err
			}
			err := ledger.Savepoint(ctx, tx, "undone", func() error {
				if err := insert(tx, "undone"); err != nil {
					return err
				}
				return errStep
			})
			if !errors.Is(err, errStep) || errors.Is(err, ledger.ErrSavepoint) {
				t.Errorf("Savepoint(failing step) = %v, want the step's error", err)
			}
			if err := ledger.Savepoint(ctx, tx, "bad name; DROP", func() error { return nil }); !errors.Is(err, ledger.ErrSavepoint) {
				t.Errorf("Savepoint(bad name) = %v, want ErrSavepoint", err)
			}
			return insert(tx, "after")
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		rows, err := db.Writer().QueryContext(ctx, `SELECT object_id FROM audit_log WHERE action = 'savepoint' ORDER BY object_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
		}
		if want := []string{"after", "before", "kept"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("rows after commit = %v, want %v", got, want)
		}
	})
}
