package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// storedSHA is the stored form of a hex SHA-256 (its 32 bytes), to compare
// with a content_sha256 column.
func storedSHA(t testing.TB, h string) []byte {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		t.Fatalf("SHA-256 %q: %v", h, err)
	}
	return b
}

// reply is one HTTP answer as a client sees it.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// sendErr sends a request to the env's API. It never touches t, so
// goroutines may call it.
func sendErr(e *stettest.Env, method, path string, h http.Header, body []byte) (reply, error) {
	req, err := http.NewRequest(method, e.Server.URL+path, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if h != nil {
		req.Header = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func send(t testing.TB, e *stettest.Env, method, path string, h http.Header, body []byte) reply {
	t.Helper()
	r, err := sendErr(e, method, path, h, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// bearer returns request headers carrying token ("" for none).
func bearer(token string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h
}

// signedErr returns the headers of a delivery of body as message id, signed
// under secret at time at.
func signedErr(secret, id string, at time.Time, body []byte) (http.Header, error) {
	return stetclient.Headers(secret, id, at, body)
}

func signed(t testing.TB, secret, id string, at time.Time, body []byte) http.Header {
	t.Helper()
	h, err := signedErr(secret, id, at, body)
	if err != nil {
		t.Fatalf("webhook.Sign() = %v", err)
	}
	return h
}

func intakePath(source string) string { return "/v1/sources/" + source + "/reports" }

// checkProblem asserts that r is an RFC 9457 problem of the given status
// and stable type slug, and returns it.
func checkProblem(t testing.TB, what string, r reply, status int, slug string) api.Problem {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: status = %d, want %d (body %s)", what, r.status, status, r.body)
	}
	if mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type")); mt != "application/problem+json" {
		t.Errorf("%s: Content-Type = %q, want application/problem+json", what, r.header.Get("Content-Type"))
	}
	var p api.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Errorf("%s: problem body %s: %v", what, r.body, err)
		return p
	}
	if want := "urn:stet:problem:" + slug; p.Type != want {
		t.Errorf("%s: problem type = %q, want %q", what, p.Type, want)
	}
	if p.Status != status {
		t.Errorf("%s: problem status = %d, want %d", what, p.Status, status)
	}
	if p.Title == "" {
		t.Errorf("%s: problem has no title: %s", what, r.body)
	}
	return p
}

// storedTables are the tables an intake call may write.
var storedTables = []string{"reports", "revisions", "jobs", "deliveries", "river_job", "attempts", "review_records"}

func rowCounts(e *stettest.Env) map[string]int {
	out := map[string]int{}
	for _, table := range storedTables {
		out[table] = e.Count(table, "")
	}
	return out
}

// intakeAnswer decodes a 200/202 intake body, insisting on exactly the
// fields of docs/design.md §7.
func intakeAnswer(t testing.TB, what string, r reply) api.IntakeResponse {
	t.Helper()
	if mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type")); mt != "application/json" {
		t.Errorf("%s: Content-Type = %q, want application/json", what, r.header.Get("Content-Type"))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &fields); err != nil {
		t.Fatalf("%s: body %s: %v", what, r.body, err)
	}
	keys := slices.Sorted(maps.Keys(fields))
	if want := []string{"duplicate", "job_id", "report_id", "revision", "state"}; !slices.Equal(keys, want) {
		t.Errorf("%s: body fields = %v, want %v", what, keys, want)
	}
	var out api.IntakeResponse
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s: body %s: %v", what, r.body, err)
	}
	if out.JobID == "" || out.ReportID == "" {
		t.Errorf("%s: body %s lacks job_id or report_id", what, r.body)
	}
	return out
}

