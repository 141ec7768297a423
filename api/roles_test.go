package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
)

// The role table of docs/security.md, route x role -> status: reader <
// reviewer < operator within a tenant; admin for the cluster-wide actions
// and nothing tenant-scoped.
func TestRoleTable(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	d := e.Deliver(stettest.SourceReports, "msg_roles", stettest.Report{ExternalID: "roles-1", Revision: 1, Text: "some text"})
	e.WaitJob(d.JobID, stet.JobCommitted)
	rec := e.Record(d.JobID).ID
	const (
		none     = ""
		reader   = stettest.ReaderToken
		reviewer = stettest.ReviewerToken
		operator = stettest.OperatorToken
		admin    = stettest.AdminToken
	)
	// Rows run in order, each role left to right: the pause rows leave a
	// pause the resume rows find.
	roles := []struct{ name, token string }{{"none", none}, {"reader", reader}, {"reviewer", reviewer}, {"operator", operator}, {"admin", admin}}
	own := map[string]string{"scope": "tenant:demo", "reason": "maintenance"}
	global := map[string]string{"scope": "all", "reason": "maintenance"}
	for _, tt := range []struct {
		method, path string
		body         any
		want         []int // none, reader, reviewer, operator, admin
	}{
		{"GET", "/v1/jobs/" + d.JobID, nil, []int{401, 200, 200, 200, 403}},
		{"GET", "/v1/reports/" + d.ReportID, nil, []int{401, 200, 200, 200, 403}},
		{"GET", "/v1/sources/reports/reports/roles-1", nil, []int{401, 200, 200, 200, 403}},
		{"GET", "/v1/review", nil, []int{401, 200, 200, 200, 403}},
		{"GET", "/v1/review/" + rec, nil, []int{401, 200, 200, 200, 403}},
		{"POST", "/v1/review/" + rec + "/decision", map[string]string{"decision": "bogus"}, []int{401, 403, 400, 400, 403}},
		{"GET", "/v1/invariants", nil, []int{401, 403, 403, 200, 200}},
		{"GET", "/v1/dispatch", nil, []int{401, 403, 403, 200, 200}},
		{"GET", "/v1/audit", nil, []int{401, 403, 403, 200, 200}},
		{"POST", "/v1/dispatch/pause", own, []int{401, 403, 403, 200, 200}},
		{"POST", "/v1/dispatch/resume", own, []int{401, 403, 403, 200, 404}}, // the operator resumed it first
		{"POST", "/v1/dispatch/pause", global, []int{401, 403, 403, 403, 200}},
		{"POST", "/v1/dispatch/resume", global, []int{401, 403, 403, 403, 200}},
	} {
		for i, r := range roles {
			st, b := e.Do(tt.method, tt.path, r.token, tt.body, nil)
			if st != tt.want[i] {
				t.Errorf("%s %s as %s = %d %s, want %d", tt.method, tt.path, r.name, st, b, tt.want[i])
			}
		}
	}
}

// An admin sees every tenant's pauses with reasons and may resume a pause
// stet set itself; a tenant's operator may not.
func TestAdminResumesStetPause(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/pause", stettest.OtherToken, map[string]string{"scope": "tenant:other", "reason": "their reason"}, nil); st != 200 {
		t.Fatalf("other pauses itself = %d %s", st, b)
	}
	var list struct {
		Pauses []struct{ Scope, Reason string } `json:"pauses"`
	}
	if st, _ := e.Do(http.MethodGet, "/v1/dispatch", stettest.AdminToken, nil, &list); st != 200 || len(list.Pauses) != 1 || list.Pauses[0].Reason != "their reason" {
		t.Errorf("admin GET /v1/dispatch = %d %+v, want the other tenant's pause with its reason", st, list)
	}
	if st, _ := e.Do(http.MethodGet, "/v1/dispatch", stettest.OperatorToken, nil, &list); st != 200 || len(list.Pauses) != 0 {
		t.Errorf("demo GET /v1/dispatch = %d %+v, want no pauses", st, list)
	}
	if st, b := e.Do(http.MethodPost, "/v1/dispatch/resume", stettest.AdminToken, map[string]string{"scope": "tenant:other"}, nil); st != 200 {
		t.Errorf("admin resumes tenant:other = %d %s", st, b)
	}
}

// Past a tenant's intake quota, intake answers 429 with Retry-After and
// stores nothing; another tenant is unaffected.
func TestIntakeQuotaPerTenant(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Now())
	e := stettest.New(t, stettest.Options{NoWorkers: true, Clock: clock, IntakeLimits: map[string]api.IntakeLimit{"demo": {RPS: 1, Burst: 3}}})
	statuses := map[int]int{}
	var retryAfter string
	for i := range 10 {
		r := e.Deliver(stettest.SourceReports, "msg_q_"+strconv.Itoa(i), stettest.Report{ExternalID: "q-" + strconv.Itoa(i), Revision: 1, Text: "x"})
		statuses[r.Status]++
		if r.Status == http.StatusTooManyRequests {
			retryAfter = r.Header.Get("Retry-After")
		}
		o := e.Deliver(stettest.SourceOther, "msg_o_"+strconv.Itoa(i), stettest.Report{ExternalID: "o-" + strconv.Itoa(i), Revision: 1, Text: "x"})
		if o.Status != http.StatusAccepted {
			t.Errorf("other tenant's delivery %d = %d %s, want 202", i, o.Status, o.Body)
		}
	}
	if statuses[http.StatusAccepted] != 3 || statuses[http.StatusTooManyRequests] != 7 || retryAfter != "1" {
		t.Errorf("demo statuses = %v, Retry-After %q; want 3 accepted, 7 refused with Retry-After 1", statuses, retryAfter)
	}
	if n := e.Count("deliveries", "source_id = $1", stettest.SourceReports); n != 3 {
		t.Errorf("demo deliveries stored = %d, want 3", n)
	}
	clock.Advance(time.Second)
	if r := e.Deliver(stettest.SourceReports, "msg_q_after", stettest.Report{ExternalID: "q-after", Revision: 1, Text: "x"}); r.Status != http.StatusAccepted {
		t.Errorf("delivery a second later = %d, want 202", r.Status)
	}
}
