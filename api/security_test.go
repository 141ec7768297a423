package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/webhook"
)

// A tenant's operator may pause and resume only its own tenant: "all",
// "processor:ID" (which stops every tenant) and another tenant's scope are
// 403, and every refusal is audited. The pauses stet set itself (processor
// scope, after an auth or quota failure) stay until an admin resumes them.
func TestDispatchTenantOperatorStaysInTenant(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	ctx := context.Background()
	if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "processor:openai-fake", Reason: "auth failure (automatic)", PausedBy: "stet", PausedAt: time.Now()}, "*"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, scope string
		status      int
	}{
		{"/v1/dispatch/pause", "all", http.StatusForbidden},
		{"/v1/dispatch/pause", "processor:rules", http.StatusForbidden},
		{"/v1/dispatch/pause", "tenant:other", http.StatusForbidden},
		{"/v1/dispatch/resume", "processor:openai-fake", http.StatusForbidden},
		{"/v1/dispatch/resume", "all", http.StatusForbidden},
		{"/v1/dispatch/pause", "tenant:demo", http.StatusOK},
		{"/v1/dispatch/resume", "tenant:demo", http.StatusOK},
	} {
		body := map[string]string{"scope": tt.scope, "reason": "maintenance"}
		if st, b := e.Do(http.MethodPost, tt.path, stettest.OperatorToken, body, nil); st != tt.status {
			t.Errorf("operator POST %s %s = %d %s, want %d", tt.path, tt.scope, st, b, tt.status)
		}
	}
	if n := e.Count("dispatch_pauses", ""); n != 1 {
		t.Errorf("pauses = %d, want 1 (stet's own processor pause, untouched)", n)
	}
	if n := e.Count("audit_log", "action = 'denied.forbidden' AND actor = 'token:operator'"); n != 5 {
		t.Errorf("audited refusals = %d, want 5", n)
	}
}

// GET /v1/dispatch shows a tenant its own pauses with their reasons, the
// global ones without reason or actor, and never another tenant's.
func TestDispatchListHidesOtherTenants(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	ctx := context.Background()
	for _, p := range []ledger.Pause{
		{Scope: "all", Reason: "secret global reason", PausedBy: "token:root-ops"},
		{Scope: "processor:openai-fake", Reason: "quota failure (automatic)", PausedBy: "stet"},
		{Scope: "tenant:other", Reason: "other tenant's reason", PausedBy: "token:other-operator"},
		{Scope: "tenant:demo", Reason: "our reason", PausedBy: "token:operator"},
	} {
		p.PausedAt = time.Now()
		if err := e.DB.SetPause(ctx, p, "*"); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Pauses []struct {
			Scope    string `json:"scope"`
			Reason   string `json:"reason"`
			PausedBy string `json:"paused_by"`
		} `json:"pauses"`
	}
	if st, b := e.Do(http.MethodGet, "/v1/dispatch", stettest.OperatorToken, nil, &list); st != http.StatusOK {
		t.Fatalf("GET /v1/dispatch = %d %s", st, b)
	}
	got := fmt.Sprint(list.Pauses)
	want := "[{all  } {processor:openai-fake  } {tenant:demo our reason token:operator}]"
	if got != want {
		t.Errorf("GET /v1/dispatch pauses = %s, want %s", got, want)
	}
}

// A noisy tenant with more violations than the check's limit does not hide
// a quiet tenant's one: GET /v1/invariants filters by tenant in SQL.
func TestInvariantsNoisyTenantDoesNotHideQuiet(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Now())
	e := stettest.New(t, stettest.Options{NoWorkers: true, Clock: clock})
	for i := range 105 {
		d := e.Deliver(stettest.SourceReports, "msg_noisy_"+strconv.Itoa(i), stettest.Report{ExternalID: "noisy-" + strconv.Itoa(i), Revision: 1, Text: "noisy text"})
		if d.Status != http.StatusAccepted {
			t.Fatalf("deliver = %d %s", d.Status, d.Body)
		}
	}
	clock.Advance(time.Minute)
	quiet := e.Deliver(stettest.SourceOther, "msg_quiet", stettest.Report{ExternalID: "quiet-1", Revision: 1, Text: "quiet text"})
	if quiet.Status != http.StatusAccepted {
		t.Fatalf("deliver = %d %s", quiet.Status, quiet.Body)
	}
	clock.Advance(2 * time.Hour)
	var out struct {
		OK         bool `json:"ok"`
		Violations []struct {
			Name     string `json:"name"`
			TenantID string `json:"tenant_id"`
			JobID    string `json:"job_id"`
		} `json:"violations"`
	}
	if st, b := e.Do(http.MethodGet, "/v1/invariants", stettest.OtherToken, nil, &out); st != http.StatusOK {
		t.Fatalf("GET /v1/invariants = %d %s", st, b)
	}
	if out.OK || len(out.Violations) != 1 || out.Violations[0].JobID != quiet.JobID {
		t.Errorf("the quiet tenant's invariants = ok %v, %d violations %+v; want its one job %s", out.OK, len(out.Violations), out.Violations, quiet.JobID)
	}
}

