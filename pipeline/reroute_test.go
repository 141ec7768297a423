package pipeline_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// A policy edit drops the processor a job was accepted for: the job is
// blocked, naming the processor and the reason. A dry run lists it and
// changes nothing; a reroute to a processor the policy in force does not
// permit is 409; an operator of another tenant gets 404; the reroute to
// the permitted processor runs the job there once (the first processor is
// never called) and keeps the decision with the job, audited. The job is
// then no longer blocked, so a second reroute is 409.
func TestRerouteBlockedJob(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	d := e.Deliver(stettest.SourceReports, "msg_reroute", stettest.Report{ExternalID: "report-reroute", Revision: 1, Text: "You are all idiots."})
	if d.Status != http.StatusAccepted {
		t.Fatalf("delivery = %d %s", d.Status, d.Body)
	}
	edited := *e.Policy
	edited.Processors = []string{"rules"}
	e.RestartWorkers(&edited)
	e.WaitJob(d.JobID, stet.JobBlocked)

	var job api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OperatorToken, nil, &job); st != http.StatusOK {
		t.Fatalf("GET job = %d %s", st, b)
	}
	if job.BlockedReason == nil || *job.BlockedReason != "openai-fake:processor_no_longer_permitted" || len(job.BoundaryDecisions) != 0 {
		t.Fatalf("blocked job = reason %v, decisions %v; want openai-fake:processor_no_longer_permitted and none", job.BlockedReason, job.BoundaryDecisions)
	}

	body := func(scope, to string, dry bool) map[string]any {
		return map[string]any{"scope": scope, "to": to, "reason": "DPO approval, ticket 12", "dry_run": dry}
	}
	var dry ledger.Rerouted
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/reroute", stettest.OperatorToken, body("job:"+d.JobID, "rules", true), &dry); st != http.StatusOK {
		t.Fatalf("dry run = %d %s", st, b)
	}
	if !dry.DryRun || len(dry.Jobs) != 1 || dry.Jobs[0].JobID != d.JobID || dry.Jobs[0].From != "openai-fake" {
		t.Errorf("dry run = %+v, want the job, from openai-fake", dry)
	}
	if e.Count("boundary_decisions", "") != 0 || e.Count("jobs", "state = 'blocked'") != 1 {
		t.Errorf("the dry run changed the ledger")
	}
	for name, c := range map[string]struct {
		token string
		body  map[string]any
		want  int
	}{
		"a processor the policy in force does not permit": {stettest.OperatorToken, body("job:"+d.JobID, "openai-fake", false), http.StatusConflict},
		"a processor not configured":                      {stettest.OperatorToken, body("job:"+d.JobID, "nope", false), http.StatusConflict},
		"another tenant's operator":                       {stettest.OtherToken, body("job:"+d.JobID, "rules", false), http.StatusNotFound},
		"a reader":                                        {stettest.ReaderToken, body("job:"+d.JobID, "rules", false), http.StatusForbidden},
		"no reason":                                       {stettest.OperatorToken, map[string]any{"scope": "job:" + d.JobID, "to": "rules", "reason": " "}, http.StatusBadRequest},
		"a malformed scope":                               {stettest.OperatorToken, body("tenant:demo", "rules", false), http.StatusBadRequest},
	} {
		if st, b := e.Do(http.MethodPost, "/v1/dispatch/reroute", c.token, c.body, nil); st != c.want {
			t.Errorf("%s: reroute = %d %s, want %d", name, st, b, c.want)
		}
	}
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/reroute", stettest.OperatorToken, body("job:"+d.JobID, "openai-fake", false), nil); !strings.Contains(string(b), "processor_no_longer_permitted") {
		t.Errorf("the 409 = %d %s, want the reason", st, b)
	}
	var moved ledger.Rerouted
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/reroute", stettest.OperatorToken, body("policy:standard", "rules", false), &moved); st != http.StatusOK || len(moved.Jobs) != 1 {
		t.Fatalf("reroute = %d %s, want the one job", st, b)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 0 {
		t.Errorf("calls to openai-fake = %d, want 0", n)
	}
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OperatorToken, nil, &job); st != http.StatusOK {
		t.Fatalf("GET job = %d %s", st, b)
	}
	if len(job.Attempts) != 1 || job.Attempts[0].Processor != "rules" || job.BlockedReason != nil {
		t.Errorf("attempts = %+v, blocked reason %v; want one attempt on rules and no reason", job.Attempts, job.BlockedReason)
	}
	if len(job.BoundaryDecisions) != 1 {
		t.Fatalf("boundary decisions = %+v, want 1", job.BoundaryDecisions)
	}
	bd := job.BoundaryDecisions[0]
	if bd.Actor != "token:operator" || bd.From != "openai-fake" || bd.To != "rules" || bd.PolicyID != "standard" ||
		bd.PolicyHash != edited.Hash() || bd.Reason != "DPO approval, ticket 12" {
		t.Errorf("decision = %+v, want by token:operator, openai-fake -> rules under the policy in force (%s)", bd, edited.Hash())
	}
	if n := e.Count("audit_log", "action = 'job.reroute' AND object_id = $1 AND actor = 'token:operator'", d.JobID); n != 1 {
		t.Errorf("job.reroute audit rows = %d, want 1", n)
	}
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/reroute", stettest.OperatorToken, body("job:"+d.JobID, "rules", false), nil); st != http.StatusConflict {
		t.Errorf("a second reroute = %d %s, want 409", st, b)
	}
}
