package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The read views as a client decodes them: field names are the contract of
// docs/design.md §7, so they are spelled here rather than borrowed from package api.
type (
	jobAttempt struct {
		N            int    `json:"n"`
		Processor    string `json:"processor"`
		StatusCode   int    `json:"status_code"`
		FailureClass string `json:"failure_class"`
		RequestID    string `json:"request_id"`
	}
	jobBody struct {
		JobID          string       `json:"job_id"`
		ReportID       string       `json:"report_id"`
		Revision       int64        `json:"revision"`
		State          string       `json:"state"`
		Attempts       []jobAttempt `json:"attempts"`
		ReviewRecordID *string      `json:"review_record_id"`
		Stages         struct {
			AcceptedAt   string `json:"accepted_at"`
			ExtractingAt string `json:"extracting_at"`
			ExtractedAt  string `json:"extracted_at"`
			CommittedAt  string `json:"committed_at"`
		} `json:"stages"`
		Artifact *struct {
			ID            string `json:"id"`
			Processor     string `json:"processor"`
			Model         string `json:"model"`
			SchemaVersion string `json:"schema_version"`
			AttemptN      int    `json:"attempt_n"`
		} `json:"artifact"`
	}
	revisionBody struct {
		Revision       int64   `json:"revision"`
		JobID          string  `json:"job_id"`
		State          string  `json:"state"`
		ReviewRecordID *string `json:"review_record_id"`
		Authoritative  bool    `json:"authoritative"`
	}
	reportBody struct {
		ReportID   string         `json:"report_id"`
		Source     string         `json:"source"`
		ExternalID *string        `json:"external_id"`
		Revisions  []revisionBody `json:"revisions"`
	}
	recordBody struct {
		ID             string          `json:"id"`
		JobID          string          `json:"job_id"`
		ReportID       string          `json:"report_id"`
		Source         string          `json:"source"`
		Revision       int64           `json:"revision"`
		Kind           string          `json:"kind"`
		State          string          `json:"state"`
		Authoritative  bool            `json:"authoritative"`
		Classification json.RawMessage `json:"classification"`
		FailureClass   *string         `json:"failure_class"`
		Decision       *string         `json:"decision"`
		DecidedBy      string          `json:"decided_by"`
		DecidedAt      string          `json:"decided_at"`
	}
	reviewPage struct {
		Records    []recordBody `json:"records"`
		NextCursor *string      `json:"next_cursor"`
	}
)

// get reads path with token and decodes a 200 into out, failing otherwise.
func get(t testing.TB, e *stettest.Env, path, token string, out any) []byte {
	t.Helper()
	st, b := e.Do(http.MethodGet, path, token, nil, out)
	if st != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, st, b)
	}
	return b
}

