package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Decisions are rows, sealed like the record: an approve, a reopen and an
// override leave two rows whose classification and note are ciphertext in
// the table and open in GetReview; a second reopen of a pending record is
// a conflict; retention purges the rows' content with the record's, and
// the deletion of the records' copy takes the rows too.
func TestDecisionRowsSealedPurgedDeleted(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		db.UseKeyring(keyring(t, mk("k1", 1)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		res := commitOne(t, db, "r-dec", "some text", "d1")
		recs, _, err := db.ListReview(ctx, ledger.ReviewFilter{Tenant: "demo"})
		if err != nil || len(recs) != 1 {
			t.Fatalf("ListReview = %v, %v", recs, err)
		}
		rec := recs[0].ID
		decide := func(d stet.Decision, class, note string) error {
			_, err := db.Decide(ctx, ledger.DecideParams{Tenant: "demo", RecordID: rec, Decision: d, Classification: json.RawMessage(class),
				Note: note, Actor: "token:rev", Now: t0})
			return err
		}
		if err := decide(stet.DecisionApprove, "", "CANARY-N1 looks fine"); err != nil {
			t.Fatal(err)
		}
		if err := decide(stet.DecisionReject, "", ""); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Fatalf("a decision on a decided record = %v, want a conflict", err)
		}
		reopen := func() error {
			_, err := db.Reopen(ctx, ledger.ReopenParams{Tenant: "demo", RecordID: rec, Actor: "token:ops", Reason: "audit sample", Now: t0})
			return err
		}
		if err := reopen(); err != nil {
			t.Fatal(err)
		}
		if err := reopen(); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Fatalf("a reopen of a pending record = %v, want a conflict", err)
		}
		if err := decide(stet.DecisionOverride, `{"category":"spam"}`, "CANARY-N2 it is spam"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM decisions WHERE classification NOT LIKE 'stet:v1:%' OR note NOT LIKE 'stet:v1:%'`); n != 0 {
			t.Errorf("decision rows with plaintext = %d, want 0", n)
		}
		r, err := db.GetReview(ctx, "demo", rec)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Decisions) != 2 || r.Decisions[0].Decision != stet.DecisionApprove || string(r.Decisions[0].Classification) != `{"category":"none"}` ||
			r.Decisions[0].Note != "CANARY-N1 looks fine" || r.Decisions[1].Decision != stet.DecisionOverride ||
			string(r.Decisions[1].Classification) != `{"category":"spam"}` || r.Decisions[1].Actor != "token:rev" || r.Reopens != 1 {
			t.Errorf("decisions = %+v (reopens %d), want the approve of the extracted classification, then the override", r.Decisions, r.Reopens)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM outbox`); n != 0 {
			t.Errorf("outbox rows = %d, want 0 (no destination configured)", n)
		}

		// Retention: the record's content and its decisions' go together.
		policyHash := (&stet.Policy{ID: "standard", Processors: []string{"p1"}}).Hash()
		if _, err := ledger.PurgeBatch(ctx, db.Writer(), ledger.PurgeRecords, policyHash, t0.Add(time.Hour), t0.Add(time.Hour), 100); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM decisions WHERE classification IS NOT NULL OR note IS NOT NULL OR purged_at IS NULL`); n != 0 {
			t.Errorf("decision rows with content after the purge = %d, want 0", n)
		}
		if r, err := db.GetReview(ctx, "demo", rec); err != nil || len(r.Decisions) != 2 || r.Decisions[1].Classification != nil {
			t.Errorf("decisions after the purge = %+v, %v; want two, without content", r, err)
		}

		// Deletion of the records' copy takes the decision rows.
		if err := ledger.DeleteLocalCopy(ctx, db.Writer(), ledger.CopyReviewRecords, res.ReportID, t0); err != nil {
			t.Fatal(err)
		}
		if n, err := ledger.VerifyLocalCopy(ctx, db.Writer(), ledger.CopyReviewRecords, res.ReportID); err != nil || n != 0 {
			t.Errorf("VerifyLocalCopy(review_records) = %d, %v; want 0", n, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM decisions`); n != 0 {
			t.Errorf("decision rows after the deletion = %d, want 0", n)
		}
		if _, err := db.GetReview(ctx, "demo", rec); !errors.Is(err, stet.ErrNotFound) && stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("GetReview after the deletion = %v, want not found", err)
		}
	})
}
