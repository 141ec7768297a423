package monitor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// The periodic check reads committed jobs for invariant 1 in its first run
// and once an hour after; the runs between read the jobs in flight and the
// jobs of open alerts, so an alert on a committed job stays open.
func TestPeriodicCheckReadsSettledJobsHourly(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Now())
	e := stettest.New(t, stettest.Options{Clock: clock})
	ctx := context.Background()
	d := e.Deliver(stettest.SourceReports, "msg_inv", stettest.Report{ExternalID: "report-inv", Revision: 1, Text: "Hello."})
	e.WaitJob(d.JobID, stet.JobCommitted)
	// The first check of the process is full (its periodic job runs on start).
	if err := e.Pipeline.Monitor().Check(ctx); err != nil {
		t.Fatal(err)
	}
	// The record goes behind stet's back, two SLAs after the job's creation.
	w := e.DB.Writer()
	if _, err := w.Exec(`DELETE FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, d.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`UPDATE jobs SET created_at = $1 WHERE public_id = stet_ulid($2)`, clock.Now().Add(-2*time.Hour).UnixMicro(), d.JobID); err != nil {
		t.Fatal(err)
	}
	open := func() int {
		return e.Count("alerts", "name = $1 AND resolved_at IS NULL", ledger.InvNoRecordAfterSLA)
	}
	clock.Advance(10 * time.Minute)
	if err := e.Pipeline.Monitor().Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := open(); n != 0 {
		t.Fatalf("open no-record alerts 10 minutes after the full check = %d, want 0 (committed jobs are read hourly)", n)
	}
	clock.Advance(time.Hour)
	if err := e.Pipeline.Monitor().Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := open(); n != 1 {
		t.Fatalf("open no-record alerts after the hourly full check = %d, want 1", n)
	}
	clock.Advance(time.Minute)
	if err := e.Pipeline.Monitor().Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := open(); n != 1 {
		t.Errorf("open no-record alerts after the next check = %d, want 1 (the open alert is read again)", n)
	}
}
