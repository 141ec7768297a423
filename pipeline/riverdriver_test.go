package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
)

// On SQLite River runs without its LISTEN/NOTIFY emulation: no insert and
// no queue pause writes a river_notification row for a listener to read
// every 50 ms, and work still flows through every stage on River's fetch
// polls and its producers' own wake-ups.
func TestSQLiteRiverWritesNoNotifications(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	if !strings.HasPrefix(e.URL, "sqlite://") {
		t.Skip("River's SQLite driver only")
	}
	// A pause over all work pauses River's extract queue, and its end
	// resumes it: River's control events, which the emulation also wrote.
	ctx := context.Background()
	if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "all", Reason: "test", PausedBy: "test", PausedAt: time.Now()}, "*"); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the extract queue paused", func() bool {
		return e.Count("river_queue", "name = 'extract' AND paused_at IS NOT NULL") == 1
	})
	if err := e.DB.ClearPause(ctx, "all", "test", "*", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the extract queue resumed", func() bool {
		return e.Count("river_queue", "name = 'extract' AND paused_at IS NULL") == 1
	})
	var jobs []string
	for i := range 5 {
		d := e.Deliver(stettest.SourceReports, stettest.MustID(fmt.Sprintf("quiet-%d", i)),
			stettest.Report{ExternalID: fmt.Sprintf("quiet-%d", i), Revision: 1, Text: "some text"})
		jobs = append(jobs, d.JobID)
	}
	for _, j := range jobs {
		e.WaitJob(j, stet.JobCommitted)
	}
	if n := e.Fake.Calls(); n != len(jobs) {
		t.Errorf("provider calls = %d, want %d", n, len(jobs))
	}
	if n := e.Count("review_records", "authoritative"); n != len(jobs) {
		t.Errorf("authoritative records = %d, want %d", n, len(jobs))
	}
	if n := e.Count("river_notification", ""); n != 0 {
		t.Errorf("river_notification rows = %d, want 0 (River's listener emulation is off)", n)
	}
}

// The side queues' poll as docs/deploy.md states it: five times the extract
// queue's, at most a second, never more often than extract.
func TestSideQueuePoll(t *testing.T) {
	for _, c := range []struct{ extract, want time.Duration }{
		{50 * time.Millisecond, 250 * time.Millisecond}, // the tests' interval
		{200 * time.Millisecond, time.Second},           // the config's default
		{time.Second, time.Second},
		{2 * time.Second, 2 * time.Second},
	} {
		if got := pipeline.SideQueuePoll(c.extract); got != c.want {
			t.Errorf("SideQueuePoll(%s) = %s, want %s", c.extract, got, c.want)
		}
	}
}
