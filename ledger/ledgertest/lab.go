// Package ledgertest holds what tests, drills and benchmarks need to know
// about the database under a ledger, so that none of them asks which one
// it is: injected write failures, table sizes, the server's settings and
// process. Each function speaks both databases' SQL here, beside the
// ledger, as the ledger's drivers do.
package ledgertest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet/ledger"
)

// FailWrites makes every op ("INSERT", "UPDATE" or "DELETE") on table fail
// with message while the table drill_fault has a row: a real database
// failure, raised by a trigger. It creates drill_fault with one row; delete
// that row to heal the database, insert one to fail it again.
func FailWrites(ctx context.Context, db *ledger.DB, op, table, message string) error {
	if op != "INSERT" && op != "UPDATE" && op != "DELETE" {
		return fmt.Errorf("ledgertest: op %q is not INSERT, UPDATE or DELETE", op)
	}
	if strings.ContainsAny(table+message, `"';$`) || strings.ContainsAny(table, " \n") {
		return fmt.Errorf("ledgertest: table and message may hold no quote or semicolon")
	}
	name := "drill_fail_" + strings.ToLower(op) + "_" + table
	stmts := []string{`CREATE TABLE IF NOT EXISTS drill_fault (on_ INTEGER)`, `INSERT INTO drill_fault VALUES (1)`}
	if db.Dialect() == ledger.Postgres {
		stmts = append(stmts, `CREATE FUNCTION `+name+`() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF (SELECT COUNT(*) FROM drill_fault) > 0 THEN RAISE EXCEPTION '`+message+`'; END IF;
				IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER `+name+` BEFORE `+op+` ON `+table+` FOR EACH ROW EXECUTE FUNCTION `+name+`()`)
	} else {
		stmts = append(stmts, `CREATE TRIGGER `+name+` BEFORE `+op+` ON `+table+`
			WHEN (SELECT COUNT(*) FROM drill_fault) > 0 BEGIN SELECT RAISE(ABORT, '`+message+`'); END`)
	}
	for _, q := range stmts {
		if _, err := db.Writer().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("ledgertest: fail writes: %w", err)
		}
	}
	return nil
}

// SQLiteSettings is what Settings says of every SQLite ledger: the
// settings ledger.Open gives it.
const SQLiteSettings = "SQLite WAL, synchronous=FULL (fsync per commit), busy_timeout 10s, one writer connection"

// Settings describes the durability settings the database runs under, for
// a benchmark's figure.
func Settings(ctx context.Context, db *ledger.DB) string {
	if db.Dialect() != ledger.Postgres {
		return SQLiteSettings
	}
	show := func(name string) string {
		var v string
		if err := db.Writer().QueryRowContext(ctx, "SHOW "+name).Scan(&v); err != nil {
			return "?"
		}
		return v
	}
	return fmt.Sprintf("PostgreSQL %s, fsync=%s, synchronous_commit=%s, full_page_writes=%s; pool of %d per process",
		show("server_version"), show("fsync"), show("synchronous_commit"), show("full_page_writes"), ledger.PostgresMaxConns)
}

// ServerBackend returns the process ID of the database server's backend
// serving this session and when the server started; ok is false when the
// database has no server (SQLite) or does not say.
func ServerBackend(ctx context.Context, db *ledger.DB) (pid int, started time.Time, ok bool) {
	if db.Dialect() != ledger.Postgres {
		return 0, time.Time{}, false
	}
	if err := db.Writer().QueryRowContext(ctx, `SELECT pg_backend_pid(), pg_postmaster_start_time()`).Scan(&pid, &started); err != nil {
		return 0, time.Time{}, false
	}
	return pid, started, true
}

// RiverAttempts is every River attempt made so far: each River job's
// attempt count plus the snoozes its metadata counts (a snooze takes an
// attempt back).
func RiverAttempts(ctx context.Context, db *ledger.DB) (int, error) {
	snoozes := `COALESCE(SUM(json_extract(metadata, '$.snoozes')), 0)`
	if db.Dialect() == ledger.Postgres {
		snoozes = `COALESCE(SUM((metadata->>'snoozes')::int), 0)`
	}
	var n int
	err := db.Reader().QueryRowContext(ctx, `SELECT COALESCE(SUM(attempt), 0) + `+snoozes+` FROM river_job`).Scan(&n)
	return n, err
}

