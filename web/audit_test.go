package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// These tests speak plain HTTP to the in-process stet with the UI mounted:
// no browser. They check what a user of the UI and of GET /v1/audit sees.

// uiClient is a browser without a browser: a cookie jar, no redirects
// followed.
type uiClient struct {
	t    *testing.T
	c    *http.Client
	base string
}

type uiAnswer struct {
	Status    int
	Body      string
	Location  string
	RequestID string
}

func newUIClient(t *testing.T, e *uiEnv) *uiClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &uiClient{t: t, base: e.Server.URL, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *uiClient) do(req *http.Request) uiAnswer {
	c.t.Helper()
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return uiAnswer{Status: resp.StatusCode, Body: string(b), Location: resp.Header.Get("Location"), RequestID: resp.Header.Get("X-Request-Id")}
}

func (c *uiClient) get(path string) uiAnswer {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(req)
}

func (c *uiClient) post(path string, form url.Values) uiAnswer {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

var (
	loginField = regexp.MustCompile(`name="login" value="([^"]+)"`)
	csrfField  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// signIn posts token to the sign-in form and returns the answer.
func (c *uiClient) signIn(token string) uiAnswer {
	c.t.Helper()
	page := c.get("/ui/login")
	m := loginField.FindStringSubmatch(page.Body)
	if m == nil {
		c.t.Fatalf("GET /ui/login = %d without a login token", page.Status)
	}
	return c.post("/ui/login", url.Values{"login": {m[1]}, "token": {token}, "next": {"/ui/review"}})
}

// uiSession signs in with token and returns the client and the session's
// CSRF token.
func uiSession(t *testing.T, e *uiEnv, token string) (*uiClient, string) {
	t.Helper()
	c := newUIClient(t, e)
	if a := c.signIn(token); a.Status != http.StatusSeeOther {
		t.Fatalf("sign in = %d, want 303: %s", a.Status, a.Body)
	}
	page := c.get("/ui/review")
	m := csrfField.FindStringSubmatch(page.Body)
	if page.Status != http.StatusOK || m == nil {
		t.Fatalf("GET /ui/review after sign-in = %d without a CSRF token", page.Status)
	}
	return c, m[1]
}

type auditRow struct {
	Tenant     string `json:"tenant"`
	Actor      string `json:"actor"`
	Action     string `json:"action"`
	ObjectType string `json:"object_type"`
	ObjectID   string `json:"object_id"`
	Route      string `json:"route"`
	RemoteAddr string `json:"remote_addr"`
	RequestID  string `json:"request_id"`
	Outcome    string `json:"outcome"`
}

// auditRows is GET /v1/audit?query as token: what an operator checks.
func (e *uiEnv) auditRows(t *testing.T, token, query string) []auditRow {
	t.Helper()
	var p struct {
		Rows []auditRow `json:"rows"`
	}
	if st, b := e.Do(http.MethodGet, "/v1/audit?"+query, token, nil, &p); st != http.StatusOK {
		t.Fatalf("GET /v1/audit?%s = %d %s", query, st, b)
	}
	return p.Rows
}

// byRequest returns the row of action answered with request ID id.
func byRequest(rows []auditRow, action, id string) *auditRow {
	for i := range rows {
		if rows[i].Action == action && rows[i].RequestID == id {
			return &rows[i]
		}
	}
	return nil
}

func hashed(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Every audit row the UI writes — a record read, a decision, a pause, a
// resume, the sign-in — carries the UI's route pattern, the remote address,
// the request ID the browser was answered with, and its outcome, as the
// API's rows do.
func TestUIAuditRowsCarryTheRequest(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, calm, _ := e.seed(t)
	c, csrf := uiSession(t, e, stettest.OperatorToken)

	read := c.get("/ui/review/" + calm)
	decide := c.post("/ui/review/"+calm+"/decision", url.Values{"csrf": {csrf}, "decision": {"reject"}})
	pause := c.post("/ui/dispatch/pause", url.Values{"csrf": {csrf}, "scope": {"tenant:demo"}, "reason": {"maintenance"}})
	resume := c.post("/ui/dispatch/resume", url.Values{"csrf": {csrf}, "scope": {"tenant:demo"}})
	for _, a := range []uiAnswer{read, decide, pause, resume} {
		if a.Status >= 400 || a.RequestID == "" {
			t.Fatalf("UI answer = %d (request %q): %s", a.Status, a.RequestID, a.Body)
		}
	}
	rows := e.auditRows(t, stettest.OperatorToken, "limit=1000")
	for _, tt := range []struct {
		action, route, requestID, object string
	}{
		{"review.read", "GET /ui/review/{id}", read.RequestID, calm},
		{"review.decide.reject", "POST /ui/review/{id}/decision", decide.RequestID, calm},
		{"dispatch.pause", "POST /ui/dispatch/pause", pause.RequestID, "tenant:demo"},
		{"dispatch.resume", "POST /ui/dispatch/resume", resume.RequestID, "tenant:demo"},
	} {
		r := byRequest(rows, tt.action, tt.requestID)
		if r == nil {
			t.Errorf("no %s row for request %s; rows: %+v", tt.action, tt.requestID, rows)
			continue
		}
		if r.Route != tt.route || r.ObjectID != tt.object || r.Actor != "token:operator" || r.Outcome != "ok" ||
			!strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") {
			t.Errorf("%s row = %+v, want route %q, object %s, actor token:operator, outcome ok, a loopback address", tt.action, *r, tt.route, tt.object)
		}
	}
	var login *auditRow
	for i := range rows {
		if rows[i].Action == "web.login" {
			login = &rows[i]
		}
	}
	if login == nil || login.Route != "POST /ui/login" || login.RequestID == "" || !strings.HasPrefix(login.RemoteAddr, "127.0.0.1:") {
		t.Errorf("web.login row = %+v, want the sign-in's route, request and address", login)
	}
}

// Another tenant's record or deletion answers 404 in the UI and, as in the
// API, is audited as a denied probe; the dispatch, batches, invariants and
// deletion pages are audited reads.
func TestUIReadsAndProbesAudited(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, calm, _ := e.seed(t)
	o := e.Deliver(stettest.SourceOther, stettest.MustID("theirs"), stettest.Report{ExternalID: "report-theirs", Revision: 1, Text: "Another tenant's post."})
	e.WaitJob(o.JobID, stet.JobCommitted)
	var theirJob api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+o.JobID, stettest.OtherToken, nil, &theirJob); st != http.StatusOK || theirJob.ReviewRecordID == nil {
		t.Fatalf("GET the other tenant's job = %d %s", st, b)
	}
	theirs := *theirJob.ReviewRecordID
	// A deletion of each tenant's.
	var del, theirDel api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+e.apiRecord(t, calm).ReportID, stettest.OperatorToken, nil, &del); st != http.StatusAccepted {
		t.Fatalf("DELETE report = %d %s", st, b)
	}
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+o.ReportID, stettest.OtherToken, nil, &theirDel); st != http.StatusAccepted {
		t.Fatalf("DELETE the other tenant's report = %d %s", st, b)
	}

	c, _ := uiSession(t, e, stettest.OperatorToken)
	probes := map[string]uiAnswer{
		theirs:              c.get("/ui/review/" + theirs),
		theirDel.DeletionID: c.get("/ui/deletions/" + theirDel.DeletionID),
	}
	for id, a := range probes {
		if a.Status != http.StatusNotFound {
			t.Errorf("another tenant's %s in the UI = %d, want 404", id, a.Status)
		}
	}
	reads := map[string]uiAnswer{
		"dispatch.read":   c.get("/ui/dispatch"),
		"batches.read":    c.get("/ui/batches"),
		"invariants.read": c.get("/ui/invariants"),
		"deletion.read":   c.get("/ui/deletions/" + del.DeletionID),
	}
	for action, a := range reads {
		if a.Status != http.StatusOK {
			t.Errorf("%s page = %d, want 200", action, a.Status)
		}
	}

	rows := e.auditRows(t, stettest.OperatorToken, "limit=1000")
	for id, a := range probes {
		r := byRequest(rows, "denied.not_found", a.RequestID)
		if r == nil || r.ObjectID != hashed(id) || r.Outcome != "denied" || r.Actor != "token:operator" || !strings.HasPrefix(r.Route, "GET /ui/") {
			t.Errorf("the probe of %s: row %+v, want denied.not_found of %s, outcome denied, a /ui/ route", id, r, hashed(id))
		}
	}
	for action, a := range reads {
		r := byRequest(rows, action, a.RequestID)
		if r == nil || r.Outcome != "ok" || r.Actor != "token:operator" || !strings.HasPrefix(r.Route, "GET /ui/") {
			t.Errorf("%s: row %+v, want one for request %s, outcome ok", action, r, a.RequestID)
		}
	}
	if r := byRequest(rows, "deletion.read", reads["deletion.read"].RequestID); r != nil && r.ObjectID != del.DeletionID {
		t.Errorf("deletion.read row names %q, want %s", r.ObjectID, del.DeletionID)
	}
	// The other tenant's log holds none of this.
	for _, r := range e.auditRows(t, stettest.OtherToken, "limit=1000") {
		if r.Actor == "token:operator" {
			t.Errorf("the other tenant's log holds demo's row %+v", r)
		}
	}
}

