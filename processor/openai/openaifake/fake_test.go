package openaifake

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

const testKey = "sk-test-key"

func newFake(t *testing.T, opts Options) *Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, New(opts))
}

// post sends body to the fake with key and decodes the answer.
var post = fakekit.KeyPoster{Header: "Authorization", Prefix: "Bearer "}.Post

const validBody = `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}}`

// bodyWith is validBody with prompt as the user message.
func bodyWith(prompt string) string {
	p, _ := json.Marshal(prompt)
	return strings.Replace(validBody, `"content":"hi"`, `"content":`+string(p), 1)
}

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	fakekit.RequestTable[map[string]any]{
		Root: f.HTTP.URL(), Calls: f.Calls, Post: post,
		Check: func(c fakekit.RequestCase, header http.Header, body map[string]any) {
			if !strings.HasPrefix(header.Get("x-request-id"), "req_") {
				t.Errorf("%s: x-request-id = %q, want req_…", c.Name, header.Get("x-request-id"))
			}
			if c.Status == 200 {
				return
			}
			if got := fakekit.ErrorField(body, "type"); got != c.Type {
				t.Errorf("%s: error.type = %v, want %v", c.Name, got, c.Type)
			}
			var want any // a Code of "" is error.code null
			if c.Code != "" {
				want = c.Code
			}
			if got := fakekit.ErrorField(body, "code"); got != want {
				t.Errorf("%s: error.code = %v, want %v", c.Name, got, want)
			}
			if _, ok := fakekit.ErrorField(body, "message").(string); !ok {
				t.Errorf("%s: error.message missing in %v", c.Name, body)
			}
			if e, _ := body["error"].(map[string]any); e != nil {
				if _, ok := e["param"]; !ok {
					t.Errorf("%s: error.param absent, want present (null or a name)", c.Name)
				}
			}
		},
	}.Run(t, []fakekit.RequestCase{
		{Name: "valid", Path: "/v1/chat/completions", Key: testKey, Body: validBody, Status: 200},
		{Name: "valid without /v1 prefix", Path: "/chat/completions", Key: testKey, Body: validBody, Status: 200},
		{Name: "wrong key", Path: "/chat/completions", Key: "sk-wrong", Body: validBody, Status: 401, Type: "invalid_request_error", Code: "invalid_api_key"},
		{Name: "no key", Path: "/chat/completions", Key: "", Body: validBody, Status: 401, Type: "invalid_request_error"},
		{Name: "unknown path", Path: "/v1/completions", Key: testKey, Body: validBody, Status: 404, Type: "invalid_request_error"},
		{Name: "not JSON", Path: "/chat/completions", Key: testKey, Body: `{"model":`, Status: 400, Type: "invalid_request_error"},
		{Name: "missing model", Path: "/chat/completions", Key: testKey, Body: `{"messages":[{"role":"user","content":"hi"}]}`, Status: 400, Type: "invalid_request_error"},
		{Name: "missing messages", Path: "/chat/completions", Key: testKey, Body: `{"model":"m"}`, Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter"},
		{Name: "empty messages", Path: "/chat/completions", Key: testKey, Body: `{"model":"m","messages":[]}`, Status: 400, Type: "invalid_request_error", Code: "empty_array"},
		{Name: "json_schema missing", Path: "/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}`, Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter"},
		{Name: "json_schema not strict", Path: "/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}}`, Status: 400, Type: "invalid_request_error", Code: "invalid_value"},
		{Name: "json_schema without schema", Path: "/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true}}}`, Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter"},
		{Name: "plain text format", Path: "/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, Status: 200},
	})
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	status, header, body := post(t, f.URL()+"/chat/completions", testKey, validBody)
	if status != 200 {
		t.Fatalf("POST = %d, want 200", status)
	}
	for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
		if header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if id, _ := body["id"].(string); !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id = %q, want chatcmpl-…", id)
	}
	if body["object"] != "chat.completion" || body["model"] != "gpt-4.1-mini" {
		t.Errorf("object, model = %v, %v; want chat.completion, gpt-4.1-mini", body["object"], body["model"])
	}
	if _, ok := body["created"].(float64); !ok {
		t.Errorf("created = %v, want a number", body["created"])
	}
	choices, _ := body["choices"].([]any)
	if len(choices) != 1 {
		t.Fatalf("choices = %v, want one", body["choices"])
	}
	choice := choices[0].(map[string]any)
	if lp, ok := choice["logprobs"]; !ok || lp != nil {
		t.Errorf("logprobs = %v (present %v), want null", lp, ok)
	}
	if choice["finish_reason"] != "stop" || choice["index"] != 0.0 {
		t.Errorf("finish_reason, index = %v, %v; want stop, 0", choice["finish_reason"], choice["index"])
	}
	msg := choice["message"].(map[string]any)
	if r, ok := msg["refusal"]; !ok || r != nil {
		t.Errorf("message.refusal = %v (present %v), want null", r, ok)
	}
	if msg["role"] != "assistant" || msg["content"] != `{"a":"ok"}` {
		t.Errorf("message = %v, want assistant with {\"a\":\"ok\"}", msg)
	}
	usage := body["usage"].(map[string]any)
	p, c, tot := usage["prompt_tokens"].(float64), usage["completion_tokens"].(float64), usage["total_tokens"].(float64)
	if p <= 0 || c <= 0 || tot != p+c {
		t.Errorf("usage = %v, want positive counts that add up", usage)
	}
}

func TestFakeFaultQueueAndCounts(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: ServerError}, Fault{Kind: RateLimit, RetryAfter: "1"})
	f.Enqueue(Fault{Kind: Refusal})
	var got []string
	for i := range 4 {
		status, _, body := post(t, f.URL()+"/chat/completions", testKey, bodyWith(fmt.Sprintf("report %d about marker-x", i)))
		answer := strconv.Itoa(status)
		if choices, _ := body["choices"].([]any); len(choices) == 1 {
			if msg, _ := choices[0].(map[string]any)["message"].(map[string]any); msg["refusal"] != nil {
				answer += " refusal"
			}
		}
		got = append(got, answer)
	}
	want := []string{"500", "429", "200 refusal", "200"}
	if !slices.Equal(got, want) {
		t.Errorf("answers to 4 calls = %v, want %v", got, want)
	}
	if n := f.Calls(); n != 4 {
		t.Errorf("Calls() = %d, want 4", n)
	}
	if n := f.CallsContaining("marker-x"); n != 4 {
		t.Errorf("CallsContaining(marker-x) = %d, want 4", n)
	}
	if n := f.CallsContaining("report 2 "); n != 1 {
		t.Errorf("CallsContaining(report 2) = %d, want 1", n)
	}
	if n := f.CallsContaining("absent"); n != 0 {
		t.Errorf("CallsContaining(absent) = %d, want 0", n)
	}
}

func TestFakeRandomFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	fakekit.CheckSeeded(t, 40, func(seed int64) func() int {
		f := newFake(t, Options{FaultRate: 0.5, Seed: seed})
		return func() int { status, _, _ := post(t, f.URL()+"/chat/completions", testKey, validBody); return status }
	}, []int{200, 429, 500, 503})
}

func TestFakeConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: ServerError}, Fault{Kind: ServerError}, Fault{Kind: ServerError})
	const n = 24
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	for i := range n {
		wg.Go(func() {
			status, _, _ := post(t, f.URL()+"/chat/completions", testKey, bodyWith(fmt.Sprintf("concurrent report %d", i)))
			if status != http.StatusOK {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := f.Calls(); got != n {
		t.Errorf("Calls() = %d, want %d", got, n)
	}
	if failed != 3 {
		t.Errorf("failed calls = %d, want the 3 scripted faults", failed)
	}
	if got := f.CallsContaining("concurrent report"); got != n {
		t.Errorf("CallsContaining = %d, want %d", got, n)
	}
}

var fakeT0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// budgetBody is validBody with a completion budget: the limits charge it
// 5 prompt tokens ("hi" and the message framing) plus maxTokens.
func budgetBody(maxTokens int) string {
	return strings.Replace(validBody, `"messages"`, fmt.Sprintf(`"max_completion_tokens":%d,"messages"`, maxTokens), 1)
}

func TestFakeLimits(t *testing.T) {
	t.Parallel()
	type step struct {
		advance    time.Duration
		body       string
		wantStatus int
		wantType   string            // error.type of a 429
		want       map[string]string // headers; "" means absent
	}
	tests := []struct {
		name  string
		opts  Options
		steps []step
	}{
		{
			name: "requests per minute",
			opts: Options{RPM: 3, LimitRetryAfter: true},
			steps: []step{
				{0, validBody, 200, "", map[string]string{"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "20s", "retry-after-ms": ""}},
				{0, validBody, 200, "", map[string]string{"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "40s"}},
				{0, validBody, 200, "", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s"}},
				{0, validBody, 429, "requests", map[string]string{"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s", "retry-after-ms": "20000", "Retry-After": "20"}},
				{19 * time.Second, validBody, 429, "requests", map[string]string{"x-ratelimit-reset-requests": "41s", "retry-after-ms": "1000", "Retry-After": "1"}},
				{time.Second, validBody, 200, "", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s"}},
			},
		},
		{
			name: "tokens per minute",
			opts: Options{TPM: 300},
			steps: []step{
				{0, budgetBody(95), 200, "", map[string]string{"x-ratelimit-limit-tokens": "300", "x-ratelimit-remaining-tokens": "200", "x-ratelimit-reset-tokens": "20s", "x-ratelimit-limit-requests": "500"}},
				{0, budgetBody(95), 200, "", map[string]string{"x-ratelimit-remaining-tokens": "100"}},
				{0, budgetBody(95), 200, "", map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0s"}},
				{0, budgetBody(95), 429, "tokens", map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0s", "retry-after-ms": ""}},
				{0, budgetBody(400), 429, "tokens", map[string]string{"x-ratelimit-remaining-tokens": "0"}},
				{10 * time.Second, budgetBody(45), 200, "", map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0s"}},
				// No budget: 5 tokens at admission, the completion's 3 after.
				{2 * time.Second, validBody, 200, "", map[string]string{"x-ratelimit-remaining-tokens": "5"}},
				{0, validBody, 429, "tokens", map[string]string{"x-ratelimit-remaining-tokens": "2"}},
			},
		},
		{
			name: "quantized window",
			opts: Options{RPM: 120, LimitWindow: time.Second, LimitRetryAfter: true},
			steps: []step{
				{0, validBody, 200, "", map[string]string{"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "500ms"}},
				{0, validBody, 200, "", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}},
				{0, validBody, 429, "requests", map[string]string{"retry-after-ms": "500", "Retry-After": "1"}},
				{300 * time.Millisecond, validBody, 429, "requests", map[string]string{"retry-after-ms": "200", "x-ratelimit-reset-requests": "700ms"}},
				{200 * time.Millisecond, validBody, 200, "", nil},
			},
		},
	}
	for _, tt := range tests {
		clock := stet.NewManualClock(fakeT0)
		tt.opts.Clock = clock
		f := newFake(t, tt.opts)
		for i, s := range tt.steps {
			clock.Advance(s.advance)
			status, header, body := post(t, f.URL()+"/chat/completions", testKey, s.body)
			if status != s.wantStatus {
				t.Errorf("%s: step %d: POST = %d %v, want %d", tt.name, i, status, body, s.wantStatus)
				continue
			}
			if status == http.StatusTooManyRequests {
				if got := fakekit.ErrorField(body, "type"); got != s.wantType {
					t.Errorf("%s: step %d: error.type = %v, want %v", tt.name, i, got, s.wantType)
				}
				if got := fakekit.ErrorField(body, "code"); got != "rate_limit_exceeded" {
					t.Errorf("%s: step %d: error.code = %v, want rate_limit_exceeded", tt.name, i, got)
				}
			}
			for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
				if header.Get(h) == "" {
					t.Errorf("%s: step %d: header %s missing", tt.name, i, h)
				}
			}
			for h, want := range s.want {
				if got := header.Get(h); got != want {
					t.Errorf("%s: step %d: header %s = %q, want %q", tt.name, i, h, got, want)
				}
			}
		}
	}
}

func TestFakeLimitMessages(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(fakeT0)
	f := newFake(t, Options{RPM: 2, TPM: 50, Clock: clock})
	tests := []struct {
		name    string
		advance time.Duration
		body    string
		want    string
	}{
		{"requests", 0, validBody, ""},
		{"requests", 0, validBody, ""},
		{"requests", 0, validBody, "Rate limit reached for gpt-4.1-mini in organization org-fake on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in 30s."},
		{"too large", time.Minute, budgetBody(60), "Request too large for gpt-4.1-mini in organization org-fake on tokens per min (TPM): Limit 50, Requested 65."},
		{"tokens", 0, budgetBody(40), ""},
		{"tokens", 0, budgetBody(40), "Rate limit reached for gpt-4.1-mini in organization org-fake on tokens per min (TPM): Limit 50, Used 45, Requested 45. Please try again in 48s."},
	}
	for _, tt := range tests {
		clock.Advance(tt.advance)
		status, _, body := post(t, f.URL()+"/chat/completions", testKey, tt.body)
		msg, _ := fakekit.ErrorField(body, "message").(string)
		switch {
		case tt.want == "" && status != 200:
			t.Errorf("%s: POST = %d %v, want 200", tt.name, status, body)
		case tt.want != "" && (status != 429 || !strings.HasPrefix(msg, tt.want)):
			t.Errorf("%s: POST = %d %q, want 429 %q…", tt.name, status, msg, tt.want)
		}
	}
}

func TestFakeWithinLimitsNeverLimits(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(fakeT0)
	// One request and 10 tokens a second; each call costs 8 tokens.
	f := newFake(t, Options{RPM: 60, TPM: 600, LimitWindow: time.Second, Clock: clock})
	for i := range 120 {
		if status, _, body := post(t, f.URL()+"/chat/completions", testKey, validBody); status != 200 {
			t.Fatalf("call %d at one a second: POST = %d %v, want 200", i, status, body)
		}
		clock.Advance(time.Second)
	}
	// The limit is live: a second call in the same second is refused.
	post(t, f.URL()+"/chat/completions", testKey, validBody)
	if status, _, _ := post(t, f.URL()+"/chat/completions", testKey, validBody); status != 429 {
		t.Errorf("second call within a second at 60 RPM / 1s window: POST = %d, want 429", status)
	}
	s := f.Stats()
	if s.Admitted != 121 || s.Limited != 1 || s.Tokens != 121*8 {
		t.Errorf("Stats() = admitted %d, limited %d, tokens %d; want 121, 1, %d", s.Admitted, s.Limited, s.Tokens, 121*8)
	}
}

func TestFakeLimitsUnderConcurrency(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(fakeT0) // never moves: no refill
	f := newFake(t, Options{RPM: 10, Clock: clock})
	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { post(t, f.URL()+"/chat/completions", testKey, validBody) })
	}
	wg.Wait()
	s := f.Stats()
	if s.Calls != n || s.Admitted != 10 || s.Limited != n-10 {
		t.Errorf("%d concurrent calls at 10 RPM: calls %d, admitted %d, limited %d; want %d, 10, %d", n, s.Calls, s.Admitted, s.Limited, n, n-10)
	}
	if s.Status[200] != 10 || s.Status[429] != n-10 {
		t.Errorf("Stats().Status = %v, want 10 × 200 and %d × 429", s.Status, n-10)
	}
}

func TestFakeStats(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(fakeT0)
	f := newFake(t, Options{RPM: 120, LimitWindow: time.Second, Clock: clock})
	f.Enqueue(Fault{Kind: Disconnect})
	for _, advance := range []time.Duration{0, 0, 0, time.Second, 0, 0} {
		clock.Advance(advance)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.URL()+"/chat/completions", strings.NewReader(validBody))
		req.Header.Set("Authorization", "Bearer "+testKey)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}
	post(t, f.URL()+"/chat/completions", testKey, `{"model":"m"}`) // invalid: neither admitted nor limited
	s := f.Stats()
	// Second 0: a disconnect, a 200, a 429. Second 1: two 200s, a 429 and
	// the invalid request.
	wantStatus := map[int]int{0: 1, 200: 3, 400: 1, 429: 2}
	if fmt.Sprint(s.Status) != fmt.Sprint(wantStatus) {
		t.Errorf("Stats().Status = %v, want %v", s.Status, wantStatus)
	}
	wantWindows := []Window{
		{Start: fakeT0, Calls: 3, Admitted: 2, Limited: 1, Tokens: 5 + 8},
		{Start: fakeT0.Add(time.Second), Calls: 4, Admitted: 2, Limited: 1, Tokens: 16},
	}
	if !slices.Equal(s.Windows, wantWindows) {
		t.Errorf("Stats().Windows = %+v, want %+v", s.Windows, wantWindows)
	}
	if s.Calls != 7 || s.Admitted != 4 || s.Limited != 2 || s.Tokens != 29 {
		t.Errorf("Stats() = %+v, want 7 calls, 4 admitted, 2 limited, 29 tokens", s)
	}
}

func TestFakeLatencyAndLimitsAreReproducible(t *testing.T) {
	t.Parallel()
	run := func(seed int64) []string {
		clock := stet.NewManualClock(fakeT0)
		f := newFake(t, Options{Seed: seed, FaultRate: 0.3, LatencyMin: time.Millisecond, LatencyMax: 4 * time.Millisecond, RPM: 600, LimitWindow: time.Second, Clock: clock})
		var out []string
		for i := range 30 {
			if i%3 == 0 {
				clock.Advance(150 * time.Millisecond)
			}
			status, h, _ := post(t, f.URL()+"/chat/completions", testKey, validBody)
			ms := h.Get("openai-processing-ms")
			if status == 200 {
				if n, err := strconv.Atoi(ms); err != nil || n < 1 || n > 4 {
					t.Errorf("seed %d call %d: openai-processing-ms = %q, want 1…4", seed, i, ms)
				}
			}
			out = append(out, fmt.Sprintf("%d/%s/%s", status, ms, h.Get("x-ratelimit-remaining-requests")))
		}
		return out
	}
	a, b := run(42), run(42)
	if !slices.Equal(a, b) {
		t.Errorf("answers with seed 42 differ between runs:\n%v\n%v", a, b)
	}
	if slices.Equal(a, run(7)) {
		t.Errorf("seeds 42 and 7 gave the same answers %v", a)
	}
	if !slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "429/") }) {
		t.Errorf("30 calls at 3 per 150ms against 10 a second never answered 429: %v", a)
	}
}
