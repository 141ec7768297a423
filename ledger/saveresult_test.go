package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

const rawCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m1","choices":[{"index":0,` +
	`"message":{"role":"assistant","content":"{\"category\":\"none\"}"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`

// resultParams is a succeeded call's result for a claimed job.
func resultParams(jobID, reportID string, token int64, n int, commit bool) ledger.SaveResultParams {
	return ledger.SaveResultParams{
		SaveArtifactParams: ledger.SaveArtifactParams{JobID: jobID, Token: token, AttemptN: n, Raw: []byte(rawCompletion),
			Output: []byte(`{"category":"none"}`), SchemaVersion: "moderation@1", ProcessorID: "p1", Model: "m1", Now: t0},
		ReportID: reportID,
		Attempt: ledger.AttemptResult{JobID: jobID, N: n, Status: stet.AttemptSucceeded, Model: "m1", StatusCode: 200,
			InputTokens: 7, OutputTokens: 3, Latency: 12 * time.Millisecond, Now: t0},
		Commit: commit,
	}
}

// saveResult runs SaveResult for a claimed job in a transaction of its own.
func saveResult(t *testing.T, db *ledger.DB, jobID, reportID string, token int64, n int, commit bool) (string, bool, error) {
	t.Helper()
	var rec string
	var recorded bool
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		rec, recorded, err = db.SaveResult(context.Background(), tx, resultParams(jobID, reportID, token, n, commit))
		return err
	})
	return rec, recorded, err
}

// refuseRecords makes every insert into review_records fail until the
// function it returns is called.
func refuseRecords(t *testing.T, db *ledger.DB) func() {
	t.Helper()
	if _, err := db.Writer().ExecContext(context.Background(), `CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused'; END $$;
		CREATE TRIGGER refuse_record BEFORE INSERT ON review_records FOR EACH ROW EXECUTE FUNCTION refuse_record()`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := db.Writer().ExecContext(context.Background(), `DROP TRIGGER refuse_record ON review_records;
			DROP FUNCTION refuse_record()`); err != nil {
			t.Fatal(err)
		}
	}
}

