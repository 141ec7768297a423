package pipeline_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/stettest"
	"github.com/stetlabs/stet/ledger"
)

// Manual's two passes: a waiting job is found by its pending River extract
// job, which is cancelled with the conversion; a blocked job, whose River
// job has ended, is found in the ledger (jobs_held). A job in another
// processor's scope is left alone, and a second run converts nothing.
func TestManualFindsHeldJobsByRiverAndLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := stettest.New(t, stettest.Options{})
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/pause", stettest.AdminToken, map[string]string{"scope": "all", "reason": "incident"}, nil); st != http.StatusOK {
		t.Fatalf("pause = %d %s", st, b)
	}
	var jobs []string
	for _, d := range []struct{ source, id string }{{stettest.SourceReports, "h-1"}, {stettest.SourceReports, "h-2"}, {stettest.SourceOther, "h-3"}} {
		r := e.Deliver(d.source, stettest.MustID(d.id), stettest.Report{ExternalID: d.id, Revision: 1, Text: "some text"})
		e.WaitJob(r.JobID, stet.JobWaiting)
		jobs = append(jobs, r.JobID)
	}
	riverJob := func(jobID string) (id int64, state string) {
		t.Helper()
		err := e.DB.Writer().QueryRow(`SELECT id, state FROM river_job WHERE kind = 'stet_extract' AND args ->> 'job_id' = $1`, jobID).Scan(&id, &state)
		if err != nil {
			t.Fatalf("river job of %s: %v", jobID, err)
		}
		return id, state
	}
	// The second job is blocked the way the gate leaves one: its River job
	// ended (completed), the ledger job blocked with a failure class.
	blockedRiver, _ := riverJob(jobs[1])
	if _, err := e.DB.Writer().Exec(`UPDATE river_job SET state = 'completed', finalized_at = CURRENT_TIMESTAMP WHERE id = $1`, blockedRiver); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DB.Writer().Exec(`UPDATE jobs SET state = 'blocked', failure_class = 'boundary' WHERE id = $1`, jobs[1]); err != nil {
		t.Fatal(err)
	}

	// The third job is another tenant's: out of this scope.
	for i, want := range []int{2, 0} {
		n, err := e.Pipeline.Manual(ctx, ledger.ManualParams{Scope: "tenant:demo", Actor: "test", AuditTenant: "*", Reason: "incident"})
		if err != nil || n != want {
			t.Fatalf("run %d: Manual = %d, %v; want %d", i+1, n, err, want)
		}
	}
	for i, want := range []stet.JobState{stet.JobManual, stet.JobManual, stet.JobWaiting} {
		if s := e.JobState(jobs[i]); s != want {
			t.Errorf("job %d state = %s, want %s", i+1, s, want)
		}
	}
	// A River job a worker held at the conversion (claimed, about to be
	// snoozed on the pause) is cancelled when that execution ends.
	e.WaitFor("the converted waiting job's River job cancelled", func() bool {
		_, s := riverJob(jobs[0])
		return s == "cancelled"
	})
	if _, s := riverJob(jobs[1]); s != "completed" {
		t.Errorf("the converted blocked job's River job = %s, want completed (it had ended)", s)
	}
	if _, s := riverJob(jobs[2]); s == "cancelled" {
		t.Errorf("the job out of scope has its River job %s, want it pending", s)
	}
	if n := e.Count("review_records", "kind = 'manual' AND failure_class = 'boundary'"); n != 1 {
		t.Errorf("manual records carrying the blocked job's class = %d, want 1", n)
	}
	if n := e.Count("review_records", "kind = 'manual'"); n != 2 {
		t.Errorf("manual records = %d, want 2", n)
	}
	if n := e.Count("audit_log", "action = 'job.manual'"); n != 2 {
		t.Errorf("job.manual audit entries = %d, want 2 (one per conversion, none for the second run)", n)
	}
}
