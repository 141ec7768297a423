package pipeline_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// deliverBatch delivers n batch-mode reports and returns their job IDs.
func deliverBatch(t *testing.T, e *stettest.Env, prefix string, n int) []string {
	t.Helper()
	var jobs []string
	for i := range n {
		r := e.Deliver(stettest.SourceBatch, fmt.Sprintf("%s-msg-%d", prefix, i),
			stettest.Report{ExternalID: fmt.Sprintf("%s-%d", prefix, i), Revision: 1, Text: fmt.Sprintf("Report %d: you are all idiots.", i)})
		if r.Status != http.StatusAccepted {
			t.Fatalf("delivery %d = %d %s, want 202", i, r.Status, r.Body)
		}
		jobs = append(jobs, r.JobID)
	}
	return jobs
}

// waitCommitted waits up to a minute: a batch goes through several River
// jobs in turn (assembly and submission, polls, the results' apply), and
// under the race detector beside the other packages' suites River's queue
// wait alone reached 9 s (CI, stop 24).
func waitCommitted(t *testing.T, e *stettest.Env, n int) {
	t.Helper()
	e.WaitForWithin(fmt.Sprintf("%d committed jobs", n), 2*time.Minute, func() bool {
		return e.Count("jobs", "state IN ('committed', 'manual')") >= n
	})
}

// A batch-mode source: the jobs go through one provider batch, submitted
// once and polled; each becomes one artifact and one record; no synchronous
// call is made.
func TestBatchEndToEnd(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 5, MaxWait: time.Hour},
		FakeOptions: openaifake.Options{Batch: openaifake.BatchOptions{PollsToEnd: 2}}})
	jobs := deliverBatch(t, e, "b", 5)
	waitCommitted(t, e, 5)
	// The records commit first; the batch is marked applied after them, in
	// a transaction of its own.
	e.WaitFor("the batch applied", func() bool { return e.Count("batches", "applied_at IS NOT NULL") == 1 })

	st := e.Fake.BatchStats()
	if st.Created != 1 || st.CreateCalls != 1 || st.Uploads != 1 {
		t.Errorf("fake batch stats = %+v, want 1 upload, 1 create call, 1 batch", st)
	}
	if st.StatusCalls < 2 {
		t.Errorf("status calls = %d, want at least 2 (the batch ends on its second poll)", st.StatusCalls)
	}
	if n := e.Fake.Calls(); n != 0 {
		t.Errorf("synchronous calls = %d, want 0", n)
	}
	for table, want := range map[string]int{"artifacts": 5, "review_records": 5, "batches": 1, "batch_items": 5} {
		if n := e.Count(table, ""); n != want {
			t.Errorf("%s = %d, want %d", table, n, want)
		}
	}
	if n := e.Count("jobs", "state = 'committed'"); n != 5 {
		t.Errorf("committed jobs = %d, want 5", n)
	}
	if n := e.Count("batch_items", "applied_at IS NOT NULL AND outcome = 'succeeded'"); n != 5 {
		t.Errorf("applied items = %d, want 5", n)
	}
	if n := e.Count("attempts", "batch_id IS NOT NULL AND status = 'succeeded'"); n != 5 {
		t.Errorf("succeeded batch attempts = %d, want 5", n)
	}
	bs, err := ledger.ListBatches(context.Background(), e.DB.Writer(), nil, 10)
	if err != nil || len(bs) != 1 {
		t.Fatalf("ListBatches = %v, %v", bs, err)
	}
	b := bs[0]
	if b.State != stet.BatchCompleted || b.AppliedAt.IsZero() || b.ProviderBatchID == "" || b.InputFileID == "" || b.OutputFileID == "" {
		t.Errorf("batch = %+v, want completed, applied, with its provider batch and files recorded", b)
	}
	if fb := e.Fake.Batches(); len(fb) != 1 || fb[0].Label != b.ID || fb[0].ID != b.ProviderBatchID {
		t.Errorf("fake batches = %+v, want one labelled %s", fb, b.ID)
	}
	var view struct {
		Attempts []struct {
			Processor string `json:"processor"`
			Status    string `json:"status"`
			BatchID   string `json:"batch_id"`
		} `json:"attempts"`
	}
	if code, body := e.Do(http.MethodGet, "/v1/jobs/"+jobs[0], stettest.ReaderToken, nil, &view); code != http.StatusOK ||
		len(view.Attempts) != 1 || view.Attempts[0].BatchID != b.ID || view.Attempts[0].Status != "succeeded" {
		t.Errorf("GET /v1/jobs/%s = %d %s, want one succeeded attempt in batch %s", jobs[0], code, body, b.ID)
	}
	rec := e.Record(jobs[0])
	if rec.Kind != "extracted" || !rec.Authoritative {
		t.Errorf("record = %+v, want an authoritative extracted record", rec)
	}
}