// The dispatch page shows a tenant's operator what GET /v1/dispatch shows
// its token: a cluster pause without its reason or actor, and no other
// tenant's pause.
func TestUIDispatchShowsWhatTheAPIShows(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for _, p := range []ledger.Pause{
		{Scope: "processor:openai-fake", Reason: "SECRET-CLUSTER-REASON", PausedBy: "admin:root-ops"},
		{Scope: "tenant:other", Reason: "SECRET-OTHER-REASON", PausedBy: "token:other-operator"},
		{Scope: "tenant:demo", Reason: "our own reason", PausedBy: "token:operator"},
	} {
		p.PausedAt = time.Now()
		if err := e.DB.SetPause(ctx, p, "*"); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := uiSession(t, e, stettest.OperatorToken)
	page := c.get("/ui/dispatch")
	if page.Status != http.StatusOK {
		t.Fatalf("GET /ui/dispatch = %d", page.Status)
	}
	for _, hidden := range []string{"SECRET-CLUSTER-REASON", "admin:root-ops", "SECRET-OTHER-REASON", "tenant:other", "other-operator"} {
		if strings.Contains(page.Body, hidden) {
			t.Errorf("the operator's dispatch page shows %q", hidden)
		}
	}
	for _, shown := range []string{"processor:openai-fake", "tenant:demo", "our own reason"} {
		if !strings.Contains(page.Body, shown) {
			t.Errorf("the operator's dispatch page lacks %q", shown)
		}
	}
	var list struct {
		Pauses []struct {
			Scope, Reason string
			PausedBy      string `json:"paused_by"`
		} `json:"pauses"`
	}
	e.Do(http.MethodGet, "/v1/dispatch", stettest.OperatorToken, nil, &list)
	for _, p := range list.Pauses {
		if p.Scope == "processor:openai-fake" && (p.Reason != "" || p.PausedBy != "") {
			t.Errorf("GET /v1/dispatch shows the cluster pause's reason or actor: %+v", p)
		}
	}
}

// An admin token cannot open a UI session: the sign-in page answers 403
// with a message pointing to the API and the CLI, no session is stored,
// and the refusal is audited.
func TestUIRefusesAdminToken(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := newUIClient(t, e)
	a := c.signIn(stettest.AdminToken)
	if a.Status != http.StatusForbidden {
		t.Fatalf("sign in with an admin token = %d, want 403", a.Status)
	}
	for _, want := range []string{"admin token", "API", "CLI", `name="token"`} {
		if !strings.Contains(a.Body, want) {
			t.Errorf("the sign-in page after an admin token lacks %q", want)
		}
	}
	if n := e.Count("web_sessions", ""); n != 0 {
		t.Errorf("web_sessions = %d, want 0", n)
	}
	if p := c.get("/ui/review"); p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Location, "/ui/login") {
		t.Errorf("GET /ui/review after the refusal = %d to %q, want the sign-in page", p.Status, p.Location)
	}
	r := byRequest(e.auditRows(t, stettest.AdminToken, "limit=1000"), "denied.forbidden", a.RequestID)
	if r == nil || r.Actor != "admin:root-ops" || r.Route != "POST /ui/login" || r.Outcome != "denied" {
		t.Errorf("the refusal's row = %+v, want denied.forbidden by admin:root-ops on POST /ui/login", r)
	}
}

