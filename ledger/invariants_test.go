package ledger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stetlabs/stet/ledger"
)

// noRecord returns the job IDs invariant 1 reports, in the order given.
func noRecord(vs []ledger.Violation) []string {
	var out []string
	for _, v := range vs {
		if v.Invariant == 1 {
			out = append(out, v.JobID)
		}
	}
	return out
}

// TestInvariantNoRecordInFlight checks invariant 1 read by state: the
// oldest jobs first across states, the settled jobs (committed, manual)
// only in a full check or when an alert about them is open.
func TestInvariantNoRecordInFlight(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		// lost: committed, then its record removed behind stet's back.
		lost := accept(t, db, "r1", 1, "text one", "d1").JobID
		extractAndCommit(t, db, lost)
		if _, err := w.Exec(`DELETE FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, lost); err != nil {
			t.Fatal(err)
		}
		// fine: committed with its record.
		extractAndCommit(t, db, accept(t, db, "r2", 1, "text two", "d2").JobID)
		// queued (accepted) and held (extracting): in flight, no record.
		queued := accept(t, db, "r3", 1, "text three", "d3").JobID
		held := accept(t, db, "r4", 1, "text four", "d4").JobID
		if _, _, err := claim(t, db, held, 0, t0); err != nil {
			t.Fatal(err)
		}
		// Creation order across states: held, queued, lost.
		for i, id := range []string{held, queued, lost} {
			if _, err := w.Exec(`UPDATE jobs SET created_at = $1 WHERE public_id = stet_ulid($2)`, t0.Add(time.Duration(i)*time.Minute).UnixMicro(), id); err != nil {
				t.Fatal(err)
			}
		}
		check := func(inFlight bool, limit int) []string {
			t.Helper()
			vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(2 * time.Hour), SLA: time.Hour, LeaseGrace: 24 * time.Hour,
				Limit: limit, InFlight: inFlight})
			if err != nil {
				t.Fatal(err)
			}
			return noRecord(vs)
		}

		if got, want := check(false, 100), []string{held, queued, lost}; !slices.Equal(got, want) {
			t.Errorf("full check = %v, want %v (oldest first, the settled job too)", got, want)
		}
		if got, want := check(false, 2), []string{held, queued}; !slices.Equal(got, want) {
			t.Errorf("full check, limit 2 = %v, want %v", got, want)
		}
		if got, want := check(true, 100), []string{held, queued}; !slices.Equal(got, want) {
			t.Errorf("in-flight check, no alert open = %v, want %v", got, want)
		}

		// Once the full check's violations are alerts, the in-flight check
		// reads the settled job's alert again: it stays open.
		vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(2 * time.Hour), SLA: time.Hour, LeaseGrace: 24 * time.Hour, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.SyncAlerts(ctx, vs, 100, t0.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got, want := check(true, 100), []string{held, queued, lost}; !slices.Equal(got, want) {
			t.Errorf("in-flight check, alerts open = %v, want %v", got, want)
		}
		// A settled job that is cancelled needs no record: its alert goes.
		if _, err := w.Exec(`UPDATE jobs SET state = 'cancelled' WHERE public_id = stet_ulid($1)`, lost); err != nil {
			t.Fatal(err)
		}
		if got, want := check(true, 100), []string{held, queued}; !slices.Equal(got, want) {
			t.Errorf("in-flight check after the cancel = %v, want %v", got, want)
		}
	})
}

// TestInvariantManyAuthoritative checks invariant 2: while the unique index
// is in place no report can have two authoritative records; without it the
// records are read and the report is found.
func TestInvariantManyAuthoritative(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		first := accept(t, db, "r1", 1, "first text", "d1")
		extractAndCommit(t, db, first.JobID)
		second := accept(t, db, "r1", 2, "second text", "d2")
		extractAndCommit(t, db, second.JobID)
		many := func() []ledger.Violation {
			t.Helper()
			vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(time.Minute), SLA: time.Hour, LeaseGrace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var out []ledger.Violation
			for _, v := range vs {
				if v.Invariant == 2 {
					out = append(out, v)
				}
			}
			return out
		}
		if vs := many(); len(vs) != 0 {
			t.Fatalf("violations of invariant 2 = %+v, want none", vs)
		}
		if _, err := w.Exec(`UPDATE review_records SET authoritative = true`); err == nil {
			t.Fatal("a second authoritative record was stored with the unique index in place")
		}
		if _, err := w.Exec(`DROP INDEX review_records_one_authoritative`); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Exec(`UPDATE review_records SET authoritative = true`); err != nil {
			t.Fatal(err)
		}
		vs := many()
		if len(vs) != 1 || vs[0].ReportID != first.ReportID || vs[0].Count != 2 || vs[0].Revision != 2 {
			t.Errorf("violations of invariant 2 without the index = %+v, want report %s with 2 records", vs, first.ReportID)
		}
	})
}
