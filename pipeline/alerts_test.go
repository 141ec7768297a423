package pipeline_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/outbound"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The alert webhook (docs/design.md §6): a processor paused for quota, an invariant
// first violated, then resolved — each reaches the webhook, verified with
// the Standard Webhooks reference library, with a webhook-id stable per
// alert and state (the first POST answered 500 is retried under the same
// id). A canary marker sent through the text and the external ID reaches
// no alert body and no log line.
func TestAlertWebhookIDsOnly(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-7f3a91"
	var calls int
	rc := newReceiver(t, func(n int) int {
		calls = n
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	e := stettest.New(t, stettest.Options{FakeOptions: openaifake.Options{APIKey: "sk-test"},
		Destinations: []outbound.Destination{{SourceID: ledger.AlertSource, ID: ledger.AlertDestination, URL: srv.URL,
			Secret: destSecret, MaxAge: time.Hour}}})
	e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.Quota})
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "ext-" + canary, Revision: 1,
		Text: "Patient " + canary + " says stop the insulin."})
	e.WaitJob(d.JobID, stet.JobWaiting)

	// An invariant breaks: the job looks held past its lease (3).
	if _, err := e.DB.Writer().Exec(`UPDATE jobs SET state = 'extracting', lease_until = $1 WHERE public_id = stet_ulid($2)`,
		time.Now().Add(-time.Hour).UnixMicro(), d.JobID); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the violation alert delivered", func() bool {
		return e.Count("outbox", "event = $1 AND state = 'delivered'", ledger.AlertViolated) == 1
	})
	// ... and is repaired: resolved.
	if _, err := e.DB.Writer().Exec(`UPDATE jobs SET state = 'waiting', lease_until = NULL WHERE public_id = stet_ulid($1)`, d.JobID); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("the resolved alert delivered", func() bool {
		return e.Count("outbox", "event = $1 AND state = 'delivered'", ledger.AlertResolved) == 1 &&
			e.Count("outbox", "event = $1 AND state = 'delivered'", ledger.AlertPaused) == 1
	})

	posts, bad := rc.snapshot()
	if bad != 0 {
		t.Errorf("alert POSTs failing verification = %d, want 0", bad)
	}
	byID := map[string][]string{}
	for _, p := range posts {
		byID[p.id] = append(byID[p.id], p.raw)
	}
	if len(byID) != 3 || len(posts) != 4 {
		t.Fatalf("alert POSTs = %d under %d webhook-ids, want 4 under 3 (one retried after a 500)", len(posts), len(byID))
	}
	types := map[string]int{}
	for id, bodies := range byID {
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				t.Errorf("webhook-id %s carried two bodies: %s and %s", id, bodies[0], b)
			}
		}
		var a struct {
			Type      string            `json:"type"`
			Invariant int               `json:"invariant"`
			Name      string            `json:"name"`
			IDs       map[string]string `json:"ids"`
			FirstSeen string            `json:"first_seen"`
		}
		if err := json.Unmarshal([]byte(bodies[0]), &a); err != nil {
			t.Fatalf("alert body %s: %v", bodies[0], err)
		}
		if _, err := time.Parse(time.RFC3339, a.FirstSeen); err != nil {
			t.Errorf("first_seen %q is not RFC 3339", a.FirstSeen)
		}
		types[a.Type]++
		switch a.Type {
		case ledger.AlertPaused:
			if a.IDs["processor"] != "openai-fake" || a.IDs["failure_class"] != "quota" {
				t.Errorf("processor.paused ids = %v", a.IDs)
			}
		case ledger.AlertViolated, ledger.AlertResolved:
			if a.Invariant != 3 || a.Name != ledger.InvHeldPastLease || a.IDs["job_id"] != d.JobID || a.IDs["report_id"] == "" {
				t.Errorf("%s = %+v, want invariant 3 for job %s", a.Type, a, d.JobID)
			}
		}
		if strings.Contains(bodies[0], canary) || strings.Contains(bodies[0], "ext-") {
			t.Errorf("alert body carries the canary or the external ID: %s", bodies[0])
		}
	}
	if types[ledger.AlertPaused] != 1 || types[ledger.AlertViolated] != 1 || types[ledger.AlertResolved] != 1 {
		t.Errorf("alert types = %v, want one each of paused, violated, resolved", types)
	}
	if calls < 4 {
		t.Errorf("receiver calls = %d, want at least 4", calls)
	}
	if strings.Contains(e.Logs.String(), canary) {
		t.Errorf("a log line carries the canary")
	}
}
