package ledger_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// A commit writes one outbox row per subscribed destination in its own
// transaction, with a sequence per report; a decision another; the
// deletion seam notifies only the destinations that received the record
// and cancels what was never sent.
func TestOutboxAndDeletionSeam(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		err := db.SyncDestinations(ctx, []ledger.DestinationSpec{
			{SourceID: "reports", DestinationID: "a", Events: []string{ledger.EventCommitted, ledger.EventDecided}, MaxAge: time.Hour},
			{SourceID: "reports", DestinationID: "b", Events: []string{ledger.EventCommitted}, MaxAge: time.Hour},
			{SourceID: "other", DestinationID: "c", Events: []string{ledger.EventCommitted}, MaxAge: time.Hour},
		}, t0)
		if err != nil {
			t.Fatal(err)
		}
		r1 := accept(t, db, "ext-1", 1, "text one", "d1")
		rec := extractAndCommit(t, db, r1.JobID)
		commit(t, db, r1.JobID) // idempotent: no second row
		if n := count(t, db, `SELECT COUNT(*) FROM outbox WHERE record_id = $1 AND event = 'record.committed'`, rec); n != 2 {
			t.Fatalf("record.committed rows = %d, want 2 (destinations a and b)", n)
		}
		if _, err := db.Decide(ctx, ledger.DecideParams{Tenant: "demo", RecordID: rec, Decision: stet.DecisionApprove, Actor: "t", Now: t0}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM outbox WHERE record_id = $1 AND event = 'record.decided' AND destination_id = 'a'`, rec); n != 1 {
			t.Fatalf("record.decided rows for a = %d, want 1 (b does not take it)", n)
		}
		if n := count(t, db, `SELECT COUNT(DISTINCT sequence) FROM outbox WHERE record_id = $1`, rec); n != 2 {
			t.Errorf("distinct sequences = %d, want 2 (one per event)", n)
		}
		// a received the commit; b never was sent anything.
		rows, err := db.ClaimDeliveries(ctx, ledger.ClaimDeliveriesParams{SourceID: "reports", DestinationID: "a", Now: t0, Lease: time.Minute, Limit: 1})
		if err != nil || len(rows) != 1 || rows[0].WebhookID != ledger.WebhookID(rec, ledger.EventCommitted) {
			t.Fatalf("ClaimDeliveries = %+v, %v, want the commit of %s", rows, err, rec)
		}
		if err := db.FinishDelivery(ctx, ledger.FinishDeliveryParams{Delivery: rows[0], Outcome: ledger.OutcomeDelivered, Status: 200, Now: t0}); err != nil {
			t.Fatal(err)
		}
		var notified []string
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			notified, err = ledger.EnqueueRecordDeleted(ctx, tx, rec, t0.Add(time.Minute))
			return err
		})
		if err != nil || !slices.Equal(notified, []string{"a"}) {
			t.Fatalf("EnqueueRecordDeleted = %v, %v, want [a]", notified, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM outbox WHERE record_id = $1 AND state = 'cancelled'`, rec); n != 2 {
			t.Errorf("cancelled rows = %d, want 2 (a's decision, b's commit: never sent)", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM outbox WHERE webhook_id = $1 AND destination_id = 'a' AND state = 'pending'`,
			ledger.WebhookID(rec, ledger.EventDeleted)); n != 1 {
			t.Errorf("pending record.deleted rows for a = %d, want 1", n)
		}
	})
}