// missingFields returns the fields of want that the JSON object body lacks.
func missingFields(t testing.TB, body []byte, want ...string) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	var missing []string
	for _, k := range want {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

// deliverCommitted delivers a report and waits for its job to commit.
func deliverCommitted(t testing.TB, e *stettest.Env, source, id string, r stettest.Report) stettest.Response {
	t.Helper()
	d := e.Deliver(source, id, r)
	if d.Status != http.StatusAccepted {
		t.Fatalf("deliver %s = %d %s, want 202", id, d.Status, d.Body)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	return d
}

// delivery is one report to deliver to a source.
type delivery struct {
	source, id string
	report     stettest.Report
}

// deliverAllCommitted delivers every report, then waits for every job to
// commit: the jobs run side by side.
func deliverAllCommitted(t testing.TB, e *stettest.Env, ds []delivery) []stettest.Response {
	t.Helper()
	var out []stettest.Response
	for _, d := range ds {
		r := e.Deliver(d.source, d.id, d.report)
		if r.Status != http.StatusAccepted {
			t.Fatalf("deliver %s = %d %s, want 202", d.id, r.Status, r.Body)
		}
		out = append(out, r)
	}
	for _, r := range out {
		e.WaitJob(r.JobID, stet.JobCommitted)
	}
	return out
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func TestGetJob(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	text := "Stop taking your insulin, cinnamon cures diabetes."
	plain := deliverCommitted(t, e, stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: text})
	e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.ServerError, Status: http.StatusServiceUnavailable})
	retried := deliverCommitted(t, e, stettest.SourceReports, "msg_2", stettest.Report{ExternalID: "report-002", Revision: 1, Text: "Another post."})

	tests := []struct {
		name     string
		d        stettest.Response
		attempts []jobAttempt // without request IDs
	}{
		{name: "one call", d: plain, attempts: []jobAttempt{{N: 1, Processor: "openai-fake", StatusCode: 200}}},
		{name: "a 503, then a call", d: retried, attempts: []jobAttempt{
			{N: 1, Processor: "openai-fake", StatusCode: 503, FailureClass: "transient"},
			{N: 2, Processor: "openai-fake", StatusCode: 200},
		}},
	}
	for _, tt := range tests {
		var j jobBody
		raw := get(t, e, "/v1/jobs/"+tt.d.JobID, stettest.ReaderToken, &j)
		if m := missingFields(t, raw, "job_id", "report_id", "revision", "state", "attempts", "review_record_id", "stages", "artifact"); len(m) > 0 {
			t.Errorf("%s: job body lacks %v: %s", tt.name, m, raw)
		}
		if j.JobID != tt.d.JobID || j.ReportID != tt.d.ReportID || j.Revision != 1 || j.State != "committed" {
			t.Errorf("%s: job = %s, want job %s of report %s, revision 1, committed", tt.name, raw, tt.d.JobID, tt.d.ReportID)
		}
		if len(j.Attempts) != len(tt.attempts) {
			t.Fatalf("%s: attempts = %+v, want %+v", tt.name, j.Attempts, tt.attempts)
		}
		for i, a := range j.Attempts {
			if !strings.HasPrefix(a.RequestID, "req_") {
				t.Errorf("%s: attempt %d request_id = %q, want the fake's x-request-id (req_…)", tt.name, a.N, a.RequestID)
			}
			a.RequestID = ""
			if a != tt.attempts[i] {
				t.Errorf("%s: attempt %d = %+v, want %+v", tt.name, i, a, tt.attempts[i])
			}
		}
		if j.Attempts[0].RequestID == j.Attempts[len(j.Attempts)-1].RequestID && len(j.Attempts) > 1 {
			t.Errorf("%s: attempts share request_id %q", tt.name, j.Attempts[0].RequestID)
		}
		for stage, at := range map[string]string{"accepted_at": j.Stages.AcceptedAt, "extracting_at": j.Stages.ExtractingAt,
			"extracted_at": j.Stages.ExtractedAt, "committed_at": j.Stages.CommittedAt} {
			if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
				t.Errorf("%s: stages.%s = %q, want an RFC 3339 time", tt.name, stage, at)
			}
		}
		if a := j.Artifact; a == nil || a.ID == "" || a.Processor != "openai-fake" || a.Model != "gpt-test" || a.SchemaVersion == "" || a.AttemptN != len(tt.attempts) {
			t.Errorf("%s: artifact = %+v, want openai-fake/gpt-test from attempt %d", tt.name, j.Artifact, len(tt.attempts))
		}
		var rec recordBody
		if j.ReviewRecordID == nil {
			t.Fatalf("%s: review_record_id = null after commit", tt.name)
		}
		get(t, e, "/v1/review/"+*j.ReviewRecordID, stettest.ReaderToken, &rec)
		if rec.JobID != j.JobID {
			t.Errorf("%s: review record %s belongs to job %s, want %s", tt.name, rec.ID, rec.JobID, j.JobID)
		}
		if bytes.Contains(raw, []byte("insulin")) {
			t.Errorf("%s: job view carries document text: %s", tt.name, raw)
		}
	}

	r := send(t, e, http.MethodGet, "/v1/jobs/job_01NOSUCHJOB000000000000000", bearer(stettest.ReaderToken), nil)
	checkProblem(t, "GET unknown job", r, http.StatusNotFound, "not-found")
}

