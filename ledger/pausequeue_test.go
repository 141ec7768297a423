package ledger_test

import (
	"context"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Two intake transactions commit out of River ID order: the walk that marks
// a paused queue's jobs waiting sees the later River job while the earlier
// one is not visible yet. The next walk must still mark the earlier one's
// job waiting, so the walk does not move past River jobs that are still
// settling (PostgreSQL: IDs come from a sequence).
func TestMarkQueuedWaitingSeesLateCommits(t *testing.T) {
	t.Parallel()
	if !hasPostgres() {
		t.Skip("PostgreSQL only: set STET_TEST_DATABASE_URL")
	}
	ctx := context.Background()
	db := open(t, ledger.Postgres)
	migrateRiver(t, db)
	early := accept(t, db, "early", 1, "early text", "d-early")
	late := accept(t, db, "late", 1, "late text", "d-late")
	const insertRiver = `INSERT INTO river_job (args, kind, queue, max_attempts, state)
		VALUES (jsonb_build_object('job_id', $1::text), 'stet_extract', 'extract', 25, 'available') RETURNING id`

	// The early transaction takes its River ID first and commits last.
	tx, err := db.Writer().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var earlyID, lateID int64
	if err := tx.QueryRowContext(ctx, insertRiver, early.JobID).Scan(&earlyID); err != nil {
		t.Fatal(err)
	}
	if err := db.Writer().QueryRowContext(ctx, insertRiver, late.JobID).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	if lateID <= earlyID {
		t.Fatalf("river IDs %d then %d, want the late one higher", earlyID, lateID)
	}
	state := func(jobID string) stet.JobState {
		t.Helper()
		var s string
		if err := db.Writer().QueryRow(`SELECT state FROM jobs WHERE public_id = $1`, ledger.StoredID(jobID)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return stet.JobState(s)
	}

	marked, err := db.MarkQueuedWaiting(ctx, "extract", "stet_extract", 0, 100, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s := state(late.JobID); s != stet.JobWaiting {
		t.Fatalf("late job after the first walk = %s, want waiting", s)
	}
	if marked >= earlyID {
		t.Errorf("the first walk moved to River job %d, past the early one (%d) still committing", marked, earlyID)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkQueuedWaiting(ctx, "extract", "stet_extract", marked, 100, t0); err != nil {
		t.Fatal(err)
	}
	if s := state(early.JobID); s != stet.JobWaiting {
		t.Errorf("early job after the second walk = %s, want waiting", s)
	}
}