// Denied requests are audited: 401 (no or unknown token), 403 (role too
// low) and 404 for another tenant's object, each with the route pattern,
// the remote address and the request ID, never the external ID.
func TestDeniedRequestsAudited(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	other := e.Deliver(stettest.SourceOther, "msg_other", stettest.Report{ExternalID: "ext-secret-id", Revision: 1, Text: "x"})
	for _, tt := range []struct {
		token, path string
		status      int
		action      string
	}{
		{"", "/v1/review", http.StatusUnauthorized, "denied.unauthorized"},
		{"tok-nobody-knows", "/v1/review", http.StatusUnauthorized, "denied.unauthorized"},
		{stettest.ReaderToken, "/v1/invariants", http.StatusForbidden, "denied.forbidden"},
		{stettest.ReaderToken, "/v1/jobs/" + other.JobID, http.StatusNotFound, "denied.not_found"},
		{stettest.ReaderToken, "/v1/sources/" + stettest.SourceOther + "/reports/ext-secret-id", http.StatusNotFound, "denied.not_found"},
	} {
		before := e.Count("audit_log", "action = $1", tt.action)
		if st, b := e.Do(http.MethodGet, tt.path, tt.token, nil, nil); st != tt.status {
			t.Errorf("GET %s = %d %s, want %d", tt.path, st, b, tt.status)
		}
		if n := e.Count("audit_log", "action = $1", tt.action); n != before+1 {
			t.Errorf("GET %s with %q: %s entries = %d, want %d", tt.path, tt.token, tt.action, n, before+1)
		}
	}
	var ext int
	if err := e.DB.Writer().QueryRow(`SELECT COUNT(*) FROM audit_log WHERE object_id LIKE '%ext-secret-id%' OR detail LIKE '%ext-secret-id%'`).Scan(&ext); err != nil {
		t.Fatal(err)
	}
	if ext != 0 {
		t.Errorf("audit rows holding the external ID = %d, want 0", ext)
	}
	rows, err := e.DB.Writer().Query(`SELECT route, remote_addr, request_id FROM audit_log WHERE action LIKE 'denied.%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var route, remote, reqID string
		if err := rows.Scan(&route, &remote, &reqID); err != nil {
			t.Fatal(err)
		}
		n++
		if !strings.HasPrefix(route, "GET /v1/") || !strings.HasPrefix(remote, "127.0.0.1") || reqID == "" {
			t.Errorf("denied entry route %q remote %q request %q, want a route pattern, a loopback address and a request ID", route, remote, reqID)
		}
		if strings.Contains(route, "ext-secret-id") {
			t.Errorf("denied entry route %q holds the external ID", route)
		}
	}
	if n != 5 {
		t.Errorf("denied entries = %d, want 5", n)
	}
}

// GET /v1/review audits every listed record by ID, not a count; GET
// /v1/invariants and GET /v1/dispatch are audited too.
func TestReadsAuditedPerRecord(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	var ids []string
	for i := range 3 {
		d := e.Deliver(stettest.SourceReports, "msg_list_"+strconv.Itoa(i), stettest.Report{ExternalID: "list-" + strconv.Itoa(i), Revision: 1, Text: "some text"})
		e.WaitJob(d.JobID, stet.JobCommitted)
		ids = append(ids, e.Record(d.JobID).ID)
	}
	if st, b := e.Do(http.MethodGet, "/v1/review", stettest.ReaderToken, nil, nil); st != http.StatusOK {
		t.Fatalf("GET /v1/review = %d %s", st, b)
	}
	for _, id := range ids {
		if n := e.Count("audit_log", "action = 'review.list' AND object_id = $1", id); n != 1 {
			t.Errorf("review.list entries for record %s = %d, want 1", id, n)
		}
	}
	for _, path := range []string{"/v1/invariants", "/v1/dispatch"} {
		if st, b := e.Do(http.MethodGet, path, stettest.OperatorToken, nil, nil); st != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, st, b)
		}
	}
	for _, action := range []string{"invariants.read", "dispatch.read"} {
		if n := e.Count("audit_log", "action = $1 AND actor = 'token:operator'", action); n != 1 {
			t.Errorf("%s entries = %d, want 1", action, n)
		}
	}
}

// A webhook-id longer than 256 bytes is 400, and nothing is stored.
func TestIntakeWebhookIDTooLong(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	d := e.Deliver(stettest.SourceReports, "msg_"+strings.Repeat("x", 300), stettest.Report{ExternalID: "long-id", Revision: 1, Text: "x"})
	if d.Status != http.StatusBadRequest || d.Problem.Type != api.ProblemType("invalid-body") {
		t.Errorf("deliver with a 304-byte webhook-id = %d %s, want 400 invalid-body", d.Status, d.Body)
	}
	if n := e.Count("deliveries", ""); n != 0 {
		t.Errorf("deliveries = %d, want 0", n)
	}
}

// Several webhook-signature header lines are all considered: the valid
// signature may be on the second line.
func TestIntakeSeveralSignatureLines(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	body := []byte(`{"external_id":"multi-sig","revision":1,"text":"x"}`)
	now := time.Now()
	sig, err := webhook.Sign(stettest.Secret, "msg_multi", now, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", "msg_multi")
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Add("webhook-signature", "v1,"+strings.Repeat("A", 43)+"=")
	h.Add("webhook-signature", sig)
	if r := e.Post("/v1/sources/"+stettest.SourceReports+"/reports", h, body); r.Status != http.StatusAccepted {
		t.Errorf("deliver with the valid signature on the second header line = %d %s, want 202", r.Status, r.Body)
	}
}
