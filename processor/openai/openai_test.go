package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
)

const (
	testKey    = "sk-test-key"
	testModel  = "gpt-4.1-mini"
	testSchema = processortest.ModerationSchema
)

// testCommon is the configuration of the adapter's own tests.
var testCommon = processor.Common{ID: "openai-test", APIKey: testKey, Model: testModel, Region: "us", Retention: "30d"}

// newTestClient returns a Client talking to f with the test key.
func newTestClient(t *testing.T, f *openaifake.Server, timeout time.Duration) *Client {
	t.Helper()
	return processortest.MustOpen(t, open, testCommon, f.URL(), timeout)
}

func open(c processor.Common) (*Client, error) { return New(Config{Common: c}) }

func testParams(prompt string) stet.ExtractParams { return processortest.Params(prompt, testSchema) }

func newFake(t *testing.T, opts openaifake.Options) *openaifake.Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, openaifake.New(opts))
}

func TestRequestGolden(t *testing.T) {
	t.Parallel()
	processortest.ExerciseGolden(t, processortest.GoldenHarness[struct{}, openaifake.Request]{
		Open: func(t *testing.T, _ struct{}, last *processortest.Last[openaifake.Request]) (processortest.Calls, stet.Processor) {
			f := newFake(t, openaifake.Options{Respond: last.Record(func(req openaifake.Request) string { return openaifake.MinimalInstance(req.Schema) })})
			return f, newTestClient(t, f, 0)
		},
		Params:  testParams(processortest.GoldenPrompt),
		Request: func(r openaifake.Request) (http.Header, []byte) { return r.Header, r.Body },
		Header:  map[string]string{"Authorization": "Bearer " + testKey, "Content-Type": "application/json"},
	}, []processortest.GoldenCase[struct{}]{
		{Name: "first call", File: "request.golden.json"},
		{Name: "repair turns", File: "request_repair.golden.json", Repair: processortest.GoldenRepair},
	})
}

// TestNoRetries checks that the SDK's own retries are off for the statuses
// it would retry by default beyond those processortest scripts (500, 429,
// a dropped connection).
func TestNoRetries(t *testing.T) {
	t.Parallel()
	processortest.ExerciseNoRetries(t, func(t *testing.T) (processortest.Server[openaifake.Fault], stet.Processor) {
		f := newFake(t, openaifake.Options{})
		return f, newTestClient(t, f, 0)
	}, testParams("hello"), []openaifake.Fault{
		{Kind: openaifake.ServerError, Status: http.StatusServiceUnavailable},
		{Kind: openaifake.HTTPError, Status: http.StatusConflict},
	}, func(ft openaifake.Fault) string { return fmt.Sprintf("%s_%d", ft.Kind, ft.Status) })
}

