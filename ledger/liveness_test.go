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

// claimAs claims a job for holder at now with a long lease.
func claimAs(t *testing.T, db *ledger.DB, jobID, holder string, expected int64, now time.Time) (int64, int) {
	t.Helper()
	var token int64
	var n int
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		token, n, err = db.Claim(context.Background(), tx, ledger.ClaimParams{JobID: jobID, Expected: expected, Now: now,
			LeaseFor: time.Hour, Holder: holder, ProcessorID: "p1", InputSHA256: "abc"})
		return err
	})
	if err != nil {
		t.Fatalf("claim %s as %s: %v", jobID, holder, err)
	}
	return token, n
}

// A dead holder's leases are taken back at once, its cut attempt becomes
// abandoned, a live holder's lease is untouched, and a second sweep (or a
// second sweeper) finds nothing.
func TestTakeOverDead(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		w := db.Writer()
		deadAfter := 8 * time.Second
		beat := func(id string, at time.Time) {
			if _, _, err := db.Heartbeat(ctx, id, at, deadAfter); err != nil {
				t.Fatal(err)
			}
		}
		beat("proc_dead", t0)
		beat("proc_live", t0)
		beat("proc_self", t0)
		jDead := accept(t, db, "a", 1, "text a", "d-a").JobID
		jLive := accept(t, db, "b", 1, "text b", "d-b").JobID
		tokDead, _ := claimAs(t, db, jDead, "proc_dead", 0, t0)
		claimAs(t, db, jLive, "proc_live", 0, t0)
		// Batches: one leased by each, one by a process that never beats.
		acceptBatch(t, db, "c")
		acceptBatch(t, db, "d")
		acceptBatch(t, db, "e")
		pending, err := ledger.PendingBatchJobs(ctx, w, 10)
		if err != nil || len(pending) != 3 {
			t.Fatalf("pending = %d, %v", len(pending), err)
		}
		for i, holder := range []string{"proc_dead", "proc_live", ""} {
			id := []string{"bat_dead", "bat_live", "bat_cli"}[i]
			if err := db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := ledger.CreateBatch(ctx, tx, id, "p1", pending[i:i+1], t0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := ledger.ClaimBatchAs(ctx, w, id, holder, t0, time.Hour); err != nil {
				t.Fatal(err)
			}
		}

		// Not yet dead: nothing is taken.
		now := t0.Add(deadAfter - time.Second)
		beat("proc_live", now)
		sweep := func(now time.Time) *ledger.Takeover {
			var to *ledger.Takeover
			if err := db.InTx(ctx, func(tx *sql.Tx) error {
				var err error
				to, err = ledger.TakeOverDead(ctx, tx, "proc_self", now, deadAfter)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return to
		}
		if to := sweep(now); !to.Empty() || len(to.Jobs) != 0 {
			t.Fatalf("sweep before dead_after = %+v, want nothing", to)
		}

		// proc_dead and proc_self fell silent; proc_live kept beating. Self
		// is never taken over, however old its own row.
		now = t0.Add(deadAfter + time.Second)
		beat("proc_live", now)
		to := sweep(now)
		if !slices.Equal(to.Dead, []string{"proc_dead"}) || !slices.Equal(to.Jobs, []string{jDead}) ||
			!slices.Equal(to.Batches, []string{"bat_dead"}) || to.Abandoned != 1 {
			t.Fatalf("takeover = %+v, want proc_dead's job %s, batch bat_dead, 1 abandoned", to, jDead)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) AND status = 'abandoned' AND finished_at IS NOT NULL`, ledger.StoredID(jDead)); n != 1 {
			t.Errorf("abandoned attempts of the dead holder's job = %d, want 1", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) AND status = 'started'`, ledger.StoredID(jLive)); n != 1 {
			t.Errorf("started attempts of the live holder's job = %d, want 1 (untouched)", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = $1 AND lease_until IS NOT NULL AND lease_holder = 'proc_live'`, ledger.StoredID(jLive)); n != 1 {
			t.Errorf("live holder's lease taken")
		}
		if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE lease_until IS NOT NULL`); n != 2 {
			t.Errorf("held batch leases = %d, want 2 (the live holder's and the holder-less one's)", n)
		}
		// The dead holder's job is claimable now, long before its lease
		// would have ended; the live one's is not.
		w2, err := db.LoadWork(ctx, w, jDead)
		if err != nil {
			t.Fatal(err)
		}
		if w2.Job.State != stet.JobExtracting || !w2.Job.LeaseUntil.IsZero() {
			t.Errorf("dead holder's job = %s lease %v, want extracting with no lease", w2.Job.State, w2.Job.LeaseUntil)
		}
		tok2, n2 := claimAs(t, db, jDead, "proc_live", tokDead, now)
		if tok2 != tokDead+1 || n2 != 2 {
			t.Errorf("claim after takeover = token %d attempt %d, want %d, 2", tok2, n2, tokDead+1)
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, _, err := db.Claim(ctx, tx, ledger.ClaimParams{JobID: jLive, Expected: 1, Now: now, LeaseFor: time.Hour,
				Holder: "proc_self", ProcessorID: "p1"})
			return err
		}); err != ledger.ErrNotClaimable {
			t.Errorf("claim of the live holder's job = %v, want ErrNotClaimable", err)
		}
		// The cut attempt's late result is fenced out.
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			return db.SaveArtifact(ctx, tx, ledger.SaveArtifactParams{JobID: jDead, Token: tokDead, AttemptN: 1,
				Output: []byte(`{}`), SchemaVersion: "v1", ProcessorID: "p1", Now: now})
		}); err != stet.ErrLeaseLost {
			t.Errorf("save by the dead holder's attempt = %v, want ErrLeaseLost", err)
		}

		// Idempotent: the dead row is gone; a second sweep finds nothing.
		if to := sweep(now.Add(time.Second)); !to.Empty() || len(to.Jobs)+len(to.Batches)+to.Abandoned != 0 {
			t.Errorf("second sweep = %+v, want nothing", to)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM worker_heartbeats WHERE process_id = 'proc_dead'`); n != 0 {
			t.Errorf("dead heartbeat rows = %d, want 0", n)
		}
		// The batch's lease renews for its holder only.
		if err := ledger.RenewBatch(ctx, w, "bat_live", "proc_live", now, time.Minute); err != nil {
			t.Errorf("renew by the holder = %v", err)
		}
		if err := ledger.RenewBatch(ctx, w, "bat_dead", "proc_dead", now, time.Minute); err != stet.ErrLeaseLost {
			t.Errorf("renew of a taken batch = %v, want ErrLeaseLost", err)
		}
		if err := ledger.ReleaseBatchAs(ctx, w, "bat_live", "proc_dead"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE id = 'bat_live' AND lease_holder = 'proc_live'`); n != 1 {
			t.Errorf("another holder released proc_live's batch lease")
		}
	})
}

