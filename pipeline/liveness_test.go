package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// A graceful shutdown that cancels a stage mid-call releases its job
// without spending an attempt: the attempt is abandoned with no failure
// class (not a transient failure), and the job is accepted again with no
// lease, for the next process.
func TestShutdownReleasesStageWithoutSpendingAttempt(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{FakeOptions: openaifake.Options{Latency: time.Minute}, ProcessorTimeout: 2 * time.Minute,
		JobTimeout: 2 * time.Minute})
	r := e.Deliver(stettest.SourceReports, "msg_shutdown", stettest.Report{ExternalID: "report-shutdown", Revision: 1, Text: "Hello."})
	if r.Status != 202 {
		t.Fatalf("deliver = %d, want 202", r.Status)
	}
	e.WaitFor("the call under way", func() bool { return e.Fake.Calls() == 1 })
	// The grace ends at once: the running stage is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = e.Pipeline.Stop(ctx)
	e.Pipeline = nil // stopped: Close must not stop it again

	if s := e.JobState(r.JobID); s != stet.JobAccepted {
		t.Errorf("job after the shutdown = %s, want accepted", s)
	}
	if n := e.Count("jobs", "public_id = stet_ulid($1) AND lease_until IS NULL AND lease_holder IS NULL", r.JobID); n != 1 {
		t.Errorf("job still leased after the shutdown")
	}
	if n := e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND status = 'abandoned' AND failure_class IS NULL AND finished_at IS NOT NULL", r.JobID); n != 1 {
		t.Errorf("abandoned attempts = %d, want 1; attempts %v", n, e.Attempts(r.JobID))
	}
	if n := e.Count("attempts", "failure_class = 'transient'"); n != 0 {
		t.Errorf("transient attempts = %d, want 0 (no attempt spent)", n)
	}
}