func TestClassification(t *testing.T) {
	t.Parallel()
	// The HTTP-date case is computed against this clock.
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	processortest.ClassificationHarness[openaifake.Fault]{
		Open: func(t *testing.T, timeout time.Duration) (processortest.Server[openaifake.Fault], stet.Processor) {
			f := newFake(t, openaifake.Options{})
			c := newTestClient(t, f, timeout)
			c.now = func() time.Time { return now }
			return f, c
		},
		Params:        testParams("Classify: the nurse was kind."),
		RequestID:     regexp.MustCompile(`^req_`), // the x-request-id header
		InvalidOutput: processortest.CutOutput,
	}.Run(t, []processortest.Classification[openaifake.Fault]{
		{Name: "429 retry-after-ms wins over Retry-After", Fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "7", RetryAfterMS: 1500}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 1500 * time.Millisecond},
		{Name: "429 Retry-After date in the past", Fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: now.Add(-time.Minute).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 0},
		{Name: "429 x-ratelimit-reset-requests", Fault: openaifake.Fault{Kind: openaifake.RateLimit}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 120 * time.Millisecond},
		{
			Name: "429 tokens exhausted uses x-ratelimit-reset-tokens",
			Fault: openaifake.Fault{Kind: openaifake.RateLimit, Header: http.Header{
				"X-Ratelimit-Remaining-Requests": {"12"},
				"X-Ratelimit-Remaining-Tokens":   {"0"},
				"X-Ratelimit-Reset-Tokens":       {"6m0s"},
			}},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 6 * time.Minute,
		},
		{
			Name:  "429 without any wait header",
			Fault: openaifake.Fault{Kind: openaifake.RateLimit, Header: http.Header{"X-Ratelimit-Reset-Requests": nil, "X-Ratelimit-Reset-Tokens": nil}},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 0,
		},
		{Name: "402 payment required", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 402, Code: "insufficient_credits"}, Class: stet.FailureQuota, Status: 402, Code: "insufficient_credits"},
		{Name: "403 forbidden", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 403}, Class: stet.FailureAuth, Status: 403, Code: "invalid_request_error"},
		{Name: "403 region not served", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 403, Code: "unsupported_country_region_territory"}, Class: stet.FailureUnsupported, Status: 403, Code: "unsupported_country_region_territory"},
		{Name: "400 invalid request", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 400, Code: "context_length_exceeded"}, Class: stet.FailureUnsupported, Status: 400, Code: "context_length_exceeded"},
		{Name: "404 model not found", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 404, Code: "model_not_found"}, Class: stet.FailureUnsupported, Status: 404, Code: "model_not_found"},
		{Name: "422 unprocessable", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 422}, Class: stet.FailureUnsupported, Status: 422, Code: "invalid_request_error"},
		{Name: "408 request timeout", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 408}, Class: stet.FailureTransient, Status: 408, Code: "invalid_request_error"},
		{Name: "409 conflict", Fault: openaifake.Fault{Kind: openaifake.HTTPError, Status: 409}, Class: stet.FailureTransient, Status: 409, Code: "invalid_request_error"},
		{Name: "503 overloaded", Fault: openaifake.Fault{Kind: openaifake.ServerError, Status: 503}, Class: stet.FailureTransient, Status: 503, Code: "server_error"},
		{Name: "503 with Retry-After", Fault: openaifake.Fault{Kind: openaifake.ServerError, Status: 503, Header: http.Header{"Retry-After": {"2"}}}, Class: stet.FailureTransient, Status: 503, Code: "server_error", RetryAfter: 2 * time.Second},
		{Name: "finish_reason length", Fault: openaifake.Fault{Kind: openaifake.Length}, Class: stet.FailureInvalidOutput, Status: 200, Code: "length"},
		{Name: "content filter", Fault: openaifake.Fault{Kind: openaifake.ContentFilter}, Class: stet.FailureRefusal, Status: 200, Code: "content_filter"},
		{Name: "delay then answer", Fault: openaifake.Fault{Kind: openaifake.Delay, Delay: 10 * time.Millisecond}, Class: stet.FailureNone, Status: 200},
	})
}

// TestClassificationOffWire covers answers no fake gives; the suite covers
// a proxy's HTML 502, a 200 that is not JSON and a cancel mid-call.
func TestClassificationOffWire(t *testing.T) {
	t.Parallel()
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "compat", BaseURL: baseURL + "/v1", Model: testModel, Timeout: 10 * time.Second}})
	}, testParams("hello"), []processortest.OffWire{
		{
			Name:    "ollama-style 404 with a string error",
			Handler: processortest.Reply(http.StatusNotFound, nil, `{"error":"model \"gpt-4.1-mini\" not found, try pulling it first"}`),
			Class:   stet.FailureUnsupported, Status: 404,
		},
		{
			Name:    "429 with a numeric code and free-text type",
			Handler: processortest.Reply(http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}}, `{"error":{"message":"slow down","type":"too many requests for this key","code":429}}`),
			Class:   stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: 3 * time.Second,
		},
		{
			Name:    "200 without choices",
			Handler: processortest.Reply(http.StatusOK, nil, `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"m","choices":[]}`),
			Class:   stet.FailureTransient, Status: 200,
		},
	})
}

// TestCanaryNeverInErrors covers what processortest's canary does not:
// provider codes and messages of other statuses, and model output carrying
// the marker into invalid_output and refusal errors.
func TestCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	faults := []openaifake.Fault{
		{Kind: openaifake.HTTPError, Status: 400, Message: processortest.Canary, Code: processortest.Canary},
		{Kind: openaifake.HTTPError, Status: 404, Message: "model " + processortest.Canary + " not found", Code: "model_not_found"},
		{Kind: openaifake.TruncatedJSON},
		{Kind: openaifake.Length},
		{Kind: openaifake.ContentFilter},
	}
	processortest.ExerciseCanary(t, testParams(""), faults, func(ft openaifake.Fault) string { return string(ft.Kind) },
		func(t *testing.T, ft openaifake.Fault, p stet.ExtractParams) (int, error) {
			f := newFake(t, openaifake.Options{Respond: func(openaifake.Request) string { return processortest.CanaryOutput }})
			f.Enqueue(ft)
			_, err := newTestClient(t, f, 0).Extract(t.Context(), p)
			return f.CallsContaining(processortest.Canary), err
		})
}