// A graceful shutdown's release spends no attempt: the attempt is abandoned
// without a failure class, and the job is accepted again with no lease.
func TestReleaseForShutdown(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		j := accept(t, db, "a", 1, "text a", "d-a").JobID
		tok, n := claimAs(t, db, j, "proc_1", 0, t0)
		if err := ledger.ReleaseForShutdown(ctx, db.Writer(), j, tok, n, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		w, err := db.LoadWork(ctx, db.Writer(), j)
		if err != nil {
			t.Fatal(err)
		}
		if w.Job.State != stet.JobAccepted || !w.Job.LeaseUntil.IsZero() || w.TransientFails != 0 {
			t.Errorf("released job = %s lease %v transient fails %d, want accepted, no lease, 0", w.Job.State, w.Job.LeaseUntil, w.TransientFails)
		}
		if c := count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) AND status = 'abandoned' AND failure_class IS NULL`, ledger.StoredID(j)); c != 1 {
			t.Errorf("abandoned attempts = %d, want 1", c)
		}
		if err := ledger.ReleaseForShutdown(ctx, db.Writer(), j, tok, n, t0.Add(time.Second)); err != stet.ErrLeaseLost {
			t.Errorf("second release = %v, want ErrLeaseLost", err)
		}
	})
}

// A process alone on its database (SQLite) releases every lease at start:
// the synchronous attempts a crash cut become abandoned; a batch's
// submitted attempts stay started, for its reconciliation to finish.
func TestReleaseLeasesAbandonsCutAttempts(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		j := accept(t, db, "a", 1, "text a", "d-a").JobID
		claimAs(t, db, j, "proc_1", 0, t0)
		acceptBatch(t, db, "b")
		pending, err := ledger.PendingBatchJobs(ctx, db.Writer(), 10)
		if err != nil || len(pending) != 1 {
			t.Fatalf("pending = %d, %v", len(pending), err)
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := ledger.CreateBatch(ctx, tx, "bat_1", "p1", pending, t0); err != nil {
				return err
			}
			return ledger.MarkSubmitStarted(ctx, tx, "bat_1", "p1", "", []ledger.SubmitItem{{JobID: pending[0].ID, Token: pending[0].Attempt + 1}}, t0)
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return ledger.ReleaseLeases(ctx, tx, t0.Add(time.Second)) }); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) AND status = 'abandoned'`, ledger.StoredID(j)); n != 1 {
			t.Errorf("abandoned sync attempts = %d, want 1", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE batch_id = 'bat_1' AND status = 'started'`); n != 1 {
			t.Errorf("started batch attempts = %d, want 1 (left for reconciliation)", n)
		}
	})
}
