package pipeline_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger/ledgertest"
)

// Intake enqueues exactly one River extract job per new ledger job, with
// the kind, queue, priority and attempts River's own insert gives it, and
// none for a redelivery: on PostgreSQL the group's statement writes these
// rows itself, on SQLite River's InsertManyFastTx does, and both must
// agree. Deliveries race, so groups of several form.
func TestIntakeEnqueuesEachNewJobOnce(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	const reports, clients = 40, 8
	ids := make([]string, reports)
	for i := range ids {
		ids[i] = stettest.MustID(fmt.Sprintf("enq-%d", i))
	}
	statuses := make([][2]int, reports)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < reports; i += clients {
				body := stettest.Report{ExternalID: fmt.Sprintf("enq-%d", i), Revision: 1, Text: "some text"}
				statuses[i][0] = e.Deliver(stettest.SourceReports, ids[i], body).Status
				statuses[i][1] = e.Deliver(stettest.SourceReports, ids[i], body).Status // a redelivery
			}
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s[0] != http.StatusAccepted || s[1] != http.StatusOK {
			t.Fatalf("delivery %d: statuses %v, want [202 200]", i, s)
		}
	}
	if n := e.Count("jobs", ""); n != reports {
		t.Fatalf("ledger jobs = %d, want %d", n, reports)
	}
	if n := e.Count("river_job", "kind = 'stet_extract'"); n != reports {
		t.Errorf("River extract jobs = %d, want %d (one per ledger job)", n, reports)
	}
	if n := e.Count("river_job", `kind = 'stet_extract' AND queue = 'extract' AND priority = 2
		AND max_attempts = 25 AND state = 'available' AND attempt = 0`); n != reports {
		t.Errorf("River extract jobs as River inserts them = %d, want %d", n, reports)
	}
	jobID := ledgertest.JSONText(e.DB, "r.args", "job_id")
	if n := e.Count("jobs", `(SELECT COUNT(*) FROM river_job r WHERE r.kind = 'stet_extract' AND stet_ulid(`+jobID+`) = jobs.public_id) = 1`); n != reports {
		t.Errorf("ledger jobs with exactly one River job naming them = %d, want %d", n, reports)
	}
}
