package anthropic

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/processortest"
)

const (
	testKey    = "sk-ant-test-key"
	testModel  = "claude-sonnet-4-5"
	testSchema = processortest.ModerationSchema
)

// testCommon is the configuration of the adapter's own tests.
var testCommon = processor.Common{ID: "anthropic-test", APIKey: testKey, Model: testModel, Region: "eu", Retention: "30d"}

// newTestClient returns a Client talking to f with the test key, in the
// tool use form or not.
func newTestClient(t *testing.T, f *anthropicfake.Server, timeout time.Duration, toolUse bool) *Client {
	t.Helper()
	open := func(c processor.Common) (*Client, error) { return New(Config{Common: c, ToolUse: toolUse}) }
	return processortest.MustOpen(t, open, testCommon, f.URL(), timeout)
}

func testParams(prompt string) stet.ExtractParams { return processortest.Params(prompt, testSchema) }

func newFake(t *testing.T, opts anthropicfake.Options) *anthropicfake.Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, anthropicfake.New(opts))
}

// recordRequests returns anthropicfake.Options whose Respond keeps the last request.
func recordRequests() (anthropicfake.Options, func() anthropicfake.Request) {
	var last processortest.Last[anthropicfake.Request]
	return anthropicfake.Options{Respond: last.Record(minimalAnswer)}, last.Get
}

// minimalAnswer answers a request with the minimal instance of its schema.
func minimalAnswer(req anthropicfake.Request) string { return fakekit.MinimalInstance(req.Schema) }

func TestRequestGolden(t *testing.T) {
	t.Parallel()
	// A case's With is its request form: tool use or structured output.
	processortest.ExerciseGolden(t, processortest.GoldenHarness[bool, anthropicfake.Request]{
		Open: func(t *testing.T, toolUse bool, last *processortest.Last[anthropicfake.Request]) (processortest.Calls, stet.Processor) {
			f := newFake(t, anthropicfake.Options{Respond: last.Record(minimalAnswer)})
			return f, newTestClient(t, f, 0, toolUse)
		},
		Params:  testParams(processortest.GoldenPrompt),
		Request: func(r anthropicfake.Request) (http.Header, []byte) { return r.Header, r.Body },
		Header:  map[string]string{"Authorization": "Bearer " + testKey, "Content-Type": "application/json", "X-Stainless-Retry-Count": "0"},
		Check: func(t *testing.T, tc processortest.GoldenCase[bool], _ stet.ExtractParams, got anthropicfake.Request) {
			if v := got.Header.Get("anthropic-version"); v == "" {
				t.Errorf("anthropic-version header missing")
			}
			if tc.With && len(tc.Repair) > 0 {
				// A JSON object answer goes back as the tool call it was.
				if len(got.Messages) < 3 || !slices.Equal(got.Messages[1].Blocks, []string{"tool_use"}) || !slices.Equal(got.Messages[2].Blocks, []string{"tool_result"}) {
					t.Errorf("repair turn blocks = %+v, want a tool_use answered by a tool_result", got.Messages)
				}
			}
		},
	}, []processortest.GoldenCase[bool]{
		{Name: "output_config first call", File: "request.golden.json"},
		{Name: "output_config repair turns", File: "request_repair.golden.json", Repair: processortest.GoldenRepair},
		{Name: "tool use first call", File: "request_tool.golden.json", With: true},
		{Name: "tool use repair turns", File: "request_tool_repair.golden.json", Repair: processortest.GoldenRepair, With: true},
	})
}

// TestSchemaSentVerbatim checks that the profile schema reaches the wire
// with its property order, in both forms.
func TestSchemaSentVerbatim(t *testing.T) {
	t.Parallel()
	const schema = `{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]}`
	for _, toolUse := range []bool{false, true} {
		t.Run(fmt.Sprint("tool use ", toolUse), func(t *testing.T) {
			t.Parallel()
			opts, last := recordRequests()
			f := newFake(t, opts)
			c := newTestClient(t, f, 0, toolUse)
			p := testParams("hello")
			p.Schema = json.RawMessage(schema)
			if _, err := c.Extract(t.Context(), p); err != nil {
				t.Fatalf("Extract() = %v, want success", err)
			}
			if got := last().Schema; string(got) != schema {
				t.Errorf("schema on the wire = %s, want %s", got, schema)
			}
		})
	}
}

