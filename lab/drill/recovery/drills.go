package recovery

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Drill1: report-001 delivered twice (same webhook-id, then a new
// webhook-id with the same content) and report-002 once: two reports, two
// authoritative records, the duplicates resolve to the existing job.
var Drill1 = Drill{
	Name: "1", Title: "duplicate deliveries",
	Expect: "report-001 twice (same webhook-id, then a new one) and report-002 once: two reports, two authoritative records",
	Want:   Counts{Reports: 2, Jobs: 2, Records: 2, Calls: 2},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{})
		r1 := stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Stop taking your insulin, cinnamon cures diabetes."}
		first := e.Deliver(stettest.SourceReports, "msg_1", r1)
		again := e.Deliver(stettest.SourceReports, "msg_1", r1)
		newID := e.Deliver(stettest.SourceReports, "msg_2", r1)
		other := e.Deliver(stettest.SourceReports, "msg_3", stettest.Report{ExternalID: "report-002", Revision: 1, Text: "You are all idiots."})
		if first.Status != http.StatusAccepted || other.Status != http.StatusAccepted {
			t.Fatalf("first deliveries = %d, %d, want 202, 202", first.Status, other.Status)
		}
		for _, r := range []stettest.Response{again, newID} {
			if r.Status != http.StatusOK || !r.Duplicate || r.JobID != first.JobID {
				t.Fatalf("redelivery = %d %s, want 200 duplicate of job %s", r.Status, r.Body, first.JobID)
			}
		}
		e.WaitJob(first.JobID, stet.JobCommitted)
		e.WaitJob(other.JobID, stet.JobCommitted)
		if n := e.Count("review_records", "authoritative"); n != 2 {
			t.Errorf("authoritative records = %d, want 2", n)
		}
	},
}

// Drill2: the destination write fails after the artifact is saved.
// Recovery uses the artifact: one provider call, one record.
var Drill2 = Drill{
	Name: "2", Title: "commit fails after the artifact",
	Expect: "the record insert fails after the artifact is saved: the commit retries from the artifact; 1 call, 1 record",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 1},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{})
		// A real database failure: a trigger aborts every review-record
		// insert while the fault table has a row.
		db := e.DB.Writer()
		if err := ledgertest.FailWrites(context.Background(), e.DB, "INSERT", "review_records", "injected destination failure"); err != nil {
			t.Fatal(err)
		}
		r := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Double your dose of warfarin."})
		e.WaitJob(r.JobID, stet.JobExtracted)
		e.WaitFor("two failed commits", func() bool {
			jobs, err := e.Pipeline.River().JobList(context.Background(), river.NewJobListParams().Kinds(pipeline.RecordArgs{}.Kind()).First(10))
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
		e.WaitJob(r.JobID, stet.JobCommitted)
		if n := e.Count("artifacts", ""); n != 1 {
			t.Errorf("artifacts = %d, want 1", n)
		}
		if n := e.Count("review_records", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", r.JobID); n != 1 {
			t.Errorf("records of the job = %d, want 1", n)
		}
	},
}

