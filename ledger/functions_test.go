package ledger_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

// Each stored function's current body is one file of
// ledger/postgres/migrations/functions: after migrate the server holds exactly
// those bodies, every stet_ function has its file, and a body changed on
// the server is put back by the next migrate.
func TestStoredFunctionsFromTheirFiles(t *testing.T) {
	t.Parallel()
	if testdb.Default() != ledger.Postgres {
		t.Skip("stored functions are PostgreSQL's; set STET_TEST_DATABASE_URL")
	}
	db := open(t, ledger.Postgres)
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join("postgres", "migrations", "functions", "*.sql"))
	if err != nil || len(files) < 5 {
		t.Fatalf("function files = %v, %v", files, err)
	}
	bodies := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(b), "$$")
		if len(parts) < 3 {
			t.Fatalf("%s: no $$-quoted body", f)
		}
		bodies[strings.TrimSuffix(filepath.Base(f), ".sql")] = parts[1]
	}
	held := func() map[string]string {
		rows, err := db.Writer().Query(`SELECT proname, prosrc FROM pg_proc
			WHERE pronamespace = current_schema()::regnamespace AND proname LIKE 'stet\_%'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, src string
			if err := rows.Scan(&name, &src); err != nil {
				t.Fatal(err)
			}
			if _, dup := out[name]; dup {
				t.Errorf("two stored functions named %s", name)
			}
			out[name] = src
		}
		return out
	}
	check := func(when string) {
		t.Helper()
		got := held()
		for name, src := range got {
			if want, ok := bodies[name]; !ok {
				t.Errorf("%s: the server holds %s, which has no file", when, name)
			} else if src != want {
				t.Errorf("%s: %s differs from its file", when, name)
			}
		}
		if len(got) != len(bodies) {
			t.Errorf("%s: the server holds %d stet_ functions, the folder %d", when, len(got), len(bodies))
		}
	}
	check("after migrate")
	if _, err := db.Writer().Exec(`CREATE OR REPLACE FUNCTION stet_ulid(p_id TEXT) RETURNS BYTEA LANGUAGE plpgsql IMMUTABLE STRICT AS $$
		BEGIN RETURN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a changed body and migrate")
}
