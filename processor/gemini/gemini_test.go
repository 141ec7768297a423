package gemini

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/processortest"
)

const (
	testKey    = "AIzaTestKey-0000"
	testModel  = "gemini-2.5-flash"
	testSchema = `{"type":"object","properties":{"category":{"type":"string","enum":["ok","harmful","medical_advice"]},"flags":{"type":["array","null"],"items":{"type":"string"}},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["category","flags","confidence"],"additionalProperties":false}`
)

// testCommon is the configuration of the adapter's own tests.
var testCommon = processor.Common{ID: "gemini-test", APIKey: testKey, Model: testModel, Region: "us", Retention: "55d"}

// newTestClient returns a Client talking to f with the test key.
func newTestClient(t *testing.T, f *geminifake.Server, timeout time.Duration) *Client {
	t.Helper()
	return processortest.MustOpen(t, open, testCommon, f.URL(), timeout)
}

func open(c processor.Common) (*Client, error) { return New(Config{Common: c}) }

func testParams(prompt string) stet.ExtractParams { return processortest.Params(prompt, testSchema) }

func newFake(t *testing.T, opts geminifake.Options) *geminifake.Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, geminifake.New(opts))
}

func TestRequestGolden(t *testing.T) {
	t.Parallel()
	temp := float32(0)
	// A case's With is its Config change, and where its request URL is
	// recorded (with the fake's base URL, for Check).
	type with struct {
		cfg  func(*Config)
		rt   processortest.RecordingTransport
		base string
	}
	processortest.ExerciseGolden(t, processortest.GoldenHarness[*with, geminifake.Request]{
		Open: func(t *testing.T, w *with, last *processortest.Last[geminifake.Request]) (processortest.Calls, stet.Processor) {
			f := newFake(t, geminifake.Options{Respond: last.Record(func(req geminifake.Request) string { return geminifake.MinimalInstance(req.Schema) })})
			w.base = f.URL()
			cfg := Config{Common: processor.Common{ID: "gemini-test", BaseURL: f.URL(), APIKey: testKey, Model: testModel, HTTPClient: w.rt.Client()}}
			if w.cfg != nil {
				w.cfg(&cfg)
			}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return f, c
		},
		Params:  testParams(processortest.GoldenPrompt),
		Request: func(r geminifake.Request) (http.Header, []byte) { return r.Header, r.Body },
		Header:  map[string]string{"x-goog-api-key": testKey, "Authorization": "", "Content-Type": "application/json"},
		Check: func(t *testing.T, tc processortest.GoldenCase[*with], _ stet.ExtractParams, got geminifake.Request) {
			want := tc.With.base + "/v1beta/models/" + testModel + ":generateContent"
			if url, _, _ := tc.With.rt.Last(); url != want {
				t.Errorf("request URL = %q, want %q (no key in the query)", url, want)
			}
			if got.SchemaField != "responseJsonSchema" || got.ResponseMIMEType != "application/json" {
				t.Errorf("schema sent as %q with mime %q, want responseJsonSchema with application/json", got.SchemaField, got.ResponseMIMEType)
			}
		},
	}, []processortest.GoldenCase[*with]{
		{Name: "first call", File: "request.golden.json", With: &with{}},
		{
			Name: "repair turns", File: "request_repair.golden.json", With: &with{},
			Repair: []stet.RepairTurn{
				processortest.GoldenRepair[0],
				{Output: nil, Problems: []string{"output stopped for reciting source material; answer in your own words"}},
			},
		},
		{
			Name: "temperature and token cap", File: "request_options.golden.json",
			With: &with{cfg: func(c *Config) { c.Temperature = &temp; c.MaxOutputTokens = 2048 }},
		},
	})
}

// TestNoRetries checks that the SDK neither retries nor continues on its
// own on the answers it would otherwise act on (its retry statuses,
// RetryInfo, CONTINUATION); processortest counts calls for the rest.
func TestNoRetries(t *testing.T) {
	t.Parallel()
	processortest.ExerciseNoRetries(t, func(t *testing.T) (processortest.Server[geminifake.Fault], stet.Processor) {
		f := newFake(t, geminifake.Options{})
		return f, newTestClient(t, f, 0)
	}, testParams("hello"), []geminifake.Fault{
		{Kind: geminifake.ServerError, Status: http.StatusServiceUnavailable},
		{Kind: geminifake.ServerError, Status: http.StatusGatewayTimeout},
		{Kind: geminifake.RateLimit, RetryDelay: "0.001s"},
		{Kind: geminifake.HTTPError, Status: http.StatusRequestTimeout},
		{Kind: geminifake.Finish, FinishReason: "CONTINUATION"},
	}, func(ft geminifake.Fault) string { return fmt.Sprintf("%s_%d%s", ft.Kind, ft.Status, ft.FinishReason) })
}

