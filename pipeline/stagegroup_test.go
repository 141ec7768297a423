package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/pipeline"
)

// gatedProcessor holds every call until its gate opens, counting arrivals.
type gatedProcessor struct {
	stet.Processor
	arrived atomic.Int32
	gate    chan struct{}
}

func (g *gatedProcessor) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	g.arrived.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Processor.Extract(ctx, p)
}

// Results that finish together commit in one group (SQLite), and the
// fence holds per item: one result whose attempt token went stale (a newer attempt
// claimed its job during the call) rolls back alone and is superseded,
// while the others' artifacts and review records commit in the same
// transaction.
func TestStageGroupFencesOneStaleItem(t *testing.T) {
	t.Parallel()
	const n = 4 // stettest's extract workers
	gated := &gatedProcessor{gate: make(chan struct{})}
	e := stettest.New(t, stettest.Options{WrapProcessor: func(id string, p stet.Processor, _ string) stet.Processor {
		if id != "openai-fake" {
			return p
		}
		gated.Processor = p
		return gated
	}})
	jobs := make([]string, n)
	for i := range jobs {
		r := e.Deliver(stettest.SourceReports, "msg_settle_"+string(rune('a'+i)),
			stettest.Report{ExternalID: "report-settle-" + string(rune('a'+i)), Revision: 1, Text: "Hello."})
		if r.Status != 202 {
			t.Fatalf("deliver %d = %d, want 202", i, r.Status)
		}
		jobs[i] = r.JobID
	}
	e.WaitFor("every call under way", func() bool { return gated.arrived.Load() == n })

	// A newer attempt takes job 1 while its call runs: its token is stale.
	stale := jobs[1]
	if _, err := e.DB.Writer().Exec(`UPDATE jobs SET attempt = attempt + 1 WHERE public_id = stet_ulid($1)`, stale); err != nil {
		t.Fatal(err)
	}

	// Hold the committers (PostgreSQL has none: there each result commits
	// on its own, and only the fence is under test).
	holds := pipeline.StageGroupCommitters(e.Pipeline)
	release := pipeline.HoldStageGroups(e.Pipeline)
	t.Cleanup(release) // before the env closes, should the test fail while holding
	close(gated.gate)
	if holds > 0 {
		e.WaitFor("every result queued for one group", func() bool { return pipeline.StageGroupWaiting(e.Pipeline) == n })
	}
	before := pipeline.StageGroupsCommitted(e.Pipeline)
	release()
	e.WaitFor("the results committed", func() bool {
		return e.Count("review_records", "") == n-1 && e.Count("attempts", "status = 'superseded'") == 1
	})
	if holds > 0 {
		if got := pipeline.StageGroupsCommitted(e.Pipeline) - before; got != holds+1 {
			t.Errorf("groups committed = %d, want %d (the holds, then all %d results in one)", got, holds+1, n)
		}
	}

	for _, id := range jobs {
		attempts := e.Attempts(id)
		if id == stale {
			if len(attempts) != 1 || attempts[0] != "superseded" {
				t.Errorf("stale job attempts = %v, want [superseded]", attempts)
			}
			if s := e.JobState(id); s != stet.JobExtracting {
				t.Errorf("stale job state = %s, want extracting (the newer attempt holds it)", s)
			}
			if c := e.Count("artifacts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", id); c != 0 {
				t.Errorf("stale job artifacts = %d, want 0", c)
			}
			if c := e.Count("review_records", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", id); c != 0 {
				t.Errorf("stale job records = %d, want 0", c)
			}
			continue
		}
		if s := e.JobState(id); s != stet.JobCommitted {
			t.Errorf("job %s state = %s, want committed", id, s)
		}
		if len(attempts) != 1 || attempts[0] != "succeeded" {
			t.Errorf("job %s attempts = %v, want [succeeded]", id, attempts)
		}
		if c := e.Count("artifacts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", id); c != 1 {
			t.Errorf("job %s artifacts = %d, want 1", id, c)
		}
		if c := e.Count("review_records", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", id); c != 1 {
			t.Errorf("job %s records = %d, want 1", id, c)
		}
	}
	if calls := e.Fake.Calls(); calls != n {
		t.Errorf("provider calls = %d, want %d", calls, n)
	}
}
