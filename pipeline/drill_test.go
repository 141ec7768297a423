package pipeline_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/lab/drill/recovery"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The failure classes of docs/design.md §2, each with its provider-call count.
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
			if n := e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", d2.JobID); n != 0 {
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
	var stored []byte
	if err := e.DB.Writer().QueryRow(`SELECT input_sha256 FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, d.JobID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	sha := hex.EncodeToString(stored)
	if len(sha) != 64 || sha == stet.SHA256Hex([]byte(text)) {
		t.Errorf("attempt input_sha256 = %q, want the hash of the minimized prompt", sha)
	}
	_ = json.Valid
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
			rows, err := e.DB.Writer().Query(`SELECT processor_id, status, COALESCE(failure_class, '') FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) ORDER BY n`, d.JobID)
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
				if err := e.DB.Writer().QueryRow(`SELECT processor_id FROM artifacts WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, d.JobID).Scan(&proc); err != nil {
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

// The recovery drills of docs/design.md §10 live in lab/drill/recovery, where
// `stetlab drill` runs them too; each test runs one and asserts on its outcome,
// with the counts written here again so that a drill cannot loosen its own
// expectation unnoticed.
func checkDrill(t *testing.T, d recovery.Drill, want recovery.Counts) {
	t.Helper()
	o := d.Run(t)
	if o.Observed != want {
		t.Errorf("drill %s observed %v, want %v", d.Name, o.Observed, want)
	}
	if !o.OK {
		t.Errorf("drill %s failed: %v", d.Name, o.Failures)
	}
}

// Drill 1: report-001 twice (same webhook-id, then a new one) and
// report-002 once: two reports, two authoritative records.
func TestDrill1DuplicateDeliveries(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill1, recovery.Counts{Reports: 2, Jobs: 2, Records: 2, Calls: 2})
}

// Drill 2: the record insert fails after the artifact: 1 call, 1 record.
func TestDrill2CommitFailsAfterArtifact(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill2, recovery.Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 1})
}

// Drill 3: racing workers: one artifact, one record, two calls.
func TestDrill3RacingWorkers(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill3, recovery.Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 2})
}

// Drill 4: replays after 24 h are duplicates; a new revision is a new job.
func TestDrill4ReplayAfterDedupWindow(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill4, recovery.Counts{Reports: 1, Jobs: 2, Records: 2, Calls: 2})
}

// Drill 5: an ambiguous answer: one record, the extra call counted.
func TestDrill5AmbiguousTimeout(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill5, recovery.Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 2})
}

// Drill 9: revisions 3, 1, 2: the authoritative record follows revision 3.
func TestDrill9RevisionsOutOfOrder(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill9, recovery.Counts{Reports: 1, Jobs: 3, Records: 3, Calls: 3})
}

// Drill 10 (shape): the policy drops the processor: blocked, no call.
func TestPolicyDropsProcessorBlocks(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill10, recovery.Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 0})
}