// Azure OpenAI: the deployment in the path, api-version in the query, the
// key in the api-key header and no bearer token.
func TestAzureOpenAI(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen http.Header
	fake := openaifake.New(openaifake.Options{APIKey: "az-key", Respond: func(req openaifake.Request) string {
		mu.Lock()
		seen = req.Header.Clone()
		mu.Unlock()
		return `{"category":"none"}`
	}})
	t.Cleanup(fake.Close)
	root := strings.TrimSuffix(fake.URL(), "/v1")
	schema := json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"}},"required":["category"],"additionalProperties":false}`)
	params := stet.ExtractParams{JobID: "job_1", Prompt: stet.NewText("classify"), SchemaName: "s", Schema: schema}

	c, err := New(Config{Common: processor.Common{ID: "azure-openai", BaseURL: root, APIKey: "az-key", Model: "my-deployment"}, AzureAPIVersion: "2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := c.Extract(context.Background(), params)
	if err != nil {
		t.Fatalf("Extract via Azure OpenAI = %v", err)
	}
	if string(ext.Output) != `{"category":"none"}` {
		t.Errorf("output = %s", ext.Output)
	}
	mu.Lock()
	if seen.Get("api-key") != "az-key" || seen.Get("Authorization") != "" {
		t.Errorf("headers: api-key %q, Authorization %q; want the key in api-key and no bearer token", seen.Get("api-key"), seen.Get("Authorization"))
	}
	mu.Unlock()

	wrong, err := New(Config{Common: processor.Common{ID: "azure-openai", BaseURL: root, APIKey: "other", Model: "my-deployment"}, AzureAPIVersion: "2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Extract(context.Background(), params); stet.ClassOf(err) != stet.FailureAuth {
		t.Errorf("Extract with a wrong Azure key = %v, want class auth", err)
	}
}

// The fake's RPM/TPM limits reach the adapter as rate_limited with a wait.
func TestFakeLimitsReachTheAdapter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		opts           openaifake.Options
		wantRetryAfter time.Duration
	}{
		{"reset header only", openaifake.Options{RPM: 1}, time.Minute},
		{"retry-after-ms", openaifake.Options{RPM: 2, LimitRetryAfter: true}, 30 * time.Second},
		{"tokens", openaifake.Options{TPM: 600, LimitWindow: time.Second, LimitRetryAfter: true}, 0},
	}
	for _, tt := range tests {
		tt.opts.Clock = stet.NewManualClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
		f := newFake(t, tt.opts)
		c := newTestClient(t, f, 0)
		var err error
		for range 5 {
			if _, err = c.Extract(t.Context(), testParams("a short report")); err != nil {
				break
			}
		}
		var pe *stet.ProcessorError
		if !errors.As(err, &pe) || pe.Class != stet.FailureRateLimited || pe.StatusCode != 429 {
			t.Errorf("%s: Extract over the limit = %v, want rate_limited 429", tt.name, err)
			continue
		}
		if tt.wantRetryAfter > 0 && pe.RetryAfter != tt.wantRetryAfter {
			t.Errorf("%s: RetryAfter = %v, want %v", tt.name, pe.RetryAfter, tt.wantRetryAfter)
		}
		if pe.RetryAfter <= 0 {
			t.Errorf("%s: RetryAfter = %v, want > 0", tt.name, pe.RetryAfter)
		}
		if s := f.Stats(); s.Limited != 1 {
			t.Errorf("%s: Stats().Limited = %d, want 1", tt.name, s.Limited)
		}
	}
}

// The fake labels batches with the key the adapter sets.
func TestBatchMetadataKeyMatchesFake(t *testing.T) {
	t.Parallel()
	if BatchMetadataKey != openaifake.BatchMetadataKey || BatchMaxItems != openaifake.BatchMaxItems {
		t.Errorf("BatchMetadataKey, BatchMaxItems = %q, %d; fake has %q, %d", BatchMetadataKey, BatchMaxItems, openaifake.BatchMetadataKey, openaifake.BatchMaxItems)
	}
}
