package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
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

// acceptTenantBatch accepts a batch-mode report of tenant and returns its
// job ID.
func acceptTenantBatch(t *testing.T, db *ledger.DB, tenant, ext string) string {
	t.Helper()
	ctx := context.Background()
	var res ledger.AcceptResult
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, _, err = db.AcceptOne(ctx, tx, ledger.AcceptParams{
			TenantID: tenant, SourceID: tenant + "-reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
			ExternalID: ext, Revision: 1, Text: stet.NewText("text of " + ext), DeliveryKey: "d-" + ext, BodySHA256: stet.SHA256Hex([]byte(ext)),
			PolicyID: "standard", PolicyHash: (&stet.Policy{ID: "standard", Processors: []string{"p1"}}).Hash(),
			ProfileID: "moderation", ProfileVersion: 1, Mode: stet.ModeBatch, Now: t0,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.JobID
}

// Invariants 4 and 5 for one tenant report only the batches holding its
// jobs, each counting only its items; every tenant's check (an admin's)
// counts all of them.
func TestInvariantBatchesByTenant(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		demo := acceptTenantBatch(t, db, "demo", "d1")
		for _, ext := range []string{"o1", "o2", "o3"} {
			acceptTenantBatch(t, db, "other", ext)
		}
		pending, err := ledger.PendingBatchJobs(ctx, w, 100)
		if err != nil || len(pending) != 4 {
			t.Fatalf("PendingBatchJobs = %d, %v; want 4", len(pending), err)
		}
		// bat_shared: demo's job and two of other's, unknown; bat_other:
		// one of other's, completed and not applied.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := ledger.CreateBatch(ctx, tx, "bat_shared", "p1", pending[:3], t0); err != nil {
				return err
			}
			_, err := ledger.CreateBatch(ctx, tx, "bat_other", "p1", pending[3:], t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.MarkUnknown(ctx, w, "bat_shared", "lost", t0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Exec(`UPDATE batches SET state = 'completed', ended_at = $1 WHERE id = 'bat_other'`, t0.UnixMicro()); err != nil {
			t.Fatal(err)
		}
		p := ledger.CheckParams{Now: t0.Add(time.Hour), SLA: 48 * time.Hour, BatchSLA: 48 * time.Hour, LeaseGrace: time.Hour}
		batchViolations := func(vs []ledger.Violation) string {
			var out []string
			for _, v := range vs {
				if v.Invariant == 4 || v.Invariant == 5 {
					out = append(out, fmt.Sprintf("%d %s %s n=%d", v.Invariant, v.BatchID, v.TenantID, v.Count))
				}
			}
			return strings.Join(out, "; ")
		}
		for _, tt := range []struct{ tenant, want string }{
			{"demo", "5 bat_shared demo n=1"},
			{"other", "4 bat_other other n=1; 5 bat_shared other n=2"},
			{"third", ""},
		} {
			vs, err := db.CheckTenantInvariants(ctx, tt.tenant, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := batchViolations(vs); got != tt.want {
				t.Errorf("CheckTenantInvariants(%s) batches = %q, want %q", tt.tenant, got, tt.want)
			}
		}
		vs, err := db.CheckInvariants(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := batchViolations(vs), "4 bat_other * n=1; 5 bat_shared * n=3"; got != want {
			t.Errorf("CheckInvariants batches = %q, want %q", got, want)
		}
		// Once demo's item is applied, bat_shared's unapplied work is
		// other's alone: demo's TenantBatches counts its one item, applied.
		if _, err := w.Exec(`UPDATE batch_items SET applied_at = $1 WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($2))`,
			t0.UnixMicro(), demo); err != nil {
			t.Fatal(err)
		}
		bs, err := db.TenantBatches(ctx, "demo", 10)
		if err != nil || len(bs) != 1 || bs[0].ID != "bat_shared" || bs[0].ItemCount != 1 || bs[0].AppliedCount != 1 {
			t.Errorf("TenantBatches(demo) = %+v, %v; want bat_shared with 1 item, 1 applied", bs, err)
		}
	})
}
