package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// insertRiver writes an available River extract job for a ledger job.
const insertRiver = `INSERT INTO river_job (args, kind, queue, max_attempts, state)
	VALUES (jsonb_build_object('job_id', $1::text), 'stet_extract', 'extract', 25, 'available') RETURNING id`

// jobState reads a ledger job's state.
func jobState(t *testing.T, db *ledger.DB, jobID string) stet.JobState {
	t.Helper()
	var s string
	if err := db.Writer().QueryRow(`SELECT state FROM jobs WHERE public_id = $1`, ledger.StoredID(jobID)).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return stet.JobState(s)
}

// Two intake transactions commit out of River ID order: the walk that marks
// a paused queue's jobs waiting sees the later River job while the earlier
// one is not visible yet. The next walk must still mark the earlier one's
// job waiting, so the walk does not move past River jobs that are still
// settling (PostgreSQL: IDs come from a sequence).
func TestMarkQueuedWaitingSeesLateCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := postgresWithRiver(t)
	early := accept(t, db, "early", 1, "early text", "d-early")
	late := accept(t, db, "late", 1, "late text", "d-late")

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

	walk, err := db.MarkQueuedWaiting(ctx, "extract", "stet_extract", ledger.QueueWalk{}, 100, 20, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s := jobState(t, db, late.JobID); s != stet.JobWaiting {
		t.Fatalf("late job after the first walk = %s, want waiting", s)
	}
	if walk.Settled >= earlyID {
		t.Errorf("the first walk settled at River job %d, past the early one (%d) still committing", walk.Settled, earlyID)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkQueuedWaiting(ctx, "extract", "stet_extract", walk, 100, 20, t0); err != nil {
		t.Fatal(err)
	}
	if s := jobState(t, db, early.JobID); s != stet.JobWaiting {
		t.Errorf("early job after the second walk = %s, want waiting", s)
	}
}

// A pause over a burst of new jobs shows them all waiting at once: the walk
// goes on past River jobs still settling (younger than 10 s) and marks them,
// page after page, though its settled point stays before the first of them.
// Before, a walk stopped at its first young page, and the rest of the burst
// showed as accepted until it was 10 s old. Once they are settled, one
// more walk reads them again and moves the settled point past them; a job
// whose River row commits late among them is marked then.
func TestMarkQueuedWaitingWalksPastYoungJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := postgresWithRiver(t)
	var jobs []string
	var first, last int64
	for i := range 5 {
		a := accept(t, db, fmt.Sprintf("young-%d", i), 1, "young text", fmt.Sprintf("d-young-%d", i))
		if err := db.Writer().QueryRowContext(ctx, insertRiver, a.JobID).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = last
		}
		jobs = append(jobs, a.JobID)
	}
	// One River row commits late, inside the range the walk passes.
	lateJob := accept(t, db, "young-late", 1, "young text", "d-young-late")
	tx, err := db.Writer().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var lateID int64
	if err := tx.QueryRowContext(ctx, insertRiver, lateJob.JobID).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	after := accept(t, db, "young-after", 1, "young text", "d-young-after") // a row after it, so the walk passes it
	if _, err := db.Writer().ExecContext(ctx, insertRiver, after.JobID); err != nil {
		t.Fatal(err)
	}
	jobs = append(jobs, after.JobID)

	// Pages of two: three pages and more hold the jobs.
	walk, err := db.MarkQueuedWaiting(ctx, "extract", "stet_extract", ledger.QueueWalk{}, 2, 20, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if s := jobState(t, db, j); s != stet.JobWaiting {
			t.Errorf("job %s after one walk = %s, want waiting", j, s)
		}
	}
	if walk.Settled >= first || walk.Scanned <= lateID {
		t.Errorf("after one walk over young jobs %d…%d: %+v, want settled before the first and scanned past %d", first, last, walk, lateID)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Ten seconds on: every River row is settled.
	if _, err := db.Writer().ExecContext(ctx, `UPDATE river_job SET created_at = created_at - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	walk, err = db.MarkQueuedWaiting(ctx, "extract", "stet_extract", walk, 2, 20, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s := jobState(t, db, lateJob.JobID); s != stet.JobWaiting {
		t.Errorf("the late job after the walk that settled = %s, want waiting", s)
	}
	if walk.Settled <= lateID || walk.Settled != walk.Scanned {
		t.Errorf("after a walk over settled jobs: %+v, want settled past %d and equal to scanned", walk, lateID)
	}
}
