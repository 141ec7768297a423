// Package testdb gives each test its own ledger database: a temporary SQLite
// file, or a fresh schema on the PostgreSQL server named by
// STET_TEST_DATABASE_URL (scripts/pg-test.sh starts one). Schemas are
// dropped when the test ends.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/stetlabs/stet/ledger"
)

// EnvURL names the variable holding the test server's URL.
const EnvURL = "STET_TEST_DATABASE_URL"

// Dialects returns the dialects to test: sqlite always, postgres when
// STET_TEST_DATABASE_URL is set.
func Dialects() []ledger.Dialect {
	if os.Getenv(EnvURL) != "" {
		return []ledger.Dialect{ledger.SQLite, ledger.Postgres}
	}
	return []ledger.Dialect{ledger.SQLite}
}

// Default is the dialect of suites that run once: postgres when
// STET_TEST_DATABASE_URL is set, else sqlite.
func Default() ledger.Dialect {
	if os.Getenv(EnvURL) != "" {
		return ledger.Postgres
	}
	return ledger.SQLite
}

// T is what URL needs of its test: *testing.T has it, and so does the
// runner of stetlab drill (lab/drill/recovery).
type T interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Skip(args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// URL returns a fresh database URL of dialect for t.
func URL(t T, dialect ledger.Dialect) string {
	t.Helper()
	if dialect == ledger.SQLite {
		return "sqlite://" + filepath.Join(t.TempDir(), "stet.db")
	}
	base := os.Getenv(EnvURL)
	if base == "" {
		t.Skip("postgres: " + EnvURL + " is not set")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		admin.Close()
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
