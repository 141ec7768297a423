package anthropicfake

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// post sends body to the fake and decodes the answer. header holds extra
// request headers; anthropic-version is set unless header says otherwise.
func post(t *testing.T, url string, header map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	return call(t, http.MethodPost, url, header, body)
}

// call sends one request (no body when body is empty) and decodes the
// JSON answer; header works as for post.
func call(t *testing.T, method, url string, header map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	h := http.Header{"anthropic-version": {"2023-06-01"}}
	for k, v := range header {
		h[k] = []string{v}
	}
	return fakekit.SendJSON(t, method, url, h, body)
}

const (
	testKey   = "sk-ant-test-key"
	testModel = "claude-sonnet-4-5"
)

// rateLimits are the limits the API reports in anthropic-ratelimit-*
// headers.
var rateLimits = []string{"requests", "tokens", "input-tokens", "output-tokens"}

func newFake(t *testing.T, opts Options) *Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, New(opts))
}

func keyHeader() map[string]string { return map[string]string{"x-api-key": testKey} }

const (
	validBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}}`
	toolBody  = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"name":"rec","input_schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}],"tool_choice":{"type":"tool","name":"rec"}}`
)

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	msgs := func(m string) string {
		return `{"model":"m","max_tokens":10,"messages":` + m + `}`
	}
	tests := []struct {
		name       string
		path       string
		header     map[string]string
		body       string
		wantStatus int
		wantType   string
	}{
		{"valid output_config", "/v1/messages", keyHeader(), validBody, 200, ""},
		{"valid tool use", "/v1/messages", keyHeader(), toolBody, 200, ""},
		{"bearer key", "/v1/messages", map[string]string{"Authorization": "Bearer " + testKey}, validBody, 200, ""},
		{"plain text answer", "/v1/messages", keyHeader(), msgs(`[{"role":"user","content":"hi"}]`), 200, ""},
		{"wrong key", "/v1/messages", map[string]string{"x-api-key": "sk-wrong"}, validBody, 401, "authentication_error"},
		{"no key", "/v1/messages", nil, validBody, 401, "authentication_error"},
		{"unknown path", "/v1/complete", keyHeader(), validBody, 404, "not_found_error"},
		{"path without /v1", "/messages", keyHeader(), validBody, 404, "not_found_error"},
		{"no anthropic-version", "/v1/messages", map[string]string{"x-api-key": testKey, "anthropic-version": ""}, validBody, 400, "invalid_request_error"},
		{"not JSON", "/v1/messages", keyHeader(), `{"model":`, 400, "invalid_request_error"},
		{"missing model", "/v1/messages", keyHeader(), `{"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"missing max_tokens", "/v1/messages", keyHeader(), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"missing messages", "/v1/messages", keyHeader(), `{"model":"m","max_tokens":1}`, 400, "invalid_request_error"},
		{"empty messages", "/v1/messages", keyHeader(), msgs(`[]`), 400, "invalid_request_error"},
		{"bad role", "/v1/messages", keyHeader(), msgs(`[{"role":"tool","content":"hi"}]`), 400, "invalid_request_error"},
		{"empty text block", "/v1/messages", keyHeader(), msgs(`[{"role":"user","content":[{"type":"text","text":""}]}]`), 400, "invalid_request_error"},
		{"tool_use without tool_result", "/v1/messages", keyHeader(), msgs(`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"rec","input":{}}]},{"role":"user","content":"again"}]`), 400, "invalid_request_error"},
		{"tool_use answered", "/v1/messages", keyHeader(), msgs(`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"rec","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":[{"type":"text","text":"again"}]}]}]`), 200, ""},
		{"format of another type", "/v1/messages", keyHeader(), `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"output_config":{"format":{"type":"json_object"}}}`, 400, "invalid_request_error"},
		{"format without schema", "/v1/messages", keyHeader(), `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"output_config":{"format":{"type":"json_schema"}}}`, 400, "invalid_request_error"},
		{"tool input_schema not an object", "/v1/messages", keyHeader(), `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"rec","input_schema":{"type":"array"}}]}`, 400, "invalid_request_error"},
		{"tool_choice names no tool", "/v1/messages", keyHeader(), `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"rec","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"other"}}`, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		status, header, body := post(t, f.URL()+tt.path, tt.header, tt.body)
		if status != tt.wantStatus {
			t.Errorf("%s: POST = %d %v, want %d", tt.name, status, body, tt.wantStatus)
			continue
		}
		id := header.Get("request-id")
		if !strings.HasPrefix(id, "req_") {
			t.Errorf("%s: request-id = %q, want req_…", tt.name, id)
		}
		if status == 200 {
			continue
		}
		e, _ := body["error"].(map[string]any)
		if body["type"] != "error" || e == nil {
			t.Errorf("%s: body = %v, want {\"type\":\"error\",\"error\":{…}}", tt.name, body)
			continue
		}
		if e["type"] != tt.wantType {
			t.Errorf("%s: error.type = %v, want %v", tt.name, e["type"], tt.wantType)
		}
		if msg, _ := e["message"].(string); msg == "" {
			t.Errorf("%s: error.message missing in %v", tt.name, body)
		}
		if body["request_id"] != id {
			t.Errorf("%s: request_id = %v, want the request-id header %q", tt.name, body["request_id"], id)
		}
		if got := header.Get("x-should-retry"); got != "false" {
			t.Errorf("%s: x-should-retry = %q, want false", tt.name, got)
		}
	}
	if got := f.Calls(); got != len(tests) {
		t.Errorf("Calls() = %d, want %d (every request counts)", got, len(tests))
	}
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	tests := []struct {
		name      string
		body      string
		wantStop  string
		wantBlock map[string]any
	}{
		{"output_config", validBody, "end_turn", map[string]any{"type": "text", "text": `{"a":"ok"}`}},
		{"tool use", toolBody, "tool_use", map[string]any{"type": "tool_use", "name": "rec", "input": map[string]any{"a": "ok"}}},
	}
	for _, tt := range tests {
		status, header, body := post(t, f.URL()+"/v1/messages", keyHeader(), tt.body)
		if status != 200 {
			t.Fatalf("%s: POST = %d, want 200", tt.name, status)
		}
		for _, limit := range rateLimits {
			for _, part := range []string{"limit", "remaining", "reset"} {
				if header.Get("anthropic-ratelimit-"+limit+"-"+part) == "" {
					t.Errorf("%s: header anthropic-ratelimit-%s-%s missing", tt.name, limit, part)
				}
			}
		}
		if _, err := time.Parse(time.RFC3339, header.Get("anthropic-ratelimit-requests-reset")); err != nil {
			t.Errorf("%s: anthropic-ratelimit-requests-reset is not RFC 3339: %v", tt.name, err)
		}
		if id, _ := body["id"].(string); !strings.HasPrefix(id, "msg_") {
			t.Errorf("%s: id = %q, want msg_…", tt.name, id)
		}
		if body["type"] != "message" || body["role"] != "assistant" || body["model"] != testModel {
			t.Errorf("%s: type, role, model = %v, %v, %v; want message, assistant, %s", tt.name, body["type"], body["role"], body["model"], testModel)
		}
		if body["stop_reason"] != tt.wantStop {
			t.Errorf("%s: stop_reason = %v, want %s", tt.name, body["stop_reason"], tt.wantStop)
		}
		for _, k := range []string{"stop_sequence", "stop_details"} {
			if v, ok := body[k]; !ok || v != nil {
				t.Errorf("%s: %s = %v (present %v), want null", tt.name, k, v, ok)
			}
		}
		content, _ := body["content"].([]any)
		if len(content) != 1 {
			t.Fatalf("%s: content = %v, want one block", tt.name, body["content"])
		}
		block := content[0].(map[string]any)
		for k, want := range tt.wantBlock {
			if got := fmt.Sprint(block[k]); got != fmt.Sprint(want) {
				t.Errorf("%s: content[0].%s = %v, want %v", tt.name, k, block[k], want)
			}
		}
		if block["type"] == "tool_use" {
			if id, _ := block["id"].(string); !strings.HasPrefix(id, "toolu_") {
				t.Errorf("%s: tool_use id = %q, want toolu_…", tt.name, id)
			}
		}
		usage := body["usage"].(map[string]any)
		in, out := usage["input_tokens"].(float64), usage["output_tokens"].(float64)
		if in <= 0 || out <= 0 {
			t.Errorf("%s: usage = %v, want positive token counts", tt.name, usage)
		}
	}
}

func TestFakeFaultShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault       Fault
		wantStatus  int
		wantType    string
		wantCode    any
		wantRetry   string
		wantHeaders []string
	}{
		{Fault{Kind: RateLimit}, 429, "rate_limit_error", nil, "true", []string{"retry-after"}},
		{Fault{Kind: SpendLimit}, 429, "rate_limit_error", "enforced_spend_limit_reached", "false", nil},
		{Fault{Kind: Overloaded}, 529, "overloaded_error", nil, "true", nil},
		{Fault{Kind: ServerError}, 500, "api_error", nil, "true", nil},
		{Fault{Kind: HTTPError, Status: 413}, 413, "request_too_large", nil, "false", nil},
		{Fault{Kind: HTTPError, Status: 402, Code: "linked_organization_spend_limit_reached"}, 402, "billing_error", "linked_organization_spend_limit_reached", "false", nil},
	}
	for _, tt := range tests {
		f := newFake(t, Options{})
		f.Enqueue(tt.fault)
		status, header, body := post(t, f.URL()+"/v1/messages", keyHeader(), validBody)
		if status != tt.wantStatus {
			t.Errorf("%s: status = %d, want %d", tt.fault.Kind, status, tt.wantStatus)
		}
		e, _ := body["error"].(map[string]any)
		if e["type"] != tt.wantType {
			t.Errorf("%s: error.type = %v, want %s", tt.fault.Kind, e["type"], tt.wantType)
		}
		details, _ := e["details"].(map[string]any)
		if got := details["error_code"]; got != tt.wantCode {
			t.Errorf("%s: error.details.error_code = %v, want %v", tt.fault.Kind, got, tt.wantCode)
		}
		if got := header.Get("x-should-retry"); got != tt.wantRetry {
			t.Errorf("%s: x-should-retry = %q, want %q", tt.fault.Kind, got, tt.wantRetry)
		}
		for _, h := range tt.wantHeaders {
			if header.Get(h) == "" {
				t.Errorf("%s: header %s missing", tt.fault.Kind, h)
			}
		}
	}
}

// TestFakeRandomFaults checks which faults FaultRate draws: a 429, a 500
// and a 529, nothing else. That the draws are reproducible from the seed is
// fakekit's (TestFaultsRandomAreReproducible).
func TestFakeRandomFaults(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{FaultRate: 1, Seed: 42})
	seen := map[int]int{}
	for range 30 {
		status, _, _ := post(t, f.URL()+"/v1/messages", keyHeader(), validBody)
		seen[status]++
	}
	if len(seen) != 3 || seen[429] == 0 || seen[500] == 0 || seen[529] == 0 {
		t.Errorf("30 calls at FaultRate 1 answered %v, want only and all of 429, 500, 529", seen)
	}
}
