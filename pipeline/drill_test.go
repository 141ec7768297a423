package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/internal/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Drill 1: report-001 delivered twice (same webhook-id, then a new
// webhook-id with the same content) and report-002 once: two reports, two
// authoritative records, the duplicates resolve to the existing job.
func TestDrill1DuplicateDeliveries(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	r1 := stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Stop taking your insulin, cinnamon cures diabetes."}
	first := e.Deliver(stettest.SourceReports, "msg_1", r1)
	again := e.Deliver(stettest.SourceReports, "msg_1", r1)
	newID := e.Deliver(stettest.SourceReports, "msg_2", r1)
	other := e.Deliver(stettest.SourceReports, "msg_3", stettest.Report{ExternalID: "report-002", Revision: 1, Text: "You are all idiots."})

	if first.Status != http.StatusAccepted || other.Status != http.StatusAccepted {
		t.Fatalf("first deliveries = %d, %d, want 202, 202", first.Status, other.Status)
	}
	for _, d := range []stettest.Response{again, newID} {
		if d.Status != http.StatusOK || !d.Duplicate || d.JobID != first.JobID {
			t.Fatalf("redelivery = %d %s, want 200 duplicate of job %s", d.Status, d.Body, first.JobID)
		}
	}
	e.WaitJob(first.JobID, stet.JobCommitted)
	e.WaitJob(other.JobID, stet.JobCommitted)
	if n := e.Count("reports", ""); n != 2 {
		t.Errorf("reports = %d, want 2", n)
	}
	if n := e.Count("review_records", "authoritative"); n != 2 {
		t.Errorf("authoritative records = %d, want 2", n)
	}
	if n := e.Count("review_records", ""); n != 2 {
		t.Errorf("records = %d, want 2", n)
	}
	if n := e.Fake.Calls(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
}

// Drill 2: the destination write fails after the artifact is saved.
// Recovery uses the artifact: one provider call, one record.
func TestDrill2CommitFailsAfterArtifact(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	// A real database failure: a trigger aborts every review-record insert
	// while the fault table has a row.
	db := e.DB.Writer()
	trigger := []string{`CREATE TRIGGER drill_fail_record BEFORE INSERT ON review_records
			WHEN (SELECT COUNT(*) FROM drill_fault) > 0 BEGIN SELECT RAISE(ABORT, 'injected destination failure'); END`}
	if e.DB.Dialect() == ledger.Postgres {
		trigger = []string{`CREATE FUNCTION drill_fail() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF (SELECT COUNT(*) FROM drill_fault) > 0 THEN RAISE EXCEPTION 'injected destination failure'; END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER drill_fail_record BEFORE INSERT ON review_records FOR EACH ROW EXECUTE FUNCTION drill_fail()`}
	}
	for _, q := range append([]string{`CREATE TABLE drill_fault (on_ INTEGER)`, `INSERT INTO drill_fault VALUES (1)`}, trigger...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Double your dose of warfarin."})
	e.WaitJob(d.JobID, stet.JobExtracted)
	// Wait until the commit stage has failed at least twice.
	e.WaitFor("two failed commits", func() bool {
		jobs, err := e.Pipeline.River().JobList(context.Background(), riverCommitJobs())
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs.Jobs) == 1 && len(jobs.Jobs[0].Errors) >= 2
	})
	if n := e.Count("review_records", ""); n != 0 {
		t.Fatalf("records while the destination fails = %d, want 0", n)
	}
	if _, err := db.Exec(`DELETE FROM drill_fault`); err != nil {
		t.Fatal(err)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 1 {
		t.Errorf("provider calls = %d, want 1", n)
	}
	if n := e.Count("artifacts", ""); n != 1 {
		t.Errorf("artifacts = %d, want 1", n)
	}
	if n := e.Count("review_records", "job_id = $1", d.JobID); n != 1 {
		t.Errorf("records = %d, want 1", n)
	}
}

// Drill 3: two workers race for one job. The first stalls past its lease;
// a second execution claims the job with a newer token, calls and saves.
// One artifact, one record; the stalled worker's result is superseded.
func TestDrill3RacingWorkers(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	e := stettest.New(t, stettest.Options{Clock: clock, FakeOptions: openaifake.Options{
		Respond: func(req openaifake.Request) string {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 1 {
				<-release // the first worker stalls
			}
			return openaifake.MinimalInstance(req.Schema)
		},
	}})
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Some text."})
	e.WaitFor("the first call", func() bool { return e.Fake.Calls() == 1 })

	// The first worker's lease runs out; a second execution of the same
	// stage takes over (as after a rescue, or an operator's resume).
	clock.Advance(time.Hour)
	if _, err := e.Pipeline.River().Insert(context.Background(), pipeline.ExtractArgs{JobID: d.JobID}, nil); err != nil {
		t.Fatal(err)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	close(release)
	e.WaitFor("the stalled attempt to be superseded", func() bool {
		return slices.Contains(e.Attempts(d.JobID), "superseded")
	})
	if got, want := e.Attempts(d.JobID), []string{"superseded", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("attempts = %v, want %v", got, want)
	}
	if n := e.Fake.Calls(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
	if n := e.Count("artifacts", ""); n != 1 {
		t.Errorf("artifacts = %d, want 1", n)
	}
	if n := e.Count("review_records", ""); n != 1 {
		t.Errorf("records = %d, want 1", n)
	}
}

// Drill 4: a delivery replayed after the provider's dedup window (the clock
// moves past 24 h) creates nothing new unless the revision is new.
func TestDrill4ReplayAfterDedupWindow(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	e := stettest.New(t, stettest.Options{Clock: clock})
	r1 := stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Vaccines contain microchips."}
	d := e.Deliver(stettest.SourceReports, "msg_1", r1)
	e.WaitJob(d.JobID, stet.JobCommitted)

	clock.Advance(25 * time.Hour)
	for _, id := range []string{"msg_1", "msg_replayed"} {
		again := e.Deliver(stettest.SourceReports, id, r1)
		if again.Status != http.StatusOK || again.JobID != d.JobID || !again.Duplicate {
			t.Fatalf("replay with %s after 25h = %d %s, want 200 duplicate of %s", id, again.Status, again.Body, d.JobID)
		}
	}
	time.Sleep(200 * time.Millisecond) // give a wrongly enqueued job time to show
	if n := e.Count("review_records", ""); n != 1 {
		t.Fatalf("records after replay = %d, want 1", n)
	}
	if n := e.Fake.Calls(); n != 1 {
		t.Fatalf("provider calls after replay = %d, want 1", n)
	}
	r2 := r1
	r2.Revision, r2.Text = 2, "Vaccines contain microchips. Edited."
	d2 := e.Deliver(stettest.SourceReports, "msg_rev2", r2)
	if d2.Status != http.StatusAccepted || d2.JobID == d.JobID {
		t.Fatalf("new revision = %d %s, want 202 with a new job", d2.Status, d2.Body)
	}
	e.WaitJob(d2.JobID, stet.JobCommitted)
	if n := e.Count("review_records", ""); n != 2 {
		t.Errorf("records after a new revision = %d, want 2", n)
	}
	if !e.Record(d2.JobID).Authoritative || e.Record(d.JobID).Authoritative {
		t.Errorf("authoritative record should be revision 2's")
	}
}

// Drill 5: the provider answers, then the connection times out before stet
// reads the body. The ambiguous call is retried; one record; the extra call
// is counted on the job.
func TestDrill5AmbiguousTimeout(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{ProcessorTimeout: 300 * time.Millisecond})
	e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.TimeoutAfterAnswer})
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "text"})
	e.WaitJob(d.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
	if got, want := e.Attempts(d.JobID), []string{"failed/transient", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("attempts = %v, want %v", got, want)
	}
	if n := e.Count("review_records", ""); n != 1 {
		t.Errorf("records = %d, want 1", n)
	}
}

// Drill 9: revisions 3, 1, 2 arrive in that order: the authoritative record
// follows revision 3 throughout.
func TestDrill9RevisionsOutOfOrder(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	jobs := map[int64]string{}
	for _, rev := range []int64{3, 1, 2} {
		d := e.Deliver(stettest.SourceReports, "msg_r"+string(rune('0'+rev)), stettest.Report{ExternalID: "report-009", Revision: rev, Text: "revision text " + string(rune('0'+rev))})
		if d.Status != http.StatusAccepted {
			t.Fatalf("revision %d = %d %s", rev, d.Status, d.Body)
		}
		jobs[rev] = d.JobID
		e.WaitJob(d.JobID, stet.JobCommitted)
		if !e.Record(jobs[3]).Authoritative {
			t.Fatalf("after revision %d arrived, revision 3's record is not authoritative", rev)
		}
	}
	if n := e.Count("review_records", "authoritative"); n != 1 {
		t.Errorf("authoritative records = %d, want 1", n)
	}
	var rep struct {
		Revisions []struct {
			Revision      int64 `json:"revision"`
			Authoritative bool  `json:"authoritative"`
		} `json:"revisions"`
	}
	if st, b := e.Do(http.MethodGet, "/v1/sources/reports/reports/report-009", stettest.ReaderToken, nil, &rep); st != http.StatusOK {
		t.Fatalf("GET report = %d %s", st, b)
	}
	for _, r := range rep.Revisions {
		if r.Authoritative != (r.Revision == 3) {
			t.Errorf("revision %d authoritative = %v", r.Revision, r.Authoritative)
		}
	}
}

// The failure classes of DESIGN §2, each with its provider-call count.
func TestFailureClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		faults    []openaifake.Fault
		state     stet.JobState
		kind      string // record kind
		class     string // the manual record's failure class
		calls     int
		attempts  []string
		problemIn string // a string the repair request must carry
	}{
		{name: "rate limited snoozes, then succeeds", faults: []openaifake.Fault{{Kind: openaifake.RateLimit, RetryAfter: "1"}},
			state: stet.JobCommitted, kind: "extracted", calls: 2, attempts: []string{"failed/rate_limited", "succeeded"}},
		{name: "retry-after-ms", faults: []openaifake.Fault{{Kind: openaifake.RateLimit, RetryAfterMS: 100}},
			state: stet.JobCommitted, kind: "extracted", calls: 2, attempts: []string{"failed/rate_limited", "succeeded"}},
		{name: "transient 5xx retried", faults: []openaifake.Fault{{Kind: openaifake.ServerError, Status: 503}},
			state: stet.JobCommitted, kind: "extracted", calls: 2, attempts: []string{"failed/transient", "succeeded"}},
		{name: "transient budget exhausted becomes manual",
			faults: []openaifake.Fault{{Kind: openaifake.ServerError}, {Kind: openaifake.ServerError}, {Kind: openaifake.ServerError}},
			state:  stet.JobManual, kind: "manual", class: "transient", calls: 3,
			attempts: []string{"failed/transient", "failed/transient", "failed/transient"}},
		{name: "invalid output repaired", faults: []openaifake.Fault{{Kind: openaifake.SchemaInvalid}},
			state: stet.JobCommitted, kind: "extracted", calls: 2, attempts: []string{"repair/invalid_output", "succeeded"}, problemIn: "not valid against the JSON schema"},
		{name: "truncated JSON repaired", faults: []openaifake.Fault{{Kind: openaifake.TruncatedJSON}},
			state: stet.JobCommitted, kind: "extracted", calls: 2, attempts: []string{"repair/invalid_output", "succeeded"}},
		{name: "invalid output past the repair budget becomes manual",
			faults: []openaifake.Fault{{Kind: openaifake.SchemaInvalid}, {Kind: openaifake.SchemaInvalid}, {Kind: openaifake.Length}},
			state:  stet.JobManual, kind: "manual", class: "invalid_output", calls: 3,
			attempts: []string{"repair/invalid_output", "repair/invalid_output", "failed/invalid_output"}},
		{name: "refusal is manual, never retried", faults: []openaifake.Fault{{Kind: openaifake.Refusal}},
			state: stet.JobManual, kind: "manual", class: "refusal", calls: 1, attempts: []string{"failed/refusal"}},
		{name: "content filter is a refusal", faults: []openaifake.Fault{{Kind: openaifake.ContentFilter}},
			state: stet.JobManual, kind: "manual", class: "refusal", calls: 1, attempts: []string{"failed/refusal"}},
		{name: "unsupported is manual, never retried", faults: []openaifake.Fault{{Kind: openaifake.HTTPError, Status: 400, Code: "invalid_request_error"}},
			state: stet.JobManual, kind: "manual", class: "unsupported", calls: 1, attempts: []string{"failed/unsupported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := stettest.New(t, stettest.Options{})
			e.Fake.Enqueue(tt.faults...)
			d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Take ten times the dose."})
			e.WaitJob(d.JobID, tt.state)
			if n := e.Fake.Calls(); n != tt.calls {
				t.Errorf("provider calls = %d, want %d", n, tt.calls)
			}
			if got := e.Attempts(d.JobID); !slices.Equal(got, tt.attempts) {
				t.Errorf("attempts = %v, want %v", got, tt.attempts)
			}
			rec := e.Record(d.JobID)
			if rec.Kind != tt.kind {
				t.Errorf("record kind = %s, want %s", rec.Kind, tt.kind)
			}
			gotClass := ""
			if rec.FailureClass != nil {
				gotClass = *rec.FailureClass
			}
			if gotClass != tt.class {
				t.Errorf("record failure class = %q, want %q", gotClass, tt.class)
			}
			if tt.kind == "extracted" {
				if problems := e.Schema().Validate(rec.Classification); len(problems) > 0 {
					t.Errorf("record classification invalid: %v", problems)
				}
			}
			if tt.problemIn != "" && e.Fake.CallsContaining(tt.problemIn) != 1 {
				t.Errorf("repair requests carrying %q = %d, want 1", tt.problemIn, e.Fake.CallsContaining(tt.problemIn))
			}
			if n := e.Count("review_records", ""); n != 1 {
				t.Errorf("records = %d, want 1", n)
			}
		})
	}
}

