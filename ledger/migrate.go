package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

type migration struct {
	version int
	name    string
	sql     string
}

func (db *DB) migrations() ([]migration, error) {
	entries, err := fs.ReadDir(db.dialect.migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: bad version prefix", name)
		}
		b, err := fs.ReadFile(db.dialect.migrations, path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(name, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// LatestVersion is the newest migration this binary knows.
func (db *DB) LatestVersion() (int, error) {
	ms, err := db.migrations()
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].version, nil
}

// Migrate applies every embedded migration not yet applied, each in its own
// transaction. It refuses to run against a database whose ledger is newer
// than this binary knows.
func (db *DB) Migrate(ctx context.Context) ([]string, error) {
	var applied []string
	err := db.WithMigrationLock(ctx, func() error {
		var err error
		applied, err = db.migrate(ctx, 0)
		return err
	})
	return applied, err
}

// WithMigrationLock runs fn while holding the migration lock, so several
// processes starting at once migrate one after another. Run River's
// migrations inside it too.
func (db *DB) WithMigrationLock(ctx context.Context, fn func() error) error {
	unlock, err := db.dialect.lockMigrations(ctx, db.w)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

// migrate applies the migrations not yet applied, up to version upTo (0:
// all of them; a test builds an older ledger with it).
func (db *DB) migrate(ctx context.Context, upTo int) ([]string, error) {
	ms, err := db.migrations()
	if err != nil {
		return nil, err
	}
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS stet_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return nil, fmt.Errorf("create stet_migrations: %w", err)
	}
	current, err := db.currentVersion(ctx, db.w)
	if err != nil {
		return nil, err
	}
	if latest := ms[len(ms)-1].version; current > latest {
		return nil, fmt.Errorf("ledger schema version %d is newer than this stet knows (%d): upgrade stet", current, latest)
	}
	done, err := db.appliedVersions(ctx)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, m := range ms {
		// Every version not yet recorded, not only those above the newest:
		// a ledger migrated by a build that had 0006 but not yet 0005 still
		// gets 0005.
		if done[m.version] || upTo > 0 && m.version > upTo {
			continue
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO stet_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.version, m.name, micros(time.Now())) // the ledger holds no clock: when this process ran it
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.name, err)
		}
		applied = append(applied, m.name)
	}
	if upTo == 0 {
		if err := db.applyFunctions(ctx); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// applyFunctions brings the stored functions to the bodies of the
// driver's migrations/functions, one file per function: the one place each
// current body is read or changed. A function whose body the server already holds is left
// alone, so a ledger created by the numbered migrations changes nothing.
func (db *DB) applyFunctions(ctx context.Context) error {
	const dir = "migrations/functions"
	entries, err := fs.ReadDir(db.dialect.migrations, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the database has no stored functions
	}
	if err != nil {
		return fmt.Errorf("read stored functions: %w", err)
	}
	for _, e := range entries {
		file := e.Name()
		name, ok := strings.CutSuffix(file, ".sql")
		if !ok {
			continue
		}
		b, err := fs.ReadFile(db.dialect.migrations, path.Join(dir, file))
		if err != nil {
			return err
		}
		body, ok := functionBody(string(b))
		if !ok {
			return fmt.Errorf("stored function %s: no $$-quoted body", file)
		}
		var held string
		err = db.w.QueryRowContext(ctx, `SELECT prosrc FROM pg_proc WHERE proname = $1 AND pronamespace = current_schema()::regnamespace`, name).Scan(&held)
		if err == nil && held == body {
			continue
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read stored function %s: %w", name, err)
		}
		if _, err := db.w.ExecContext(ctx, string(b)); err != nil {
			return fmt.Errorf("stored function %s: %w", name, err)
		}
	}
	return nil
}

// functionBody is the text between a function file's first two $$.
func functionBody(sql string) (string, bool) {
	_, rest, ok := strings.Cut(sql, "$$")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "$$")
	return body, ok
}

// appliedVersions returns the versions stet_migrations records.
func (db *DB) appliedVersions(ctx context.Context) (map[int]bool, error) {
	rows, err := db.w.QueryContext(ctx, `SELECT version FROM stet_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		done[v] = true
	}
	return done, rows.Err()
}

func (db *DB) currentVersion(ctx context.Context, q Querier) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM stet_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read ledger version: %w", err)
	}
	return int(v.Int64), nil
}

// SchemaVersions returns the ledger's schema version and the newest this
// binary knows.
func (db *DB) SchemaVersions(ctx context.Context) (current, known int, err error) {
	known, err = db.LatestVersion()
	if err != nil {
		return 0, 0, err
	}
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS stet_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return 0, known, fmt.Errorf("read ledger version: %w", err)
	}
	current, err = db.currentVersion(ctx, db.w)
	return current, known, err
}

// MigrationsCurrent reports whether the ledger schema is exactly the version
// this binary knows: what /readyz checks.
func (db *DB) MigrationsCurrent(ctx context.Context) (bool, error) {
	latest, err := db.LatestVersion()
	if err != nil {
		return false, err
	}
	v, err := db.currentVersion(ctx, db.r)
	if err != nil {
		return false, err
	}
	return v == latest, nil
}

// CheckSchema says whether the ledger's schema is the one this binary
// knows, and which way to go if not.
func (db *DB) CheckSchema(ctx context.Context) error {
	current, known, err := db.SchemaVersions(ctx)
	switch {
	case err != nil:
		return err
	case current > known:
		return fmt.Errorf("ledger schema version %d is newer than this stet knows (%d): upgrade stet", current, known)
	case current < known:
		return fmt.Errorf("ledger schema version %d is older than this stet's (%d): run 'stet migrate'", current, known)
	}
	return nil
}
