package recovery

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Drill8: a report is deleted while the fake holds its extraction call;
// then its delivery is replayed. The request cancels the job in the same
// transaction; the late result is counted on its attempt and discarded;
// the replay answers 410 and stores nothing; every copy is a task, the
// processor's retention of the synchronous call among them.
var Drill8 = Drill{
	Name: "8", Title: "delete during extraction",
	Expect: "delete while the call is held, then replay: 410, nothing resurrected, the late result discarded, provider copies as tasks",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 1},
	run: func(d *run) {
		t := d.t
		started, release := make(chan struct{}, 16), make(chan struct{})
		var once sync.Once
		stop := func() { once.Do(func() { close(release) }) }
		e := d.Env(stettest.Options{FakeOptions: openaifake.Options{Respond: func(req openaifake.Request) string {
			started <- struct{}{}
			<-release
			return openaifake.MinimalInstance(req.Schema)
		}}})
		defer stop()
		report := stettest.Report{ExternalID: "report-008", Revision: 1, Text: "Patient MRN 123456 says the vaccine causes autism. CANARY-D8"}
		first := e.Deliver(stettest.SourceReports, "msg_d8", report)
		if first.Status != http.StatusAccepted {
			t.Fatalf("deliver = %d %s", first.Status, first.Body)
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the fake never received the call")
		}
		var acc api.DeletionAccepted
		st, b := e.Do(http.MethodDelete, "/v1/sources/"+stettest.SourceReports+"/reports/report-008", stettest.OperatorToken, nil, &acc)
		if st != http.StatusAccepted || acc.State != "pending" || acc.DeletionID == "" {
			t.Fatalf("DELETE = %d %s, want 202 pending", st, b)
		}
		if s := e.JobState(first.JobID); s != stet.JobCancelled {
			t.Fatalf("job after the request = %s, want cancelled (same transaction)", s)
		}
		stop()
		e.WaitFor("the late result to be discarded", func() bool {
			return e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND discarded_at IS NOT NULL", first.JobID) == 1
		})
		replay := e.Deliver(stettest.SourceReports, "msg_d8", report)
		if replay.Status != http.StatusGone || replay.Problem.Type != api.ProblemType("gone") {
			t.Fatalf("replay = %d %s, want 410 gone", replay.Status, replay.Body)
		}
		if fresh := e.Deliver(stettest.SourceReports, "msg_d8_new", report); fresh.Status != http.StatusGone {
			t.Fatalf("new webhook-id for the deleted identity = %d, want 410", fresh.Status)
		}
		del := WaitDeletion(t, e, acc.DeletionID, "unresolved", "done")
		for table, want := range map[string]int{"revisions": 1, "artifacts": 0, "deliveries": 0} {
			if n := e.Count(table, ""); n != want {
				t.Errorf("%s rows = %d, want %d (nothing resurrected)", table, n, want)
			}
		}
		if n := e.Count("revisions", "text IS NOT NULL OR metadata IS NOT NULL"); n != 0 {
			t.Errorf("revisions with text = %d, want 0", n)
		}
		if n := e.Count("reports", "external_id IS NOT NULL"); n != 0 {
			t.Errorf("reports with an external ID = %d, want 0", n)
		}
		if got := e.Attempts(first.JobID); len(got) != 1 || got[0] != "superseded" {
			t.Errorf("attempts = %v, want [superseded] (the late result counted, not saved)", got)
		}
		if del.State != "unresolved" {
			t.Errorf("deletion state = %s, want unresolved (the processor keeps the call 30d)", del.State)
		}
		tasks := TaskStates(del)
		for _, c := range ledger.LocalCopies {
			if tasks[c] != "done" {
				t.Errorf("task %s = %q, want done", c, tasks[c])
			}
		}
		if tasks["provider_retention:openai-fake"] != "unresolved" {
			t.Errorf("provider_retention:openai-fake = %q, want unresolved; tasks %v", tasks["provider_retention:openai-fake"], tasks)
		}
		for _, tk := range del.Tasks {
			if tk.Copy == "provider_retention:openai-fake" && (tk.ExpiresAt == nil || tk.Reason == nil) {
				t.Errorf("retention task = %+v, want expires_at and a reason", tk)
			}
		}
		for _, path := range []string{"/v1/sources/" + stettest.SourceReports + "/reports/report-008", "/v1/reports/" + first.ReportID, "/v1/jobs/" + first.JobID} {
			if st, b := e.Do(http.MethodGet, path, stettest.ReaderToken, nil, nil); st != http.StatusGone {
				t.Errorf("GET %s = %d %s, want 410", path, st, b)
			}
		}
		if logsHold(e, "CANARY-D8") || logsHold(e, "report-008") {
			t.Errorf("the logs hold the text or the external ID")
		}
	},
}