// SaveResult (PostgreSQL's one round trip for a stage result) writes what
// SaveArtifact, FinishAttempt and WriteRecord write, behind the same fence.
func TestSaveResult(t *testing.T) {
	t.Parallel()
	if testdb.Default() != ledger.Postgres {
		t.Skip("stet_save_result is PostgreSQL's; set STET_TEST_DATABASE_URL")
	}
	db := open(t, ledger.Postgres)
	ctx := context.Background()

	// Revision 2 commits first and is authoritative; revision 1, arriving
	// late, gets a record that is not.
	a2 := accept(t, db, "r1", 2, "second", "d2")
	a1 := accept(t, db, "r1", 1, "first", "d1")
	tok, n, err := claim(t, db, a2.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := saveResult(t, db, a2.JobID, a2.ReportID, tok-1, n, true); !errors.Is(err, stet.ErrLeaseLost) {
		t.Fatalf("SaveResult with a stale token = %v, want ErrLeaseLost", err)
	}
	if c := count(t, db, `SELECT COUNT(*) FROM artifacts`); c != 0 {
		t.Fatalf("artifacts after a stale save = %d, want 0", c)
	}
	rec2, recorded, err := saveResult(t, db, a2.JobID, a2.ReportID, tok, n, true)
	if err != nil || !recorded || rec2 == "" {
		t.Fatalf("SaveResult = %q, %v, %v; want a record", rec2, recorded, err)
	}
	if again := commit(t, db, a2.JobID); again != rec2 {
		t.Errorf("WriteRecord after SaveResult = %s, want %s", again, rec2)
	}
	tok1, n1, err := claim(t, db, a1.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	rec1, recorded, err := saveResult(t, db, a1.JobID, a1.ReportID, tok1, n1, true)
	if err != nil || !recorded || rec1 == "" {
		t.Fatalf("SaveResult of revision 1 = %q, %v, %v; want a record", rec1, recorded, err)
	}
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM review_records WHERE authoritative AND public_id = stet_ulid('` + rec2 + `')`:                              1,
		`SELECT COUNT(*) FROM review_records WHERE NOT authoritative AND public_id = stet_ulid('` + rec1 + `')`:                          1,
		`SELECT COUNT(*) FROM review_records WHERE classification = '{"category":"none"}' AND kind = 'extracted'`:                        2,
		`SELECT COUNT(*) FROM jobs WHERE state = 'committed' AND committed_at IS NOT NULL AND processor_id = 'p1'`:                       2,
		`SELECT COUNT(*) FROM artifacts WHERE output = '{"category":"none"}' AND raw LIKE 'stet:z1:%' AND model = 'm1'`:                  2,
		`SELECT COUNT(*) FROM attempts WHERE status = 'succeeded' AND status_code = 200 AND latency_ms = 12 AND finished_at IS NOT NULL`: 2,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}

	// A failing record part rolls back alone: the artifact and the attempt
	// stay, the job is extracted, and the record stage finishes it.
	a3 := accept(t, db, "r3", 1, "third", "d3")
	allow := refuseRecords(t, db)
	tok3, n3, err := claim(t, db, a3.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	rec3, recorded, err := saveResult(t, db, a3.JobID, a3.ReportID, tok3, n3, true)
	if err != nil || !recorded || rec3 != "" {
		t.Fatalf("SaveResult with the record refused = %q, %v, %v; want recorded with no record", rec3, recorded, err)
	}
	allow()
	if s := count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = $1 AND state = 'extracted'`, ledger.StoredID(a3.JobID)); s != 1 {
		t.Errorf("job after a refused record: extracted = %d, want 1", s)
	}
	if c := count(t, db, `SELECT COUNT(*) FROM artifacts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1)`, ledger.StoredID(a3.JobID)); c != 1 {
		t.Errorf("artifacts after a refused record = %d, want 1", c)
	}
	if rec := commit(t, db, a3.JobID); rec == "" {
		t.Error("the record stage found no record to write")
	}

	// With a destination configured the record is the caller's (WriteRecord
	// writes its outbox rows); without WriteRecord too.
	if err := db.SyncDestinations(ctx, []ledger.DestinationSpec{{SourceID: "reports", DestinationID: "d1",
		Events: []string{"record.committed"}, MaxAge: time.Hour}}, t0); err != nil {
		t.Fatal(err)
	}
	for i, c := range []bool{true, false} {
		a := accept(t, db, "r-dest", int64(i+1), "dest", "dd"+string(rune('a'+i)))
		tok, n, err := claim(t, db, a.JobID, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		rec, recorded, err := saveResult(t, db, a.JobID, a.ReportID, tok, n, c)
		if err != nil || recorded || rec != "" {
			t.Fatalf("SaveResult (commit %v) with a destination = %q, %v, %v; want unrecorded", c, rec, recorded, err)
		}
		if rec := commit(t, db, a.JobID); rec == "" {
			t.Fatal("WriteRecord after an unrecorded SaveResult wrote no record")
		}
	}
	if c := count(t, db, `SELECT COUNT(*) FROM outbox WHERE destination_id = 'd1'`); c != 2 {
		t.Errorf("outbox rows = %d, want 2 (one per record)", c)
	}
}

// LoadWork reads the dispatch pauses that could cover the job with it, and
// Paused answers from them as ActivePause does.
func TestLoadWorkPauses(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		a := accept(t, db, "r1", 1, "text", "d1")
		check := func(want map[string]bool) {
			t.Helper()
			w, err := db.LoadWork(ctx, db.Reader(), a.JobID)
			if err != nil {
				t.Fatal(err)
			}
			for proc, paused := range want {
				if got := w.Paused(proc); got != paused {
					t.Errorf("pauses %q: Paused(%s) = %v, want %v", w.Pauses, proc, got, paused)
				}
				p, err := ledger.ActivePause(ctx, db.Reader(), "demo", proc)
				if err != nil || (p != nil) != paused {
					t.Errorf("ActivePause(demo, %s) = %v, %v; want paused %v", proc, p, err, paused)
				}
			}
		}
		check(map[string]bool{"p1": false, "p2": false})
		for _, scope := range []string{"processor:p2", "tenant:other"} {
			if err := db.SetPause(ctx, ledger.Pause{Scope: scope, Reason: "test", PausedBy: "ops", PausedAt: t0}, "demo"); err != nil {
				t.Fatal(err)
			}
		}
		check(map[string]bool{"p1": false, "p2": true})
		if err := db.SetPause(ctx, ledger.Pause{Scope: "tenant:demo", Reason: "test", PausedBy: "ops", PausedAt: t0}, "demo"); err != nil {
			t.Fatal(err)
		}
		check(map[string]bool{"p1": true, "p2": true})
		if err := db.ClearPause(ctx, "tenant:demo", "ops", "demo", t0); err != nil {
			t.Fatal(err)
		}
		if err := db.SetPause(ctx, ledger.Pause{Scope: "all", Reason: "test", PausedBy: "ops", PausedAt: t0}, "demo"); err != nil {
			t.Fatal(err)
		}
		check(map[string]bool{"p1": true, "p3": true})
		if err := db.SetPause(ctx, ledger.Pause{Scope: "processor:a\nb", PausedBy: "ops", PausedAt: t0}, "demo"); err == nil {
			t.Error("a scope with a newline was accepted")
		}
	})
}