// Drill3: two workers race for one job. The first stalls past its lease;
// a second execution claims the job with a newer token, calls and saves.
// One artifact, one record; the stalled worker's result is superseded.
var Drill3 = Drill{
	Name: "3", Title: "racing workers",
	Expect: "a worker stalls past its lease, a second takes the job: one artifact, one record, the stale result superseded",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 2},
	run: func(d *run) {
		t := d.t
		clock := stet.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
		release := make(chan struct{})
		var once sync.Once
		var mu sync.Mutex
		calls := 0
		e := d.Env(stettest.Options{Clock: clock, FakeOptions: openaifake.Options{
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
		stop := func() { once.Do(func() { close(release) }) }
		defer stop()
		r := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Some text."})
		e.WaitFor("the first call", func() bool { return e.Fake.Calls() == 1 })
		// The first worker's lease runs out; a second execution of the same
		// stage takes over (as after a rescue, or an operator's resume).
		clock.Advance(time.Hour)
		if _, err := e.Pipeline.River().Insert(context.Background(), pipeline.ExtractArgs{JobID: r.JobID}, nil); err != nil {
			t.Fatal(err)
		}
		e.WaitJob(r.JobID, stet.JobCommitted)
		stop()
		e.WaitFor("the stalled attempt to be superseded", func() bool {
			return slices.Contains(e.Attempts(r.JobID), "superseded")
		})
		if got, want := e.Attempts(r.JobID), []string{"superseded", "succeeded"}; !slices.Equal(got, want) {
			t.Errorf("attempts = %v, want %v", got, want)
		}
		if n := e.Count("artifacts", ""); n != 1 {
			t.Errorf("artifacts = %d, want 1", n)
		}
	},
}

// Drill4: a delivery replayed after the provider's dedup window (the clock
// moves past 24 h) creates nothing new unless the revision is new.
var Drill4 = Drill{
	Name: "4", Title: "replay after the dedup window",
	Expect: "replays 25 h later (same and new webhook-id) are duplicates; only a new revision makes a record",
	Want:   Counts{Reports: 1, Jobs: 2, Records: 2, Calls: 2},
	run: func(d *run) {
		t := d.t
		clock := stet.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
		e := d.Env(stettest.Options{Clock: clock})
		r1 := stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Vaccines contain microchips."}
		r := e.Deliver(stettest.SourceReports, "msg_1", r1)
		e.WaitJob(r.JobID, stet.JobCommitted)
		clock.Advance(25 * time.Hour)
		for _, id := range []string{"msg_1", "msg_replayed"} {
			again := e.Deliver(stettest.SourceReports, id, r1)
			if again.Status != http.StatusOK || again.JobID != r.JobID || !again.Duplicate {
				t.Fatalf("replay with %s after 25h = %d %s, want 200 duplicate of %s", id, again.Status, again.Body, r.JobID)
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
		if d2.Status != http.StatusAccepted || d2.JobID == r.JobID {
			t.Fatalf("new revision = %d %s, want 202 with a new job", d2.Status, d2.Body)
		}
		e.WaitJob(d2.JobID, stet.JobCommitted)
		if !e.Record(d2.JobID).Authoritative || e.Record(r.JobID).Authoritative {
			t.Errorf("authoritative record should be revision 2's")
		}
	},
}

// Drill5: the provider answers, then the connection times out before stet
// reads the body. The ambiguous call is retried; one record; the extra call
// is counted on the job.
var Drill5 = Drill{
	Name: "5", Title: "ambiguous provider answer",
	Expect: "the provider answers, the connection times out before the body is read: one record, the extra call counted",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 2},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{ProcessorTimeout: 300 * time.Millisecond})
		e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.TimeoutAfterAnswer})
		r := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "text"})
		e.WaitJob(r.JobID, stet.JobCommitted)
		if got, want := e.Attempts(r.JobID), []string{"failed/transient", "succeeded"}; !slices.Equal(got, want) {
			t.Errorf("attempts = %v, want %v", got, want)
		}
	},
}

// Drill9: revisions 3, 1, 2 arrive in that order: the authoritative record
// follows revision 3 throughout.
var Drill9 = Drill{
	Name: "9", Title: "revisions out of order",
	Expect: "revisions 3, 1, 2 in that order: the authoritative record follows revision 3",
	Want:   Counts{Reports: 1, Jobs: 3, Records: 3, Calls: 3},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{})
		jobs := map[int64]string{}
		for _, rev := range []int64{3, 1, 2} {
			r := e.Deliver(stettest.SourceReports, "msg_r"+string(rune('0'+rev)), stettest.Report{ExternalID: "report-009", Revision: rev, Text: "revision text " + string(rune('0'+rev))})
			if r.Status != http.StatusAccepted {
				t.Fatalf("revision %d = %d %s", rev, r.Status, r.Body)
			}
			jobs[rev] = r.JobID
			e.WaitJob(r.JobID, stet.JobCommitted)
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
	},
}

// Drill10: the policy is edited to drop the processor. Pending jobs are
// blocked; nothing is sent anywhere else.
var Drill10 = Drill{
	Name: "10", Title: "policy drops the processor",
	Expect: "the policy is edited to drop the processor: the pending job is blocked (boundary), nothing sent elsewhere",
	Want:   Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 0},
	run: func(d *run) {
		t := d.t
		e := d.Env(stettest.Options{NoWorkers: true})
		r := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "text"})
		edited := *e.Policy
		edited.Processors = []string{"rules"}
		e.RestartWorkers(&edited)
		e.WaitJob(r.JobID, stet.JobBlocked)
		if n := e.Count("attempts", ""); n != 0 {
			t.Errorf("attempts = %d, want 0 (no call to any processor)", n)
		}
		var j struct {
			FailureClass string `json:"failure_class"`
		}
		e.Do(http.MethodGet, "/v1/jobs/"+r.JobID, stettest.ReaderToken, nil, &j)
		if j.FailureClass != "boundary" {
			t.Errorf("failure_class = %q, want boundary", j.FailureClass)
		}
	},
}

// contains reports whether the env's logs hold s.
func logsHold(e *stettest.Env, s string) bool { return strings.Contains(e.Logs.String(), s) }