func TestGetReport(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	answers := deliverAllCommitted(t, e, []delivery{
		{source: stettest.SourceReports, id: "msg_1", report: stettest.Report{ExternalID: "report-r", Revision: 1, Text: "First revision."}},
		{source: stettest.SourceReports, id: "msg_2", report: stettest.Report{ExternalID: "report-r", Revision: 2, Text: "Second revision."}},
		{source: stettest.SourceBlobs, id: "msg_blob", report: stettest.Report{Text: "An anonymous post."}},
	})
	r1, r2, blob := answers[0], answers[1], answers[2]
	if r1.ReportID != r2.ReportID {
		t.Fatalf("revisions of one report got reports %s and %s", r1.ReportID, r2.ReportID)
	}

	var byExt, byID reportBody
	raw := get(t, e, "/v1/sources/"+stettest.SourceReports+"/reports/report-r", stettest.ReaderToken, &byExt)
	get(t, e, "/v1/reports/"+r1.ReportID, stettest.ReaderToken, &byID)
	if m := missingFields(t, raw, "report_id", "source", "external_id", "revisions"); len(m) > 0 {
		t.Errorf("report body lacks %v: %s", m, raw)
	}
	for name, rep := range map[string]reportBody{"by external ID": byExt, "by report ID": byID} {
		if rep.ReportID != r1.ReportID || rep.Source != stettest.SourceReports || rep.ExternalID == nil || *rep.ExternalID != "report-r" {
			t.Errorf("%s: report = %+v, want %s of %s, external_id report-r", name, rep, r1.ReportID, stettest.SourceReports)
		}
		want := []struct {
			revision      int64
			job           string
			authoritative bool
		}{{1, r1.JobID, false}, {2, r2.JobID, true}}
		if len(rep.Revisions) != len(want) {
			t.Fatalf("%s: revisions = %+v, want 2", name, rep.Revisions)
		}
		for i, w := range want {
			got := rep.Revisions[i]
			if got.Revision != w.revision || got.JobID != w.job || got.State != "committed" || got.ReviewRecordID == nil || got.Authoritative != w.authoritative {
				t.Errorf("%s: revision %d = %+v, want job %s committed with a record, authoritative %v", name, i, got, w.job, w.authoritative)
			}
		}
	}

	// A content-identity report has no external ID: it is read by report ID.
	var rep reportBody
	raw = get(t, e, "/v1/reports/"+blob.ReportID, stettest.ReaderToken, &rep)
	if !bytes.Contains(raw, []byte(`"external_id":null`)) {
		t.Errorf("content-identity report body = %s, want external_id null", raw)
	}
	if rep.ReportID != blob.ReportID || rep.Source != stettest.SourceBlobs || len(rep.Revisions) != 1 ||
		rep.Revisions[0].JobID != blob.JobID || !rep.Revisions[0].Authoritative {
		t.Errorf("content-identity report = %s, want one authoritative revision of job %s", raw, blob.JobID)
	}

	for _, path := range []string{
		"/v1/sources/" + stettest.SourceReports + "/reports/report-missing",
		"/v1/sources/" + stettest.SourceBlobs + "/reports/report-r", // another source's external ID
		"/v1/reports/rep_01NOSUCHREPORT00000000000",
	} {
		r := send(t, e, http.MethodGet, path, bearer(stettest.ReaderToken), nil)
		checkProblem(t, "GET "+path, r, http.StatusNotFound, "not-found")
	}
}

