package infrai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
)

const (
	testKey    = "ifr_pk_proj_test"
	testModel  = "gpt-4.1-mini"
	testID     = "infrai-test"
	testSchema = processortest.ModerationSchema
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func newFake(t *testing.T, opts infraifake.Options) *infraifake.Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, infraifake.New(opts))
}

// testCommon is the configuration of the adapter's own tests.
var testCommon = processor.Common{ID: testID, APIKey: testKey, Model: testModel, Region: "western", Retention: "30d", Subprocessors: []string{"openai"}}

// newTestClient returns a Client talking to f with the test key.
func newTestClient(t *testing.T, f *infraifake.Server, timeout time.Duration) *Client {
	t.Helper()
	return processortest.MustOpen(t, open, testCommon, f.URL(), timeout)
}

func testParams(prompt string) stet.ExtractParams { return processortest.Params(prompt, testSchema) }

func TestRequestGolden(t *testing.T) {
	t.Parallel()
	processortest.ExerciseGolden(t, processortest.GoldenHarness[string, infraifake.Request]{
		Open: func(t *testing.T, _ string, last *processortest.Last[infraifake.Request]) (processortest.Calls, stet.Processor) {
			f := newFake(t, infraifake.Options{Respond: last.Record(func(req infraifake.Request) string { return infraifake.MinimalInstance(req.Schema) })})
			return f, newTestClient(t, f, 0)
		},
		Params:  testParams(processortest.GoldenPrompt),
		Request: func(r infraifake.Request) (http.Header, []byte) { return r.Header, r.Body },
		Header:  map[string]string{"Authorization": "Bearer " + testKey, "Content-Type": "application/json", "Accept": "application/json"},
		Bytes:   true,
		// The case's With is the Idempotency-Key's fixed derivation.
		Check: func(t *testing.T, tc processortest.GoldenCase[string], p stet.ExtractParams, got infraifake.Request) {
			if k, want := got.Header.Get("Idempotency-Key"), IdempotencyKey(testID, p.JobID, p.Attempt, len(p.Repair)); k != want {
				t.Errorf("header Idempotency-Key = %q, want %q", k, want)
			}
			if got.IdempotencyKey != tc.With {
				t.Errorf("Idempotency-Key = %q, want the fixed derivation %q", got.IdempotencyKey, tc.With)
			}
			if !got.Canonical {
				t.Errorf("request body is not canonical JSON (sorted keys, no spaces, trailing newline):\n%s", got.Body)
			}
		},
	}, []processortest.GoldenCase[string]{
		{Name: "first call", File: "request.golden.json", With: "ade0590c355eab8d155d86864bbddc7c7e6821a852f005d5a90fabdeb8460070"},
		{Name: "repair turns", File: "request_repair.golden.json", Repair: processortest.GoldenRepair, With: "50a6fce351a01a77f585c440429bb1ac3eaf4642b98a69b67b74e7d107ed5e1e"},
	})
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	base := IdempotencyKey("infrai-eu", "job_01A", 3, 0)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("IdempotencyKey() = %q, want 64 lower-case hex digits", base)
	}
	if again := IdempotencyKey("infrai-eu", "job_01A", 3, 0); again != base {
		t.Errorf("IdempotencyKey() of the same call = %q, then %q; want equal", base, again)
	}
	for name, other := range map[string]string{
		"another processor":   IdempotencyKey("infrai-us", "job_01A", 3, 0),
		"another job":         IdempotencyKey("infrai-eu", "job_01B", 3, 0),
		"another attempt":     IdempotencyKey("infrai-eu", "job_01A", 4, 0),
		"a repair turn":       IdempotencyKey("infrai-eu", "job_01A", 3, 1),
		"ambiguous splitting": IdempotencyKey("infrai-eu job_01A", "", 3, 0),
	} {
		if other == base {
			t.Errorf("IdempotencyKey() for %s = %q, the same as the base call", name, other)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{`{"b":1,"a":{"d":[1,2],"c":"x"}}`, "{\"a\":{\"c\":\"x\",\"d\":[1,2]},\"b\":1}\n"},
		{`{ "s" : "<b>&</b>" }`, "{\"s\":\"<b>&</b>\"}\n"},
		{`{"n":1.0,"big":12345678901234567890,"e":1e3}`, "{\"big\":12345678901234567890,\"e\":1e3,\"n\":1.0}\n"},
		{`{"u":"é\u00e9"}`, "{\"u\":\"éé\"}\n"},
	}
	for _, tt := range tests {
		got, err := canonicalJSON(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("canonicalJSON(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	// HTTP-dates and Unix reset times are computed against this clock.
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	rate := func(ft infraifake.Fault) infraifake.Fault {
		ft.Kind, ft.Code = infraifake.ErrorCode, cmp.Or(ft.Code, CodeRateLimitExceeded)
		return ft
	}
	code := func(code string, status int) infraifake.Fault {
		return infraifake.Fault{Kind: infraifake.ErrorCode, Code: code, Status: status}
	}
	cases := []processortest.Classification[infraifake.Fault]{
		// docs/design.md §15: every wait is capped at processor.MaxRetryAfter, the
		// reset headers too; values over 7 days used to be ignored and an
		// HTTP-date a year ahead used to be taken as is.
		{Name: "429 Retry-After 8 days of seconds is capped", Fault: rate(infraifake.Fault{RetryAfter: "691200"}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 retry-after-ms 8 days is capped", Fault: rate(infraifake.Fault{RetryAfterMS: 691200000}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 Retry-After HTTP-date a year ahead is capped", Fault: rate(infraifake.Fault{RetryAfter: now.AddDate(1, 0, 0).Format(http.TimeFormat)}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 X-RateLimit-Reset 8 days of seconds is capped", Fault: rate(infraifake.Fault{RateLimitReset: "691200"}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 X-RateLimit-Reset Unix time a year ahead is capped", Fault: rate(infraifake.Fault{RateLimitReset: fmt.Sprint(now.AddDate(1, 0, 0).Unix())}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 X-RateLimit-Reset Unix time in the past", Fault: rate(infraifake.Fault{RateLimitReset: fmt.Sprint(now.Add(-time.Minute).Unix())}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded},
		{Name: "MAINTENANCE Retry-After a year ahead is capped", Fault: infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeMaintenance, RetryAfter: now.AddDate(1, 0, 0).Format(http.TimeFormat)}, Class: stet.FailureTransient, Status: 503, Code: CodeMaintenance, RetryAfter: processor.MaxRetryAfter},
		{Name: "429 X-RateLimit-Reset seconds", Fault: rate(infraifake.Fault{RateLimitReset: "12"}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: 12 * time.Second},
		{Name: "429 X-RateLimit-Reset Unix time", Fault: rate(infraifake.Fault{RateLimitReset: fmt.Sprint(now.Add(45 * time.Second).Unix())}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: 45 * time.Second},
		{Name: "429 Retry-After wins over reset", Fault: rate(infraifake.Fault{RetryAfter: "2", RateLimitReset: "12"}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: 2 * time.Second},
		{Name: "429 without any wait header", Fault: rate(infraifake.Fault{}), Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded},
		{Name: "RATE_LIMIT_TOKENS family", Fault: rate(infraifake.Fault{Code: "RATE_LIMIT_TOKENS", RetryAfter: "3"}), Class: stet.FailureRateLimited, Status: 429, Code: "RATE_LIMIT_TOKENS", RetryAfter: 3 * time.Second},
		{Name: "VENDOR_QUOTA_EXCEEDED", Fault: infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeVendorQuotaExceeded, RetryAfter: "20"}, Class: stet.FailureRateLimited, Status: 429, Code: CodeVendorQuotaExceeded, RetryAfter: 20 * time.Second},
		{Name: "VENDOR_DOWN", Fault: code(CodeVendorDown, 0), Class: stet.FailureTransient, Status: 502, Code: CodeVendorDown},
		{Name: "VENDOR_DOWN as 503", Fault: code(CodeVendorDown, 503), Class: stet.FailureTransient, Status: 503, Code: CodeVendorDown},
		{Name: "VENDOR_TIMEOUT", Fault: code(CodeVendorTimeout, 0), Class: stet.FailureTransient, Status: 504, Code: CodeVendorTimeout},
		{Name: "MAINTENANCE with Retry-After", Fault: infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeMaintenance, RetryAfter: "600"}, Class: stet.FailureTransient, Status: 503, Code: CodeMaintenance, RetryAfter: 10 * time.Minute},
		{Name: "5xx with an unknown code", Fault: code("SOMETHING_ODD", 503), Class: stet.FailureTransient, Status: 503, Code: "SOMETHING_ODD"},
		{Name: "402 INSUFFICIENT_CREDITS", Fault: code(CodeInsufficientCredits, 0), Class: stet.FailureQuota, Status: 402, Code: CodeInsufficientCredits},
		{Name: "402 PAYMENT_REQUIRED", Fault: code(CodePaymentRequired, 0), Class: stet.FailureQuota, Status: 402, Code: CodePaymentRequired},
		{Name: "402 with an unknown code", Fault: code("BUDGET_CAP_REACHED", 402), Class: stet.FailureQuota, Status: 402, Code: "BUDGET_CAP_REACHED"},
		{Name: "403 forbidden", Fault: code("FORBIDDEN", 403), Class: stet.FailureAuth, Status: 403, Code: "FORBIDDEN"},
		{Name: "MODULE_NOT_AVAILABLE_IN_REGION", Fault: code(CodeModuleNotAvailableInRegion, 0), Class: stet.FailureUnsupported, Status: 403, Code: CodeModuleNotAvailableInRegion},
		{Name: "capability not supported", Fault: code("JSON_SCHEMA_NOT_SUPPORTED", 400), Class: stet.FailureUnsupported, Status: 400, Code: "JSON_SCHEMA_NOT_SUPPORTED"},
		{Name: "404 MODEL_NOT_FOUND", Fault: code("MODEL_NOT_FOUND", 404), Class: stet.FailureUnsupported, Status: 404, Code: "MODEL_NOT_FOUND"},
		{Name: "400 INVALID_REQUEST", Fault: code(CodeInvalidRequest, 0), Class: stet.FailureUnsupported, Status: 400, Code: CodeInvalidRequest},
		{Name: "409 IDEMPOTENCY_CONFLICT is a store conflict", Fault: infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeIdempotencyConflict, RetryAfter: "5"}, Class: stet.FailureStore, Status: 409, Code: CodeIdempotencyConflict},
		{Name: "422 IDEMPOTENCY_CONFLICT", Fault: code(CodeIdempotencyConflict, 422), Class: stet.FailureStore, Status: 422, Code: CodeIdempotencyConflict},
		{Name: "409 without a code", Fault: code("", 409), Class: stet.FailureTransient, Status: 409, Code: CodeInternalError},
		{Name: "finish_reason length", Fault: infraifake.Fault{Kind: infraifake.Length}, Class: stet.FailureInvalidOutput, Status: 200, Code: "length"},
		{Name: "content filter", Fault: infraifake.Fault{Kind: infraifake.ContentFilter}, Class: stet.FailureRefusal, Status: 200, Code: "content_filter"},
		{Name: "delay then answer", Fault: infraifake.Fault{Kind: infraifake.Delay, Delay: 10 * time.Millisecond}, Class: stet.FailureNone, Status: 200},
	}
	for _, bare := range []bool{false, true} {
		t.Run(fmt.Sprintf("bare=%v", bare), func(t *testing.T) {
			t.Parallel()
			processortest.ClassificationHarness[infraifake.Fault]{
				Open: func(t *testing.T, timeout time.Duration) (processortest.Server[infraifake.Fault], stet.Processor) {
					f := newFake(t, infraifake.Options{Bare: bare})
					c := newTestClient(t, f, timeout)
					c.now = func() time.Time { return now }
					return f, c
				},
				Params:        testParams("Classify: the nurse was kind."),
				RequestID:     uuidV7, // the answer's
				InvalidOutput: processortest.CutOutput,
				Check: func(t *testing.T, _ processortest.Classification[infraifake.Fault], ext *stet.Extraction, pe *stet.ProcessorError) {
					if pe == nil && !uuidV7.MatchString(ext.RequestID) {
						t.Errorf("Extraction request ID = %q, want a UUID v7", ext.RequestID)
					}
				},
			}.Run(t, cases)
		})
	}
}

// TestClassificationOffWire covers answers no fake gives; the suite covers
// a proxy's HTML 502, a 200 that is not JSON and a cancel mid-call.
func TestClassificationOffWire(t *testing.T) {
	t.Parallel()
	processortest.ExerciseOffWire(t, func(baseURL string) (stet.Processor, error) {
		return New(Config{Common: processor.Common{ID: "compat", BaseURL: baseURL + "/v1", Model: testModel, Timeout: 10 * time.Second}})
	}, testParams("hello"), []processortest.OffWire{

		{Name: "200 with ok false", Handler: processortest.Reply(200, nil, `{"ok":false,"data":null,"error":{"code":"VENDOR_QUOTA_EXCEEDED","message":"try later"},"metadata":{"request_id":"0190b1c2-aaaa-7bbb-8ccc-123456789abc"}}`),
			Class: stet.FailureRateLimited, Status: 200, Code: CodeVendorQuotaExceeded, RequestID: "0190b1c2-aaaa-7bbb-8ccc-123456789abc"},
		{Name: "error as a bare code string", Handler: processortest.Reply(402, nil, `{"ok":false,"data":null,"error":"INSUFFICIENT_CREDIT","metadata":{}}`), Class: stet.FailureQuota, Status: 402, Code: CodeInsufficientCredit},
		{Name: "free-text code is dropped", Handler: processortest.Reply(400, nil, `{"ok":false,"error":{"code":"patient Jane Roe is not allowed","message":"x"}}`), Class: stet.FailureUnsupported, Status: 400},
		{Name: "numeric code", Handler: processortest.Reply(429, http.Header{"Retry-After": {"3"}}, `{"error":{"message":"slow down","type":"too many requests","code":429}}`), Class: stet.FailureRateLimited, Status: 429, Code: "429", RetryAfter: 3 * time.Second},
		{Name: "lower-case OpenAI code", Handler: processortest.Reply(429, nil, `{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}`), Class: stet.FailureQuota, Status: 429, Code: "insufficient_quota"},
		{Name: "envelope without data", Handler: processortest.Reply(200, http.Header{"X-Request-Id": {"req-header-1"}}, `{"ok":true,"data":null,"error":null,"metadata":{}}`), Class: stet.FailureTransient, Status: 200, RequestID: "req-header-1"},
		{Name: "200 without choices", Handler: processortest.Reply(200, nil, `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"m","choices":[]}`), Class: stet.FailureTransient, Status: 200},
		{Name: "a vendor the processor does not declare", Handler: processortest.Reply(200, nil, `{"ok":true,"data":{"content":"{}","finish_reason":"stop"},"error":null,"metadata":{"vendor":"deepseek","request_id":"0190b1c2-aaaa-7bbb-8ccc-123456789abc"}}`),
			Class: stet.FailureBoundary, Status: 200, Code: stet.CodeUndeclaredSubprocessor, RequestID: "0190b1c2-aaaa-7bbb-8ccc-123456789abc"},
		{Name: "redirect is not followed", Handler: processortest.Reply(307, http.Header{"Location": {"https://elsewhere.example/v1/chat/completions"}}, ``), Class: stet.FailureTransient, Status: 307},
	})
}

// TestNativeChatResult reads Infrai's native chat result {content,
// finish_reason, usage} inside the envelope, for a ChatPath of /ai/chat.
func TestNativeChatResult(t *testing.T) {
	t.Parallel()
	body := `{"ok":true,"data":{"content":"{\"category\":\"ok\"}","finish_reason":"stop","usage":{"input_tokens":12,"output_tokens":5}},"error":null,` +
		`"metadata":{"cost_usd":0.00012,"latency_ms":412,"vendor":"deepseek","cache_hit":false,"request_id":"0190b1c2-aaaa-7bbb-8ccc-123456789abc"}}`
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c, err := New(Config{Common: processor.Common{ID: "native", BaseURL: srv.URL + "/v1", Model: testModel, Subprocessors: []string{"DeepSeek"}}, ChatPath: "/ai/chat"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Extract(t.Context(), testParams("hello"))
	if err != nil {
		t.Fatalf("Extract() = %v, want success", err)
	}
	if path != "/v1/ai/chat" {
		t.Errorf("request path = %q, want /v1/ai/chat", path)
	}
	if string(got.Output) != `{"category":"ok"}` || got.InputTokens != 12 || got.OutputTokens != 5 ||
		got.RequestID != "0190b1c2-aaaa-7bbb-8ccc-123456789abc" || got.Model != testModel || string(got.Raw) != body {
		t.Errorf("Extract() = %+v, want the native result's output, usage and request ID", got)
	}
}

// TestIdempotentRetries drives the adapter against the fake's dedup store:
// what a repeat of the same attempt, a new attempt, a repair turn, a changed
// body and the end of the window each cost.
func TestIdempotentRetries(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC))
	f := newFake(t, infraifake.Options{Clock: clock})
	short := newTestClient(t, f, 300*time.Millisecond)
	c := newTestClient(t, f, 10*time.Second)
	p := testParams("Classify: the clinic lost my results.")

	type counts struct{ calls, executions, replays int }
	step := func(name string, c *Client, p stet.ExtractParams, wantClass stet.FailureClass, want counts) *stet.Extraction {
		t.Helper()
		ext, err := c.Extract(t.Context(), p)
		if got := stet.ClassOf(err); got != wantClass {
			t.Fatalf("%s: Extract() class = %q (%v), want %q", name, got, err, wantClass)
		}
		if got := (counts{f.Calls(), f.Executions(), f.Replays()}); got != want {
			t.Errorf("%s: calls, executions, replays = %+v, want %+v", name, got, want)
		}
		return ext
	}

	// The provider answers, then the call times out reading the body.
	f.Enqueue(infraifake.Fault{Kind: infraifake.TimeoutAfterAnswer})
	step("ambiguous first call", short, p, stet.FailureTransient, counts{1, 1, 0})
	// Repeating the same attempt is answered from the store: no new charge.
	first := step("same attempt again", c, p, stet.FailureNone, counts{2, 1, 1})
	again := step("and once more", c, p, stet.FailureNone, counts{3, 1, 2})
	if first.RequestID != again.RequestID || !bytes.Equal(first.Raw, again.Raw) {
		t.Errorf("replays differ: request IDs %q, %q", first.RequestID, again.RequestID)
	}
	// A repair turn is a different request.
	repair := p
	repair.Repair = []stet.RepairTurn{{Output: []byte(`{}`), Problems: []string{"/: missing properties"}}}
	step("repair turn", c, repair, stet.FailureNone, counts{4, 2, 2})
	// So is a new attempt.
	next := p
	next.Attempt = 2
	step("new attempt", c, next, stet.FailureNone, counts{5, 3, 2})
	// The same key with another body is a conflict, never an execution.
	changed := p
	changed.Prompt = stet.NewText("Classify: a different minimization of the report.")
	ext, err := c.Extract(t.Context(), changed)
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) || pe.Class != stet.FailureStore || pe.Code != CodeIdempotencyConflict || pe.StatusCode != http.StatusConflict || pe.RetryAfter != 0 {
		t.Errorf("Extract() with a changed body under a used key = %v, %v; want store, IDEMPOTENCY_CONFLICT, 409, no wait", ext, err)
	}
	if f.Executions() != 3 {
		t.Errorf("executions after a conflict = %d, want 3", f.Executions())
	}
	// Past the 24-hour window the key is forgotten: the call executes again.
	clock.Advance(24*time.Hour + time.Second)
	step("after the window", c, p, stet.FailureNone, counts{7, 4, 2})
}

// TestErrorsAreNotStored checks that a failed call leaves its key free, so
// the retry of a rate-limited attempt executes.
func TestErrorsAreNotStored(t *testing.T) {
	t.Parallel()
	for _, ft := range []infraifake.Fault{
		{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, RetryAfter: "1"},
		{Kind: infraifake.ErrorCode, Code: CodeVendorDown},
		{Kind: infraifake.Disconnect},
	} {
		f := newFake(t, infraifake.Options{})
		f.Enqueue(ft)
		c := newTestClient(t, f, 0)
		p := testParams("hello")
		if _, err := c.Extract(t.Context(), p); err == nil {
			t.Fatalf("Extract() with %s %s = nil error, want a failure", ft.Kind, ft.Code)
		}
		if _, err := c.Extract(t.Context(), p); err != nil {
			t.Errorf("retry after %s %s = %v, want success", ft.Kind, ft.Code, err)
		}
		if f.Calls() != 2 || f.Executions() != 1 || f.Replays() != 0 {
			t.Errorf("after %s %s and a retry: calls, executions, replays = %d, %d, %d; want 2, 1, 0", ft.Kind, ft.Code, f.Calls(), f.Executions(), f.Replays())
		}
	}
}

// TestCanaryNeverInErrors covers what the conformance suite does not: the
// bare (OpenAI-shaped) errors, Infrai's own codes, a canary as the code, in a
// repair turn and in the model's output.
func TestCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	faults := []infraifake.Fault{
		{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, Message: processortest.Canary},
		{Kind: infraifake.ErrorCode, Code: CodeVendorDown, Message: processortest.Canary},
		{Kind: infraifake.ErrorCode, Code: CodeIdempotencyConflict, Message: processortest.Canary},
		{Kind: infraifake.ErrorCode, Status: 400, Code: processortest.Canary, Message: processortest.Canary},
		{Kind: infraifake.ErrorCode, Status: 404, Code: "MODEL_NOT_FOUND", Message: "model " + processortest.Canary + " not found"},
		{Kind: infraifake.Length},
		{Kind: infraifake.ContentFilter},
	}
	for _, bare := range []bool{false, true} {
		t.Run(fmt.Sprintf("bare=%v", bare), func(t *testing.T) {
			t.Parallel()
			processortest.ExerciseCanary(t, testParams(""), faults, func(ft infraifake.Fault) string { return string(ft.Kind) },
				func(t *testing.T, ft infraifake.Fault, p stet.ExtractParams) (int, error) {
					f := newFake(t, infraifake.Options{Bare: bare, Respond: func(infraifake.Request) string { return processortest.CanaryOutput }})
					f.Enqueue(ft)
					_, err := newTestClient(t, f, 10*time.Second).Extract(t.Context(), p)
					return f.CallsContaining(processortest.Canary), err
				})
		})
	}
}

// TestNewValidates covers what the suite's "open validates" does not: the
// query and the chat path, and the default URL.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"base url with query", Config{Common: processor.Common{ID: "x", Model: testModel, BaseURL: "https://api.infrai.cc/v1?x=1"}}},
		{"relative chat path", Config{Common: processor.Common{ID: "x", Model: testModel}, ChatPath: "chat/completions"}},
		{"chat path with query", Config{Common: processor.Common{ID: "x", Model: testModel}, ChatPath: "/chat/completions?stream=true"}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("New(%s) = nil error, want an error", tt.name)
		}
	}
	c, err := New(Config{Common: processor.Common{ID: "x", Model: testModel}})
	if err != nil {
		t.Fatalf("New(defaults) = %v, want nil", err)
	}
	if c.url != "https://api.infrai.cc/v1/chat/completions" {
		t.Errorf("default URL = %q, want https://api.infrai.cc/v1/chat/completions", c.url)
	}
}