// TestNoRetries checks that the SDK's own retries are off for the answers
// it would retry by default, x-should-retry: true included, beyond those
// processortest scripts (500, 429, a dropped connection).
func TestNoRetries(t *testing.T) {
	t.Parallel()
	processortest.ExerciseNoRetries(t, func(t *testing.T) (processortest.Server[anthropicfake.Fault], stet.Processor) {
		f := newFake(t, anthropicfake.Options{})
		return f, newTestClient(t, f, 0, false)
	}, testParams("hello"), []anthropicfake.Fault{
		{Kind: anthropicfake.Overloaded},
		{Kind: anthropicfake.RateLimit, RetryAfter: "0"},
		{Kind: anthropicfake.HTTPError, Status: http.StatusConflict},
		{Kind: anthropicfake.HTTPError, Status: http.StatusRequestTimeout},
	}, func(ft anthropicfake.Fault) string { return fmt.Sprintf("%s_%d", ft.Kind, ft.Status) })
}

func TestClassification(t *testing.T) {
	t.Parallel()
	// Dates and rate-limit resets are computed against this clock.
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	// resets sets every limit's remaining count and reset time, and drops
	// retry-after, so only the reset headers decide.
	resets := func(remaining [4]string, after [4]time.Duration) http.Header {
		h := http.Header{"Retry-After": nil}
		for i, limit := range rateLimits {
			h.Set("anthropic-ratelimit-"+limit+"-remaining", remaining[i])
			h.Set("anthropic-ratelimit-"+limit+"-reset", at(after[i]))
		}
		return h
	}
	// A key with no values removes that header from the fake's answer.
	noWait := http.Header{"Retry-After": nil}
	for _, limit := range rateLimits {
		noWait[http.CanonicalHeaderKey("anthropic-ratelimit-"+limit+"-reset")] = nil
	}

	harness := func(toolUse bool) processortest.ClassificationHarness[anthropicfake.Fault] {
		return processortest.ClassificationHarness[anthropicfake.Fault]{
			Open: func(t *testing.T, timeout time.Duration) (processortest.Server[anthropicfake.Fault], stet.Processor) {
				f := newFake(t, anthropicfake.Options{})
				c := newTestClient(t, f, timeout, toolUse)
				c.now = func() time.Time { return now }
				return f, c
			},
			Params:        testParams("Classify: the nurse was kind."),
			RequestID:     regexp.MustCompile(`^req_`), // the request-id header
			InvalidOutput: processortest.KeptOutput,
		}
	}
	harness(false).Run(t, []processortest.Classification[anthropicfake.Fault]{
		// processor.MaxRetryAfter caps every wait; values over 7 days used
		// to be ignored, and the reset headers taken instead.
		{Name: "429 retry-after seconds over 7 days is capped", Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: "864000"}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 retry-after-ms over 7 days is capped", Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfterMS: 864000000}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 retry-after date in the past", Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: now.Add(-time.Minute).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 0},
		{
			Name:  "429 requests exhausted waits for the requests reset",
			Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Header: resets([4]string{"0", "900", "900", "900"}, [4]time.Duration{20 * time.Second, 50 * time.Second, 5 * time.Second, 5 * time.Second})},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 20 * time.Second,
		},
		{
			Name:  "429 two limits exhausted waits for the later",
			Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Header: resets([4]string{"0", "900", "0", "900"}, [4]time.Duration{20 * time.Second, 50 * time.Second, 40 * time.Second, 5 * time.Second})},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 40 * time.Second,
		},
		{
			Name:  "429 none exhausted waits for the latest reset",
			Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Header: resets([4]string{"3", "900", "900", "900"}, [4]time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 25 * time.Second})},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 25 * time.Second,
		},
		{
			Name:  "429 reset a year ahead is capped",
			Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Header: resets([4]string{"0", "900", "900", "900"}, [4]time.Duration{365 * 24 * time.Hour, 5 * time.Second, 5 * time.Second, 5 * time.Second})},
			Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: processor.MaxRetryAfter,
		},
		{Name: "429 without any wait header", Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Header: noWait}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error"},
		{Name: "429 ramp limit is a rate limit", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 429, Code: "ramp_limit_exceeded", Header: http.Header{"Retry-After": {"3"}}}, Class: stet.FailureRateLimited, Status: 429, Code: "ramp_limit_exceeded", RetryAfter: 3 * time.Second},
		{Name: "429 contract spend limit", Fault: anthropicfake.Fault{Kind: anthropicfake.SpendLimit, Code: "contract_spend_limit_reached"}, Class: stet.FailureQuota, Status: 429, Code: "contract_spend_limit_reached"},
		{Name: "429 spend limit said only in the message", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 429, Message: "You have reached your organization's spend limit."}, Class: stet.FailureQuota, Status: 429, Code: "rate_limit_error"},
		{Name: "402 billing_error", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 402}, Class: stet.FailureQuota, Status: 402, Code: "billing_error"},
		{Name: "402 linked organization spend limit", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 402, Code: "linked_organization_spend_limit_reached"}, Class: stet.FailureQuota, Status: 402, Code: "linked_organization_spend_limit_reached"},
		{Name: "400 credit balance too low", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 400, Message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}, Class: stet.FailureQuota, Status: 400, Code: "invalid_request_error"},
		{Name: "400 quoting credit words later is not quota", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 400, Message: "messages.0.content.0.text: invalid: your credit balance is too low"}, Class: stet.FailureUnsupported, Status: 400, Code: "invalid_request_error"},
		{Name: "400 invalid_request_error", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 400}, Class: stet.FailureUnsupported, Status: 400, Code: "invalid_request_error"},
		{Name: "400 with an error_code", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 400, Code: "image_dimensions_too_large"}, Class: stet.FailureUnsupported, Status: 400, Code: "image_dimensions_too_large"},
		{Name: "403 permission_error", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 403}, Class: stet.FailureAuth, Status: 403, Code: "permission_error"},
		{Name: "404 not_found_error", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 404}, Class: stet.FailureUnsupported, Status: 404, Code: "not_found_error"},
		{Name: "413 request_too_large", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 413}, Class: stet.FailureUnsupported, Status: 413, Code: "request_too_large"},
		{Name: "409 conflict", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 409}, Class: stet.FailureTransient, Status: 409, Code: "conflict_error"},
		{Name: "504 timeout_error", Fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 504}, Class: stet.FailureTransient, Status: 504, Code: "timeout_error"},
		{Name: "529 overloaded_error", Fault: anthropicfake.Fault{Kind: anthropicfake.Overloaded}, Class: stet.FailureTransient, Status: 529, Code: "overloaded_error"},
		{Name: "529 with retry-after", Fault: anthropicfake.Fault{Kind: anthropicfake.Overloaded, Header: http.Header{"Retry-After": {"2"}}}, Class: stet.FailureTransient, Status: 529, Code: "overloaded_error", RetryAfter: 2 * time.Second},
		{Name: "stop_reason max_tokens", Fault: anthropicfake.Fault{Kind: anthropicfake.MaxTokens}, Class: stet.FailureInvalidOutput, Status: 200, Code: "max_tokens", Problem: "output truncated at the token limit"},
		{Name: "delay then answer", Fault: anthropicfake.Fault{Kind: anthropicfake.Delay, Delay: 10 * time.Millisecond}, Class: stet.FailureNone, Status: 200},
	})
	t.Run("tool use", func(t *testing.T) {
		t.Parallel()
		harness(true).Run(t, []processortest.Classification[anthropicfake.Fault]{
			{Name: "answer without a tool call", Fault: anthropicfake.Fault{Kind: anthropicfake.TruncatedJSON}, Class: stet.FailureInvalidOutput, Status: 200, Problem: "answer did not call the moderation_v1 tool"},
			{Name: "stop_reason max_tokens", Fault: anthropicfake.Fault{Kind: anthropicfake.MaxTokens}, Class: stet.FailureInvalidOutput, Status: 200, Code: "max_tokens", Problem: "output truncated at the token limit"},
			{Name: "stop_reason refusal", Fault: anthropicfake.Fault{Kind: anthropicfake.Refusal}, Class: stet.FailureRefusal, Status: 200, Code: "refusal"},
			{Name: "schema-invalid input", Fault: anthropicfake.Fault{Kind: anthropicfake.SchemaInvalid}, Class: stet.FailureNone, Status: 200},
			{Name: "529 overloaded_error", Fault: anthropicfake.Fault{Kind: anthropicfake.Overloaded}, Class: stet.FailureTransient, Status: 529, Code: "overloaded_error"},
		})
	})
}