func TestListReview(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	ds := []delivery{{source: stettest.SourceBlobs, id: "msg_blob", report: stettest.Report{Text: "An anonymous post."}}}
	for i := range 5 {
		ds = append(ds, delivery{source: stettest.SourceReports, id: fmt.Sprintf("msg_%d", i),
			report: stettest.Report{ExternalID: fmt.Sprintf("report-%d", i), Revision: 1, Text: fmt.Sprintf("Post number %d.", i)}})
	}
	answers := deliverAllCommitted(t, e, ds)
	blob := answers[0]
	jobs := map[string]string{} // job ID → report ID
	for _, d := range answers[1:] {
		jobs[d.JobID] = d.ReportID
	}

	// Pages of 2, 2 and 1; the last without a cursor; no record twice.
	seen := map[string]bool{}
	var sizes []int
	path := "/v1/review?source=" + stettest.SourceReports + "&limit=2"
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatalf("pagination does not end; pages so far %v", sizes)
		}
		var p reviewPage
		raw := get(t, e, path, stettest.ReaderToken, &p)
		if m := missingFields(t, raw, "records", "next_cursor"); len(m) > 0 {
			t.Fatalf("review page lacks %v: %s", m, raw)
		}
		sizes = append(sizes, len(p.Records))
		for _, r := range p.Records {
			if seen[r.ID] {
				t.Errorf("record %s listed twice", r.ID)
			}
			seen[r.ID] = true
			if jobs[r.JobID] != r.ReportID || r.Source != stettest.SourceReports || r.Revision != 1 || r.Kind != "extracted" ||
				r.State != "pending" || !r.Authoritative || r.FailureClass != nil || len(r.Classification) == 0 || r.Classification[0] != '{' {
				t.Errorf("listed record = %+v, want a pending authoritative extracted record of one of the deliveries", r)
			}
		}
		if p.NextCursor == nil {
			break
		}
		path = "/v1/review?source=" + stettest.SourceReports + "&limit=2&cursor=" + *p.NextCursor
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Errorf("page sizes = %v, want [2 2 1]", sizes)
	}
	if len(seen) != 5 {
		t.Errorf("records listed = %d, want 5", len(seen))
	}
	var one reviewPage
	var rawPage struct {
		Records []json.RawMessage `json:"records"`
	}
	get(t, e, "/v1/review?source="+stettest.SourceReports+"&limit=2", stettest.ReaderToken, &rawPage)
	get(t, e, "/v1/review?source="+stettest.SourceReports+"&limit=2", stettest.ReaderToken, &one)
	if len(rawPage.Records) == 0 || len(one.Records) == 0 {
		t.Fatalf("first page is empty")
	}
	if m := missingFields(t, rawPage.Records[0], "id", "job_id", "report_id", "source", "revision", "kind", "state",
		"authoritative", "classification", "failure_class"); len(m) > 0 {
		t.Errorf("listed record lacks %v: %s", m, rawPage.Records[0])
	}

	// Decide one, then filter.
	var rec recordBody
	if st, b := e.Do(http.MethodPost, "/v1/review/"+one.Records[0].ID+"/decision", stettest.ReviewerToken,
		map[string]any{"decision": "approve"}, &rec); st != http.StatusOK {
		t.Fatalf("approve = %d %s", st, b)
	}
	filters := []struct {
		query string
		want  int
	}{
		{"", 6},
		{"state=pending", 5},
		{"state=decided", 1},
		{"source=" + stettest.SourceBlobs, 1},
		{"source=" + stettest.SourceReports, 5},
		{"state=pending&source=" + stettest.SourceReports, 4},
		{"state=decided&source=" + stettest.SourceBlobs, 0},
		{"source=no-such-source", 0},
	}
	for _, f := range filters {
		var p reviewPage
		get(t, e, "/v1/review?"+f.query, stettest.ReaderToken, &p)
		if len(p.Records) != f.want || p.NextCursor != nil {
			t.Errorf("GET /v1/review?%s = %d records (next %v), want %d and no cursor", f.query, len(p.Records), p.NextCursor, f.want)
		}
		for _, r := range p.Records {
			if strings.Contains(f.query, "state=decided") && r.State != "decided" ||
				strings.Contains(f.query, "state=pending") && r.State != "pending" ||
				strings.Contains(f.query, "source=blobs") && (r.Source != stettest.SourceBlobs || r.JobID != blob.JobID) {
				t.Errorf("GET /v1/review?%s listed %+v", f.query, r)
			}
		}
	}

	for _, q := range []string{"state=done", "state=PENDING", "limit=0", "limit=501", "limit=two"} {
		r := send(t, e, http.MethodGet, "/v1/review?"+q, bearer(stettest.ReaderToken), nil)
		checkProblem(t, "GET /v1/review?"+q, r, http.StatusBadRequest, "invalid-query")
	}
}

