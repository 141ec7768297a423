package ledger_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// acceptBatch accepts a batch-mode report and returns its job ID.
func acceptBatch(t *testing.T, db *ledger.DB, ext string) string {
	t.Helper()
	ctx := context.Background()
	var res ledger.AcceptResult
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, _, err = db.AcceptOne(ctx, tx, ledger.AcceptParams{
			TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
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

func TestBatchLifecycle(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		acceptBatch(t, db, "a")
		acceptBatch(t, db, "b")
		acceptBatch(t, db, "c")
		accept(t, db, "sync-1", 1, "a sync report", "d-sync") // sync jobs never wait for the assembler

		pending, err := ledger.PendingBatchJobs(ctx, w, 100)
		if err != nil || len(pending) != 3 {
			t.Fatalf("PendingBatchJobs = %d jobs, %v; want 3", len(pending), err)
		}
		// A racing assembler took job c first: the batch skips it.
		var created int
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := ledger.CreateBatch(ctx, tx, "bat_other", "p1", pending[2:], t0); err != nil {
				return err
			}
			created, err = ledger.CreateBatch(ctx, tx, "bat_1", "p1", pending, t0)
			return err
		})
		if err != nil || created != 2 {
			t.Fatalf("CreateBatch = %d, %v; want 2 (one job already batched)", created, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM batch_items WHERE batch_id = 'bat_1'`); n != 2 {
			t.Errorf("items of bat_1 = %d, want 2", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'batched'`); n != 3 {
			t.Errorf("batched jobs = %d, want 3", n)
		}
		if p, _ := ledger.PendingBatchJobs(ctx, w, 100); len(p) != 0 {
			t.Errorf("PendingBatchJobs after assembly = %d, want 0", len(p))
		}

		// One worker at a time.
		if _, err := ledger.ClaimBatch(ctx, w, "bat_1", t0, time.Minute); err != nil {
			t.Fatalf("ClaimBatch = %v", err)
		}
		if _, err := ledger.ClaimBatch(ctx, w, "bat_1", t0.Add(time.Second), time.Minute); err != ledger.ErrNotClaimable {
			t.Errorf("second ClaimBatch = %v, want ErrNotClaimable", err)
		}
		if _, err := ledger.ClaimBatch(ctx, w, "bat_1", t0.Add(2*time.Minute), time.Minute); err != nil {
			t.Errorf("ClaimBatch after the lease = %v", err)
		}

		items, err := ledger.BatchItems(ctx, w, "bat_1")
		if err != nil || len(items) != 2 {
			t.Fatalf("BatchItems = %v, %v", items, err)
		}
		subs := []ledger.SubmitItem{{JobID: items[0].JobID, Token: items[0].Token, InputSHA256: "h0"}, {JobID: items[1].JobID, Token: items[1].Token, InputSHA256: "h1"}}
		submit := func() error {
			return db.InTx(ctx, func(tx *sql.Tx) error {
				return ledger.MarkSubmitStarted(ctx, tx, "bat_1", "p1", "file-1", subs, t0)
			})
		}
		if err := submit(); err != nil {
			t.Fatal(err)
		}
		if err := submit(); err != nil { // an ambiguous resend records no second attempt
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE batch_id = 'bat_1'`); n != 2 {
			t.Errorf("attempts of bat_1 = %d, want 2 (one per item, however often submission is tried)", n)
		}
		if err := ledger.MarkSubmitted(ctx, w, "bat_1", stet.BatchHandle{ProviderID: "prov-1"}, t0.Add(30*time.Second), t0); err != nil {
			t.Fatal(err)
		}
		if err := ledger.MarkSubmitted(ctx, w, "bat_1", stet.BatchHandle{ProviderID: "prov-2"}, t0, t0); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Errorf("second MarkSubmitted = %v, want a conflict", err)
		}
		got, err := ledger.GetBatch(ctx, w, "prov-1") // by the provider's ID too
		if err != nil || got.ID != "bat_1" || got.State != stet.BatchSubmitted || got.InputFileID != "file-1" || !got.NextPollAt.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("GetBatch(provider ID) = %+v, %v", got, err)
		}

		st := &stet.BatchStatus{State: stet.BatchCompleted, ProviderState: "completed", OutputFileID: "out-1", ResultsExpireAt: t0.Add(24 * time.Hour)}
		if err := ledger.RecordPoll(ctx, w, "bat_1", st, t0.Add(time.Minute), t0); err != nil {
			t.Fatal(err)
		}
		items, _ = ledger.BatchItems(ctx, w, "bat_1")
		apply := func(it ledger.BatchItem, ok bool) string {
			var out string
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				a := ledger.ApplyItem{BatchID: "bat_1", Item: it, Now: t0,
					Result: ledger.AttemptResult{Status: stet.AttemptSucceeded, Now: t0}}
				if ok {
					a.Artifact = &ledger.SaveArtifactParams{Output: []byte(`{"category":"none"}`), Raw: []byte(`{}`), SchemaVersion: "moderation@1", ProcessorID: "p1"}
				} else {
					a.Result.Status, a.Result.FailureClass, a.Route = stet.AttemptFailed, stet.FailureTransient, "batch"
				}
				var err error
				out, err = db.ApplyBatchItem(ctx, tx, a)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if got := apply(items[0], true); got != ledger.ApplySucceeded {
			t.Errorf("apply ok item = %s, want %s", got, ledger.ApplySucceeded)
		}
		if got := apply(items[0], true); got != ledger.ApplySkipped {
			t.Errorf("apply ok item again = %s, want %s", got, ledger.ApplySkipped)
		}
		if got := apply(items[1], false); got != ledger.ApplyFailed {
			t.Errorf("apply expired item = %s, want %s", got, ledger.ApplyFailed)
		}
		if err := ledger.FinishApply(ctx, w, "bat_1", t0); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM artifacts`); n != 1 {
			t.Errorf("artifacts = %d, want 1", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'extracted'`); n != 1 {
			t.Errorf("extracted jobs = %d, want 1", n)
		}
		// The expired item's job waits for the next batch.
		if p, _ := ledger.PendingBatchJobs(ctx, w, 100); len(p) != 1 || p[0].ID != items[1].JobID {
			t.Errorf("PendingBatchJobs after an expired item = %+v, want that item's job", p)
		}
		got, _ = ledger.GetBatch(ctx, w, "bat_1")
		if got.AppliedAt.IsZero() || got.AppliedCount != 2 || got.ResultsFetchedAt.IsZero() {
			t.Errorf("batch after apply = %+v, want applied 2 of 2", got)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE batch_id = 'bat_1' AND status = 'succeeded'`); n != 1 {
			t.Errorf("succeeded batch attempts = %d, want 1", n)
		}
	})
}

func TestBatchInvariants(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		acceptBatch(t, db, "a")
		acceptBatch(t, db, "b")
		pending, _ := ledger.PendingBatchJobs(ctx, w, 10)
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := ledger.CreateBatch(ctx, tx, "bat_done", "p1", pending[:1], t0); err != nil {
				return err
			}
			_, err := ledger.CreateBatch(ctx, tx, "bat_lost", "p1", pending[1:], t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.MarkSubmitted(ctx, w, "bat_done", stet.BatchHandle{ProviderID: "p-1"}, t0, t0); err != nil {
			t.Fatal(err)
		}
		if err := ledger.RecordPoll(ctx, w, "bat_done", &stet.BatchStatus{State: stet.BatchCompleted}, t0, t0); err != nil {
			t.Fatal(err)
		}
		if err := ledger.MarkUnknown(ctx, w, "bat_lost", "test", t0); err != nil {
			t.Fatal(err)
		}
		// Within the apply grace, a batch that ended is not yet a violation…
		vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(time.Minute), SLA: 48 * time.Hour, LeaseGrace: time.Minute})
		if err != nil || len(vs) != 1 || vs[0].Name != ledger.InvBatchUnknown {
			t.Errorf("violations within the grace = %+v, %v; want only batch_unknown", vs, err)
		}
		// …unless the provider's retention of its results has passed.
		if _, err := w.Exec(`UPDATE batches SET results_expire_at = $1 WHERE id = 'bat_done'`, t0.Add(30*time.Second).UnixMicro()); err != nil {
			t.Fatal(err)
		}
		vs, err = db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(time.Minute), SLA: 48 * time.Hour, LeaseGrace: time.Minute})
		if err != nil || len(vs) != 2 {
			t.Errorf("violations with the results expired = %+v, %v; want batch_not_applied and batch_unknown", vs, err)
		}
		vs, err = db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(time.Hour), SLA: 48 * time.Hour, LeaseGrace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]string{}
		for _, v := range vs {
			found[v.Name] = v.BatchID
		}
		if found[ledger.InvBatchNotApplied] != "bat_done" || found[ledger.InvBatchUnknown] != "bat_lost" || len(vs) != 2 {
			t.Errorf("violations = %+v, want batch_not_applied for bat_done and batch_unknown for bat_lost", vs)
		}
		// Resubmitting the unknown batch clears invariant 5.
		if err := ledger.ResetForResubmit(ctx, w, "bat_lost", t0); err != nil {
			t.Fatal(err)
		}
		if err := ledger.ResetForResubmit(ctx, w, "bat_done", t0); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Errorf("ResetForResubmit of a submitted batch = %v, want a conflict", err)
		}
	})
}

