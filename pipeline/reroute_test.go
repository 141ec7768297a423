package pipeline_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
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

// Infrai reports which upstream vendor served a call. A vendor the
// processor does not declare among its subprocessors: the output is
// discarded (no artifact, no record), the job is blocked with the reason
// undeclared_subprocessor, the processor is paused for every job and an
// alert is opened with IDs only.
func TestUndeclaredVendorPausesProcessor(t *testing.T) {
	t.Parallel()
	f := infraifake.New(infraifake.Options{APIKey: "ik-test", Vendor: "deepseek"})
	t.Cleanup(f.Close)
	e := stettest.New(t, stettest.Options{WrapProcessor: func(id string, p stet.Processor, _ string) stet.Processor {
		if id != "openai-fake" {
			return p
		}
		c, err := infrai.New(infrai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: "ik-test", Model: "infrai-test",
			Region: "us", Retention: "30d", Subprocessors: []string{"openai"}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}})
	d := e.Deliver(stettest.SourceReports, "msg_vendor", stettest.Report{ExternalID: "report-vendor", Revision: 1, Text: "Some report text."})
	e.WaitJob(d.JobID, stet.JobBlocked)
	if n := f.Calls(); n != 1 {
		t.Errorf("Infrai calls = %d, want 1", n)
	}
	var job api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OperatorToken, nil, &job); st != http.StatusOK {
		t.Fatalf("GET job = %d %s", st, b)
	}
	if job.Artifact != nil || job.BlockedReason == nil || *job.BlockedReason != "openai-fake:"+stet.CodeUndeclaredSubprocessor ||
		len(job.Attempts) != 1 || job.Attempts[0].FailureClass != string(stet.FailureBoundary) {
		t.Errorf("job = artifact %v, reason %v, attempts %+v; want no artifact, blocked for undeclared_subprocessor, one boundary attempt", job.Artifact, job.BlockedReason, job.Attempts)
	}
	if n := e.Count("dispatch_pauses", "scope = 'processor:openai-fake'"); n != 1 {
		t.Errorf("pauses of the processor = %d, want 1", n)
	}
	if n := e.Count("alerts", "name = 'processor_paused' AND resolved_at IS NULL"); n != 1 {
		t.Errorf("open processor_paused alerts = %d, want 1", n)
	}
	if n := e.Count("review_records", ""); n != 0 {
		t.Errorf("review records = %d, want 0", n)
	}
}
