package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
)

// auditRow is one row of GET /v1/audit as a client decodes it.
type auditRow struct {
	At         string `json:"at"`
	Tenant     string `json:"tenant"`
	Actor      string `json:"actor"`
	Action     string `json:"action"`
	ObjectType string `json:"object_type"`
	ObjectID   string `json:"object_id"`
	Route      string `json:"route"`
	RemoteAddr string `json:"remote_addr"`
	RequestID  string `json:"request_id"`
	Outcome    string `json:"outcome"`
	Count      int64  `json:"count"`
}

type auditPage struct {
	Rows       []auditRow `json:"rows"`
	NextCursor *string    `json:"next_cursor"`
}

// readAudit is GET /v1/audit?query as token; it fails the test unless 200.
func readAudit(t *testing.T, e *stettest.Env, token, query string) auditPage {
	t.Helper()
	var p auditPage
	if st, b := e.Do(http.MethodGet, "/v1/audit?"+query, token, nil, &p); st != http.StatusOK {
		t.Fatalf("GET /v1/audit?%s = %d %s, want 200", query, st, b)
	}
	return p
}

// call sends an API request and returns the status and the X-Request-Id
// stet answered with.
func call(t *testing.T, e *stettest.Env, method, path, token string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.Server.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header.Get("X-Request-Id")
}

// auditRowsOf returns the rows of p with action.
func auditRowsOf(p auditPage, action string) []auditRow {
	var out []auditRow
	for _, r := range p.Rows {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// A decision, a pause, a resume and a deletion through the API are audit
// rows carrying the route pattern, the remote address and the request ID
// the caller was answered with, and their outcome: GET /v1/audit shows them.
func TestAuditRowsCarryTheRequest(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	d := deliverCommitted(t, e, stettest.SourceReports, "msg_audit_req", stettest.Report{ExternalID: "audit-req-1", Revision: 1, Text: "some text"})
	rec := e.Record(d.JobID).ID

	_, decideID := call(t, e, http.MethodPost, "/v1/review/"+rec+"/decision", stettest.ReviewerToken, map[string]string{"decision": "reject"})
	_, pauseID := call(t, e, http.MethodPost, "/v1/dispatch/pause", stettest.OperatorToken, map[string]string{"scope": "tenant:demo", "reason": "maintenance"})
	_, resumeID := call(t, e, http.MethodPost, "/v1/dispatch/resume", stettest.OperatorToken, map[string]string{"scope": "tenant:demo"})
	_, deleteID := call(t, e, http.MethodDelete, "/v1/reports/"+d.ReportID, stettest.OperatorToken, nil)

	for _, tt := range []struct {
		object, action, actor, route, requestID string
	}{
		{rec, "review.decide.reject", "token:reviewer", "POST /v1/review/{id}/decision", decideID},
		{"tenant:demo", "dispatch.pause", "token:operator", "POST /v1/dispatch/pause", pauseID},
		{"tenant:demo", "dispatch.resume", "token:operator", "POST /v1/dispatch/resume", resumeID},
		{d.ReportID, "report.delete", "token:operator", "DELETE /v1/reports/{report_id}", deleteID},
	} {
		rows := auditRowsOf(readAudit(t, e, stettest.OperatorToken, "object="+url.QueryEscape(tt.object)), tt.action)
		if len(rows) != 1 {
			t.Errorf("GET /v1/audit?object=%s: %d %s rows, want 1", tt.object, len(rows), tt.action)
			continue
		}
		r := rows[0]
		if r.Actor != tt.actor || r.Route != tt.route || r.RequestID != tt.requestID || !strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") ||
			r.Outcome != "ok" || r.Tenant != "demo" {
			t.Errorf("%s row = %+v, want actor %s, route %q, request %s, a loopback address, outcome ok, tenant demo",
				tt.action, r, tt.actor, tt.route, tt.requestID)
		}
	}
	// A refusal is a row with outcome denied.
	if st, _ := e.Do(http.MethodGet, "/v1/invariants", stettest.ReaderToken, nil, nil); st != http.StatusForbidden {
		t.Fatalf("GET /v1/invariants as a reader = %d, want 403", st)
	}
	denied := auditRowsOf(readAudit(t, e, stettest.OperatorToken, "limit=1000"), "denied.forbidden")
	if len(denied) != 1 || denied[0].Outcome != "denied" || denied[0].Route != "GET /v1/invariants" || denied[0].Actor != "token:reader" {
		t.Errorf("denied.forbidden rows = %+v, want the reader's one, outcome denied", denied)
	}
}

// Badly signed deliveries are audited as one row per source, reason and
// minute with a count, in the source's tenant's log: a flood makes one row
// a minute, not one a request.
func TestAuditDeniedIntakeRollsUp(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 3, 1, 10, 0, 5, 0, time.UTC))
	e := stettest.New(t, stettest.Options{NoWorkers: true, Clock: clock})
	body := []byte(`{"external_id":"flood-1","revision":1,"text":"x"}`)
	badSig := func() http.Header {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("webhook-id", "msg_flood")
		h.Set("webhook-timestamp", fmt.Sprint(clock.Now().Unix()))
		h.Set("webhook-signature", "v1,"+strings.Repeat("A", 43)+"=")
		return h
	}
	path := "/v1/sources/" + stettest.SourceReports + "/reports"
	for range 7 {
		if r := e.Post(path, badSig(), body); r.Status != http.StatusUnauthorized {
			t.Fatalf("a bad signature = %d %s, want 401", r.Status, r.Body)
		}
		clock.Advance(time.Second)
	}
	if r := e.Post(path, http.Header{"Content-Type": {"application/json"}}, body); r.Status != http.StatusUnauthorized {
		t.Fatalf("no signature headers = %d %s, want 401", r.Status, r.Body)
	}
	clock.Advance(time.Minute)
	if r := e.Post(path, badSig(), body); r.Status != http.StatusUnauthorized {
		t.Fatalf("a bad signature a minute later = %d, want 401", r.Status)
	}

	p := readAudit(t, e, stettest.OperatorToken, "object="+stettest.SourceReports)
	bad := auditRowsOf(p, "denied.intake.bad_signature")
	if len(bad) != 2 || bad[0].Count != 7 || bad[1].Count != 1 {
		t.Fatalf("denied.intake.bad_signature rows = %+v, want two: 7 in the first minute, 1 in the next", bad)
	}
	r := bad[0]
	if r.Actor != "anonymous" || r.ObjectType != "source" || r.ObjectID != stettest.SourceReports || r.Outcome != "denied" ||
		r.Route != "POST /v1/sources/{source}/reports" || r.RequestID == "" || !strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") ||
		r.At != "2026-03-01T10:00:05Z" {
		t.Errorf("the first minute's row = %+v, want the first refusal's: anonymous, source %s, denied, route, request, remote, time", r, stettest.SourceReports)
	}
	if missing := auditRowsOf(p, "denied.intake.missing_headers"); len(missing) != 1 || missing[0].Count != 1 {
		t.Errorf("denied.intake.missing_headers rows = %+v, want one with count 1", missing)
	}
	if n := e.Count("audit_log", "action LIKE 'denied.intake.%'"); n != 3 {
		t.Errorf("denied intake rows in the ledger = %d, want 3 (9 refusals)", n)
	}
	if rows := auditRowsOf(readAudit(t, e, stettest.OtherToken, "limit=1000"), "denied.intake.bad_signature"); len(rows) != 0 {
		t.Errorf("the other tenant sees %d of demo's denied intake rows, want 0", len(rows))
	}
	if rep, err := e.DB.VerifyAuditChain(t.Context()); err != nil || rep.Broken != nil {
		t.Errorf("VerifyAuditChain = %+v, %v; want intact", rep, err)
	}
}