// Decisions, in order, on three committed records.
func TestReviewDecisions(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	recordOf := func(jobID string) recordBody {
		var j jobBody
		get(t, e, "/v1/jobs/"+jobID, stettest.ReaderToken, &j)
		if j.ReviewRecordID == nil {
			t.Fatalf("job %s has no review record", jobID)
		}
		var r recordBody
		get(t, e, "/v1/review/"+*j.ReviewRecordID, stettest.ReaderToken, &r)
		return r
	}
	// A refusal first, alone, so the scripted fault meets its job: a manual
	// record, which has no classification until a person gives one.
	e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.Refusal})
	m := e.Deliver(stettest.SourceReports, "msg_manual", stettest.Report{ExternalID: "report-manual", Revision: 1, Text: "A post the model refuses."})
	e.WaitJob(m.JobID, stet.JobManual)
	manual := recordOf(m.JobID)
	if manual.Kind != "manual" || manual.FailureClass == nil || *manual.FailureClass != "refusal" || string(manual.Classification) != "null" {
		t.Errorf("manual record = %+v (classification %s), want kind manual, failure_class refusal, classification null", manual, manual.Classification)
	}

	var ds []delivery
	for i := range 4 {
		ds = append(ds, delivery{source: stettest.SourceReports, id: fmt.Sprintf("msg_%d", i),
			report: stettest.Report{ExternalID: fmt.Sprintf("report-%d", i), Revision: 1, Text: fmt.Sprintf("Post number %d.", i)}})
	}
	var recs []recordBody
	for _, d := range deliverAllCommitted(t, e, ds) {
		recs = append(recs, recordOf(d.JobID))
	}
	approveRec, overrideRec, untouched, raced := recs[0], recs[1], recs[2], recs[3]
	valid := json.RawMessage(`{"category":"spam","severity":"low","action":"remove","labels":["spam"],"rationale":"Advertises a product."}`)

	steps := []struct {
		name  string
		token string
		rec   recordBody
		body  string
		// 200 expectations
		decision, decidedBy string
		class               json.RawMessage // want this classification after
		// problem expectations
		status int
		slug   string
	}{
		{name: "approve", token: stettest.ReviewerToken, rec: approveRec, body: `{"decision":"approve","note":"looks right"}`,
			status: http.StatusOK, decision: "approve", decidedBy: "token:reviewer", class: approveRec.Classification},
		{name: "second decision", token: stettest.ReviewerToken, rec: approveRec, body: `{"decision":"reject"}`,
			status: http.StatusConflict, slug: "conflict"},
		{name: "override with a valid classification", token: stettest.ReviewerToken, rec: overrideRec,
			body:   `{"decision":"override","classification":` + string(valid) + `}`,
			status: http.StatusOK, decision: "override", decidedBy: "token:reviewer", class: valid},
		{name: "override with an invalid classification", token: stettest.ReviewerToken, rec: untouched,
			body:   `{"decision":"override","classification":{"category":"weather","severity":"low"}}`,
			status: http.StatusBadRequest, slug: "invalid-classification"},
		{name: "override with a classification that is not an object", token: stettest.ReviewerToken, rec: untouched,
			body:   `{"decision":"override","classification":"spam"}`,
			status: http.StatusBadRequest, slug: "invalid-classification"},
		{name: "override without classification", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"override"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "override with a null classification", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"override","classification":null}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "approve with a classification", token: stettest.ReviewerToken, rec: untouched,
			body:   `{"decision":"approve","classification":` + string(valid) + `}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "reject with a classification", token: stettest.ReviewerToken, rec: untouched,
			body:   `{"decision":"reject","classification":` + string(valid) + `}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "unknown decision", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"maybe"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "trailing data after the JSON", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"approve"}garbage`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "no decision", token: stettest.ReviewerToken, rec: untouched, body: `{}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "unknown field", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"approve","by":"someone"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "malformed JSON", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "reader may not decide", token: stettest.ReaderToken, rec: untouched, body: `{"decision":"approve"}`,
			status: http.StatusForbidden, slug: "forbidden"},
		{name: "note over 4096 bytes", token: stettest.ReviewerToken, rec: untouched, body: `{"decision":"approve","note":"` + strings.Repeat("n", 4097) + `"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "unknown record", token: stettest.ReviewerToken, rec: recordBody{ID: "rr_01NOSUCHRECORD00000000000"}, body: `{"decision":"approve"}`,
			status: http.StatusNotFound, slug: "not-found"},
		{name: "approve a manual record without classification", token: stettest.ReviewerToken, rec: manual, body: `{"decision":"approve"}`,
			status: http.StatusBadRequest, slug: "invalid-body"},
		{name: "approve a manual record with a classification", token: stettest.ReviewerToken, rec: manual,
			body:   `{"decision":"approve","classification":` + string(valid) + `}`,
			status: http.StatusOK, decision: "approve", decidedBy: "token:reviewer", class: valid},
	}
	for _, s := range steps {
		h := bearer(s.token)
		h.Set("Content-Type", "application/json")
		r := send(t, e, http.MethodPost, "/v1/review/"+s.rec.ID+"/decision", h, []byte(s.body))
		if s.status != http.StatusOK {
			checkProblem(t, s.name, r, s.status, s.slug)
			continue
		}
		if r.status != http.StatusOK {
			t.Errorf("%s = %d %s, want 200", s.name, r.status, r.body)
			continue
		}
		for name, body := range map[string][]byte{"answer": r.body, "GET afterwards": get(t, e, "/v1/review/"+s.rec.ID, stettest.ReaderToken, nil)} {
			var got recordBody
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s: %s: %v", s.name, body, err)
			}
			if got.ID != s.rec.ID || got.State != "decided" || got.Decision == nil || *got.Decision != s.decision ||
				got.DecidedBy != s.decidedBy || got.DecidedAt == "" || !jsonEqual(got.Classification, s.class) {
				t.Errorf("%s: %s = %s, want decided %s by %s with classification %s", s.name, name, body, s.decision, s.decidedBy, s.class)
			}
		}
	}

	// Every refused decision left the third record as it was.
	var after recordBody
	raw := get(t, e, "/v1/review/"+untouched.ID, stettest.ReaderToken, &after)
	if after.State != "pending" || after.Decision != nil || after.DecidedBy != "" || !jsonEqual(after.Classification, untouched.Classification) {
		t.Errorf("record after refused decisions = %s, want it pending with classification %s", raw, untouched.Classification)
	}
	// A reviewer may still decide it.
	if st, b := e.Do(http.MethodPost, "/v1/review/"+untouched.ID+"/decision", stettest.ReviewerToken, map[string]any{"decision": "reject"}, nil); st != http.StatusOK {
		t.Errorf("reject = %d %s, want 200", st, b)
	}

	// Ten reviewers decide one record at once: one wins, the rest conflict.
	const n = 10
	statuses := make([]int, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			h := bearer(stettest.ReviewerToken)
			h.Set("Content-Type", "application/json")
			<-start
			r, err := sendErr(e, http.MethodPost, "/v1/review/"+raced.ID+"/decision", h, []byte(`{"decision":"reject"}`))
			statuses[i], errs[i] = r.status, err
		})
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for i, st := range statuses {
		if errs[i] != nil {
			t.Fatalf("concurrent decision %d: %v", i, errs[i])
		}
		count[st]++
	}
	if want := map[int]int{http.StatusOK: 1, http.StatusConflict: n - 1}; !maps.Equal(count, want) {
		t.Errorf("concurrent decisions = %v, want %v", count, want)
	}
	if k := e.Count("audit_log", "action = 'review.decide.reject' AND object_id = $1", raced.ID); k != 1 {
		t.Errorf("audit entries for the raced decision = %d, want 1", k)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	d := deliverCommitted(t, e, stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "A post."})
	rec := e.Record(d.JobID)

	type call struct {
		name   string
		method string
		path   string
		header http.Header
		body   string
		status int
		slug   string // for problems
	}
	h := func(v string) http.Header {
		x := http.Header{}
		x.Set("Authorization", v)
		return x
	}
	calls := []call{
		{name: "no token", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "empty bearer", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: h("Bearer "), status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "bad token", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: bearer("tok-nobody"), status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "token prefix", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: bearer(stettest.ReaderToken[:5]), status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "basic scheme", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: h("Basic " + stettest.ReaderToken), status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "no token, review list", method: http.MethodGet, path: "/v1/review", status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "no token, decision", method: http.MethodPost, path: "/v1/review/" + rec.ID + "/decision", body: `{"decision":"approve"}`, status: http.StatusUnauthorized, slug: "unauthorized"},
		{name: "no token, invariants", method: http.MethodGet, path: "/v1/invariants", status: http.StatusUnauthorized, slug: "unauthorized"},

		{name: "another tenant's job", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: bearer(stettest.OtherToken), status: http.StatusNotFound, slug: "not-found"},
		{name: "another tenant's record", method: http.MethodGet, path: "/v1/review/" + rec.ID, header: bearer(stettest.OtherToken), status: http.StatusNotFound, slug: "not-found"},
		{name: "another tenant's report", method: http.MethodGet, path: "/v1/reports/" + d.ReportID, header: bearer(stettest.OtherToken), status: http.StatusNotFound, slug: "not-found"},
		{name: "another tenant's report by external ID", method: http.MethodGet, path: "/v1/sources/" + stettest.SourceReports + "/reports/report-001", header: bearer(stettest.OtherToken), status: http.StatusNotFound, slug: "not-found"},
		{name: "another tenant's decision", method: http.MethodPost, path: "/v1/review/" + rec.ID + "/decision", header: bearer(stettest.OtherToken), body: `{"decision":"approve"}`, status: http.StatusNotFound, slug: "not-found"},

		{name: "reader deciding", method: http.MethodPost, path: "/v1/review/" + rec.ID + "/decision", header: bearer(stettest.ReaderToken), body: `{"decision":"approve"}`, status: http.StatusForbidden, slug: "forbidden"},
		{name: "reader checking invariants", method: http.MethodGet, path: "/v1/invariants", header: bearer(stettest.ReaderToken), status: http.StatusForbidden, slug: "forbidden"},
		{name: "reviewer checking invariants", method: http.MethodGet, path: "/v1/invariants", header: bearer(stettest.ReviewerToken), status: http.StatusForbidden, slug: "forbidden"},

		{name: "reader reading", method: http.MethodGet, path: "/v1/jobs/" + d.JobID, header: bearer(stettest.ReaderToken), status: http.StatusOK},
		{name: "operator reading", method: http.MethodGet, path: "/v1/review/" + rec.ID, header: bearer(stettest.OperatorToken), status: http.StatusOK},
		{name: "operator checking invariants", method: http.MethodGet, path: "/v1/invariants", header: bearer(stettest.OperatorToken), status: http.StatusOK},
		{name: "reviewer deciding", method: http.MethodPost, path: "/v1/review/" + rec.ID + "/decision", header: bearer(stettest.ReviewerToken), body: `{"decision":"approve"}`, status: http.StatusOK},
	}
	for _, c := range calls {
		r := send(t, e, c.method, c.path, c.header, []byte(c.body))
		if c.status != http.StatusOK {
			checkProblem(t, c.name, r, c.status, c.slug)
			if c.status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: WWW-Authenticate = %q, want a Bearer challenge", c.name, r.header.Get("WWW-Authenticate"))
			}
			continue
		}
		if r.status != http.StatusOK {
			t.Errorf("%s: %s %s = %d %s, want 200", c.name, c.method, c.path, r.status, r.body)
		}
		if c.path == "/v1/invariants" {
			var inv struct {
				OK         bool              `json:"ok"`
				Violations []json.RawMessage `json:"violations"`
			}
			if err := json.Unmarshal(r.body, &inv); err != nil || !inv.OK || inv.Violations == nil || len(inv.Violations) != 0 {
				t.Errorf("%s: body = %s, want {\"ok\":true,\"violations\":[]}", c.name, r.body)
			}
		}
	}

	// Lists are scoped too: the other tenant sees an empty queue.
	var p reviewPage
	get(t, e, "/v1/review", stettest.OtherToken, &p)
	if len(p.Records) != 0 {
		t.Errorf("another tenant's review list = %d records, want 0", len(p.Records))
	}
	var after recordBody
	get(t, e, "/v1/review/"+rec.ID, stettest.ReaderToken, &after)
	if after.DecidedBy != "token:reviewer" {
		t.Errorf("record decided_by = %q, want token:reviewer (no other caller may have decided it)", after.DecidedBy)
	}
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	text := "My neighbour Jane takes double doses of warfarin."
	d := deliverCommitted(t, e, stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-audit-7", Revision: 1, Text: text})

	var j jobBody
	get(t, e, "/v1/jobs/"+d.JobID, stettest.ReaderToken, &j)
	recID := *j.ReviewRecordID
	get(t, e, "/v1/review/"+recID, stettest.ReaderToken, nil)
	get(t, e, "/v1/sources/"+stettest.SourceReports+"/reports/report-audit-7", stettest.ReaderToken, nil)
	if st, b := e.Do(http.MethodPost, "/v1/review/"+recID+"/decision", stettest.ReviewerToken,
		map[string]any{"decision": "approve", "note": "checked"}, nil); st != http.StatusOK {
		t.Fatalf("approve = %d %s", st, b)
	}
	// Refused calls are not reads.
	e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OtherToken, nil, nil)
	e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, "", nil, nil)

	entries, err := e.DB.AuditEntries(context.Background(), "demo")
	if err != nil {
		t.Fatalf("AuditEntries(demo) = %v", err)
	}
	type key struct{ actor, action, objectType, objectID string }
	got := map[key]int{}
	for _, a := range entries {
		got[key{a.Actor, a.Action, a.ObjectType, a.ObjectID}]++
		for _, field := range []string{a.Actor, a.Action, a.ObjectType, a.ObjectID, a.Detail} {
			for _, secret := range []string{text, "warfarin", "Jane", "report-audit-7"} {
				if strings.Contains(field, secret) {
					t.Errorf("audit entry %+v contains %q", a, secret)
				}
			}
		}
		if a.Now.IsZero() {
			t.Errorf("audit entry %+v has no time", a)
		}
	}
	want := map[key]int{
		{"token:reader", "job.read", "job", d.JobID}:                        1,
		{"token:reader", "review.read", "review_record", recID}:             1,
		{"token:reader", "report.read", "report", d.ReportID}:               1,
		{"token:reviewer", "review.decide.approve", "review_record", recID}: 1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("audit entries %+v = %d, want %d; all entries: %v", k, got[k], n, slices.Collect(maps.Keys(got)))
		}
	}
	readerEntries := 0
	for k, n := range got {
		if k.actor == "token:reader" {
			readerEntries += n
		}
	}
	if readerEntries != 3 {
		t.Errorf("entries by token:reader = %d, want 3 (one per read)", readerEntries)
	}
	other, err := e.DB.AuditEntries(context.Background(), "other")
	if err != nil {
		t.Fatalf("AuditEntries(other) = %v", err)
	}
	for _, a := range other {
		if a.ObjectID == d.JobID {
			t.Errorf("the other tenant's audit log names this tenant's job: %+v", a)
		}
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	deliverCommitted(t, e, stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "A post."})
	e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "A post."})
	e.Post(intakePath(stettest.SourceReports), http.Header{}, []byte(`{}`))

	for _, path := range []string{"/healthz", "/readyz"} {
		r := send(t, e, http.MethodGet, path, nil, nil)
		if r.status != http.StatusOK || !json.Valid(r.body) {
			t.Errorf("GET %s = %d %s, want 200 JSON", path, r.status, r.body)
		}
	}
	r := send(t, e, http.MethodGet, "/metrics", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.status)
	}
	body := string(r.body)
	for _, line := range []string{
		`stet_intake_requests_total{status="202"} 1`,
		`stet_intake_requests_total{status="200"} 1`,
		`stet_intake_requests_total{status="401"} 1`,
		`stet_provider_calls_total{failure_class="ok",processor="openai-fake"} 1`,
		`stet_jobs{state="committed"} 1`,
		`stet_stage_duration_seconds_count{outcome="extracted",stage="extract"} 1`,
		`# TYPE stet_stage_duration_seconds histogram`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", metricLines(body, "stet_"))
	}
}

// metricLines returns the lines of a metrics body that start with prefix.
func metricLines(body, prefix string) string {
	var out []string
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