// Table is one table's size on disk.
type Table struct {
	Name  string
	Bytes int64 // with its indexes
	Rows  int64
	// LiveBytes (PostgreSQL) is the table with its indexes once VACUUM
	// FULL has rewritten them: the rows and index entries alone, without
	// the space VACUUM freed that PostgreSQL keeps allocated for later
	// rows. Zero elsewhere.
	LiveBytes int64
}

// Tables returns every table's size, largest first: after a VACUUM on
// PostgreSQL (and LiveBytes after a VACUUM FULL), after a WAL checkpoint
// on SQLite (an index counted toward its table).
func Tables(ctx context.Context, db *ledger.DB) ([]Table, error) {
	w := db.Writer()
	pg := db.Dialect() == ledger.Postgres
	var q string
	if pg {
		if _, err := w.ExecContext(ctx, `VACUUM`); err != nil {
			return nil, err
		}
		q = `SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
			WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' ORDER BY 2 DESC`
	} else {
		if _, err := w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return nil, err
		}
		q = `SELECT COALESCE(m.tbl_name, s.name), SUM(s.pgsize) FROM dbstat s LEFT JOIN sqlite_master m ON m.name = s.name
			GROUP BY 1 ORDER BY 2 DESC`
	}
	rows, err := w.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	var out []Table
	for rows.Next() {
		var t Table
		if err := rows.Scan(&t.Name, &t.Bytes); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		if strings.ContainsAny(out[i].Name, `"' ;`) {
			continue
		}
		_ = w.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+out[i].Name).Scan(&out[i].Rows)
	}
	if pg {
		if _, err := w.ExecContext(ctx, `VACUUM FULL`); err != nil {
			return nil, err
		}
		for i := range out {
			if err := w.QueryRowContext(ctx, `SELECT pg_total_relation_size(to_regclass($1))`, out[i].Name).Scan(&out[i].LiveBytes); err != nil {
				return nil, fmt.Errorf("live size of %s: %w", out[i].Name, err)
			}
		}
	}
	return out, nil
}

// JSONText is the SQL expression that reads key of the JSON object in
// column as text, on this database.
func JSONText(db *ledger.DB, column, key string) string {
	if db.Dialect() == ledger.Postgres {
		return column + "->>'" + key + "'"
	}
	return "json_extract(" + column + ", '$." + key + "')"
}

// Holding scans every column of every table that can hold text (text,
// JSON and blobs; River's tables included) for marker and returns, by
// "table.column", how many rows hold it, and how many columns it scanned.
func Holding(ctx context.Context, db *ledger.DB, marker string) (map[string]int, int, error) {
	type column struct{ table, name, match string }
	var cols []column
	q := `SELECT m.name, p.name, p.type FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table'`
	pg := db.Dialect() == ledger.Postgres
	if pg {
		q = `SELECT table_name, column_name, data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'bytea', 'ARRAY')`
	}
	rows, err := db.Writer().QueryContext(ctx, q)
	if err != nil {
		return nil, 0, fmt.Errorf("list columns: %w", err)
	}
	for rows.Next() {
		var c column
		var typ string
		if err := rows.Scan(&c.table, &c.name, &typ); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("list columns: %w", err)
		}
		switch {
		case !pg:
			// Every SQLite column may hold text whatever its type.
			c.match = fmt.Sprintf(`instr(CAST(%q AS BLOB), CAST($1 AS BLOB)) > 0`, c.name)
		case typ == "bytea":
			c.match = fmt.Sprintf(`position(convert_to($1, 'UTF8') in %q) > 0`, c.name)
		default:
			c.match = fmt.Sprintf(`strpos(CAST(%q AS TEXT), $1) > 0`, c.name)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list columns: %w", err)
	}
	found := map[string]int{}
	for _, c := range cols {
		var n int
		if err := db.Writer().QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*) FROM %q WHERE %s`, c.table, c.match), marker).Scan(&n); err != nil {
			return nil, 0, fmt.Errorf("scan %s.%s: %w", c.table, c.name, err)
		}
		if n > 0 {
			found[c.table+"."+c.name] = n
		}
	}
	return found, len(cols), nil
}