// quota and auth pause the processor: the job waits without a record, an
// alert names the processor, later jobs for it send nothing; unpausing
// resumes every job from its last durable stage.
func TestQuotaPausesProcessor(t *testing.T) {
	t.Parallel()
	for _, fault := range []openaifake.Fault{{Kind: openaifake.Quota}, {Kind: openaifake.Unauthorized}} {
		t.Run(string(fault.Kind), func(t *testing.T) {
			t.Parallel()
			e := stettest.New(t, stettest.Options{FakeOptions: openaifake.Options{APIKey: "sk-test"}})
			e.Fake.Enqueue(fault)
			d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "text one"})
			e.WaitJob(d.JobID, stet.JobWaiting)
			e.WaitFor("the alert", func() bool { return strings.Contains(e.Logs.String(), `"alert":"processor_paused"`) })
			pauses, err := e.DB.Pauses(context.Background())
			if err != nil || len(pauses) != 1 || pauses[0].Scope != "processor:openai-fake" {
				t.Fatalf("pauses = %+v, %v, want processor:openai-fake", pauses, err)
			}
			d2 := e.Deliver(stettest.SourceReports, "msg_2", stettest.Report{ExternalID: "report-002", Revision: 1, Text: "text two"})
			e.WaitJob(d2.JobID, stet.JobWaiting)
			time.Sleep(300 * time.Millisecond) // a wrong dispatch would show as a call
			if n := e.Fake.Calls(); n != 1 {
				t.Fatalf("provider calls while paused = %d, want 1 (the failed one)", n)
			}
			if n := e.Count("review_records", ""); n != 0 {
				t.Fatalf("records while paused = %d, want 0", n)
			}
			if n := e.Count("attempts", "job_id = $1", d2.JobID); n != 0 {
				t.Fatalf("attempts of the second job while paused = %d, want 0 (no attempt spent)", n)
			}
			if err := e.DB.ClearPause(context.Background(), "processor:openai-fake", "test", "demo", time.Now()); err != nil {
				t.Fatal(err)
			}
			e.WaitJob(d.JobID, stet.JobCommitted)
			e.WaitJob(d2.JobID, stet.JobCommitted)
			if n := e.Fake.Calls(); n != 3 {
				t.Errorf("provider calls = %d, want 3", n)
			}
		})
	}
}

