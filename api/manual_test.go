package api_test

import (
	"net/http"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
)

// POST /v1/dispatch/manual: the pause rules decide who may name which
// scope; converted jobs become manual records once and never run after the
// unpause.
func TestDispatchManual(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/pause", stettest.AdminToken, map[string]string{"scope": "all", "reason": "incident"}, nil); st != http.StatusOK {
		t.Fatalf("pause = %d %s", st, b)
	}
	var jobs []string
	for _, d := range []struct{ source, id string }{{stettest.SourceReports, "m-1"}, {stettest.SourceReports, "m-2"}, {stettest.SourceOther, "m-3"}} {
		r := e.Deliver(d.source, stettest.MustID(d.id), stettest.Report{ExternalID: d.id, Revision: 1, Text: "some text"})
		e.WaitJob(r.JobID, stet.JobWaiting)
		jobs = append(jobs, r.JobID)
	}
	own := map[string]string{"scope": "tenant:demo", "reason": "human process"}
	for _, tt := range []struct {
		name  string
		token string
		body  any
		want  int
	}{
		{"no token", "", own, http.StatusUnauthorized},
		{"reader", stettest.ReaderToken, own, http.StatusForbidden},
		{"reviewer", stettest.ReviewerToken, own, http.StatusForbidden},
		{"another tenant", stettest.OtherToken, own, http.StatusForbidden},
		{"operator, all", stettest.OperatorToken, map[string]string{"scope": "all"}, http.StatusForbidden},
		{"operator, a processor", stettest.OperatorToken, map[string]string{"scope": "processor:openai-fake"}, http.StatusForbidden},
		{"bad scope", stettest.OperatorToken, map[string]string{"scope": "region:us"}, http.StatusBadRequest},
	} {
		if st, b := e.Do(http.MethodPost, "/v1/dispatch/manual", tt.token, tt.body, nil); st != tt.want {
			t.Errorf("%s: POST /v1/dispatch/manual = %d %s, want %d", tt.name, st, b, tt.want)
		}
	}
	if n := e.Count("review_records", ""); n != 0 {
		t.Fatalf("review records after refused requests = %d, want 0", n)
	}
	for _, tt := range []struct {
		token, scope string
		want         int
	}{
		{stettest.OperatorToken, "tenant:demo", 2},
		{stettest.OperatorToken, "tenant:demo", 0}, // idempotent
		{stettest.AdminToken, "processor:openai-fake", 1},
		{stettest.AdminToken, "all", 0},
	} {
		var out struct {
			Scope     string `json:"scope"`
			Converted int    `json:"converted"`
		}
		if st, b := e.Do(http.MethodPost, "/v1/dispatch/manual", tt.token, map[string]string{"scope": tt.scope}, &out); st != http.StatusOK || out.Scope != tt.scope || out.Converted != tt.want {
			t.Errorf("manual %s = %d %s, want 200 converted %d", tt.scope, st, b, tt.want)
		}
	}
	if n := e.Count("review_records", "kind = 'manual'"); n != 3 {
		t.Errorf("manual review records = %d, want 3", n)
	}
	if n := e.Count("audit_log", "action = 'job.manual'"); n != 3 {
		t.Errorf("job.manual audit entries = %d, want 3", n)
	}
	// Each converted job's River extract job ends: cancelled, or, when a
	// worker was running it at the conversion, completed by that run once
	// it found the job manual (River runs without a listener, so it cannot
	// interrupt a running job).
	e.WaitFor("every extract River job finalized", func() bool {
		return e.Count("river_job", "kind = 'stet_extract' AND state IN ('cancelled', 'completed')") == 3
	})
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/resume", stettest.AdminToken, map[string]string{"scope": "all"}, nil); st != http.StatusOK {
		t.Fatalf("resume = %d %s", st, b)
	}
	// A report delivered after the unpause goes through: dispatch runs
	// again, and by then it has had every chance to call for the
	// converted jobs too.
	control := e.Deliver(stettest.SourceReports, "msg_control", stettest.Report{ExternalID: "report-control", Revision: 1, Text: "after the unpause"})
	e.WaitJob(control.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 1 {
		t.Errorf("provider calls after the unpause = %d, want 1 (the new report's)", n)
	}
	for _, id := range jobs {
		if s := e.JobState(id); s != stet.JobManual {
			t.Errorf("job %s = %s, want manual", id, s)
		}
	}
}