func TestClassification(t *testing.T) {
	t.Parallel()
	// The HTTP-date cases are computed against this clock.
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	const exhausted = "RESOURCE_EXHAUSTED"
	processortest.ClassificationHarness[geminifake.Fault]{
		Open: func(t *testing.T, timeout time.Duration) (processortest.Server[geminifake.Fault], stet.Processor) {
			f := newFake(t, geminifake.Options{})
			c := newTestClient(t, f, timeout)
			c.now = func() time.Time { return now }
			return f, c
		},
		Params: testParams("Classify: the nurse was kind."),
		Check: func(t *testing.T, tt processortest.Classification[geminifake.Fault], _ *stet.Extraction, pe *stet.ProcessorError) {
			if pe == nil {
				return
			}
			// 200 answers carry the body's responseId; error answers carry
			// none, as the API sends no request ID header.
			if (tt.Status == 200) != (pe.RequestID != "") {
				t.Errorf("Extract() with %s: RequestID = %q, want it set only from a 200 body", tt.Name, pe.RequestID)
			}
			if tt.Fault.Kind == geminifake.MaxTokens && (len(pe.Output) == 0 || json.Valid(pe.Output)) {
				t.Errorf("Extract() with %s: Output = %q, want the cut text", tt.Name, pe.Output)
			}
		},
	}.Run(t, []processortest.Classification[geminifake.Fault]{
		{Name: "429 RetryInfo", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "7s"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: 7 * time.Second},
		{Name: "429 fractional RetryInfo", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "25.465784708s"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: 25465784708 * time.Nanosecond},
		{Name: "429 Retry-After date in the past", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: now.Add(-time.Minute).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted},
		// Every wait is capped at processor.MaxRetryAfter: over seven days
		// these were once ignored, and a date a year ahead snoozed a week.
		{Name: "429 RetryInfo over the cap", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "2592000s"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 Retry-After ten days", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: "864000"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 Retry-After a year ahead", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: now.AddDate(1, 0, 0).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 retry-after-ms over seven days", Fault: geminifake.Fault{Kind: geminifake.RateLimit, Header: http.Header{"Retry-After-Ms": {"700000000"}}}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 longest wait wins", Fault: geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "7s", RetryAfter: "3"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: 7 * time.Second},
		{Name: "429 without details", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 429, Message: "Resource has been exhausted (e.g. check quota)."}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted},
		{Name: "429 per-minute tokens", Fault: geminifake.Fault{Kind: geminifake.RateLimit, QuotaID: "GenerateContentInputTokensPerModelPerMinute-FreeTier", QuotaValue: "250000", RetryDelay: "26s"}, Class: stet.FailureRateLimited, Status: 429, Code: exhausted, RetryAfter: 26 * time.Second},
		{Name: "429 per-day quota", Fault: geminifake.Fault{Kind: geminifake.Quota, RetryDelay: "43s"}, Class: stet.FailureQuota, Status: 429, Code: exhausted, RetryAfter: 43 * time.Second},
		{Name: "429 limit 0", Fault: geminifake.Fault{Kind: geminifake.RateLimit, QuotaID: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", QuotaValue: "0"}, Class: stet.FailureQuota, Status: 429, Code: exhausted},
		{Name: "403 billing disabled", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 403, Reason: "BILLING_DISABLED"}, Class: stet.FailureQuota, Status: 403, Code: "BILLING_DISABLED"},
		{Name: "400 API_KEY_INVALID", Fault: geminifake.Fault{Kind: geminifake.Unauthorized}, Class: stet.FailureAuth, Status: 400, Code: "API_KEY_INVALID"},
		{Name: "403 PERMISSION_DENIED", Fault: geminifake.Fault{Kind: geminifake.PermissionDenied}, Class: stet.FailureAuth, Status: 403, Code: "PERMISSION_DENIED"},
		{Name: "403 SERVICE_DISABLED", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 403, Reason: "SERVICE_DISABLED"}, Class: stet.FailureAuth, Status: 403, Code: "SERVICE_DISABLED"},
		{Name: "400 FAILED_PRECONDITION region", Fault: geminifake.Fault{Kind: geminifake.RegionUnsupported}, Class: stet.FailureUnsupported, Status: 400, Code: "FAILED_PRECONDITION"},
		{Name: "400 INVALID_ARGUMENT", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 400}, Class: stet.FailureUnsupported, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "404 NOT_FOUND model", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 404}, Class: stet.FailureUnsupported, Status: 404, Code: "NOT_FOUND"},
		{Name: "413 too large", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 413}, Class: stet.FailureUnsupported, Status: 413, Code: "INVALID_ARGUMENT"},
		{Name: "408 request timeout", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 408}, Class: stet.FailureTransient, Status: 408},
		{Name: "409 ABORTED", Fault: geminifake.Fault{Kind: geminifake.HTTPError, Status: 409}, Class: stet.FailureTransient, Status: 409, Code: "ABORTED"},
		{Name: "503 UNAVAILABLE", Fault: geminifake.Fault{Kind: geminifake.ServerError, Status: 503}, Class: stet.FailureTransient, Status: 503, Code: "UNAVAILABLE"},
		{Name: "504 DEADLINE_EXCEEDED", Fault: geminifake.Fault{Kind: geminifake.ServerError, Status: 504}, Class: stet.FailureTransient, Status: 504, Code: "DEADLINE_EXCEEDED"},
		{Name: "503 with Retry-After", Fault: geminifake.Fault{Kind: geminifake.ServerError, Status: 503, RetryAfter: "2"}, Class: stet.FailureTransient, Status: 503, Code: "UNAVAILABLE", RetryAfter: 2 * time.Second},
		{Name: "MAX_TOKENS", Fault: geminifake.Fault{Kind: geminifake.MaxTokens}, Class: stet.FailureInvalidOutput, Status: 200, Code: "MAX_TOKENS"},
		{Name: "CONTINUATION", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "CONTINUATION"}, Class: stet.FailureInvalidOutput, Status: 200, Code: "CONTINUATION"},
		{Name: "PROHIBITED_CONTENT", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "PROHIBITED_CONTENT"}, Class: stet.FailureRefusal, Status: 200, Code: "PROHIBITED_CONTENT"},
		{Name: "BLOCKLIST", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "BLOCKLIST"}, Class: stet.FailureRefusal, Status: 200, Code: "BLOCKLIST"},
		{Name: "SPII", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "SPII"}, Class: stet.FailureRefusal, Status: 200, Code: "SPII"},
		{Name: "RECITATION", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "RECITATION"}, Class: stet.FailureInvalidOutput, Status: 200, Code: "RECITATION"},
		{Name: "OTHER", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "OTHER"}, Class: stet.FailureInvalidOutput, Status: 200, Code: "OTHER"},
		{Name: "LANGUAGE", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "LANGUAGE"}, Class: stet.FailureUnsupported, Status: 200, Code: "LANGUAGE"},
		{Name: "unknown finish reason", Fault: geminifake.Fault{Kind: geminifake.Finish, FinishReason: "SOMETHING_NEW"}, Class: stet.FailureInvalidOutput, Status: 200, Code: "SOMETHING_NEW"},
		{Name: "prompt blocked SAFETY", Fault: geminifake.Fault{Kind: geminifake.PromptBlocked}, Class: stet.FailureRefusal, Status: 200, Code: "prompt.SAFETY"},
		{Name: "prompt blocked PROHIBITED_CONTENT", Fault: geminifake.Fault{Kind: geminifake.PromptBlocked, BlockReason: "PROHIBITED_CONTENT"}, Class: stet.FailureRefusal, Status: 200, Code: "prompt.PROHIBITED_CONTENT"},
		{Name: "delay then answer", Fault: geminifake.Fault{Kind: geminifake.Delay, Delay: 10 * time.Millisecond}, Class: stet.FailureNone, Status: 200},
	})
}