// Drill 10 (shape): the policy is edited to drop the processor. Pending
// jobs are blocked; nothing is sent anywhere else.
func TestPolicyDropsProcessorBlocks(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "text"})
	edited := *e.Policy
	edited.Processors = []string{"rules"}
	e.RestartWorkers(&edited)
	e.WaitJob(d.JobID, stet.JobBlocked)
	if n := e.Fake.Calls(); n != 0 {
		t.Errorf("provider calls = %d, want 0", n)
	}
	if n := e.Count("attempts", ""); n != 0 {
		t.Errorf("attempts = %d, want 0 (no call to any processor)", n)
	}
	var j struct {
		FailureClass string `json:"failure_class"`
	}
	e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.ReaderToken, nil, &j)
	if j.FailureClass != "boundary" {
		t.Errorf("failure_class = %q, want boundary", j.FailureClass)
	}
}

// Minimization: identifiers never reach the processor; the attempt records
// the SHA-256 of what was sent.
func TestMinimizedBeforeSending(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	text := "Email me at jane.doe@example.org or call (555) 123-4567, SSN 123-45-6789, MRN: 884422."
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: text})
	e.WaitJob(d.JobID, stet.JobCommitted)
	for _, leaked := range []string{"jane.doe@example.org", "123-4567", "123-45-6789", "884422"} {
		if n := e.Fake.CallsContaining(leaked); n != 0 {
			t.Errorf("the processor received %q", leaked)
		}
	}
	for _, ph := range []string{"[EMAIL]", "[PHONE]", "[SSN]", "[MRN]"} {
		if n := e.Fake.CallsContaining(ph); n != 1 {
			t.Errorf("calls carrying %s = %d, want 1", ph, n)
		}
	}
	var sha string
	if err := e.DB.Writer().QueryRow(`SELECT input_sha256 FROM attempts WHERE job_id = $1`, d.JobID).Scan(&sha); err != nil {
		t.Fatal(err)
	}
	if len(sha) != 64 || sha == stet.SHA256Hex([]byte(text)) {
		t.Errorf("attempt input_sha256 = %q, want the hash of the minimized prompt", sha)
	}
	_ = json.Valid
}

