package azurecs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/azurecs/azurecsfake"
	"github.com/stetlabs/stet/processor/processortest"
)

const testKey = "0123456789abcdef0123456789abcdef"

func newFake(t *testing.T, opts azurecsfake.Options) *azurecsfake.Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, azurecsfake.New(opts))
}

// testCommon is the configuration of the adapter's own tests.
var testCommon = processor.Common{ID: "azure-cs-test", APIKey: testKey, Region: "eastus", Retention: "none"}

// newTestClient returns a Client with the quickstart mapping talking to f.
func newTestClient(t *testing.T, f *azurecsfake.Server, timeout time.Duration) *Client {
	t.Helper()
	open := func(c processor.Common) (*Client, error) {
		return New(Config{Common: c, MappingPath: quickstartMapping})
	}
	return processortest.MustOpen(t, open, testCommon, f.URL(), timeout)
}

func testParams(t *testing.T, input string) stet.ExtractParams {
	return stet.ExtractParams{
		JobID:      "job_01TEST",
		Attempt:    1,
		Prompt:     stet.NewText("PROMPT-NOT-SENT " + input),
		Input:      stet.NewText(input),
		SchemaName: "moderation_v1",
		Schema:     processortest.ReadFile(t, processortest.QuickstartSchema),
	}
}