// Drill11: with text retention 2s, the sweeper purges a committed
// revision's text (on the injected clock, no sleeping); the record stays
// readable; nothing re-extracts it; the provider-call count is unchanged.
var Drill11 = Drill{
	Name: "11", Title: "text retention",
	Expect: "text: 2s: the sweeper purges committed texts; the records stay readable; no re-extraction",
	Want:   Counts{Reports: 2, Jobs: 2, Records: 2, Calls: 2},
	run: func(d *run) {
		t := d.t
		clock := stet.NewManualClock(time.Now())
		e := d.Env(stettest.Options{Clock: clock, EditPolicy: func(p *stet.Policy) { p.TextRetention = 2 * time.Second }})
		report := stettest.Report{ExternalID: "report-011", Revision: 1, Text: "Stop taking your insulin. CANARY-D11", Metadata: json.RawMessage(`{"ward":"7"}`)}
		r := e.Deliver(stettest.SourceReports, "msg_d11", report)
		e.WaitJob(r.JobID, stet.JobCommitted)
		second := e.Deliver(stettest.SourceReports, "msg_d11b", stettest.Report{ExternalID: "report-011b", Revision: 1, Text: "Hello."})
		e.WaitJob(second.JobID, stet.JobCommitted)
		calls := e.Fake.Calls()
		ctx := context.Background()
		if n, err := e.Pipeline.Governance().Sweep(ctx); err != nil || n[ledger.PurgeText] != 0 {
			t.Fatalf("Sweep before 2s = %v, %v; want nothing purged", n, err)
		}
		clock.Advance(3 * time.Second)
		n, err := e.Pipeline.Governance().Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n[ledger.PurgeText] != 2 {
			t.Errorf("purged texts = %d, want 2", n[ledger.PurgeText])
		}
		if c := e.Count("revisions", "text IS NOT NULL OR metadata IS NOT NULL"); c != 0 {
			t.Errorf("revisions with text or metadata = %d, want 0", c)
		}
		if c := e.Count("revisions", "text_purged_at IS NOT NULL"); c != 2 {
			t.Errorf("stamped revisions = %d, want 2", c)
		}
		rec := e.Record(r.JobID)
		if string(rec.Classification) == "null" || rec.ClassificationPurgedAt != "" {
			t.Errorf("record after the text purge = %+v, want its classification kept", rec)
		}
		var j api.JobView
		if st, b := e.Do(http.MethodGet, "/v1/jobs/"+r.JobID, stettest.ReaderToken, nil, &j); st != http.StatusOK || j.TextPurgedAt == "" {
			t.Errorf("job view = %d %s, want text_purged_at", st, b)
		}
		var rep api.ReportView
		if st, b := e.Do(http.MethodGet, "/v1/reports/"+r.ReportID, stettest.ReaderToken, nil, &rep); st != http.StatusOK || len(rep.Revisions) != 1 || rep.Revisions[0].TextPurgedAt == "" {
			t.Errorf("report view = %d %s, want the revision's text_purged_at", st, b)
		}
		// Nothing re-extracts it: a replay is a duplicate, a resume refuses.
		if again := e.Deliver(stettest.SourceReports, "msg_d11", report); again.Status != http.StatusOK || again.JobID != r.JobID {
			t.Errorf("replay = %d %s, want 200 duplicate", again.Status, again.Body)
		}
		if _, err := e.Pipeline.Resume(ctx, r.JobID); err == nil {
			t.Errorf("Resume of a committed, purged job succeeded")
		}
		if got := e.Fake.Calls(); got != calls || calls != 2 {
			t.Errorf("provider calls = %d, then %d; want 2, unchanged by the purge", calls, got)
		}
		if n, err := e.Pipeline.Governance().Sweep(ctx); err != nil || n[ledger.PurgeText] != 0 {
			t.Errorf("second Sweep = %v, %v; want nothing left", n, err)
		}
	},
}