// TestClassificationOffWire covers answers no fake gives; the suite covers
// a proxy's HTML 502, a 200 that is not JSON and a cancel mid-call.
func TestClassificationOffWire(t *testing.T) {
	t.Parallel()
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "proxy", BaseURL: baseURL, APIKey: testKey, Model: testModel, Timeout: 10 * time.Second}})
	}, testParams("hello"), []processortest.OffWire{
		{
			Name:    "gateway 429 with a text body and Retry-After",
			Handler: processortest.Reply(429, http.Header{"Content-Type": {"text/plain"}, "Retry-After": {"4"}, "X-Request-Id": {"gw-123"}}, "slow down"),
			Class:   stet.FailureRateLimited, Status: 429, RetryAfter: 4 * time.Second, RequestID: "gw-123",
		},
		{
			Name:    "error wrapped in an array",
			Handler: processortest.Reply(429, nil, `[{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{"quota_limit":"GenerateContentRequestsPerDayPerProject","quota_limit_value":"1500"}}]}}]`),
			Class:   stet.FailureQuota, Status: 429, Code: "RATE_LIMIT_EXCEEDED",
		},
		{
			Name:    "free text in status is dropped",
			Handler: processortest.Reply(400, nil, `{"error":{"code":400,"message":"bad","status":"patient Jane Roe said"}}`),
			Class:   stet.FailureUnsupported, Status: 400,
		},
		{
			Name:    "200 without candidates",
			Handler: processortest.Reply(200, nil, `{"usageMetadata":{"promptTokenCount":3,"totalTokenCount":3},"modelVersion":"gemini-2.5-flash","responseId":"abc"}`),
			Class:   stet.FailureTransient, Status: 200, RequestID: "abc",
		},
	})
}

