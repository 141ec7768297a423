package api_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// openapiDoc is the parts of the document the tests read.
type openapiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) openapiDoc {
	t.Helper()
	var d openapiDoc
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatalf("api.OpenAPI() is not JSON: %v", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.1.") {
		t.Fatalf("openapi = %q, want 3.1.x", d.OpenAPI)
	}
	return d
}

// routeExcluded says why a registered pattern is not in the document, or "".
func routeExcluded(pattern string) string {
	switch pattern {
	case "/":
		return "the not-found fallback: every undocumented path answers a 404 not-found problem"
	case "/ui/", "GET /{$}":
		return "the review UI (HTML, sessions and CSRF; docs/design.md §12), no part of the API contract"
	}
	return ""
}

// The router's routes and the document's paths are the same set: a route
// missing from the document, or a documented path the router lacks, fails.
func TestOpenAPIPathsEqualRoutes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	s := api.New(api.Config{})
	s.MountUI(http.NotFoundHandler()) // the UI's patterns are registered, and excluded by name
	routes := map[string]bool{}
	for _, p := range s.Routes() {
		if routeExcluded(p) != "" {
			continue
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			t.Errorf("route %q has no method; document it or exclude it with a reason", p)
			continue
		}
		routes[strings.ToLower(method)+" "+path] = true
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("route %q is not in api/openapi.yaml", p)
		}
	}
	if len(routes) < 20 {
		t.Fatalf("routes = %d, want every API route (%v)", len(routes), s.Routes())
	}
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}
	for path, item := range doc.Paths {
		for k := range item {
			if !slices.Contains(methods, k) {
				continue // parameters, summary
			}
			if !routes[k+" "+path] {
				t.Errorf("api/openapi.yaml documents %s %s, which the router does not serve", strings.ToUpper(k), path)
			}
		}
	}
}

