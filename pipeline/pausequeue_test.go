package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// A pause over every processor is idle: River's extract queue is paused, so
// the queued jobs are never claimed (no River attempt, no snooze), yet each
// shows as waiting; resuming sends each job once.
func TestPauseAllIsIdle(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	ctx := context.Background()
	// A processor pause covers all work when it names the only processor.
	if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "processor:openai-fake", Reason: "test", PausedBy: "test", PausedAt: time.Now()}, "*"); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the extract queue paused", func() bool {
		return e.Count("river_queue", "name = 'extract' AND paused_at IS NOT NULL") == 1
	})
	// A producer without a notifier (SQLite) learns of a queue pause on its
	// next look at the queue, every 2 s in River v0.51 (not configurable):
	// until then a new job is still claimed once and snoozed. Wait past it.
	time.Sleep(2500 * time.Millisecond)
	var jobs []string
	for i := range 5 {
		d := e.Deliver(stettest.SourceReports, stettest.MustID(fmt.Sprintf("idle-%d", i)), stettest.Report{ExternalID: fmt.Sprintf("idle-%d", i), Revision: 1, Text: "some text"})
		jobs = append(jobs, d.JobID)
	}
	for _, j := range jobs {
		e.WaitJob(j, stet.JobWaiting)
	}
	time.Sleep(1500 * time.Millisecond) // a claim would show as an attempt or a snooze
	if n := e.Count("river_job", "kind = 'stet_extract' AND (attempt > 0 OR CAST(metadata AS TEXT) LIKE '%snoozes%')"); n != 0 {
		t.Fatalf("extract jobs claimed while paused = %d, want 0", n)
	}
	if n := e.Fake.Calls(); n != 0 {
		t.Fatalf("provider calls while paused = %d, want 0", n)
	}
	if err := e.DB.ClearPause(ctx, "processor:openai-fake", "test", "*", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		e.WaitJob(j, stet.JobCommitted)
	}
	if n := e.Fake.Calls(); n != len(jobs) {
		t.Errorf("provider calls after resume = %d, want %d", n, len(jobs))
	}
	if n := e.Count("river_queue", "name = 'extract' AND paused_at IS NOT NULL"); n != 0 {
		t.Errorf("extract queue still paused after resume")
	}
}
