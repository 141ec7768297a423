package pipeline_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/outbound"
)

// Manual's two passes: a waiting job is found by its pending River extract
// job, which is cancelled with the conversion; a blocked job, whose River
// job has ended, is found in the ledger (jobs_held). A job in another
// processor's scope is left alone, and a second run converts nothing.
// Two revisions of one report converted in one page leave the later one
// authoritative whichever comes first, each conversion writes its outbox
// event, and the page's audit entries keep the chain intact.
func TestManualFindsHeldJobsByRiverAndLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := stettest.New(t, stettest.Options{Destinations: []outbound.Destination{
		{SourceID: stettest.SourceReports, ID: "mod-tool", URL: "http://127.0.0.1:1/hooks", Secret: destSecret,
			Events: []string{ledger.EventCommitted}, MaxAge: time.Hour},
	}})
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/pause", stettest.AdminToken, map[string]string{"scope": "all", "reason": "incident"}, nil); st != http.StatusOK {
		t.Fatalf("pause = %d %s", st, b)
	}
	var jobs []string
	reports := map[string]string{}
	for i, d := range []struct {
		source, id string
		rev        int64
	}{
		{stettest.SourceReports, "h-1", 1}, {stettest.SourceReports, "h-2", 1}, {stettest.SourceOther, "h-3", 1},
		{stettest.SourceReports, "h-4", 2}, {stettest.SourceReports, "h-4", 1}, // the older revision after
		{stettest.SourceReports, "h-5", 1}, {stettest.SourceReports, "h-5", 2},
	} {
		r := e.Deliver(d.source, stettest.MustID(fmt.Sprintf("%s-%d", d.id, i)), stettest.Report{ExternalID: d.id, Revision: d.rev, Text: fmt.Sprintf("text %d", i)})
		e.WaitJob(r.JobID, stet.JobWaiting)
		jobs = append(jobs, r.JobID)
		reports[d.id] = r.ReportID
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
	if _, err := e.DB.Writer().Exec(`UPDATE jobs SET state = 'blocked', failure_class = 'boundary' WHERE public_id = stet_ulid($1)`, jobs[1]); err != nil {
		t.Fatal(err)
	}

	// The third job is another tenant's: out of this scope.
	for i, want := range []int{6, 0} {
		n, err := e.Pipeline.Manual(ctx, ledger.ManualParams{Scope: "tenant:demo", Actor: "test", AuditTenant: "*", Reason: "incident"})
		if err != nil || n != want {
			t.Fatalf("run %d: Manual = %d, %v; want %d", i+1, n, err, want)
		}
	}
	for i, want := range []stet.JobState{stet.JobManual, stet.JobManual, stet.JobWaiting, stet.JobManual, stet.JobManual, stet.JobManual, stet.JobManual} {
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
	var finalized, attempted bool
	if err := e.DB.Writer().QueryRow(`SELECT finalized_at IS NOT NULL, metadata ->> 'cancel_attempted_at' IS NOT NULL
		FROM river_job WHERE kind = 'stet_extract' AND args ->> 'job_id' = $1`, jobs[0]).Scan(&finalized, &attempted); err != nil {
		t.Fatal(err)
	}
	if !finalized || !attempted {
		t.Errorf("the cancelled River job: finalized %v, cancel_attempted_at set %v; want both, as River's cancel leaves it", finalized, attempted)
	}
	if _, s := riverJob(jobs[1]); s != "completed" {
		t.Errorf("the converted blocked job's River job = %s, want completed (it had ended)", s)
	}
	if _, s := riverJob(jobs[2]); s == "cancelled" {
		t.Errorf("the job out of scope has its River job %s, want it pending", s)
	}
	if n := e.Count("review_records", "kind = 'manual' AND failure_class = 'boundary'"); n != 1 {
		t.Errorf("manual records carrying the blocked job's class = %d, want 1", n)
	}
	if n := e.Count("review_records", "kind = 'manual'"); n != 6 {
		t.Errorf("manual records = %d, want 6", n)
	}
	for _, id := range []string{"h-4", "h-5"} {
		var rev int64
		var n int
		if err := e.DB.Writer().QueryRow(`SELECT MAX(revision), COUNT(*) FROM review_records WHERE report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1)) AND authoritative`,
			reports[id]).Scan(&rev, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 || rev != 2 {
			t.Errorf("%s: authoritative records %d, revision %d; want 1, revision 2", id, n, rev)
		}
		if n := e.Count("review_records", "report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1))", reports[id]); n != 2 {
			t.Errorf("%s: records = %d, want 2", id, n)
		}
		if n := e.Count("outbox", "report_id = $1 AND event = $2", reports[id], ledger.EventCommitted); n != 2 {
			t.Errorf("%s: record.committed outbox rows = %d, want 2", id, n)
		}
	}
	if n := e.Count("outbox", "event = $1", ledger.EventCommitted); n != 6 {
		t.Errorf("record.committed outbox rows = %d, want 6 (one per manual record of the destination's source)", n)
	}
	if n := e.Count("audit_log", "action = 'job.manual'"); n != 6 {
		t.Errorf("job.manual audit entries = %d, want 6 (one per conversion, none for the second run)", n)
	}
	rep, err := e.DB.VerifyAuditChain(ctx)
	if err != nil || rep.Broken != nil {
		t.Errorf("audit chain after the conversions: %+v, %v; want intact", rep, err)
	}
}
