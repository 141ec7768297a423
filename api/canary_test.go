package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The canary markers: one inside the document text, one as the external ID.
// Neither may reach a log line, a problem body, /metrics, River's job
// errors or the audit log, whatever path a report takes.
const (
	canaryText = "CANARYx7Qz"
	canaryExt  = "ext-CANARY-9k2"
)

// canaryMarkers are searched for in every sink; the bare "CANARY" catches
// a marker cut short.
var canaryMarkers = []string{canaryText, canaryExt, "CANARY"}

func TestCanaryNeverLeaks(t *testing.T) {
	t.Parallel()
	// Model output that quotes the document back: valid, and (in invalid
	// mode) schema-invalid with the markers as values and as a property name.
	var invalidOutput atomic.Bool
	respond := func(openaifake.Request) string {
		if invalidOutput.Load() {
			return `{"` + canaryText + `":"` + canaryExt + `","category":"` + canaryText + `","severity":"` + canaryExt +
				`","action":"allow","labels":["` + canaryText + `"],"rationale":"` + canaryText + `"}`
		}
		return `{"rationale":"The post says ` + canaryText + ` (` + canaryExt + `).","category":"spam","severity":"low","action":"review","labels":["spam"]}`
	}
	e := stettest.New(t, stettest.Options{
		ProcessorTimeout: 300 * time.Millisecond,
		BodyLimit:        2048,
		FakeOptions:      openaifake.Options{Respond: respond},
	})
	echo := "Your request about " + canaryText + " in " + canaryExt + " could not be processed."
	text := func(n int) string {
		return fmt.Sprintf("Revision %d. My doctor told me %s, so I stopped my insulin.", n, canaryText)
	}

	// Every processor outcome, one revision of the canary report each, one
	// at a time so the scripted faults meet the job they were meant for.
	paths := []struct {
		name    string
		faults  []openaifake.Fault
		invalid bool
		state   stet.JobState
	}{
		{name: "success", state: stet.JobCommitted},
		{name: "rate limited", faults: []openaifake.Fault{{Kind: openaifake.RateLimit, RetryAfterMS: 50, Message: echo}}, state: stet.JobCommitted},
		{name: "5xx until manual", faults: []openaifake.Fault{
			{Kind: openaifake.ServerError, Message: echo},
			{Kind: openaifake.ServerError, Status: http.StatusServiceUnavailable, Message: echo},
			{Kind: openaifake.ServerError, Status: http.StatusBadGateway, Message: echo},
		}, state: stet.JobManual},
		{name: "disconnect", faults: []openaifake.Fault{{Kind: openaifake.Disconnect}}, state: stet.JobCommitted},
		{name: "schema-invalid, repaired", faults: []openaifake.Fault{{Kind: openaifake.SchemaInvalid}}, state: stet.JobCommitted},
		{name: "truncated JSON, repaired", faults: []openaifake.Fault{{Kind: openaifake.TruncatedJSON}}, state: stet.JobCommitted},
		{name: "schema-invalid, repair budget exhausted", faults: []openaifake.Fault{
			{Kind: openaifake.SchemaInvalid}, {Kind: openaifake.SchemaInvalid}, {Kind: openaifake.Length},
		}, state: stet.JobManual},
		{name: "output quoting the markers, repair budget exhausted", invalid: true, state: stet.JobManual},
		{name: "refusal", faults: []openaifake.Fault{{Kind: openaifake.Refusal, Message: echo}}, state: stet.JobManual},
		{name: "content filter", faults: []openaifake.Fault{{Kind: openaifake.ContentFilter}}, state: stet.JobManual},
		{name: "400 unsupported", faults: []openaifake.Fault{{Kind: openaifake.HTTPError, Status: http.StatusBadRequest, Code: "invalid_request_error", Message: echo}}, state: stet.JobManual},
		{name: "404 model not found", faults: []openaifake.Fault{{Kind: openaifake.HTTPError, Status: http.StatusNotFound, Code: "model_not_found", Message: echo}}, state: stet.JobManual},
		{name: "timeout after the answer", faults: []openaifake.Fault{{Kind: openaifake.TimeoutAfterAnswer}}, state: stet.JobCommitted},
		// Last: these jobs wait (snoozed for a minute) rather than finish.
		{name: "quota", faults: []openaifake.Fault{{Kind: openaifake.Quota, Message: echo}}, state: stet.JobWaiting},
		{name: "auth", faults: []openaifake.Fault{{Kind: openaifake.Unauthorized, Message: echo}}, state: stet.JobWaiting},
	}
	var jobs []string
	var manualRecord string
	for i, p := range paths {
		n := i + 1
		e.Fake.Enqueue(p.faults...)
		invalidOutput.Store(p.invalid)
		d := e.Deliver(stettest.SourceReports, fmt.Sprintf("msg_canary_%d", n), stettest.Report{ExternalID: canaryExt, Revision: int64(n), Text: text(n)})
		if d.Status != http.StatusAccepted {
			t.Fatalf("%s: deliver = %d %s, want 202", p.name, d.Status, d.Body)
		}
		e.WaitJob(d.JobID, p.state)
		if p.state == stet.JobManual && manualRecord == "" {
			manualRecord = e.Record(d.JobID).ID
		}
		jobs = append(jobs, d.JobID)
	}
	invalidOutput.Store(false)
	if e.Fake.CallsContaining(canaryText) == 0 {
		t.Fatalf("no processor call carried the text marker: the canary went nowhere")
	}

	// Every refused delivery, each carrying the markers.
	var problems []string
	body := func(extra string) string {
		return `{"external_id":"` + canaryExt + `","revision":1,"text":"` + canaryText + ` refused"` + extra + `}`
	}
	otherSecret := "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldC0wMTIzNDU2"
	intakeErrors := []struct {
		name   string
		source string
		id     string
		body   string
		secret string
		skew   time.Duration
		ctype  string
		status int
	}{
		{name: "wrong secret", body: body(""), secret: otherSecret, status: http.StatusUnauthorized},
		{name: "stale timestamp", body: body(""), skew: -10 * time.Minute, status: http.StatusUnauthorized},
		{name: "malformed JSON", body: `{"external_id":"` + canaryExt + `","revision":1,"text":"` + canaryText, status: http.StatusBadRequest},
		{name: "unknown field named by the marker", body: body(`,"` + canaryText + `":"` + canaryExt + `"`), status: http.StatusBadRequest},
		{name: "text of the wrong type", body: `{"external_id":"` + canaryExt + `","revision":1,"text":{"` + canaryText + `":1}}`, status: http.StatusBadRequest},
		{name: "external_id of the wrong type", body: `{"external_id":["` + canaryExt + `"],"revision":1,"text":"` + canaryText + `"}`, status: http.StatusBadRequest},
		{name: "revision a marker string", body: `{"external_id":"` + canaryExt + `","revision":"` + canaryText + `","text":"` + canaryText + `"}`, status: http.StatusBadRequest},
		{name: "missing revision", body: `{"external_id":"` + canaryExt + `","text":"` + canaryText + `"}`, status: http.StatusBadRequest},
		{name: "external_id too long", body: `{"external_id":"` + strings.Repeat(canaryExt, 30) + `","revision":1,"text":"` + canaryText + `"}`, status: http.StatusBadRequest},
		{name: "non-UTF-8 text", body: `{"external_id":"` + canaryExt + `","revision":1,"text":"` + canaryText + "\xff\xfe" + `"}`, status: http.StatusBadRequest},
		{name: "metadata a marker string", body: body(`,"metadata":"` + canaryText + `"`), status: http.StatusBadRequest},
		{name: "trailing garbage", body: body("") + canaryText, status: http.StatusBadRequest},
		{name: "revision conflict", body: body(""), status: http.StatusConflict},
		{name: "delivery conflict", id: "msg_canary_1", body: `{"external_id":"` + canaryExt + `","revision":99,"text":"` + canaryText + `"}`, status: http.StatusConflict},
		{name: "body over the limit", body: `{"external_id":"` + canaryExt + `","revision":1,"text":"` + strings.Repeat(canaryText+" ", 300) + `"}`, status: http.StatusRequestEntityTooLarge},
		{name: "audio", body: body(""), ctype: "audio/mpeg", status: http.StatusUnprocessableEntity},
		{name: "unknown source named by the marker", source: canaryText, body: body(""), status: http.StatusNotFound},
	}
	for i, c := range intakeErrors {
		id := cmpOr(c.id, fmt.Sprintf("msg_canary_refused_%d", i))
		h := signed(t, cmpOr(c.secret, stettest.Secret), id, e.Clock.Now().Add(c.skew), []byte(c.body))
		if c.ctype != "" {
			h.Set("Content-Type", c.ctype)
		}
		r := send(t, e, http.MethodPost, intakePath(cmpOr(c.source, stettest.SourceReports)), h, []byte(c.body))
		if r.status != c.status {
			t.Errorf("%s: POST = %d %s, want %d", c.name, r.status, r.body, c.status)
		}
		problems = append(problems, c.name+": "+string(r.body))
	}

	// Reads and decisions that answer problems, some with the markers in
	// their path or body. Successful reads may show the external ID the
	// caller asked about; they are made for the logs, not inspected.
	reads := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{name: "report by external ID", method: http.MethodGet, path: "/v1/sources/reports/reports/" + canaryExt, token: stettest.ReaderToken, status: http.StatusOK},
		{name: "job", method: http.MethodGet, path: "/v1/jobs/" + jobs[0], token: stettest.ReaderToken, status: http.StatusOK},
		{name: "review list", method: http.MethodGet, path: "/v1/review?source=reports", token: stettest.ReaderToken, status: http.StatusOK},
		{name: "missing report", method: http.MethodGet, path: "/v1/sources/reports/reports/" + canaryExt + "-missing", token: stettest.ReaderToken, status: http.StatusNotFound},
		{name: "another tenant reading the report", method: http.MethodGet, path: "/v1/sources/reports/reports/" + canaryExt, token: stettest.OtherToken, status: http.StatusNotFound},
		{name: "unknown source in a read", method: http.MethodGet, path: "/v1/sources/" + canaryText + "/reports/" + canaryExt, token: stettest.ReaderToken, status: http.StatusNotFound},
		{name: "unknown route", method: http.MethodGet, path: "/v1/" + canaryText + "/" + canaryExt, token: stettest.ReaderToken, status: http.StatusNotFound},
		{name: "unauthenticated read", method: http.MethodGet, path: "/v1/sources/reports/reports/" + canaryExt, token: "", status: http.StatusUnauthorized},
		{name: "token made of the marker", method: http.MethodGet, path: "/v1/sources/reports/reports/" + canaryExt, token: canaryText, status: http.StatusUnauthorized},
		{name: "override quoting the markers", method: http.MethodPost, path: "/v1/review/" + manualRecord + "/decision", token: stettest.ReviewerToken,
			body: `{"decision":"override","classification":{"` + canaryText + `":"` + canaryExt + `","category":"` + canaryText + `","rationale":7}}`, status: http.StatusBadRequest},
		{name: "decision with an unknown field", method: http.MethodPost, path: "/v1/review/" + manualRecord + "/decision", token: stettest.ReviewerToken,
			body: `{"decision":"approve","` + canaryText + `":"` + canaryExt + `"}`, status: http.StatusBadRequest},
		{name: "decision of the marker", method: http.MethodPost, path: "/v1/review/" + manualRecord + "/decision", token: stettest.ReviewerToken,
			body: `{"decision":"` + canaryText + `"}`, status: http.StatusBadRequest},
		{name: "approve a manual record quoting the markers", method: http.MethodPost, path: "/v1/review/" + manualRecord + "/decision", token: stettest.ReviewerToken,
			body: `{"decision":"approve","note":"` + canaryExt + `","classification":{"category":"spam","severity":"low","action":"review","labels":["spam"],"rationale":"` + canaryText + `"}}`, status: http.StatusOK},
	}
	for _, rd := range reads {
		h := bearer(rd.token)
		if rd.body != "" {
			h.Set("Content-Type", "application/json")
		}
		r := send(t, e, rd.method, rd.path, h, []byte(rd.body))
		if r.status != rd.status {
			t.Errorf("%s: %s = %d %s, want %d", rd.name, rd.method, r.status, r.body, rd.status)
		}
		if r.status >= 300 {
			problems = append(problems, rd.name+": "+string(r.body))
		}
	}

	// The sinks.
	sinks := map[string]string{
		"logs":             e.Logs.String(),
		"problem bodies":   strings.Join(problems, "\n"),
		"/metrics":         string(send(t, e, http.MethodGet, "/metrics", nil, nil).body),
		"River job errors": queryText(t, e, `SELECT COALESCE(CAST(errors AS TEXT), '') FROM river_job`),
		"River job args":   queryText(t, e, `SELECT CAST(args AS TEXT) FROM river_job`),
		"audit log": queryText(t, e, `SELECT tenant_id || ' ' || actor || ' ' || action || ' ' || object_type || ' ' ||
			object_id || ' ' || COALESCE(detail, '') FROM audit_log`),
	}
	for sink, content := range sinks {
		for _, m := range canaryMarkers {
			if i := strings.Index(content, m); i >= 0 {
				t.Errorf("%s contain the marker %q: …%s…", sink, m, excerpt(content, i))
			}
		}
	}

	// The sinks were looked at while they held something: a leak could
	// have shown.
	for sink, want := range map[string]string{
		"logs":             jobs[0],
		"problem bodies":   "urn:stet:problem:invalid-signature",
		"/metrics":         `stet_provider_calls_total{failure_class="refusal",processor="openai-fake"}`,
		"River job errors": "transient",
		"River job args":   jobs[len(jobs)-1],
		"audit log":        "review.decide.approve",
	} {
		if !strings.Contains(sinks[sink], want) {
			t.Errorf("%s lack %q: the canary test looked at an empty sink", sink, want)
		}
	}
	if n := e.Count("revisions", "text LIKE '%' || $1 || '%'", canaryText); n != len(paths) {
		t.Errorf("revisions holding the text marker = %d, want %d (the text itself is stored)", n, len(paths))
	}
}

// queryText concatenates the single text column of every row of q.
func queryText(t testing.TB, e *stettest.Env, q string) string {
	t.Helper()
	rows, err := e.DB.Writer().QueryContext(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var sb strings.Builder
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		sb.WriteString(s)
		sb.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return sb.String()
}

// excerpt returns up to 200 bytes around position i of s.
func excerpt(s string, i int) string {
	return s[max(0, i-100):min(len(s), i+100)]
}