func riverCommitJobs() *river.JobListParams {
	return river.NewJobListParams().Kinds(pipeline.CommitArgs{}.Kind()).First(10)
}

// Approved fallbacks: a policy's later processors take over only after a
// transient or rate-limited failure, the attempt records which processor
// answered, and a processor the policy in force no longer permits is never
// used — dropping the primary blocks the job instead of re-routing it.
func TestApprovedFallbacks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fault    openaifake.Fault
		edited   []string // the policy in force, if edited after acceptance
		state    stet.JobState
		attempts []string // processor/status[/class]
	}{
		{name: "rate limited goes to the fallback", fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "30"},
			state: stet.JobCommitted, attempts: []string{"openai-fake/failed/rate_limited", "rules/succeeded"}},
		{name: "transient goes to the fallback", fault: openaifake.Fault{Kind: openaifake.ServerError, Status: 503},
			state: stet.JobCommitted, attempts: []string{"openai-fake/failed/transient", "rules/succeeded"}},
		{name: "a refusal never falls back", fault: openaifake.Fault{Kind: openaifake.Refusal},
			state: stet.JobManual, attempts: []string{"openai-fake/failed/refusal"}},
		{name: "unsupported never falls back", fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 400},
			state: stet.JobManual, attempts: []string{"openai-fake/failed/unsupported"}},
		{name: "a fallback the policy dropped is not used", fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "1"},
			edited: []string{"openai-fake"}, state: stet.JobCommitted, attempts: []string{"openai-fake/failed/rate_limited", "openai-fake/succeeded"}},
		{name: "a dropped primary blocks, never re-routes", fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "1"},
			edited: []string{"rules"}, state: stet.JobBlocked, attempts: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := stettest.New(t, stettest.Options{PolicyProcessors: []string{"openai-fake", "rules"}, NoWorkers: tt.edited != nil})
			e.Fake.Enqueue(tt.fault)
			d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Stop taking your insulin."})
			if tt.edited != nil {
				edited := *e.Policy
				edited.Processors = tt.edited
				e.RestartWorkers(&edited)
			}
			e.WaitJob(d.JobID, tt.state)
			rows, err := e.DB.Writer().Query(`SELECT processor_id, status, COALESCE(failure_class, '') FROM attempts WHERE job_id = $1 ORDER BY n`, d.JobID)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for rows.Next() {
				var proc, status, class string
				if err := rows.Scan(&proc, &status, &class); err != nil {
					t.Fatal(err)
				}
				s := proc + "/" + status
				if class != "" {
					s += "/" + class
				}
				got = append(got, s)
			}
			rows.Close()
			if !slices.Equal(got, tt.attempts) {
				t.Errorf("attempts = %v, want %v", got, tt.attempts)
			}
			if tt.state == stet.JobCommitted {
				last := tt.attempts[len(tt.attempts)-1]
				var proc string
				if err := e.DB.Writer().QueryRow(`SELECT processor_id FROM artifacts WHERE job_id = $1`, d.JobID).Scan(&proc); err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(last, proc+"/") {
					t.Errorf("artifact processor = %s, want the one that answered (%s)", proc, last)
				}
			}
		})
	}
}

// Admission control: with the processor's limits configured (with the
// headroom an operator leaves for clock and network jitter), stet paces its
// calls so the provider answers no 429, and jobs that must wait spend no
// attempt. Without admission the same load draws 429s.
func TestAdmissionKeepsWithinProviderLimits(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{
		FakeOptions: openaifake.Options{RPM: 120, LimitWindow: time.Second}, // 2 requests a second
		Limits:      admission.Limits{RPM: 100},
	})
	var jobs []string
	for i := 0; i < 8; i++ {
		d := e.Deliver(stettest.SourceReports, fmt.Sprintf("msg_%d", i), stettest.Report{ExternalID: fmt.Sprintf("report-%03d", i), Revision: 1, Text: fmt.Sprintf("text %d", i)})
		jobs = append(jobs, d.JobID)
	}
	for _, j := range jobs {
		e.WaitJob(j, stet.JobCommitted)
	}
	st := e.Fake.Stats()
	if st.Limited != 0 || st.Calls != 8 {
		t.Errorf("fake saw %d calls, %d answered 429; want 8 and 0", st.Calls, st.Limited)
	}
	if n := e.Count("attempts", ""); n != 8 {
		t.Errorf("attempts = %d, want 8 (waiting for admission spends none)", n)
	}
}