// Results fetched twice are applied once.
func TestBatchResultsFetchedTwiceAppliedOnce(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 3, MaxWait: time.Hour}})
	deliverBatch(t, e, "t", 3)
	waitCommitted(t, e, 3)
	var id string
	if err := e.DB.Writer().QueryRow(`SELECT id FROM batches`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	// The records commit with their items; the batch's own run then marks
	// it applied and gives up its lease. Wait for both, or the run below
	// would find the batch held.
	e.WaitFor("the batch applied and released", func() bool {
		return e.Count("batches", "applied_at IS NOT NULL AND lease_until IS NULL") == 1
	})
	before := e.Fake.BatchStats().ResultFetches
	// As after a crash between applying the items and marking the batch.
	if _, err := e.DB.Writer().Exec(`UPDATE batches SET applied_at = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if outcome, err := e.Pipeline.RunBatch(context.Background(), id); err != nil || outcome == "held" {
		t.Fatalf("RunBatch = %q, %v; want the batch applied again", outcome, err)
	}
	if after := e.Fake.BatchStats().ResultFetches; after <= before {
		t.Errorf("result fetches = %d then %d, want the results fetched again", before, after)
	}
	for table, want := range map[string]int{"artifacts": 3, "review_records": 3, "batch_items": 3} {
		if n := e.Count(table, ""); n != want {
			t.Errorf("%s = %d, want %d", table, n, want)
		}
	}
	if n := e.Count("batches", "applied_at IS NOT NULL AND applied_count = 3"); n != 1 {
		t.Errorf("applied batches = %d, want 1 with 3 applied items", n)
	}
	if st := e.Fake.BatchStats(); st.Created != 1 {
		t.Errorf("batches created = %d, want 1", st.Created)
	}
}

// A partially expired batch: the expired items go into a new batch, the
// rest are applied once; nothing is duplicated.
func TestBatchPartiallyExpired(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{MaxAttempts: 20, Batch: pipeline.BatchSettings{MaxItems: 4, MaxWait: 200 * time.Millisecond}})
	jobs := deliverBatch(t, e, "x", 4)
	e.Fake.ScriptBatchItem(jobs[1], openaifake.Fault{Kind: openaifake.ItemExpired})
	waitCommitted(t, e, 3)
	e.WaitFor("the first batch applied", func() bool { return e.Count("batches", "applied_at IS NOT NULL") >= 1 })
	// From now on the provider answers that item.
	e.Fake.ScriptBatchItem(jobs[1], openaifake.Fault{Kind: openaifake.ItemOK})
	waitCommitted(t, e, 4)

	if n := e.Count("jobs", "state = 'committed'"); n != 4 {
		t.Errorf("committed jobs = %d, want 4", n)
	}
	for table, want := range map[string]int{"artifacts": 4, "review_records": 4} {
		if n := e.Count(table, ""); n != want {
			t.Errorf("%s = %d, want %d", table, n, want)
		}
	}
	if n := e.Count("batch_items", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", jobs[1]); n < 2 {
		t.Errorf("batch items of the expired job = %d, want it in a second batch", n)
	}
	if n := e.Count("batch_items", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND outcome = 'succeeded'", jobs[1]); n != 1 {
		t.Errorf("succeeded items of the expired job = %d, want 1", n)
	}
	expired := e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND failure_class = 'transient'", jobs[1])
	if items := e.Count("batch_items", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", jobs[1]); expired < 1 || expired != items-1 {
		t.Errorf("transient attempts of the expired job = %d in %d batches, want one per expired item", expired, items)
	}
	if n := e.Fake.Calls(); n != 0 {
		t.Errorf("synchronous calls = %d, want 0 (on_expired: batch)", n)
	}
}

// A 429 on a status lookup with Retry-After as an HTTP-date: the next poll
// is not before that date, and nothing is submitted again.
func TestBatchStatus429HTTPDate(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 2, MaxWait: time.Hour}})
	until := time.Now().Add(30 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	e.Fake.EnqueueBatch(openaifake.BatchRouteStatus, openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: until.Format(http.TimeFormat)})
	deliverBatch(t, e, "r", 2)
	e.WaitFor("a rate-limited poll", func() bool { return e.Fake.BatchStats().StatusCalls >= 1 && e.Count("batches", "poll_count >= 1") == 1 })
	var next int64
	if err := e.DB.Writer().QueryRow(`SELECT next_poll_at FROM batches`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if got := time.UnixMicro(next); got.Before(until.Add(-time.Second)) {
		t.Errorf("next poll at %s, want not before the Retry-After date %s", got.UTC(), until)
	}
	time.Sleep(300 * time.Millisecond) // the poll cap is 200ms: a poll ignoring Retry-After would have happened
	st := e.Fake.BatchStats()
	if st.StatusCalls != 1 || st.CreateCalls != 1 || st.Created != 1 {
		t.Errorf("fake stats = %+v, want 1 status call, 1 create call, 1 batch", st)
	}
}

// The provider created the batch but the answer was lost: the next run
// reconciles by the batch's metadata, adopts it, and never submits again.
func TestBatchAmbiguousSubmitReconciled(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 3, MaxWait: time.Hour}})
	e.Fake.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.CreateThenReset})
	deliverBatch(t, e, "a", 3)
	waitCommitted(t, e, 3)
	st := e.Fake.BatchStats()
	if st.Created != 1 || st.CreateCalls != 1 || st.ListCalls < 1 {
		t.Errorf("fake stats = %+v, want 1 batch from 1 create call, found by listing", st)
	}
	for table, want := range map[string]int{"artifacts": 3, "review_records": 3} {
		if n := e.Count(table, ""); n != want {
			t.Errorf("%s = %d, want %d", table, n, want)
		}
	}
}

// An interrupted submission that created nothing cannot be established
// either way from the listing: the batch goes to unknown, an alert names
// it, and an operator's resubmit is audit-logged and submits once.
func TestBatchUnknownThenResubmit(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 2, MaxWait: time.Hour}})
	// A 500 on the create call: ambiguous, but nothing was created.
	e.Fake.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.ServerError})
	deliverBatch(t, e, "u", 2)
	e.WaitFor("an unknown batch", func() bool { return e.Count("batches", "state = 'unknown'") == 1 })
	var id string
	if err := e.DB.Writer().QueryRow(`SELECT id FROM batches`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	vs, err := e.DB.CheckInvariants(context.Background(), ledger.CheckParams{Now: time.Now(), SLA: time.Hour, LeaseGrace: time.Minute})
	if err != nil || len(vs) != 1 || vs[0].Name != ledger.InvBatchUnknown || vs[0].BatchID != id {
		t.Errorf("violations = %+v, %v; want batch_unknown for %s", vs, err, id)
	}
	if st := e.Fake.BatchStats(); st.Created != 0 {
		t.Fatalf("batches created = %d, want 0", st.Created)
	}
	// The periodic check raises the alert, IDs only, and sets the gauge.
	e.WaitFor("the batch_unknown alert", func() bool {
		return strings.Contains(e.Logs.String(), `"alert":"invariant_violated"`) && strings.Contains(e.Logs.String(), `"batch_id":"`+id+`"`) &&
			violations(t, e, ledger.InvBatchUnknown) == 1
	})
	if err := e.Pipeline.ReconcileBatch(context.Background(), id, "", true, "test-operator"); err != nil {
		t.Fatalf("ReconcileBatch(resubmit) = %v", err)
	}
	waitCommitted(t, e, 2)
	if st := e.Fake.BatchStats(); st.Created != 1 {
		t.Errorf("batches created = %d, want 1", st.Created)
	}
	e.WaitFor("the gauge back to 0", func() bool {
		return violations(t, e, ledger.InvBatchUnknown) == 0
	})
	if n := e.Count("audit_log", "action = 'batch.reconcile.resubmit' AND object_id = $1 AND actor = 'test-operator'", id); n != 1 {
		t.Errorf("audit entries = %d, want 1", n)
	}
}

// Removing the processor from the policy blocks waiting batch-mode jobs; they
// are never sent elsewhere.
func TestBatchPolicyDropBlocks(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: false, Batch: pipeline.BatchSettings{MaxItems: 100, MaxWait: time.Hour},
		PolicyProcessors: []string{"openai-fake", "rules"}})
	jobs := deliverBatch(t, e, "p", 2)
	dropped := *e.Policy
	dropped.Processors = []string{"rules"}
	e.Restart(&dropped)
	if _, err := e.Pipeline.Assemble(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		e.WaitJob(j, stet.JobBlocked)
	}
	if st := e.Fake.BatchStats(); st.CreateCalls != 0 || st.Uploads != 0 {
		t.Errorf("fake stats = %+v, want nothing sent", st)
	}
	if n := e.Count("review_records", ""); n != 0 {
		t.Errorf("records = %d, want 0 (nothing re-routed to rules)", n)
	}
}

// No document text, prompt or model output reaches the logs, River's job
// rows or the batch ledger through the batch path, whatever the items'
// outcomes.
func TestBatchCanaryNeverLogged(t *testing.T) {
	t.Parallel()
	const marker = "CANARY-Jane-Roe-555-0199"
	e := stettest.New(t, stettest.Options{MaxAttempts: 2, Batch: pipeline.BatchSettings{MaxItems: 3, MaxWait: time.Hour, OnExpired: stet.ModeSync}})
	var jobs []string
	for i := range 3 {
		r := e.Deliver(stettest.SourceBatch, fmt.Sprintf("c-%d", i), stettest.Report{ExternalID: fmt.Sprintf("canary-%d-%s", i, marker), Revision: 1,
			Text: "Patient " + marker + " (canary.jane@example.com) says you are all idiots."})
		if r.Status != http.StatusAccepted {
			t.Fatalf("delivery = %d %s", r.Status, r.Body)
		}
		jobs = append(jobs, r.JobID)
	}
	e.Fake.ScriptBatchItem(jobs[0], openaifake.Fault{Kind: openaifake.Refusal, Message: "I will not discuss " + marker})
	e.Fake.ScriptBatchItem(jobs[1], openaifake.Fault{Kind: openaifake.SchemaInvalid})
	e.Fake.ScriptBatchItem(jobs[2], openaifake.Fault{Kind: openaifake.ItemExpired})
	waitCommitted(t, e, 3)
	if strings.Contains(e.Logs.String(), marker) {
		t.Errorf("logs contain the marker")
	}
	var leaks int
	for _, q := range []string{
		`SELECT COUNT(*) FROM river_job WHERE CAST(args AS TEXT) LIKE $1 OR CAST(errors AS TEXT) LIKE $1`,
		`SELECT COUNT(*) FROM batches WHERE COALESCE(unknown_reason, '') LIKE $1 OR COALESCE(provider_state, '') LIKE $1`,
		`SELECT COUNT(*) FROM attempts WHERE COALESCE(request_id, '') LIKE $1`,
	} {
		var n int
		if err := e.DB.Writer().QueryRow(q, "%"+marker+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		leaks += n
	}
	if leaks != 0 {
		t.Errorf("rows holding the marker = %d, want 0", leaks)
	}
	// The policy minimizes email addresses, not names: the provider sees
	// the marker but never the address.
	if n := e.Fake.BatchItemsContaining(marker); n == 0 {
		t.Errorf("batch items holding the marker = 0, want some (the fake's inputs were not inspected)")
	}
	if n := e.Fake.BatchItemsContaining("canary.jane@example.com"); n != 0 {
		t.Errorf("batch items holding the email address = %d, want 0: minimization must run on the batch path", n)
	}
}

// violations reads stet_invariant_violations{invariant=name} from the
// registry; -1 when the check has not set it yet.
func violations(t *testing.T, e *stettest.Env, name string) float64 {
	t.Helper()
	mfs, err := e.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stet_invariant_violations" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "invariant" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// A paused processor's batch-mode jobs wait in accepted: no batch is
// assembled, nothing is sent; after unpausing they go out in one batch.
func TestBatchPausedProcessorWaits(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 2, MaxWait: time.Hour}})
	ctx := context.Background()
	if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "processor:openai-fake", Reason: "test", PausedBy: "test", PausedAt: time.Now()}, "demo"); err != nil {
		t.Fatal(err)
	}
	jobs := deliverBatch(t, e, "w", 2)
	if _, err := e.Pipeline.Assemble(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := e.Count("batches", ""); n != 0 {
		t.Errorf("batches while paused = %d, want 0", n)
	}
	for _, j := range jobs {
		if s := e.JobState(j); s != stet.JobAccepted {
			t.Errorf("job %s while paused = %s, want accepted", j, s)
		}
	}
	if err := e.DB.ClearPause(ctx, "processor:openai-fake", "test", "demo", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, e, 2)
	if st := e.Fake.BatchStats(); st.Created != 1 || st.Uploads != 1 {
		t.Errorf("fake stats = %+v, want one batch after unpausing", st)
	}
}

// The provider refuses a batch for good (400): nothing is sent again as a
// batch; the items go to synchronous extraction.
func TestBatchRejectedGoesSync(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{Batch: pipeline.BatchSettings{MaxItems: 2, MaxWait: time.Hour}})
	e.Fake.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.HTTPError, Status: 400})
	deliverBatch(t, e, "j", 2)
	waitCommitted(t, e, 2)
	if n := e.Count("jobs", "state = 'committed'"); n != 2 {
		t.Errorf("committed jobs = %d, want 2", n)
	}
	st := e.Fake.BatchStats()
	if st.CreateCalls != 1 || st.Created != 0 || e.Fake.Calls() != 2 {
		t.Errorf("fake: %d create calls, %d batches, %d sync calls; want 1, 0, 2", st.CreateCalls, st.Created, e.Fake.Calls())
	}
	if n := e.Count("batches", "state = 'failed' AND provider_state = 'rejected' AND applied_at IS NOT NULL"); n != 1 {
		t.Errorf("rejected, applied batches = %d, want 1", n)
	}
}

// Between assembly and submission: a pause holds the batch (nothing is
// sent); a policy that no longer permits the processor takes the items out
// of the batch, blocked, before anything leaves.
func TestBatchBeforeSubmission(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true, Batch: pipeline.BatchSettings{MaxItems: 100, MaxWait: time.Hour},
		PolicyProcessors: []string{"openai-fake", "rules"}})
	ctx := context.Background()
	jobs := deliverBatch(t, e, "s", 2)
	if n, err := e.Pipeline.Assemble(ctx, true); err != nil || n != 1 {
		t.Fatalf("Assemble = %d, %v; want 1 batch", n, err)
	}
	var id string
	if err := e.DB.Writer().QueryRow(`SELECT id FROM batches`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "processor:openai-fake", Reason: "test", PausedBy: "test", PausedAt: time.Now()}, "demo"); err != nil {
		t.Fatal(err)
	}
	if outcome, err := e.Pipeline.RunBatch(ctx, id); err != nil || outcome != "paused" {
		t.Errorf("RunBatch while paused = %q, %v; want paused", outcome, err)
	}
	if st := e.Fake.BatchStats(); st.Uploads != 0 || st.CreateCalls != 0 {
		t.Errorf("fake stats while paused = %+v, want nothing sent", st)
	}
	if err := e.DB.ClearPause(ctx, "processor:openai-fake", "test", "demo", time.Now()); err != nil {
		t.Fatal(err)
	}

	dropped := *e.Policy
	dropped.Processors = []string{"rules"}
	e.Restart(&dropped)
	if outcome, err := e.Pipeline.RunBatch(ctx, id); err != nil || outcome != "empty" {
		t.Errorf("RunBatch after the policy dropped the processor = %q, %v; want empty", outcome, err)
	}
	for _, j := range jobs {
		if s := e.JobState(j); s != stet.JobBlocked {
			t.Errorf("job %s = %s, want blocked", j, s)
		}
	}
	if st := e.Fake.BatchStats(); st.Uploads != 0 || st.CreateCalls != 0 {
		t.Errorf("fake stats = %+v, want nothing sent", st)
	}
	if n := e.Count("batches", "applied_at IS NOT NULL AND applied_count = 2"); n != 1 {
		t.Errorf("batches with both items taken out = %d, want 1", n)
	}
	if n := e.Count("review_records", ""); n != 0 {
		t.Errorf("records = %d, want 0 (nothing re-routed to rules)", n)
	}
}