// problemSlugs collects every problem slug the api package can answer:
// the string literals given to problem, fail and refuse, the Slug fields
// of BodyError and Refusal literals, and each stet.ErrorCode (fail maps a
// code to its slug, "_" to "-").
func problemSlugs(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	seen := map[string]bool{}
	lit := func(e ast.Expr) {
		if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
			s, _ := strconv.Unquote(b.Value)
			seen[s] = true
		}
	}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				name := ""
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				switch {
				case name == "problem" && len(n.Args) >= 4:
					lit(n.Args[3])
				case (name == "refuse" || name == "fail") && len(n.Args) >= 2:
					lit(n.Args[1])
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Slug" {
					lit(n.Value)
				}
			}
			return true
		})
	}
	root, err := parser.ParseFile(fset, filepath.Join("..", "error.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := 0
	ast.Inspect(root, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "ErrorCode" {
				for _, v := range vs.Values {
					if b, ok := v.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(b.Value)
						seen[strings.ReplaceAll(s, "_", "-")] = true
						codes++
					}
				}
			}
		}
		return true
	})
	if codes < 5 {
		t.Fatalf("found %d stet.ErrorCode constants, want them all", codes)
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Every problem type the code can answer is in the document's closed list,
// and the list names no type the code never answers.
func TestOpenAPIProblemTypes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	var problem struct {
		Properties struct {
			Type struct {
				OneOf []struct {
					Const       string `json:"const"`
					Description string `json:"description"`
				} `json:"oneOf"`
			} `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["Problem"], &problem); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, c := range problem.Properties.Type.OneOf {
		if c.Description == "" {
			t.Errorf("problem type %s has no description", c.Const)
		}
		documented = append(documented, c.Const)
	}
	sort.Strings(documented)
	var answered []string
	for _, s := range problemSlugs(t) {
		answered = append(answered, api.ProblemType(s))
	}
	for _, a := range answered {
		if !slices.Contains(documented, a) {
			t.Errorf("the api package can answer %s, which api/openapi.yaml does not list", a)
		}
	}
	for _, d := range documented {
		if !slices.Contains(answered, d) {
			t.Errorf("api/openapi.yaml lists %s, which no code answers", d)
		}
	}
}

// The document's state and failure-class lists are the domain's.
func TestOpenAPIEnumsMatchDomain(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	enum := func(name string) []string {
		var s struct {
			Enum []string `json:"enum"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[name], &s); err != nil {
			t.Fatal(err)
		}
		sort.Strings(s.Enum)
		return s.Enum
	}
	var states, classes []string
	for _, s := range stet.JobStates {
		states = append(states, string(s))
	}
	for _, c := range stet.FailureClasses {
		classes = append(classes, string(c))
	}
	sort.Strings(states)
	sort.Strings(classes)
	if got := enum("JobState"); !slices.Equal(got, states) {
		t.Errorf("JobState enum = %v, want stet.JobStates %v", got, states)
	}
	if got := enum("FailureClass"); !slices.Equal(got, classes) {
		t.Errorf("FailureClass enum = %v, want stet.FailureClasses %v", got, classes)
	}
	var row struct {
		Properties struct {
			Outcome struct {
				Enum []string `json:"enum"`
			} `json:"outcome"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["AuditRow"], &row); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, o := range ledger.AuditOutcomes {
		outcomes = append(outcomes, string(o))
	}
	sort.Strings(outcomes)
	sort.Strings(row.Properties.Outcome.Enum)
	if !slices.Equal(row.Properties.Outcome.Enum, outcomes) {
		t.Errorf("AuditRow outcome enum = %v, want ledger.AuditOutcomes %v", row.Properties.Outcome.Enum, outcomes)
	}
}

// GET /v1/openapi.json is public and answers the document (and, like every
// response of an Env, is itself validated against it).
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	st, b := e.Do(http.MethodGet, "/v1/openapi.json", "", nil, nil)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json = %d %s, want 200", st, b)
	}
	if string(b) != string(api.OpenAPI()) {
		t.Errorf("GET /v1/openapi.json body differs from api.OpenAPI()")
	}
}

// The response check itself: a body that breaks its schema, an
// undocumented status and an unknown problem type are each caught.
func TestOpenAPICheckResponseCatches(t *testing.T) {
	t.Parallel()
	js := http.Header{"Content-Type": {"application/json"}}
	pj := http.Header{"Content-Type": {"application/problem+json"}}
	tests := []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		ok                 bool
	}{
		{"a conforming intake answer", "POST", "/v1/sources/reports/reports", 202, js, `{"job_id":"job_1","report_id":"rep_1","revision":1,"state":"accepted","duplicate":false}`, true},
		{"a missing field", "POST", "/v1/sources/reports/reports", 202, js, `{"job_id":"job_1","report_id":"rep_1","revision":1,"state":"accepted"}`, false},
		{"an unknown state", "POST", "/v1/sources/reports/reports", 202, js, `{"job_id":"job_1","report_id":"rep_1","revision":1,"state":"lost","duplicate":false}`, false},
		{"an undocumented status", "GET", "/healthz", 418, js, `{"status":"ok"}`, false},
		{"an unknown problem type", "GET", "/v1/jobs/job_1", 404, pj, `{"type":"urn:stet:problem:nope","title":"Not Found","status":404}`, false},
		{"a documented problem", "GET", "/v1/jobs/job_1", 404, pj, `{"type":"urn:stet:problem:not-found","title":"Not Found","status":404,"detail":"not found"}`, true},
		{"an undocumented path", "GET", "/v1/nothing", 200, js, `{}`, false},
	}
	for _, tt := range tests {
		got := stettest.CheckResponse(tt.method, tt.path, tt.status, tt.header, []byte(tt.body))
		if (len(got) == 0) != tt.ok {
			t.Errorf("%s: CheckResponse = %v, want ok %v", tt.name, got, tt.ok)
		}
	}
}

// The views of a job of a profile with parts and of its record, shaped by
// the code that answers them, conform to the document; a part in a state
// the domain lacks, or a provenance entry without its processor, does not.
func TestOpenAPIPartsViews(t *testing.T) {
	t.Parallel()
	js := http.Header{"Content-Type": {"application/json"}}
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	attempt := func(n int, processor string) stet.Attempt {
		return stet.Attempt{N: n, Processor: processor, Model: "m-1", Status: stet.AttemptSucceeded, StatusCode: 200, StartedAt: at}
	}
	job := api.NewJobView(&ledger.JobDetail{
		Job: stet.Job{ID: "job_1", ReportID: "rep_1", SourceID: "reports", Revision: 1, ExtractionVersion: "moderation@1",
			State: stet.JobManual, FailureClass: stet.FailureRefusal, ReviewRecordID: "rec_1", CreatedAt: at, CommittedAt: at},
		Parts: []ledger.PartDetail{
			{JobID: "job_2", PartID: "triage", State: stet.JobManual, Processor: "fake-b", Attempts: []stet.Attempt{attempt(1, "fake-b")}},
			{JobID: "job_3", PartID: "notes", State: stet.JobCommitted, Processor: "openai-fake", Attempts: []stet.Attempt{attempt(1, "openai-fake")}},
		},
	})
	rec := api.NewRecordView(&stet.ReviewRecord{ID: "rec_1", JobID: "job_1", ReportID: "rep_1", SourceID: "reports", Revision: 1,
		Kind: stet.RecordManual, State: stet.RecordPending, FailureClass: stet.FailureRefusal, CreatedAt: at,
		Classification: json.RawMessage(`{"rationale":"kept"}`), FailedPart: "triage",
		Provenance: map[string]stet.FieldSource{"rationale": {Part: "notes", Processor: "openai-fake", Model: "m-1"}}})
	jobBody, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	recBody, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(jobBody), `"parts":[{"id":"triage"`) || !strings.Contains(string(recBody), `"failed_part":"triage"`) {
		t.Fatalf("views lack their parts fields:\n%s\n%s", jobBody, recBody)
	}
	tests := []struct {
		name, path, body string
		ok               bool
	}{
		{"a job with parts", "/v1/jobs/job_1", string(jobBody), true},
		{"a record with provenance and a failed part", "/v1/review/rec_1", string(recBody), true},
		{"a part in an unknown state", "/v1/jobs/job_1", strings.Replace(string(jobBody), `"state":"committed"`, `"state":"merged"`, 1), false},
		{"a part without its attempts", "/v1/jobs/job_1", strings.Replace(string(jobBody), `"state":"manual","attempts":`, `"state":"manual","tries":`, 1), false},
		{"provenance without its processor", "/v1/review/rec_1", strings.Replace(string(recBody), `"processor":"openai-fake",`, ``, 1), false},
	}
	for _, tt := range tests {
		got := stettest.CheckResponse(http.MethodGet, tt.path, http.StatusOK, js, []byte(tt.body))
		if (len(got) == 0) != tt.ok {
			t.Errorf("%s: CheckResponse = %v, want ok %v\n%s", tt.name, got, tt.ok, tt.body)
		}
	}
}
