package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
)

// POST /v1/dispatch/pause|resume: an admin pauses a processor or
// everything (a tenant's operator only its tenant); jobs wait without a call or an attempt; resuming continues
// them. Every change is audited.
func TestDispatchPauseResume(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	pause := map[string]string{"scope": "processor:openai-fake", "reason": "key rotation"}

	for _, tt := range []struct {
		name   string
		token  string
		path   string
		body   any
		status int
	}{
		{"no token", "", "/v1/dispatch/pause", pause, http.StatusUnauthorized},
		{"reader", stettest.ReaderToken, "/v1/dispatch/pause", pause, http.StatusForbidden},
		{"reviewer", stettest.ReviewerToken, "/v1/dispatch/pause", pause, http.StatusForbidden},
		{"bad scope", stettest.OperatorToken, "/v1/dispatch/pause", map[string]string{"scope": "region:us", "reason": "x"}, http.StatusBadRequest},
		{"no reason", stettest.OperatorToken, "/v1/dispatch/pause", map[string]string{"scope": "all"}, http.StatusBadRequest},
		{"another tenant", stettest.OperatorToken, "/v1/dispatch/pause", map[string]string{"scope": "tenant:other", "reason": "x"}, http.StatusForbidden},
		{"a tenant's operator, a processor", stettest.OperatorToken, "/v1/dispatch/pause", pause, http.StatusForbidden},
		{"resume what is not paused", stettest.OperatorToken, "/v1/dispatch/resume", map[string]string{"scope": "tenant:demo"}, http.StatusNotFound},
		{"admin resumes what is not paused", stettest.AdminToken, "/v1/dispatch/resume", map[string]string{"scope": "all"}, http.StatusNotFound},
	} {
		if st, b := e.Do(http.MethodPost, tt.path, tt.token, tt.body, nil); st != tt.status {
			t.Errorf("%s: POST %s = %d %s, want %d", tt.name, tt.path, st, b, tt.status)
		}
	}
	if n := e.Count("dispatch_pauses", ""); n != 0 {
		t.Fatalf("pauses after refused requests = %d, want 0", n)
	}

	if st, b := e.Do(http.MethodPost, "/v1/dispatch/pause", stettest.AdminToken, pause, nil); st != http.StatusOK {
		t.Fatalf("pause = %d %s", st, b)
	}
	var list struct {
		Pauses []struct{ Scope, Reason, PausedBy string } `json:"pauses"`
	}
	if st, _ := e.Do(http.MethodGet, "/v1/dispatch", stettest.AdminToken, nil, &list); st != http.StatusOK || len(list.Pauses) != 1 || list.Pauses[0].Scope != "processor:openai-fake" {
		t.Fatalf("GET /v1/dispatch = %d %+v, want the processor pause", st, list)
	}
	d := e.Deliver(stettest.SourceReports, "msg_paused", stettest.Report{ExternalID: "report-paused", Revision: 1, Text: "some text"})
	e.WaitJob(d.JobID, stet.JobWaiting)
	time.Sleep(300 * time.Millisecond)
	if n := e.Fake.Calls(); n != 0 {
		t.Fatalf("provider calls while paused = %d, want 0", n)
	}
	if n := e.Count("attempts", ""); n != 0 {
		t.Fatalf("attempts while paused = %d, want 0", n)
	}
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/resume", stettest.AdminToken, map[string]string{"scope": "processor:openai-fake"}, nil); st != http.StatusOK {
		t.Fatalf("resume = %d %s", st, b)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 1 {
		t.Errorf("provider calls after resume = %d, want 1", n)
	}
	entries, err := e.DB.AuditEntries(context.Background(), "*")
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range entries {
		if a.ObjectType == "dispatch" && a.Action != "dispatch.read" && a.Action != "denied.not_found" {
			actions = append(actions, a.Action+" "+a.ObjectID+" by "+a.Actor)
		}
	}
	want := []string{"dispatch.pause processor:openai-fake by admin:root-ops", "dispatch.resume processor:openai-fake by admin:root-ops"}
	if len(actions) != 2 || actions[0] != want[0] || actions[1] != want[1] {
		t.Errorf("audit = %q, want %q", actions, want)
	}
}