// Drill12: a report that went through a provider batch, then deleted: its
// batch input and output files are deleted at the OpenAI fake (tasks done,
// the fake holds no copy), the batch record, which OpenAI's API cannot
// delete, is unresolved with that reason, the local copies are done, and
// the canary is in no table and not in the bytes of the SQLite file or WAL.
var Drill12 = Drill{
	Name: "12", Title: "delete a batched report",
	Expect: "delete a report whose text went to a batch: file and batch tasks listed; the canary in no table, nor the SQLite file or WAL",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 0},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{})
		const canary = "CANARY-D12-7f3a"
		r := e.Deliver(stettest.SourceBatch, "msg_d12", stettest.Report{ExternalID: "report-012", Revision: 1, Text: "Stop taking insulin. " + canary})
		e.WaitJob(r.JobID, stet.JobCommitted)
		e.WaitFor("the batch to be applied", func() bool { return e.Count("batches", "applied_at IS NOT NULL") == 1 })
		var acc api.DeletionAccepted
		if st, b := e.Do(http.MethodDelete, "/v1/sources/"+stettest.SourceBatch+"/reports/report-012", stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
			t.Fatalf("DELETE = %d %s", st, b)
		}
		del := WaitDeletion(t, e, acc.DeletionID, "unresolved", "done")
		var files, batches int
		for _, tk := range del.Tasks {
			switch {
			case strings.HasPrefix(tk.Copy, "provider_file:openai-fake/"):
				files++
				if tk.State != "done" {
					t.Errorf("task %s = %s, want done (the file is deleted at the provider)", tk.Copy, tk.State)
				}
			case strings.HasPrefix(tk.Copy, "provider_batch:openai-fake/"):
				batches++
				if tk.State != "unresolved" || tk.Reason == nil || !strings.Contains(*tk.Reason, stet.CodeNoDeleteAPI) {
					t.Errorf("task %s = %s, want unresolved (%s: OpenAI cannot delete a batch record)", tk.Copy, tk.State, stet.CodeNoDeleteAPI)
				}
			case tk.State != "done":
				t.Errorf("task %s = %s, want done", tk.Copy, tk.State)
			}
		}
		if files != 2 || batches != 1 {
			t.Errorf("provider tasks: %d files, %d batches; want input and output files and 1 batch", files, batches)
		}
		if n := e.Fake.BatchStats().FileDeletes; n != 2 {
			t.Errorf("file deletes at the fake = %d, want 2", n)
		}
		for _, f := range e.Fake.Files() {
			if !f.Deleted && strings.Contains(string(f.Content), canary) {
				t.Errorf("the fake still holds a file with the text")
			}
		}
		if _, ok := TaskStates(del)["provider_retention:openai-fake"]; ok {
			t.Errorf("a batch-only report has a synchronous retention task")
		}
		AssertCanaryGone(t, e, canary)
	},
}