// GET /v1/audit: an operator reads its own tenant's rows, an admin every
// tenant's; object finds an object's rows, the sha256 form a denied probe
// records included; since, limit and cursor page; bad parameters are 400;
// and reading the log is itself an audit row.
func TestAuditEndpoint(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	d := deliverCommitted(t, e, stettest.SourceReports, "msg_audit_ep", stettest.Report{ExternalID: "audit-ep-1", Revision: 1, Text: "some text"})
	get(t, e, "/v1/jobs/"+d.JobID, stettest.ReaderToken, nil)
	get(t, e, "/v1/jobs/"+d.JobID, stettest.ReaderToken, nil)
	// The other tenant probes demo's job: 404, audited in its own log.
	if st, _ := e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OtherToken, nil, nil); st != http.StatusNotFound {
		t.Fatalf("another tenant's job = %d, want 404", st)
	}
	sum := sha256.Sum256([]byte(d.JobID))
	hashed := "sha256:" + hex.EncodeToString(sum[:])

	// Own tenant: the two reads, not the other tenant's probe.
	own := readAudit(t, e, stettest.OperatorToken, "object="+d.JobID)
	if reads := auditRowsOf(own, "job.read"); len(reads) != 2 || reads[0].ObjectID != d.JobID || reads[0].Actor != "token:reader" {
		t.Errorf("operator's rows about the job = %+v, want its two job.read rows", own.Rows)
	}
	if len(auditRowsOf(own, "denied.not_found")) != 0 {
		t.Errorf("the operator sees the other tenant's row: %+v", own.Rows)
	}
	theirs := readAudit(t, e, stettest.OtherToken, "object="+d.JobID)
	if probes := auditRowsOf(theirs, "denied.not_found"); len(probes) != 1 || probes[0].ObjectID != hashed || probes[0].Outcome != "denied" {
		t.Errorf("the other tenant's rows about the job = %+v, want its probe as %s, denied", theirs.Rows, hashed)
	}
	if len(auditRowsOf(theirs, "job.read")) != 0 {
		t.Errorf("the other tenant sees demo's reads: %+v", theirs.Rows)
	}
	all := readAudit(t, e, stettest.AdminToken, "object="+d.JobID)
	if len(auditRowsOf(all, "job.read")) != 2 || len(auditRowsOf(all, "denied.not_found")) != 1 {
		t.Errorf("admin's rows about the job = %+v, want both tenants' three", all.Rows)
	}

	// Paging: a cursor walks every row once, in order.
	full := readAudit(t, e, stettest.OperatorToken, "limit=1000")
	var walked []auditRow
	q := "limit=2"
	for range 100 {
		p := readAudit(t, e, stettest.OperatorToken, q)
		walked = append(walked, p.Rows...)
		if p.NextCursor == nil {
			break
		}
		if len(p.Rows) != 2 {
			t.Fatalf("a page with a next cursor has %d rows, want 2", len(p.Rows))
		}
		q = "limit=2&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if len(walked) < len(full.Rows) {
		t.Errorf("paging by 2 read %d rows, want at least the %d read at once", len(walked), len(full.Rows))
	}
	for i := range full.Rows {
		if walked[i] != full.Rows[i] {
			t.Errorf("row %d paged = %+v, read at once = %+v", i, walked[i], full.Rows[i])
			break
		}
	}
	// since: nothing after now; everything since an hour ago.
	if p := readAudit(t, e, stettest.OperatorToken, "since="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))); len(p.Rows) != 0 {
		t.Errorf("rows since an hour from now = %d, want 0", len(p.Rows))
	}
	if p := readAudit(t, e, stettest.OperatorToken, "object="+d.JobID+"&since="+url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))); len(auditRowsOf(p, "job.read")) != 2 {
		t.Errorf("job.read rows since an hour ago = %+v, want 2", p.Rows)
	}

	// Reading the log is audited: the next read shows this one's row.
	_, readID := call(t, e, http.MethodGet, "/v1/audit?object="+d.JobID, stettest.OperatorToken, nil)
	reads := auditRowsOf(readAudit(t, e, stettest.OperatorToken, "limit=1000"), "audit.read")
	var mine *auditRow
	for i := range reads {
		if reads[i].RequestID == readID {
			mine = &reads[i]
		}
	}
	if mine == nil || mine.ObjectType != "audit_log" || mine.ObjectID != d.JobID || mine.Route != "GET /v1/audit" || mine.Actor != "token:operator" {
		t.Errorf("audit.read rows = %+v, want one for request %s about %s", reads, readID, d.JobID)
	}
	// An object that is not a stet ID (it may be an external ID) is not
	// written to the log as given.
	readAudit(t, e, stettest.OperatorToken, "object=audit-ep-1")
	if n := e.Count("audit_log", "object_id LIKE '%audit-ep-1%'"); n != 0 {
		t.Errorf("audit rows naming the external ID = %d, want 0", n)
	}

	for _, bad := range []string{"since=yesterday", "since=2026-01-02", "limit=0", "limit=1001", "limit=x", "cursor=abc", "cursor=-3",
		"objet=" + d.JobID, "object=a&object=b", "object=" + strings.Repeat("x", 300)} {
		st, b := e.Do(http.MethodGet, "/v1/audit?"+bad, stettest.OperatorToken, nil, nil)
		var prob api.Problem
		_ = json.Unmarshal(b, &prob)
		if st != http.StatusBadRequest || prob.Type != api.ProblemType("invalid-query") {
			t.Errorf("GET /v1/audit?%s = %d %s, want 400 invalid-query", bad, st, b)
		}
	}
	for _, tok := range []string{stettest.ReaderToken, stettest.ReviewerToken} {
		if st, _ := e.Do(http.MethodGet, "/v1/audit", tok, nil, nil); st != http.StatusForbidden {
			t.Errorf("GET /v1/audit as %s = %d, want 403", tok, st)
		}
	}
}