// The batches page and the invariants page show a tenant's operator only
// its own share of a provider batch that holds other tenants' jobs too.
func TestUIBatchesCountOwnItems(t *testing.T) {
	e := newEnv(t, envOptions{})
	d := e.Deliver(stettest.SourceReports, stettest.MustID("own"), stettest.Report{ExternalID: "own-1", Revision: 1, Text: "Thanks everyone."})
	e.WaitJob(d.JobID, stet.JobCommitted)
	var others []string
	for _, ext := range []string{"their-1", "their-2", "their-3"} {
		o := e.Deliver(stettest.SourceOther, stettest.MustID(ext), stettest.Report{ExternalID: ext, Revision: 1, Text: "Another tenant's post."})
		e.WaitJob(o.JobID, stet.JobCommitted)
		others = append(others, o.JobID)
	}
	// A batch lost at the provider holding one of demo's jobs and three of
	// the other tenant's.
	w := e.DB.Writer()
	now := time.Now().UnixMicro()
	if _, err := w.Exec(`INSERT INTO batches (id, processor_id, state, item_count, created_at, updated_at) VALUES ('bat_SHARED', 'openai-fake', 'unknown', 4, $1, $1)`, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range append([]string{d.JobID}, others...) {
		if _, err := w.Exec(`INSERT INTO batch_items (batch_id, job_id, token) SELECT 'bat_SHARED', id, 1 FROM jobs WHERE public_id = stet_ulid($1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := uiSession(t, e, stettest.OperatorToken)
	page := c.get("/ui/batches")
	if page.Status != http.StatusOK || !strings.Contains(page.Body, "0 / 1") || strings.Contains(page.Body, "/ 4") {
		t.Errorf("GET /ui/batches = %d; want the shared batch as 0 / 1 (demo's item), not of 4:\n%s", page.Status, page.Body)
	}
	var inv struct {
		Violations []ledger.Violation `json:"violations"`
	}
	e.Do(http.MethodGet, "/v1/invariants", stettest.OperatorToken, nil, &inv)
	found := false
	for _, v := range inv.Violations {
		if v.Invariant == 5 {
			found = true
			if v.Count != 1 || v.TenantID != "demo" {
				t.Errorf("GET /v1/invariants batch_unknown = %+v, want demo's 1 item", v)
			}
		}
	}
	if !found {
		t.Errorf("GET /v1/invariants = %+v, want the shared batch's batch_unknown", inv.Violations)
	}
}