// GetDeletion reads a deletion through the API.
func GetDeletion(t stettest.T, e *stettest.Env, id string) (api.DeletionView, []byte) {
	t.Helper()
	var d api.DeletionView
	st, b := e.Do(http.MethodGet, "/v1/deletions/"+id, stettest.ReaderToken, nil, &d)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/deletions/%s = %d %s, want 200", id, st, b)
	}
	return d, b
}

// WaitDeletion waits until the deletion reaches one of states.
func WaitDeletion(t stettest.T, e *stettest.Env, id string, states ...string) api.DeletionView {
	t.Helper()
	var d api.DeletionView
	// A deletion is a task job per copy, each its own River job on the
	// batch queue: on a loaded machine they take longer than one stage.
	e.WaitForWithin("deletion "+id+" to end", time.Minute, func() bool {
		d, _ = GetDeletion(t, e, id)
		for _, s := range states {
			if d.State == s {
				return true
			}
		}
		return false
	})
	return d
}

// TaskStates maps each of a deletion's copies to its task's state.
func TaskStates(d api.DeletionView) map[string]string {
	m := map[string]string{}
	for _, t := range d.Tasks {
		m[t.Copy] = t.State
	}
	return m
}

// AssertCanaryGone scans every text column of every ledger table, River's
// job arguments, and, on SQLite, the bytes of the database file and its WAL.
func AssertCanaryGone(t stettest.T, e *stettest.Env, canary string) {
	t.Helper()
	for table, cols := range map[string][]string{
		"revisions": {"text", "metadata"}, "artifacts": {"output"}, "review_records": {"classification", "note"},
		"deliveries": {"delivery_key"}, "audit_log": {"detail", "object_id"}, "reports": {"external_id"},
	} {
		for _, c := range cols {
			if n := e.Count(table, c+" LIKE $1", "%"+canary+"%"); n != 0 {
				t.Errorf("%s.%s holds the canary in %d rows", table, c, n)
			}
		}
	}
	// The raw response is stored deflated (ledger/compress.go), where LIKE
	// cannot see: each one is read as the ledger reads it. A value whose
	// data key is destroyed holds nothing readable. An artifact's values
	// are bound to its ID (ledger.ArtifactID: its legacy_id, or its job's
	// public ID) under its report's data key. The rows are read first:
	// OpenSealed reads the data key on the writer, SQLite's one connection.
	type sealedRaw struct {
		id, reportID, stored string
		sealed               bool
	}
	var raws []sealedRaw
	rows, err := e.DB.Writer().QueryContext(context.Background(), `SELECT a.legacy_id, j.public_id, r.public_id, a.raw, (a.sealed & 1) <> 0
		FROM artifacts a JOIN jobs j ON j.id = a.job_id JOIN reports r ON r.id = j.report_id WHERE a.raw IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var legacy sql.NullString
		var jobKey, reportKey []byte
		var stored string
		var sealed bool
		if err := rows.Scan(&legacy, &jobKey, &reportKey, &stored, &sealed); err != nil {
			rows.Close()
			t.Fatal(err)
		}
		raws = append(raws, sealedRaw{ledger.ArtifactID(legacy.String, ledger.PublicID("job", jobKey)), ledger.PublicID("rep", reportKey), stored, sealed})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range raws {
		raw, err := e.DB.OpenSealed(context.Background(), a.reportID, "artifacts.raw", a.id, a.stored, a.sealed)
		switch {
		case errors.Is(err, ledger.ErrKeyDestroyed):
		case err != nil:
			t.Errorf("artifact %s: raw response does not open: %v", a.id, err)
		case strings.Contains(raw, canary):
			t.Errorf("artifacts.raw holds the canary in artifact %s", a.id)
		}
	}
	if n := e.Count("river_job", "CAST(args AS TEXT) LIKE $1", "%"+canary+"%"); n != 0 {
		t.Errorf("river_job args hold the canary")
	}
	path, ok := strings.CutPrefix(e.URL, "sqlite://")
	if !ok {
		return // a server's files are not this process's to read
	}
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds the canary's bytes", filepath.Base(f))
		}
	}
}