// goldenRequest is what the golden files hold: the request line, the
// headers stet sets, and the body.
type goldenRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   string            `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func TestRequestGolden(t *testing.T) {
	t.Parallel()
	eight, err := ParseMapping([]byte(strings.Replace(string(processortest.ReadFile(t, quickstartMapping)), "output_type: FourSeverityLevels", "output_type: EightSeverityLevels", 1)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		golden  string
		mapping *Mapping
		base    string // appended to the fake's URL
	}{
		{name: "four levels", golden: "request.golden.json", mapping: quickstart(t)},
		{name: "eight levels, endpoint given with /contentsafety/", golden: "request_eight_levels.golden.json", mapping: eight, base: "/contentsafety/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu  sync.Mutex
				got *http.Request
				raw []byte
			)
			f := newFake(t, azurecsfake.Options{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				got, raw = r.Clone(context.Background()), body
				mu.Unlock()
				r.Body = io.NopCloser(bytes.NewReader(body))
				f.Handler().ServeHTTP(w, r)
			}))
			defer srv.Close()
			c, err := New(Config{Common: processor.Common{ID: "azure-cs", BaseURL: srv.URL + tt.base, APIKey: testKey}, Mapping: tt.mapping})
			if err != nil {
				t.Fatal(err)
			}
			p := testParams(t, "Patient <b>[EMAIL]</b> says the dose & timing felt wrong — \"again\".")
			if _, err := c.Extract(t.Context(), p); err != nil {
				t.Fatalf("Extract() = %v, want success", err)
			}
			mu.Lock()
			defer mu.Unlock()
			g := goldenRequest{
				Method: got.Method,
				Path:   got.URL.Path,
				Query:  got.URL.RawQuery,
				Headers: map[string]string{
					"Content-Type":              got.Header.Get("Content-Type"),
					"Accept":                    got.Header.Get("Accept"),
					"Ocp-Apim-Subscription-Key": got.Header.Get("Ocp-Apim-Subscription-Key"),
				},
				Body: raw,
			}
			if got.Header.Get("Authorization") != "" {
				t.Errorf("Authorization header sent; the key goes only in Ocp-Apim-Subscription-Key")
			}
			var buf bytes.Buffer
			e := json.NewEncoder(&buf)
			e.SetEscapeHTML(false)
			e.SetIndent("", "  ")
			if err := e.Encode(g); err != nil {
				t.Fatalf("request body is not JSON: %v", err)
			}
			processortest.Golden(t, tt.golden, buf.Bytes())
			if strings.Contains(string(raw), "PROMPT-NOT-SENT") {
				t.Errorf("request carries the prompt; it must carry only the minimized input")
			}
			if n := f.Calls(); n != 1 {
				t.Errorf("fake calls = %d, want 1", n)
			}
		})
	}
}

// TestExtractSuccess checks what the mapping makes of an answer; the
// suite's "answer metadata" checks the request ID, Raw, the model label,
// no tokens and the latency.
func TestExtractSuccess(t *testing.T) {
	t.Parallel()
	f := newFake(t, azurecsfake.Options{Table: []azurecsfake.Rule{
		{Contains: "hurt myself", Severities: azurecsfake.Severities{SelfHarm: 5, Hate: 2}},
	}})
	c := newTestClient(t, f, 0)
	got, err := c.Extract(t.Context(), testParams(t, "Some nights I want to hurt myself."))
	if err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	if len(c.Mapping().Hash()) != 64 {
		t.Errorf("Mapping().Hash() = %q, want 64 hex digits", c.Mapping().Hash())
	}
	// The fake answers 5 as 4 on the four-level scale.
	want := `{"category":"self_harm","severity":"high","action":"escalate","labels":["self_harm","harassment"],"rationale":"azure content safety: SelfHarm=4, Hate=2; rule self-harm-acute"}`
	if string(got.Output) != want {
		t.Errorf("Output = %s, want %s", got.Output, want)
	}
}

// TestClassification covers the answers only this service gives; the
// conformance suite covers 429 with Retry-After or retry-after-ms, quota,
// 401, 500, disconnects and timeouts.
func TestClassification(t *testing.T) {
	t.Parallel()
	// The HTTP-date case is computed against the client's clock.
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	processortest.ClassificationHarness[azurecsfake.Fault]{
		Open: func(t *testing.T, timeout time.Duration) (processortest.Server[azurecsfake.Fault], stet.Processor) {
			f := newFake(t, azurecsfake.Options{})
			c := newTestClient(t, f, timeout)
			c.now = func() time.Time { return now }
			return f, c
		},
		Params:    testParams(t, "The nurse was kind."),
		RequestID: regexp.MustCompile(`^.{36}$`), // the apim-request-id header
	}.Run(t, []processortest.Classification[azurecsfake.Fault]{
		{Name: "429 TooManyRequests code", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, RetryAfter: "2", Code: "TooManyRequests"}, Class: stet.FailureRateLimited, Status: 429, Code: "TooManyRequests", RetryAfter: 2 * time.Second},
		{Name: "429 retry-after-ms wins", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, RetryAfter: "7", RetryAfterMS: 1500}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: 1500 * time.Millisecond},
		{Name: "429 x-ms-retry-after-ms", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, Header: http.Header{"X-Ms-Retry-After-Ms": {"250"}}}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: 250 * time.Millisecond},
		{Name: "429 without header: the message's wait", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, Message: "Rate limit is exceeded. Try again in 3 seconds."}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: 3 * time.Second},
		// Every wait is capped at processor.MaxRetryAfter, the service's own
		// hints included; a value over the old 7-day bound is capped, not
		// ignored.
		{Name: "429 x-ms-retry-after-ms over the cap", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, Header: http.Header{"X-Ms-Retry-After-Ms": {"1e12"}}}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 Retry-After a week of seconds", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, RetryAfter: "604800"}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 Retry-After a year ahead", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, RetryAfter: now.AddDate(1, 0, 0).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 the message's wait over the cap", Fault: azurecsfake.Fault{Kind: azurecsfake.RateLimit, Message: "Rate limit is exceeded. Try again in 999999 seconds."}, Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: processor.MaxRetryAfter},
		{Name: "403 network rules", Fault: azurecsfake.Fault{Kind: azurecsfake.Forbidden}, Class: stet.FailureAuth, Status: 403, Code: "403"},
		{Name: "400 InvalidRequestBody", Fault: azurecsfake.Fault{Kind: azurecsfake.BadRequest}, Class: stet.FailureUnsupported, Status: 400, Code: "InvalidRequestBody"},
		{Name: "400 with innererror", Fault: azurecsfake.Fault{Kind: azurecsfake.BadRequest, InnerCode: "TextTooLong"}, Class: stet.FailureUnsupported, Status: 400, Code: "InvalidRequestBody"},
		{Name: "400 code only in innererror", Fault: azurecsfake.Fault{Kind: azurecsfake.BadRequest, Code: "not an identifier!", InnerCode: "TextTooLong", Header: http.Header{"X-Ms-Error-Code": nil}}, Class: stet.FailureUnsupported, Status: 400, Code: "TextTooLong"},
		{Name: "404 resource not found", Fault: azurecsfake.Fault{Kind: azurecsfake.HTTPError, Status: 404, Code: "ResourceNotFound"}, Class: stet.FailureUnsupported, Status: 404, Code: "ResourceNotFound"},
		{Name: "413 too large", Fault: azurecsfake.Fault{Kind: azurecsfake.HTTPError, Status: 413}, Class: stet.FailureUnsupported, Status: 413, Code: "413"},
		{Name: "408 request timeout", Fault: azurecsfake.Fault{Kind: azurecsfake.HTTPError, Status: 408}, Class: stet.FailureTransient, Status: 408, Code: "408"},
		{Name: "409 conflict", Fault: azurecsfake.Fault{Kind: azurecsfake.HTTPError, Status: 409}, Class: stet.FailureTransient, Status: 409, Code: "409"},
		{Name: "503 ServerBusy", Fault: azurecsfake.Fault{Kind: azurecsfake.ServerError, Status: 503}, Class: stet.FailureTransient, Status: 503, Code: "ServerBusy"},
		{Name: "503 with Retry-After", Fault: azurecsfake.Fault{Kind: azurecsfake.ServerError, Status: 503, Header: http.Header{"Retry-After": {"2"}}}, Class: stet.FailureTransient, Status: 503, Code: "ServerBusy", RetryAfter: 2 * time.Second},
		{Name: "502 from a proxy", Fault: azurecsfake.Fault{Kind: azurecsfake.HTTPError, Status: 502}, Class: stet.FailureTransient, Status: 502, Code: "502"},
		{Name: "200 not JSON", Fault: azurecsfake.Fault{Kind: azurecsfake.Malformed}, Class: stet.FailureTransient, Status: 200, Code: CodeMalformedResponse},
		{Name: "200 category missing", Fault: azurecsfake.Fault{Kind: azurecsfake.MissingCategory}, Class: stet.FailureTransient, Status: 200, Code: CodeMalformedResponse},
	})
}

// TestClassificationOffWire covers answers no fake gives; the suite covers
// a proxy's HTML 502, a 200 that is not JSON and a cancel mid-call.
func TestClassificationOffWire(t *testing.T) {
	t.Parallel()
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "azure-cs", BaseURL: baseURL, Timeout: 10 * time.Second}, MappingPath: quickstartMapping})
	}, testParams(t, "hello"), []processortest.OffWire{
		{
			Name: "redirect is not followed",
			Handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/contentsafety/text:analyze" {
					t.Errorf("redirect followed to %s", r.URL.Path)
				}
				http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			},
			Class: stet.FailureUnsupported, Status: 307, Code: CodeRedirect,
		},
		{
			Name:    "free-text code is dropped",
			Handler: processortest.Reply(http.StatusBadRequest, nil, `{"error":{"code":"text was: my secret","message":"no"}}`),
			Class:   stet.FailureUnsupported, Status: 400,
		},
		{
			Name:    "severity off the scale",
			Handler: processortest.Reply(http.StatusOK, nil, `{"categoriesAnalysis":[{"category":"Hate","severity":3},{"category":"SelfHarm","severity":0},{"category":"Sexual","severity":0},{"category":"Violence","severity":0}]}`),
			Class:   stet.FailureTransient, Status: 200, Code: CodeMalformedResponse,
		},
		{
			Name:    "severity missing",
			Handler: processortest.Reply(http.StatusOK, nil, `{"categoriesAnalysis":[{"category":"Hate"},{"category":"SelfHarm","severity":0},{"category":"Sexual","severity":0},{"category":"Violence","severity":0}]}`),
			Class:   stet.FailureTransient, Status: 200, Code: CodeMalformedResponse,
		},
		{
			Name: "body over the size limit",
			Handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(bytes.Repeat([]byte(" "), maxResponseBytes+10))
			},
			Class: stet.FailureTransient, Status: 200,
		},
	})
}

// TestNoCallCases covers the inputs Extract refuses before any text leaves.
func TestNoCallCases(t *testing.T) {
	t.Parallel()
	schema := processortest.ReadFile(t, processortest.QuickstartSchema)
	tests := []struct {
		name     string
		modify   func(p *stet.ExtractParams)
		wantCode string
	}{
		{"empty input", func(p *stet.ExtractParams) { p.Input = stet.NewText(" \n\t") }, CodeEmptyInput},
		{"over 10k code points", func(p *stet.ExtractParams) { p.Input = stet.NewText(strings.Repeat("é", MaxTextLength+1)) }, CodeTextTooLong},
		{"schema the mapping does not fit", func(p *stet.ExtractParams) {
			p.Schema = []byte(strings.Replace(string(schema), `"escalate"`, `"urgent"`, 1))
		}, CodeSchemaMismatch},
		{"invalid schema", func(p *stet.ExtractParams) { p.Schema = []byte("{not json") }, CodeInvalidSchema},
		{"repair turn", func(p *stet.ExtractParams) {
			p.Repair = []stet.RepairTurn{{Output: []byte(`{}`), Problems: []string{"/: missing properties"}}}
		}, CodeMappingRepair},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, azurecsfake.Options{})
			c := newTestClient(t, f, 0)
			p := testParams(t, "hello")
			tt.modify(&p)
			_, err := c.Extract(t.Context(), p)
			var pe *stet.ProcessorError
			if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != tt.wantCode {
				t.Errorf("Extract(%s) = %v, want unsupported %s", tt.name, err, tt.wantCode)
			}
			if n := f.Calls(); n != 0 {
				t.Errorf("Extract(%s): fake calls = %d, want 0", tt.name, n)
			}
		})
	}
	// Exactly the limit is sent.
	f := newFake(t, azurecsfake.Options{})
	c := newTestClient(t, f, 0)
	p := testParams(t, strings.Repeat("é", MaxTextLength))
	if _, err := c.Extract(t.Context(), p); err != nil {
		t.Errorf("Extract(10k code points) = %v, want success", err)
	}
	if n := f.Calls(); n != 1 {
		t.Errorf("Extract(10k code points): fake calls = %d, want 1", n)
	}
}

func TestCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	const marker = "CANARY Jane Roe 555-0100"
	// The conformance suite covers quota, auth, 5xx, disconnects and
	// timeouts; these are the answers only this service gives: a 429 whose
	// message is parsed for its wait, codes and inner codes that carry the
	// marker, and 200s that are not an analysis.
	faults := []azurecsfake.Fault{
		{Kind: azurecsfake.RateLimit, Message: marker + " Try again in 2 seconds."},
		{Kind: azurecsfake.Forbidden, Message: marker},
		{Kind: azurecsfake.BadRequest, Message: marker, Code: marker, InnerCode: marker},
		{Kind: azurecsfake.HTTPError, Status: 404, Message: "resource " + marker + " not found", Code: "ResourceNotFound"},
		{Kind: azurecsfake.Malformed},
		{Kind: azurecsfake.MissingCategory},
	}
	for _, ft := range faults {
		t.Run(string(ft.Kind), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, azurecsfake.Options{})
			f.Enqueue(ft)
			c := newTestClient(t, f, 10*time.Second)
			_, err := c.Extract(t.Context(), testParams(t, "Report about "+marker))
			if err == nil {
				t.Fatalf("Extract() with %s = nil error, want a failure", ft.Kind)
			}
			if f.CallsContaining(marker) != 1 {
				t.Fatalf("fake saw the marker in %d calls, want 1 (the canary must reach the provider)", f.CallsContaining(marker))
			}
			var pe *stet.ProcessorError
			errors.As(err, &pe)
			for _, s := range []string{err.Error(), fmt.Sprint(err), fmt.Sprintf("%+v", err), pe.Code, pe.RequestID} {
				if strings.Contains(s, "CANARY") || strings.Contains(s, "Jane Roe") {
					t.Errorf("Extract() with %s: %q contains the canary", ft.Kind, s)
				}
			}
		})
	}
	// The no-call refusals and a successful record never carry it either.
	f := newFake(t, azurecsfake.Options{Table: []azurecsfake.Rule{{Contains: "CANARY", Severities: azurecsfake.Severities{Hate: 6, Violence: 4}}}})
	c := newTestClient(t, f, 0)
	got, err := c.Extract(t.Context(), testParams(t, "Report about "+marker))
	if err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	if strings.Contains(string(got.Output), "CANARY") || strings.Contains(string(got.Output), "Jane") {
		t.Errorf("Output = %s carries the canary", got.Output)
	}
	long := testParams(t, strings.Repeat(marker+" ", MaxTextLength/len(marker)+1))
	if _, err := c.Extract(t.Context(), long); err == nil || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("Extract(too long) = %v, want an error without the canary", err)
	}
}

// TestNewValidates covers what the suite's "open validates" does not: the
// base URL is required, and the mapping, API version and schema.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	m := quickstart(t)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no base url", Config{Common: processor.Common{ID: "x"}, Mapping: m}},
		{"base url with a query", Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com/?api-version=1"}, Mapping: m}},
		{"no mapping", Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com"}}},
		{"missing mapping file", Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com"}, MappingPath: "testdata/none.yaml"}},
		{"bad api version", Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com"}, Mapping: m, APIVersion: "2024 09 01&x=y"}},
		{"schema the mapping does not fit", Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com"}, Mapping: m, Schema: []byte(`{"type":"object","properties":{"category":{"type":"string"}}}`)}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("New(%s) = nil error, want an error", tt.name)
		}
	}
	c, err := New(Config{Common: processor.Common{ID: "x", BaseURL: "https://x.cognitiveservices.azure.com/"}, Mapping: m, Schema: processortest.ReadFile(t, processortest.QuickstartSchema)})
	if err != nil {
		t.Fatalf("New(defaults) = %v, want nil", err)
	}
	if want := "https://x.cognitiveservices.azure.com/contentsafety/text:analyze?api-version=2024-09-01"; c.endpoint != want {
		t.Errorf("endpoint = %q, want %q", c.endpoint, want)
	}
	if c.Mapping() != m {
		t.Errorf("Mapping() is not the configured mapping")
	}
}

func TestSchemaCheckIsCached(t *testing.T) {
	t.Parallel()
	f := newFake(t, azurecsfake.Options{})
	c := newTestClient(t, f, 0)
	for range 3 {
		if _, err := c.Extract(t.Context(), testParams(t, "hello")); err != nil {
			t.Fatalf("Extract() = %v", err)
		}
	}
	if n := c.fitted.Len(); n != 1 {
		t.Errorf("schema checks cached = %d, want 1 for one distinct schema", n)
	}
}

func TestFakeRespondHookAndCallsContaining(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	f := newFake(t, azurecsfake.Options{
		Table: []azurecsfake.Rule{{Contains: "x", Severities: azurecsfake.Severities{Hate: 6}}},
		Respond: func(req azurecsfake.Request) azurecsfake.Severities {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, req.OutputType+"/"+req.APIVersion)
			return azurecsfake.Severities{Sexual: 4}
		},
	})
	c := newTestClient(t, f, 0)
	got, err := c.Extract(t.Context(), testParams(t, "x marks the spot"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Output), `"rationale":"azure content safety: Sexual=4; rule sexual-medium"`) {
		t.Errorf("Output = %s, want the Respond hook's severities to win over the table", got.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "FourSeverityLevels/2024-09-01" {
		t.Errorf("Respond saw %v, want one FourSeverityLevels/2024-09-01 request", seen)
	}
	if f.CallsContaining("marks the") != 1 || f.CallsContaining("absent") != 0 {
		t.Errorf("CallsContaining = %d, %d; want 1, 0", f.CallsContaining("marks the"), f.CallsContaining("absent"))
	}
}