// TestModelPath checks that a model given with or without "models/" reaches
// the same URL.
func TestModelPath(t *testing.T) {
	t.Parallel()
	for _, model := range []string{testModel, "models/" + testModel} {
		f := newFake(t, geminifake.Options{})
		rt := &processortest.RecordingTransport{}
		c, err := New(Config{Common: processor.Common{ID: "g", BaseURL: f.URL() + "/", APIKey: testKey, Model: model, HTTPClient: rt.Client()}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Extract(t.Context(), testParams("hello")); err != nil {
			t.Errorf("Extract() with model %q = %v, want success", model, err)
		}
		if url, _, _ := rt.Last(); url != f.URL()+"/v1beta/models/"+testModel+":generateContent" {
			t.Errorf("model %q: request URL = %q, want %q", model, url, f.URL()+"/v1beta/models/"+testModel+":generateContent")
		}
	}
}

// TestThoughtsLeftOut checks that thought parts never become the output.
func TestThoughtsLeftOut(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"Thinking about it.","thought":true},{"text":"{\"category\":"},{"text":"\"ok\"}"}],"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-pro","responseId":"r1"}`)
	}))
	defer srv.Close()
	c, err := New(Config{Common: processor.Common{ID: "g", BaseURL: srv.URL, APIKey: testKey, Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Extract(t.Context(), testParams("hello"))
	if err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	if string(got.Output) != `{"category":"ok"}` {
		t.Errorf("Output = %s, want the joined non-thought parts", got.Output)
	}
}

// TestEnvironmentIgnored sets every variable the SDK reads and checks that
// the call still goes where Config says, with Config's key. It cannot run
// in parallel: t.Setenv changes the process environment.
func TestEnvironmentIgnored(t *testing.T) {
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request reached the decoy server from the environment: %s", r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	}))
	defer decoy.Close()
	for k, v := range map[string]string{
		"GOOGLE_API_KEY":              "env-google-key",
		"GEMINI_API_KEY":              "env-gemini-key",
		"GOOGLE_GEMINI_BASE_URL":      decoy.URL,
		"GOOGLE_VERTEX_BASE_URL":      decoy.URL,
		"GOOGLE_GENAI_USE_VERTEXAI":   "true",
		"GOOGLE_GENAI_USE_ENTERPRISE": "true",
		"GOOGLE_CLOUD_PROJECT":        "env-project",
		"GOOGLE_CLOUD_LOCATION":       "europe-west4",
	} {
		t.Setenv(k, v)
	}
	f := newFake(t, geminifake.Options{})
	c := newTestClient(t, f, 0)
	if _, err := c.Extract(t.Context(), testParams("hello")); err != nil {
		t.Fatalf("Extract() with SDK variables set = %v, want success against the configured fake", err)
	}
	if n := f.Calls(); n != 1 {
		t.Errorf("fake calls = %d, want 1", n)
	}
}

// TestCanaryNeverInErrors covers what processortest's canary cases do not:
// Gemini's own codes, reasons and finish and block reasons, and repair turns.
func TestCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	faults := []geminifake.Fault{
		{Kind: geminifake.Unauthorized, Message: processortest.Canary},
		{Kind: geminifake.PermissionDenied, Message: processortest.Canary},
		{Kind: geminifake.HTTPError, Status: 400, Message: processortest.Canary, Code: processortest.Canary, Reason: processortest.Canary},
		{Kind: geminifake.HTTPError, Status: 404, Message: "model " + processortest.Canary + " not found"},
		{Kind: geminifake.RegionUnsupported, Message: processortest.Canary},
		{Kind: geminifake.MaxTokens},
		{Kind: geminifake.Finish, FinishReason: processortest.Canary},
		{Kind: geminifake.Finish, FinishReason: "CONTINUATION"},
		{Kind: geminifake.PromptBlocked, BlockReason: processortest.Canary},
	}
	processortest.ExerciseCanary(t, testParams(""), faults, func(ft geminifake.Fault) string { return string(ft.Kind) + "_" + ft.FinishReason },
		func(t *testing.T, ft geminifake.Fault, p stet.ExtractParams) (int, error) {
			f := newFake(t, geminifake.Options{Respond: func(geminifake.Request) string { return processortest.CanaryOutput }})
			f.Enqueue(ft)
			_, err := newTestClient(t, f, 10*time.Second).Extract(t.Context(), p)
			return f.CallsContaining(processortest.Canary), err
		})
}