var intakeEpoch = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// Every refused delivery of docs/design.md §7 answers its problem and stores
// nothing: no report, revision, job, receipt or River job.
func TestIntakeRefusalsStoreNothing(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(intakeEpoch)
	e := stettest.New(t, stettest.Options{Clock: clock, NoWorkers: true, BodyLimit: 1024})

	// A report already on file, for the conflicts.
	seedBody := []byte(`{"external_id":"seed-1","revision":1,"text":"the seed report"}`)
	if r := send(t, e, http.MethodPost, intakePath(stettest.SourceReports), signed(t, stettest.Secret, "msg_seed", clock.Now(), seedBody), seedBody); r.status != http.StatusAccepted {
		t.Fatalf("seed delivery = %d %s, want 202", r.status, r.body)
	}

	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("not-the-source-secret-0123456789"))
	fresh := `{"external_id":"new-1","revision":1,"text":"a report nobody has seen"}`
	tests := []struct {
		name   string
		source string        // default SourceReports
		id     string        // webhook-id; default a fresh one
		body   string        // what is signed
		sent   *string       // what is sent, if not body
		secret string        // default the source's secret
		skew   time.Duration // signing time minus now
		edit   func(h http.Header)
		status int
		slug   string
	}{
		// 409
		{name: "same identity and revision, other content", body: `{"external_id":"seed-1","revision":1,"text":"other content"}`,
			status: http.StatusConflict, slug: "revision-conflict"},
		{name: "same webhook-id, other body", id: "msg_seed", body: fresh,
			status: http.StatusConflict, slug: "delivery-conflict"},

		// 401
		{name: "missing webhook-id", body: fresh, edit: func(h http.Header) { h.Del("webhook-id") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "missing webhook-timestamp", body: fresh, edit: func(h http.Header) { h.Del("webhook-timestamp") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "missing webhook-signature", body: fresh, edit: func(h http.Header) { h.Del("webhook-signature") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "wrong secret", body: fresh, secret: otherSecret,
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "tampered body", body: fresh, sent: ptr(strings.Replace(fresh, "nobody", "NOBODY", 1)),
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "signature of another webhook-id", body: fresh, edit: func(h http.Header) { h.Set("webhook-id", "msg_swapped") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "signature not base64", body: fresh, edit: func(h http.Header) { h.Set("webhook-signature", "v1,not*base64") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "timestamp not a number", body: fresh, edit: func(h http.Header) { h.Set("webhook-timestamp", "yesterday") },
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "timestamp 6 minutes old", body: fresh, skew: -6 * time.Minute,
			status: http.StatusUnauthorized, slug: "invalid-signature"},
		{name: "timestamp 6 minutes ahead", body: fresh, skew: 6 * time.Minute,
			status: http.StatusUnauthorized, slug: "invalid-signature"},

		// 400
		{name: "malformed JSON", body: `{"external_id":"new-1","revision":1,"text":"half`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "not an object", body: `["new-1",1,"text"]`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "empty body", body: ``,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "trailing garbage", body: fresh + ` garbage`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "a second JSON value", body: fresh + `{}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "trailing closing brace", body: fresh + `}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "trailing closing bracket", body: fresh + `]`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "missing text", body: `{"external_id":"new-1","revision":1}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "null text", body: `{"external_id":"new-1","revision":1,"text":null}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "empty text", body: `{"external_id":"new-1","revision":1,"text":""}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "blank text", body: `{"external_id":"new-1","revision":1,"text":" \n\t "}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "text not a string", body: `{"external_id":"new-1","revision":1,"text":42}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "missing external_id", body: `{"revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "empty external_id", body: `{"external_id":"","revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "external_id over 256 bytes", body: `{"external_id":"` + strings.Repeat("x", 257) + `","revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "external_id with a control character", body: `{"external_id":"new\u0001","revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "external_id on a content-identity source", source: stettest.SourceBlobs, body: `{"external_id":"blob-1","text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "missing revision", body: `{"external_id":"new-1","text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision 0", body: `{"external_id":"new-1","revision":0,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision -1", body: `{"external_id":"new-1","revision":-1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision 1.5", body: `{"external_id":"new-1","revision":1.5,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision 1e0", body: `{"external_id":"new-1","revision":1e0,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision beyond int64", body: `{"external_id":"new-1","revision":9223372036854775808,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision as a string", body: `{"external_id":"new-1","revision":"1","text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision on a content-revisions source", source: stettest.SourceNotes, body: `{"external_id":"note-1","revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "revision on a content-identity source", source: stettest.SourceBlobs, body: `{"revision":1,"text":"some text"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "unknown top-level field", body: `{"external_id":"new-1","revision":1,"text":"some text","priority":"high"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "non-UTF-8 bytes", body: "{\"external_id\":\"new-1\",\"revision\":1,\"text\":\"caf\xe9\"}",
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "lone surrogate escape", body: `{"external_id":"new-1","revision":1,"text":"\ud800"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		// Fuzz finding: a spelled \ufffd elsewhere in the body hid the lone
		// surrogate in text.
		{name: "lone surrogate escape, metadata spells U+FFFD", body: `{"external_id":"new-1","revision":1,"text":"\ud800","metadata":{"k":"\ufffd"}}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "lone surrogate escape, text spells \\\\ufffd", body: `{"external_id":"new-1","revision":1,"text":"\\ufffd \ud800"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "metadata an array", body: `{"external_id":"new-1","revision":1,"text":"some text","metadata":[1]}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "metadata a string", body: `{"external_id":"new-1","revision":1,"text":"some text","metadata":"x"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "metadata a number", body: `{"external_id":"new-1","revision":1,"text":"some text","metadata":7}`,
			status: http.StatusBadRequest, slug: "invalid-body"},

		// 413, 404, 422
		{name: "body over the limit", body: `{"external_id":"new-1","revision":1,"text":"` + strings.Repeat("a", 1100) + `"}`,
			status: http.StatusRequestEntityTooLarge, slug: "body-too-large"},
		{name: "unknown source", source: "no-such-source", body: fresh,
			status: http.StatusNotFound, slug: "unknown-source"},
		{name: "audio", body: fresh, edit: func(h http.Header) { h.Set("Content-Type", "audio/mpeg") },
			status: http.StatusUnprocessableEntity, slug: "unsupported-media"},
		{name: "plain text", body: fresh, edit: func(h http.Header) { h.Set("Content-Type", "text/plain") },
			status: http.StatusUnprocessableEntity, slug: "unsupported-media"},
	}
	// The cases run one after another on one ledger: each compares the row
	// counts around its own request, which a concurrent case would disturb.
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			source := cmpOr(tt.source, stettest.SourceReports)
			id := cmpOr(tt.id, fmt.Sprintf("msg_refused_%d", i))
			secret := cmpOr(tt.secret, stettest.Secret)
			// Each case names its own report, so one wrongly stored
			// delivery cannot turn a later case into a conflict.
			own := func(s string) string { return strings.ReplaceAll(s, `"new-1"`, fmt.Sprintf(`"new-%d"`, i)) }
			body := own(tt.body)
			h := signed(t, secret, id, clock.Now().Add(tt.skew), []byte(body))
			if tt.edit != nil {
				tt.edit(h)
			}
			sent := body
			if tt.sent != nil {
				sent = own(*tt.sent)
			}
			before := rowCounts(e)
			r := send(t, e, http.MethodPost, intakePath(source), h, []byte(sent))
			checkProblem(t, "POST "+tt.name, r, tt.status, tt.slug)
			if after := rowCounts(e); !maps.Equal(after, before) {
				t.Errorf("rows after a %d = %v, want unchanged %v", tt.status, after, before)
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// A 202 answers the docs/design.md §7 body, and by the time it is sent the
// revision, the job and the extract task are committed.
func TestIntakeAcceptedIsDurable(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	body := []byte(`{"external_id":"report-001","revision":1,"text":"Stop taking your insulin.","metadata":{"lang":"en"}}`)
	r := send(t, e, http.MethodPost, intakePath(stettest.SourceReports), signed(t, stettest.Secret, "msg_1", e.Clock.Now(), body), body)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST new revision = %d %s, want 202", r.status, r.body)
	}
	got := intakeAnswer(t, "202", r)
	if got.Revision != 1 || got.State != "accepted" || got.Duplicate {
		t.Errorf("202 body = %s, want revision 1, state accepted, duplicate false", r.body)
	}
	if n := e.Count("reports", "public_id = stet_ulid($1) AND source_id = $2 AND external_id = $3", got.ReportID, stettest.SourceReports, "report-001"); n != 1 {
		t.Errorf("reports rows for %s = %d, want 1", got.ReportID, n)
	}
	if n := e.Count("revisions", "report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1)) AND revision = 1 AND content_sha256 = $2", got.ReportID, storedSHA(t, stet.SHA256Hex([]byte("Stop taking your insulin.")))); n != 1 {
		t.Errorf("revisions rows = %d, want 1", n)
	}
	if n := e.Count("jobs", "public_id = stet_ulid($1) AND report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($2)) AND state = 'accepted'", got.JobID, got.ReportID); n != 1 {
		t.Errorf("jobs rows = %d, want 1", n)
	}
	if n := e.Count("revisions", "report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1)) AND metadata = $2", got.ReportID, `{"lang":"en"}`); n != 1 {
		t.Errorf("revisions with the delivered metadata = %d, want 1", n)
	}
	if n := e.Count("deliveries", "delivery_key = 'msg_1' AND job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", got.JobID); n != 1 {
		t.Errorf("deliveries rows = %d, want 1", n)
	}
	if n := e.Count("river_job", "kind = 'stet_extract' AND CAST(args AS TEXT) LIKE '%' || $1 || '%'", got.JobID); n != 1 {
		t.Errorf("river_job stet_extract rows for %s = %d, want 1", got.JobID, n)
	}
	if n := e.Count("river_job", ""); n != 1 {
		t.Errorf("river_job rows = %d, want 1", n)
	}
}

// Deliveries a sender may legitimately send are accepted as they are.
func TestIntakeAcceptedVariants(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	tests := []struct {
		name     string
		source   string // default SourceReports
		ctype    string // "-" for none
		body     string
		revision int64
		text     string        // the text as stored, if checked
		skew     time.Duration // signing time minus now
	}{
		{name: "timestamp 4 minutes old", skew: -4 * time.Minute,
			body: `{"external_id":"v-old","revision":1,"text":"some text"}`, revision: 1},
		{name: "timestamp 4 minutes ahead", skew: 4 * time.Minute,
			body: `{"external_id":"v-ahead","revision":1,"text":"some text"}`, revision: 1},
		{name: "charset parameter", ctype: "application/json; charset=utf-8",
			body: `{"external_id":"v-1","revision":1,"text":"some text"}`, revision: 1},
		{name: "a +json media type", ctype: "application/vnd.example+json",
			body: `{"external_id":"v-2","revision":1,"text":"some text"}`, revision: 1},
		{name: "no Content-Type", ctype: "-",
			body: `{"external_id":"v-3","revision":1,"text":"some text"}`, revision: 1},
		{name: "null metadata",
			body: `{"external_id":"v-4","revision":1,"text":"some text","metadata":null}`, revision: 1},
		{name: "nested metadata",
			body: `{"external_id":"v-5","revision":1,"text":"some text","metadata":{"a":{"b":[1,2]}}}`, revision: 1},
		{name: "a revision beyond float64 precision",
			body: `{"external_id":"v-6","revision":9007199254740993,"text":"some text"}`, revision: 9007199254740993},
		{name: "a trailing newline",
			body: "{\"external_id\":\"v-7\",\"revision\":1,\"text\":\"some text\"}\n", revision: 1},
		{name: "an escaped surrogate pair",
			body: `{"external_id":"v-8","revision":1,"text":"smile \ud83d\ude00"}`, revision: 1, text: "smile \U0001F600"},
		{name: "non-ASCII text",
			body: `{"external_id":"v-9","revision":1,"text":"Le médecin a dit: arrêtez — 薬"}`, revision: 1, text: "Le médecin a dit: arrêtez — 薬"},
		{name: "a literal replacement character in scraped text",
			body: "{\"external_id\":\"v-10\",\"revision\":1,\"text\":\"caf\uFFFD au lait \\ufffd\"}", revision: 1, text: "caf\uFFFD au lait \uFFFD"},
		{name: "content identity, null external_id", source: stettest.SourceBlobs,
			body: `{"external_id":null,"text":"a blob"}`, revision: 1},
	}
	for i, tt := range tests {
		body := []byte(tt.body)
		h := signed(t, stettest.Secret, fmt.Sprintf("msg_variant_%d", i), e.Clock.Now().Add(tt.skew), body)
		switch tt.ctype {
		case "":
		case "-":
			h.Del("Content-Type")
		default:
			h.Set("Content-Type", tt.ctype)
		}
		r := send(t, e, http.MethodPost, intakePath(cmpOr(tt.source, stettest.SourceReports)), h, body)
		if r.status != http.StatusAccepted {
			t.Errorf("%s: POST = %d %s, want 202", tt.name, r.status, r.body)
			continue
		}
		got := intakeAnswer(t, tt.name, r)
		if got.Revision != tt.revision {
			t.Errorf("%s: revision = %d, want %d", tt.name, got.Revision, tt.revision)
		}
		if tt.text != "" {
			if n := e.Count("revisions", "report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1)) AND content_sha256 = $2", got.ReportID, storedSHA(t, stet.SHA256Hex([]byte(tt.text)))); n != 1 {
				t.Errorf("%s: revisions holding the decoded text %q = %d, want 1", tt.name, tt.text, n)
			}
		}
	}
}

// A webhook-id is unique per source: another source may use the same one.
func TestIntakeWebhookIDPerSource(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	a := e.Deliver(stettest.SourceReports, "msg_shared", stettest.Report{ExternalID: "report-1", Revision: 1, Text: "one text"})
	b := e.Deliver(stettest.SourceNotes, "msg_shared", stettest.Report{ExternalID: "note-1", Text: "another text"})
	if a.Status != http.StatusAccepted || b.Status != http.StatusAccepted || a.JobID == b.JobID {
		t.Errorf("one webhook-id on two sources = %d %s and %d %s, want two 202s with two jobs", a.Status, a.Body, b.Status, b.Body)
	}
}

// Redeliveries resolve to the existing job: the same delivery again, and the
// same identity, revision and content under a new webhook-id.
func TestIntakeDuplicates(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	body := []byte(`{"external_id":"report-001","revision":1,"text":"Cinnamon cures diabetes."}`)
	post := func(id string, b []byte) reply {
		return send(t, e, http.MethodPost, intakePath(stettest.SourceReports), signed(t, stettest.Secret, id, e.Clock.Now(), b), b)
	}
	first := post("msg_1", body)
	if first.status != http.StatusAccepted {
		t.Fatalf("first delivery = %d %s, want 202", first.status, first.body)
	}
	want := intakeAnswer(t, "202", first)

	// The same content, spelled differently, is the same content: identity
	// is the text, not the body bytes.
	respaced := []byte(`{ "text": "Cinnamon cures diabetes.", "revision": 1, "external_id": "report-001" }`)
	tests := []struct {
		name string
		id   string
		body []byte
	}{
		{name: "same delivery again", id: "msg_1", body: body},
		{name: "same content under a new webhook-id", id: "msg_2", body: body},
		{name: "same content in another body under a new webhook-id", id: "msg_3", body: respaced},
		{name: "the second delivery again", id: "msg_2", body: body},
	}
	for _, tt := range tests {
		r := post(tt.id, tt.body)
		if r.status != http.StatusOK {
			t.Errorf("%s = %d %s, want 200", tt.name, r.status, r.body)
			continue
		}
		got := intakeAnswer(t, tt.name, r)
		if got.JobID != want.JobID || got.ReportID != want.ReportID || got.Revision != 1 || !got.Duplicate || got.State != "accepted" {
			t.Errorf("%s = %s, want a duplicate of job %s (state accepted)", tt.name, r.body, want.JobID)
		}
	}
	for table, n := range map[string]int{"reports": 1, "revisions": 1, "jobs": 1, "deliveries": 3, "river_job": 1} {
		if got := e.Count(table, ""); got != n {
			t.Errorf("%s rows = %d, want %d", table, got, n)
		}
	}
}

// A webhook-signature header may carry several signatures while a secret
// is rotated: one that matches is enough.
func TestIntakeSignatureRotation(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	wrong := "v1," + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	tests := []struct {
		name  string
		order func(right string) string
	}{
		{name: "wrong then right", order: func(right string) string { return wrong + " " + right }},
		{name: "right then wrong", order: func(right string) string { return right + " " + wrong }},
		{name: "another version first", order: func(right string) string { return "v1a,c29tZXRoaW5n " + right }},
	}
	for i, tt := range tests {
		body := []byte(fmt.Sprintf(`{"external_id":"rotated-%d","revision":1,"text":"text %d"}`, i, i))
		id := fmt.Sprintf("msg_rot_%d", i)
		h := signed(t, stettest.Secret, id, e.Clock.Now(), body)
		h.Set("webhook-signature", tt.order(h.Get("webhook-signature")))
		r := send(t, e, http.MethodPost, intakePath(stettest.SourceReports), h, body)
		if r.status != http.StatusAccepted {
			t.Errorf("%s: POST = %d %s, want 202", tt.name, r.status, r.body)
		}
	}
	if n := e.Count("jobs", ""); n != len(tests) {
		t.Errorf("jobs = %d, want %d", n, len(tests))
	}
}

// A content-identity source: the text is the identity, so the same text is
// the same job and other text is another report.
func TestIntakeContentIdentity(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	a := e.Deliver(stettest.SourceBlobs, "msg_a", stettest.Report{Text: "An anonymous post."})
	if a.Status != http.StatusAccepted || a.Revision != 1 {
		t.Fatalf("first blob = %d %s, want 202 revision 1", a.Status, a.Body)
	}
	again := e.Deliver(stettest.SourceBlobs, "msg_a2", stettest.Report{Text: "An anonymous post."})
	if again.Status != http.StatusOK || !again.Duplicate || again.JobID != a.JobID || again.ReportID != a.ReportID {
		t.Errorf("same text again = %d %s, want 200 duplicate of job %s", again.Status, again.Body, a.JobID)
	}
	b := e.Deliver(stettest.SourceBlobs, "msg_b", stettest.Report{Text: "Another anonymous post."})
	if b.Status != http.StatusAccepted || b.ReportID == a.ReportID || b.JobID == a.JobID || b.Revision != 1 {
		t.Errorf("other text = %d %s, want 202 with another report at revision 1", b.Status, b.Body)
	}
	if n := e.Count("reports", "source_id = $1 AND external_id IS NULL", stettest.SourceBlobs); n != 2 {
		t.Errorf("blob reports = %d, want 2", n)
	}
	if n := e.Count("jobs", ""); n != 2 {
		t.Errorf("jobs = %d, want 2", n)
	}
}

// A revisions: content source: stet numbers revisions as the content
// changes, and earlier content is that earlier revision, never a new one.
func TestIntakeContentRevisions(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	steps := []struct {
		id, text  string
		status    int
		revision  int64
		sameJobAs int // index of the earlier step whose job this must be, or -1
	}{
		{id: "msg_1", text: "First version.", status: http.StatusAccepted, revision: 1, sameJobAs: -1},
		{id: "msg_2", text: "Second version.", status: http.StatusAccepted, revision: 2, sameJobAs: -1},
		{id: "msg_3", text: "First version.", status: http.StatusOK, revision: 1, sameJobAs: 0},
		{id: "msg_4", text: "Second version.", status: http.StatusOK, revision: 2, sameJobAs: 1},
		{id: "msg_5", text: "Third version.", status: http.StatusAccepted, revision: 3, sameJobAs: -1},
	}
	var got []stettest.Response
	for i, s := range steps {
		r := e.Deliver(stettest.SourceNotes, s.id, stettest.Report{ExternalID: "note-1", Text: s.text})
		got = append(got, r)
		if r.Status != s.status || r.Revision != s.revision || r.Duplicate != (s.status == http.StatusOK) {
			t.Errorf("delivery %d (%q) = %d %s, want %d revision %d", i+1, s.text, r.Status, r.Body, s.status, s.revision)
			continue
		}
		if r.ReportID != got[0].ReportID {
			t.Errorf("delivery %d report = %s, want %s", i+1, r.ReportID, got[0].ReportID)
		}
		if s.sameJobAs >= 0 && r.JobID != got[s.sameJobAs].JobID {
			t.Errorf("delivery %d job = %s, want %s", i+1, r.JobID, got[s.sameJobAs].JobID)
		}
	}
	if n := e.Count("revisions", ""); n != 3 {
		t.Errorf("revisions = %d, want 3", n)
	}
	if n := e.Count("jobs", ""); n != 3 {
		t.Errorf("jobs = %d, want 3", n)
	}
}

// Concurrent deliveries of one report revision resolve to one job: exactly
// one 202, every other answer a 200 naming the same job.
func TestIntakeConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	const n = 20
	tests := []struct {
		name          string
		sameID        bool
		wantDelivered int
	}{
		{name: "twenty webhook-ids", sameID: false, wantDelivered: n},
		{name: "one webhook-id", sameID: true, wantDelivered: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := stettest.New(t, stettest.Options{NoWorkers: true})
			body := []byte(`{"external_id":"report-race","revision":1,"text":"Everyone at once."}`)
			replies := make([]reply, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					id := "msg_race"
					if !tt.sameID {
						id = fmt.Sprintf("msg_race_%d", i)
					}
					h, err := signedErr(stettest.Secret, id, e.Clock.Now(), body)
					if err != nil {
						errs[i] = err
						return
					}
					<-start
					replies[i], errs[i] = sendErr(e, http.MethodPost, intakePath(stettest.SourceReports), h, body)
				})
			}
			close(start)
			wg.Wait()
			statuses := map[int]int{}
			jobs := map[string]bool{}
			for i, r := range replies {
				if errs[i] != nil {
					t.Fatalf("delivery %d: %v", i, errs[i])
				}
				statuses[r.status]++
				var a api.IntakeResponse
				if err := json.Unmarshal(r.body, &a); err == nil && a.JobID != "" {
					jobs[a.JobID] = true
				}
			}
			if want := map[int]int{http.StatusAccepted: 1, http.StatusOK: n - 1}; !maps.Equal(statuses, want) {
				t.Errorf("statuses = %v, want %v", statuses, want)
			}
			if len(jobs) != 1 {
				t.Errorf("distinct job IDs answered = %d, want 1", len(jobs))
			}
			for table, want := range map[string]int{"reports": 1, "revisions": 1, "jobs": 1, "deliveries": tt.wantDelivered, "river_job": 1} {
				if got := e.Count(table, ""); got != want {
					t.Errorf("%s rows = %d, want %d", table, got, want)
				}
			}
		})
	}
}

// The database goes away under intake: the delivery is answered 503 with
// Retry-After, and nothing is stored.
func TestIntakeDatabaseLost(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	e.DB.Writer().Close() // every statement of intake now fails
	r := e.Deliver(stettest.SourceReports, "msg_db_lost", stettest.Report{ExternalID: "report-db-lost", Revision: 1, Text: "some text"})
	if r.Status != http.StatusServiceUnavailable || r.Problem.Type != api.ProblemType("unavailable") {
		t.Fatalf("delivery with the database gone = %d %s, want 503 unavailable", r.Status, r.Body)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	db, err := ledger.Open(context.Background(), e.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"reports", "revisions", "jobs", "deliveries"} {
		var n int
		if err := db.Writer().QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s rows after a 503 = %d, want 0", table, n)
		}
	}
}

// Audio at intake (docs/design.md §19): a source that takes audio accepts
// an audio report, stores its clip beside the revision under the audio's
// hash, answers a redelivery as a duplicate and other audio for the same
// revision as a conflict; every refusal stores nothing.
func TestIntakeAudio(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(intakeEpoch)
	e := stettest.New(t, stettest.Options{Clock: clock, NoWorkers: true, BodyLimit: 1024})
	audio := func(id, contentType string, data []byte) string {
		b, _ := json.Marshal(map[string]any{"external_id": id, "revision": 1,
			"audio": map[string]string{"content_type": contentType, "data": base64.StdEncoding.EncodeToString(data)}})
		return string(b)
	}
	clip := bytes.Repeat([]byte("RIFF-not-really-a-wav "), 100) // 2,200 bytes: over body_limit, under the audio limit
	deliver := func(source, id, body string) reply {
		return send(t, e, http.MethodPost, intakePath(source), signed(t, stettest.Secret, id, clock.Now(), []byte(body)), []byte(body))
	}
	first := intakeAnswer(t, "audio report", deliver(stettest.SourceVoice, "msg_voice_1", audio("v-1", "audio/wav; codecs=1", clip)))
	if r := deliver(stettest.SourceVoice, "msg_voice_1", audio("v-1", "audio/wav; codecs=1", clip)); r.status != http.StatusOK {
		t.Errorf("same webhook-id again = %d %s, want 200", r.status, r.body)
	}
	again := intakeAnswer(t, "same audio, new webhook-id", deliver(stettest.SourceVoice, "msg_voice_2", audio("v-1", "audio/wav", clip)))
	if !again.Duplicate || again.JobID != first.JobID {
		t.Errorf("same audio, new webhook-id = %+v, want a duplicate of %s", again, first.JobID)
	}
	checkProblem(t, "other audio, same revision", deliver(stettest.SourceVoice, "msg_voice_3", audio("v-1", "audio/wav", clip[1:])),
		http.StatusConflict, "revision-conflict")
	if n := e.Count("revision_audio", ""); n != 1 {
		t.Errorf("stored clips = %d, want 1", n)
	}
	if n := e.Count("revisions", "audio_sha256 = '"+stet.SHA256Hex(clip)+"' AND transcript_sha256 IS NULL"); n != 1 {
		t.Errorf("revisions under the clip's hash awaiting a transcript = %d, want 1", n)
	}

	before := rowCounts(e)
	big := bytes.Repeat([]byte{'x'}, stettest.VoiceBodyLimit)
	for _, tc := range []struct {
		name, source, body string
		status             int
		slug               string
	}{
		{"audio to a source that takes text only", stettest.SourceReports, audio("v-2", "audio/wav", clip[:100]), http.StatusUnprocessableEntity, "unsupported-media"},
		{"an audio type not accepted", stettest.SourceVoice, audio("v-2", "audio/flac", clip), http.StatusUnprocessableEntity, "unsupported-media"},
		{"audio data not base64", stettest.SourceVoice, `{"external_id":"v-2","revision":1,"audio":{"content_type":"audio/wav","data":"@@@"}}`, http.StatusBadRequest, "invalid-body"},
		{"empty audio data", stettest.SourceVoice, audio("v-2", "audio/wav", nil), http.StatusBadRequest, "invalid-body"},
		{"text and audio", stettest.SourceVoice, `{"external_id":"v-2","revision":1,"text":"hi","audio":{"content_type":"audio/wav","data":"AAAA"}}`, http.StatusBadRequest, "invalid-body"},
		{"neither text nor audio", stettest.SourceVoice, `{"external_id":"v-2","revision":1}`, http.StatusBadRequest, "invalid-body"},
		{"audio over the audio body limit", stettest.SourceVoice, audio("v-2", "audio/wav", big), http.StatusRequestEntityTooLarge, "body-too-large"},
		{"text over body_limit on a source that takes audio", stettest.SourceVoice,
			`{"external_id":"v-2","revision":1,"text":"` + strings.Repeat("a", 2000) + `"}`, http.StatusRequestEntityTooLarge, "body-too-large"},
	} {
		checkProblem(t, tc.name, deliver(tc.source, "msg_"+strings.ReplaceAll(tc.name, " ", "_"), tc.body), tc.status, tc.slug)
	}
	if after := rowCounts(e); !maps.Equal(before, after) {
		t.Errorf("rows after the refusals = %v, want %v: nothing stored", after, before)
	}
}