// TestClassificationOffWire covers answers no fake gives; the suite covers
// a proxy's HTML 502, a 200 that is not JSON and a cancel mid-call.
func TestClassificationOffWire(t *testing.T) {
	t.Parallel()
	message := func(stop, content string) string {
		return `{"id":"msg_01x","type":"message","role":"assistant","model":"m","content":` + content + `,"stop_reason":"` + stop + `","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}`
	}
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "raw", BaseURL: baseURL, Model: testModel, Timeout: 10 * time.Second}})
	}, testParams("hello"), []processortest.OffWire{
		{
			Name:    "429 with a free-text error type",
			Handler: processortest.Reply(429, http.Header{"retry-after": {"3"}}, `{"type":"error","error":{"type":"too many requests for this key","message":"slow down"}}`),
			Class:   stet.FailureRateLimited, Status: 429, RetryAfter: 3 * time.Second,
		},
		{
			Name:    "request_id only in the error body",
			Handler: processortest.Reply(529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011BodyOnly"}`),
			Class:   stet.FailureTransient, Status: 529, Code: "overloaded_error", RequestID: "req_011BodyOnly",
		},
		{
			Name:    "error details of an unexpected shape",
			Handler: processortest.Reply(400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"bad","details":"free text"}}`),
			Class:   stet.FailureUnsupported, Status: 400, Code: "invalid_request_error",
		},
		{
			Name:    "200 that is not a message",
			Handler: processortest.Reply(200, nil, `{"type":"completion","completion":"{}"}`),
			Class:   stet.FailureTransient, Status: 200,
		},
		{
			Name:    "stop_reason model_context_window_exceeded",
			Handler: processortest.Reply(200, nil, message("model_context_window_exceeded", `[{"type":"text","text":"{\"cat"}]`)),
			Class:   stet.FailureUnsupported, Status: 200, Code: "model_context_window_exceeded",
		},
		{
			Name:    "empty answer",
			Handler: processortest.Reply(200, nil, message("end_turn", `[]`)),
			Class:   stet.FailureInvalidOutput, Status: 200,
		},
	})
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "raw", BaseURL: baseURL, Model: testModel, Timeout: 10 * time.Second}, ToolUse: true})
	}, testParams("hello"), []processortest.OffWire{
		{
			Name:    "tool use: a call of another tool",
			Handler: processortest.Reply(200, nil, message("tool_use", `[{"type":"tool_use","id":"toolu_01","name":"other","input":{}}]`)),
			Class:   stet.FailureInvalidOutput, Status: 200,
		},
	})
}

// TestCachedInputTokensCount checks that input tokens written to or read
// from the prompt cache count as input.
func TestCachedInputTokensCount(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("request-id", "req_011Cached")
		_, _ = io.WriteString(w, `{"id":"msg_01x","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"{\"a\":1}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":7}}`)
	}))
	defer srv.Close()
	c, err := New(Config{Common: processor.Common{ID: "cached", BaseURL: srv.URL, Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Extract(t.Context(), testParams("hello"))
	if err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	if got.InputTokens != 3210 || got.OutputTokens != 7 || got.RequestID != "req_011Cached" {
		t.Errorf("Extract() = input %d output %d request %q, want 3210, 7, req_011Cached", got.InputTokens, got.OutputTokens, got.RequestID)
	}
}

// TestCanaryNeverInErrors covers what processortest's canary does not:
// Anthropic's other error types and statuses (the marker also as error.type
// and error_code), and model output carrying the marker into invalid_output
// errors, in both request forms.
func TestCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	faults := []anthropicfake.Fault{
		{Kind: anthropicfake.Overloaded, Message: processortest.Canary},
		{Kind: anthropicfake.HTTPError, Status: 400, Message: processortest.Canary, Type: processortest.Canary, Code: processortest.Canary},
		{Kind: anthropicfake.HTTPError, Status: 404, Message: "model: " + processortest.Canary},
		{Kind: anthropicfake.HTTPError, Status: 413, Message: processortest.Canary},
		{Kind: anthropicfake.TruncatedJSON},
		{Kind: anthropicfake.MaxTokens},
	}
	for _, toolUse := range []bool{false, true} {
		t.Run(fmt.Sprint("tool use ", toolUse), func(t *testing.T) {
			t.Parallel()
			processortest.ExerciseCanary(t, testParams(""), faults, func(ft anthropicfake.Fault) string { return string(ft.Kind) },
				func(t *testing.T, ft anthropicfake.Fault, p stet.ExtractParams) (int, error) {
					f := newFake(t, anthropicfake.Options{Respond: func(anthropicfake.Request) string { return processortest.CanaryOutput }})
					f.Enqueue(ft)
					_, err := newTestClient(t, f, 0, toolUse).Extract(t.Context(), p)
					return f.CallsContaining(processortest.Canary), err
				})
		})
	}
}

// TestInvalidSchemaMakesNoCall covers JSON that is not a schema object; the
// suite covers no schema and one that is not JSON.
func TestInvalidSchemaMakesNoCall(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{"[]", `"object"`, "null"} {
		f := newFake(t, anthropicfake.Options{})
		c := newTestClient(t, f, 0, false)
		p := testParams("hello")
		p.Schema = json.RawMessage(schema)
		_, err := c.Extract(t.Context(), p)
		if got := stet.ClassOf(err); got != stet.FailureUnsupported {
			t.Errorf("Extract(schema %q): class = %q, want unsupported", schema, got)
		}
		if n := f.Calls(); n != 0 {
			t.Errorf("Extract(schema %q): fake calls = %d, want 0", schema, n)
		}
	}
}

// TestRequestOptions checks the provider-specific settings on the wire:
// max_tokens, inference_geo, and a max_tokens large enough that the SDK
// would refuse it without a request timeout.
func TestRequestOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		maxTokens     int64
		geo           string
		wantMaxTokens int64
	}{
		{name: "defaults", wantMaxTokens: DefaultMaxTokens},
		{name: "inference geo", geo: "eu", maxTokens: 2048, wantMaxTokens: 2048},
		{name: "large max_tokens", maxTokens: 64000, wantMaxTokens: 64000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, last := recordRequests()
			f := newFake(t, opts)
			c, err := New(Config{Common: processor.Common{ID: "opts", BaseURL: f.URL(), APIKey: testKey, Model: testModel}, MaxTokens: tt.maxTokens, InferenceGeo: tt.geo})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Extract(t.Context(), testParams("hello")); err != nil {
				t.Fatalf("Extract() = %v, want success", err)
			}
			got := last()
			if got.MaxTokens != tt.wantMaxTokens || got.InferenceGeo != tt.geo {
				t.Errorf("request max_tokens %d inference_geo %q, want %d %q", got.MaxTokens, got.InferenceGeo, tt.wantMaxTokens, tt.geo)
			}
			if hasGeo := bytes.Contains(got.Body, []byte(`"inference_geo"`)); hasGeo != (tt.geo != "") {
				t.Errorf("request body has inference_geo = %v, want %v", hasGeo, tt.geo != "")
			}
		})
	}
}

// TestEnvironmentIgnored checks that the SDK's environment variables do not
// change where text goes or what is sent with it. Not parallel: it sets
// environment variables.
func TestEnvironmentIgnored(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request reached ANTHROPIC_BASE_URL: %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	}))
	defer elsewhere.Close()
	t.Setenv("ANTHROPIC_BASE_URL", elsewhere.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: from-env")
	t.Setenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "content")

	opts, last := recordRequests()
	f := anthropicfake.New(opts) // no key required
	defer f.Close()
	c, err := New(Config{Common: processor.Common{ID: "env", BaseURL: f.URL(), Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Extract(t.Context(), testParams("hello")); err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	got := last()
	for _, h := range []string{"Authorization", "X-Api-Key", "X-Leak"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("header %s = %q, want none (taken from the environment)", h, v)
		}
	}
	if n := f.Calls(); n != 1 {
		t.Errorf("fake calls = %d, want 1", n)
	}
}

// TestNewValidates covers what the suite's "open validates" does not: the
// SDK appends /v1 itself, and max_tokens.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"base url with /v1", Config{Common: processor.Common{ID: "x", Model: testModel, BaseURL: "https://api.anthropic.com/v1/"}}},
		{"negative max tokens", Config{Common: processor.Common{ID: "x", Model: testModel}, MaxTokens: -1}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("New(%s) = nil error, want an error", tt.name)
		}
	}
	for _, base := range []string{"https://api.anthropic.com", "https://gateway.example/anthropic/"} {
		if _, err := New(Config{Common: processor.Common{ID: "x", Model: testModel, BaseURL: base}}); err != nil {
			t.Errorf("New(base url %q) = %v, want nil", base, err)
		}
	}
}