// SaveResultCommit commits a whole result in one round trip, and keeps
// nothing of any other outcome: a stale token, a record part that fails,
// a configured destination. SaveResult then reads that outcome as before.
func TestSaveResultCommit(t *testing.T) {
	t.Parallel()
	if testdb.Default() != ledger.Postgres {
		t.Skip("stet_save_result_commit is PostgreSQL's; set STET_TEST_DATABASE_URL")
	}
	db := open(t, ledger.Postgres)
	ctx := context.Background()
	kept := func(jobID string) []int {
		return []int{
			count(t, db, `SELECT COUNT(*) FROM artifacts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1)`, ledger.StoredID(jobID)),
			count(t, db, `SELECT COUNT(*) FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1)`, ledger.StoredID(jobID)),
			count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) AND status = 'succeeded'`, ledger.StoredID(jobID)),
			count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = $1 AND state = 'extracting'`, ledger.StoredID(jobID)),
		}
	}

	a := accept(t, db, "r1", 1, "first", "d1")
	tok, n, err := claim(t, db, a.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SaveResultCommit(ctx, resultParams(a.JobID, a.ReportID, tok-1, n, true)); !errors.Is(err, ledger.ErrSaveApart) {
		t.Fatalf("SaveResultCommit with a stale token = %v, want ErrSaveApart", err)
	}
	if got := kept(a.JobID); !slices.Equal(got, []int{0, 0, 0, 1}) {
		t.Fatalf("after a stale token: artifacts, records, succeeded attempts, extracting jobs = %v, want [0 0 0 1]", got)
	}
	rec, err := db.SaveResultCommit(ctx, resultParams(a.JobID, a.ReportID, tok, n, true))
	if err != nil || rec == "" {
		t.Fatalf("SaveResultCommit = %q, %v; want a record", rec, err)
	}
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM review_records WHERE authoritative AND kind = 'extracted' AND public_id = stet_ulid('` + rec + `')`:        1,
		`SELECT COUNT(*) FROM jobs WHERE state = 'committed' AND committed_at IS NOT NULL AND processor_id = 'p1'`:                       1,
		`SELECT COUNT(*) FROM artifacts WHERE output = '{"category":"none"}' AND raw LIKE 'stet:z1:%' AND model = 'm1'`:                  1,
		`SELECT COUNT(*) FROM attempts WHERE status = 'succeeded' AND status_code = 200 AND latency_ms = 12 AND finished_at IS NOT NULL`: 1,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	if again := commit(t, db, a.JobID); again != rec {
		t.Errorf("WriteRecord after SaveResultCommit = %s, want %s", again, rec)
	}
	if _, err := db.SaveResultCommit(ctx, resultParams(a.JobID, a.ReportID, tok, n, true)); !errors.Is(err, ledger.ErrSaveApart) {
		t.Errorf("SaveResultCommit of a committed job = %v, want ErrSaveApart", err)
	}

	// A record part that fails: nothing kept, and SaveResult then keeps
	// the artifact without the record, as before.
	a2 := accept(t, db, "r2", 1, "second", "d2")
	allow := refuseRecords(t, db)
	tok2, n2, err := claim(t, db, a2.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SaveResultCommit(ctx, resultParams(a2.JobID, a2.ReportID, tok2, n2, true)); !errors.Is(err, ledger.ErrSaveApart) {
		t.Fatalf("SaveResultCommit with the record refused = %v, want ErrSaveApart", err)
	}
	if got := kept(a2.JobID); !slices.Equal(got, []int{0, 0, 0, 1}) {
		t.Fatalf("after a refused record: artifacts, records, succeeded attempts, extracting jobs = %v, want [0 0 0 1]", got)
	}
	if rec, recorded, err := saveResult(t, db, a2.JobID, a2.ReportID, tok2, n2, true); err != nil || !recorded || rec != "" {
		t.Fatalf("SaveResult after it = %q, %v, %v; want recorded with no record", rec, recorded, err)
	}
	allow()

	// A configured destination: the record is WriteRecord's, so nothing is kept.
	if err := db.SyncDestinations(ctx, []ledger.DestinationSpec{{SourceID: "reports", DestinationID: "d1",
		Events: []string{"record.committed"}, MaxAge: time.Hour}}, t0); err != nil {
		t.Fatal(err)
	}
	a3 := accept(t, db, "r3", 1, "third", "d3")
	tok3, n3, err := claim(t, db, a3.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SaveResultCommit(ctx, resultParams(a3.JobID, a3.ReportID, tok3, n3, true)); !errors.Is(err, ledger.ErrSaveApart) {
		t.Fatalf("SaveResultCommit with a destination = %v, want ErrSaveApart", err)
	}
	if got := kept(a3.JobID); !slices.Equal(got, []int{0, 0, 0, 1}) {
		t.Fatalf("with a destination: artifacts, records, succeeded attempts, extracting jobs = %v, want [0 0 0 1]", got)
	}
	// Not asked to commit: nothing is sent.
	if _, err := db.SaveResultCommit(ctx, resultParams(a3.JobID, a3.ReportID, tok3, n3, false)); !errors.Is(err, ledger.ErrSaveApart) {
		t.Errorf("SaveResultCommit without Commit = %v, want ErrSaveApart", err)
	}
}