// A batch whose River job was lost is found again: unfinished, its next
// poll long past, its lease free.
func TestOverdueBatches(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		acceptBatch(t, db, "a")
		acceptBatch(t, db, "b")
		pending, _ := ledger.PendingBatchJobs(ctx, w, 10)
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := ledger.CreateBatch(ctx, tx, "bat_1", "p1", pending[:1], t0); err != nil {
				return err
			}
			_, err := ledger.CreateBatch(ctx, tx, "bat_2", "p1", pending[1:], t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.MarkSubmitted(ctx, w, "bat_1", stet.BatchHandle{ProviderID: "p-1"}, t0.Add(time.Minute), t0); err != nil {
			t.Fatal(err)
		}
		at := func(now time.Time) []string {
			ids, err := ledger.OverdueBatches(ctx, w, now, 15*time.Minute, 10)
			if err != nil {
				t.Fatal(err)
			}
			return ids
		}
		if ids := at(t0.Add(10 * time.Minute)); len(ids) != 0 {
			t.Errorf("overdue at +10m = %v, want none", ids)
		}
		if ids := at(t0.Add(20 * time.Minute)); len(ids) != 2 {
			t.Errorf("overdue at +20m = %v, want both (bat_1's poll is 19m late, bat_2 untouched for 20m)", ids)
		}
		if _, err := ledger.ClaimBatch(ctx, w, "bat_1", t0.Add(20*time.Minute), time.Hour); err != nil {
			t.Fatal(err)
		}
		if ids := at(t0.Add(21 * time.Minute)); len(ids) != 1 || ids[0] != "bat_2" {
			t.Errorf("overdue with bat_1 leased = %v, want [bat_2]", ids)
		}
		if err := ledger.MarkUnknown(ctx, w, "bat_2", "test", t0); err != nil {
			t.Fatal(err)
		}
		if ids := at(t0.Add(21 * time.Minute)); len(ids) != 0 {
			t.Errorf("overdue with bat_2 unknown = %v, want none (an operator decides)", ids)
		}
	})
}
