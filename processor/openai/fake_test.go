package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
)

// post sends body to the fake and decodes the answer.
func post(t *testing.T, url, key, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("fake answered non-JSON %q: %v", raw, err)
	}
	return res.StatusCode, res.Header, out
}

func errorField(body map[string]any, field string) any {
	e, _ := body["error"].(map[string]any)
	return e[field]
}

const validBody = `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}}`

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, FakeOptions{})
	tests := []struct {
		name       string
		path       string
		key        string
		body       string
		wantStatus int
		wantType   string
		wantCode   any
	}{
		{"valid", "/v1/chat/completions", testKey, validBody, 200, "", nil},
		{"valid without /v1 prefix", "/chat/completions", testKey, validBody, 200, "", nil},
		{"wrong key", "/chat/completions", "sk-wrong", validBody, 401, "invalid_request_error", "invalid_api_key"},
		{"no key", "/chat/completions", "", validBody, 401, "invalid_request_error", nil},
		{"unknown path", "/v1/completions", testKey, validBody, 404, "invalid_request_error", nil},
		{"not JSON", "/chat/completions", testKey, `{"model":`, 400, "invalid_request_error", nil},
		{"missing model", "/chat/completions", testKey, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", nil},
		{"missing messages", "/chat/completions", testKey, `{"model":"m"}`, 400, "invalid_request_error", "missing_required_parameter"},
		{"empty messages", "/chat/completions", testKey, `{"model":"m","messages":[]}`, 400, "invalid_request_error", "empty_array"},
		{"json_schema missing", "/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}`, 400, "invalid_request_error", "missing_required_parameter"},
		{"json_schema not strict", "/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}}`, 400, "invalid_request_error", "invalid_value"},
		{"json_schema without schema", "/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true}}}`, 400, "invalid_request_error", "missing_required_parameter"},
		{"plain text format", "/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200, "", nil},
	}
	for _, tt := range tests {
		url := f.srv.URL + tt.path
		status, header, body := post(t, url, tt.key, tt.body)
		if status != tt.wantStatus {
			t.Errorf("%s: POST = %d %v, want %d", tt.name, status, body, tt.wantStatus)
			continue
		}
		if !strings.HasPrefix(header.Get("x-request-id"), "req_") {
			t.Errorf("%s: x-request-id = %q, want req_…", tt.name, header.Get("x-request-id"))
		}
		if status == 200 {
			continue
		}
		if got := errorField(body, "type"); got != tt.wantType {
			t.Errorf("%s: error.type = %v, want %v", tt.name, got, tt.wantType)
		}
		if got := errorField(body, "code"); got != tt.wantCode {
			t.Errorf("%s: error.code = %v, want %v", tt.name, got, tt.wantCode)
		}
		if _, ok := errorField(body, "message").(string); !ok {
			t.Errorf("%s: error.message missing in %v", tt.name, body)
		}
		if e, _ := body["error"].(map[string]any); e != nil {
			if _, ok := e["param"]; !ok {
				t.Errorf("%s: error.param absent, want present (null or a name)", tt.name)
			}
		}
	}
	if got := f.Calls(); got != len(tests) {
		t.Errorf("Calls() = %d, want %d (every request counts)", got, len(tests))
	}
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	f := newFake(t, FakeOptions{})
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
	f := newFake(t, FakeOptions{})
	f.Enqueue(Fault{Kind: ServerError}, Fault{Kind: RateLimit, RetryAfter: "1"})
	f.Enqueue(Fault{Kind: Refusal})
	c := newTestClient(t, f, 0)
	var got []stet.FailureClass
	for i := range 4 {
		_, err := c.Extract(t.Context(), testParams(fmt.Sprintf("report %d about marker-x", i)))
		got = append(got, stet.ClassOf(err))
	}
	want := []stet.FailureClass{stet.FailureTransient, stet.FailureRateLimited, stet.FailureRefusal, stet.FailureNone}
	if !slices.Equal(got, want) {
		t.Errorf("classes of 4 calls = %v, want %v", got, want)
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
	run := func(seed int64) []int {
		f := newFake(t, FakeOptions{FaultRate: 0.5, Seed: seed})
		var statuses []int
		for range 40 {
			status, _, _ := post(t, f.URL()+"/chat/completions", testKey, validBody)
			statuses = append(statuses, status)
		}
		return statuses
	}
	a, b := run(42), run(42)
	if !slices.Equal(a, b) {
		t.Errorf("statuses with seed 42 differ between runs:\n%v\n%v", a, b)
	}
	seen := map[int]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range []int{200, 429, 500, 503} {
		if !seen[s] {
			t.Errorf("40 calls at FaultRate 0.5 never answered %d: %v", s, a)
		}
	}
	if slices.Equal(a, run(7)) {
		t.Errorf("seeds 42 and 7 gave the same fault sequence %v", a)
	}
}

func TestFakeConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(t, FakeOptions{})
	f.Enqueue(Fault{Kind: ServerError}, Fault{Kind: ServerError}, Fault{Kind: ServerError})
	c := newTestClient(t, f, 0)
	const n = 24
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	for i := range n {
		wg.Go(func() {
			_, err := c.Extract(t.Context(), testParams(fmt.Sprintf("concurrent report %d", i)))
			if err != nil {
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

func TestMinimalInstance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, want string
	}{
		{"no schema", ``, `{}`},
		{"enum first value", `{"type":"string","enum":["b","a"]}`, `"b"`},
		{"const", `{"const":"fixed"}`, `"fixed"`},
		{"required only", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`, `{"b":0}`},
		{"nested", `{"type":"object","properties":{"o":{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]},"l":{"type":"array","items":{"type":"string"}}},"required":["o","l"]}`, `{"l":[],"o":{"x":false}}`},
		{"minItems", `{"type":"array","minItems":2,"items":{"type":"number"}}`, `[0,0]`},
		{"nullable type", `{"type":["null","string"]}`, `"ok"`},
		{"null only", `{"type":"null"}`, `null`},
		{"minimum", `{"type":"integer","minimum":2.5}`, `3`},
		{"local ref", `{"$defs":{"flag":{"type":"string","enum":["x"]}},"type":"object","properties":{"f":{"$ref":"#/$defs/flag"}},"required":["f"]}`, `{"f":"x"}`},
		{"anyOf", `{"anyOf":[{"type":"boolean"},{"type":"string"}]}`, `false`},
		{"recursive ref", `{"$ref":"#"}`, `null`},
	}
	for _, tt := range tests {
		if got := MinimalInstance(json.RawMessage(tt.schema)); got != tt.want {
			t.Errorf("MinimalInstance(%s) = %s, want %s", tt.name, got, tt.want)
		}
	}
}
