package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

func requestDeletion(t *testing.T, db *ledger.DB, r ledger.DeletionRequest) ledger.DeletionRequested {
	t.Helper()
	var out ledger.DeletionRequested
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		out, err = db.RequestDeletion(context.Background(), tx, r)
		return err
	})
	if err != nil {
		t.Fatalf("RequestDeletion(%+v) = %v", r, err)
	}
	return out
}

// The request cancels the report's unfinished jobs, writes the tombstone
// (by hash) and the tasks in one transaction; a claimed attempt's result
// is then refused as cancelled; intake of the identity is gone; a second
// request returns the same deletion.
func TestRequestDeletionCancelsAndTombstones(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "r-del", 1, "secret text", "d1")
		token, n, err := claim(t, db, res.JobID, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		out := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", SourceID: "reports", ExternalID: "r-del", Actor: "test", Now: t0})
		if !out.Created || out.ReportID != res.ReportID {
			t.Fatalf("RequestDeletion = %+v, want a new deletion of %s", out, res.ReportID)
		}
		var state string
		_ = db.Writer().QueryRow(`SELECT state FROM jobs WHERE public_id = $1`, ledger.StoredID(res.JobID)).Scan(&state)
		if state != string(stet.JobCancelled) {
			t.Errorf("job = %s, want cancelled", state)
		}
		if err := save(db, res.JobID, token, n); !errors.Is(err, ledger.ErrCancelled) {
			t.Errorf("SaveArtifact after the deletion = %v, want ErrCancelled", err)
		}
		again := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", SourceID: "reports", ExternalID: "r-del", Actor: "test", Now: t0})
		byID := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: res.ReportID, Actor: "test", Now: t0})
		if again.Created || again.DeletionID != out.DeletionID || byID.DeletionID != out.DeletionID {
			t.Errorf("second requests = %+v, %+v; want deletion %s", again, byID, out.DeletionID)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := db.RequestDeletion(ctx, tx, ledger.DeletionRequest{Tenant: "other", ReportID: res.ReportID, Now: t0})
			return err
		})
		if stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("another tenant's request = %v, want not found", err)
		}
		if gone := accept(t, db, "r-del", 2, "new text", "d2"); gone.Outcome != ledger.OutcomeGone {
			t.Errorf("intake of the deleted identity = %s, want gone", gone.Outcome)
		}
		var revs int
		_ = db.Writer().QueryRow(`SELECT COUNT(*) FROM revisions`).Scan(&revs)
		if revs != 1 {
			t.Errorf("revisions = %d, want 1 (nothing stored for the gone delivery)", revs)
		}
		d, err := db.GetDeletion(ctx, "demo", out.DeletionID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != stet.DeletionPending || len(d.Tasks) != len(ledger.LocalCopies)+1 || d.Tasks[0].Copy != ledger.CopyEncryptionKey {
			t.Errorf("deletion = %+v, want pending, local copies then provider_retention:p1", d)
		}
	})
}

// Invariant 6: a task not done past its due time, or past its expiry for
// a provider-held copy, is a violation; done tasks are not.
func TestInvariantDeletionOverdue(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "r-inv", 1, "text", "d1")
		if _, _, err := claim(t, db, res.JobID, 0, t0); err != nil { // p1 receives the text
			t.Fatal(err)
		}
		out := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: res.ReportID, Actor: "test", Now: t0})
		check := func(now time.Time) int {
			vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: now, SLA: 1000 * time.Hour, LeaseGrace: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, v := range vs {
				if v.Invariant == 6 && v.DeletionID == out.DeletionID {
					n++
				}
			}
			return n
		}
		if n := check(t0.Add(time.Minute)); n != 0 {
			t.Errorf("violations before due = %d, want 0", n)
		}
		if n := check(t0.Add(2 * time.Hour)); n != len(ledger.LocalCopies)+1 {
			t.Errorf("violations past due = %d, want %d", n, len(ledger.LocalCopies)+1)
		}
		for _, c := range ledger.LocalCopies {
			if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, c, stet.DeletionDone, "", time.Time{}, t0); err != nil {
				t.Fatal(err)
			}
		}
		// The processor keeps the call 30 days: unresolved, due at its expiry.
		if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, "provider_retention:p1", stet.DeletionUnresolved, "retention", t0.Add(30*24*time.Hour), t0); err != nil {
			t.Fatal(err)
		}
		if n := check(t0.Add(2 * time.Hour)); n != 0 {
			t.Errorf("violations with the retention not expired = %d, want 0", n)
		}
		if n := check(t0.Add(31 * 24 * time.Hour)); n != 1 {
			t.Errorf("violations past the retention's expiry = %d, want 1", n)
		}
		if s, err := ledger.FinishDeletion(ctx, db.Writer(), out.DeletionID, t0); err != nil || s != stet.DeletionUnresolved {
			t.Errorf("FinishDeletion = %s, %v; want unresolved", s, err)
		}
	})
}
