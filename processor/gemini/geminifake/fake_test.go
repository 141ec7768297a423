package geminifake

import (
	"cmp"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stetlabs/stet/lab/fakekit"
)

const testKey = "AIzaTestKey-0000"

// responseIDShape is what the adapter keeps of a responseId (its safeID):
// at most 128 base64url characters, or '.', ':' and '='.
var responseIDShape = regexp.MustCompile(`^[A-Za-z0-9_.:=-]{1,128}$`)

func newFake(t *testing.T, opts Options) *Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, New(opts))
}

// post sends body to the fake with key and decodes the answer.
var post = fakekit.KeyPoster{Header: "x-goog-api-key"}.Post

const (
	genPath   = "/v1beta/models/gemini-2.5-flash:generateContent"
	validBody = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}`
)

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	fakekit.RequestTable[map[string]any]{
		Root: f.URL(), Calls: f.Calls, Post: post,
		Check: func(c fakekit.RequestCase, header http.Header, body map[string]any) {
			if c.Status == 404 {
				if body != nil {
					t.Errorf("%s: 404 answered %v, want Google's HTML page", c.Name, body)
				}
				return
			}
			if got := header.Get("Content-Type"); got != "application/json; charset=UTF-8" {
				t.Errorf("%s: Content-Type = %q, want application/json; charset=UTF-8", c.Name, got)
			}
			if c.Status == 200 {
				return
			}
			// Code is the error's RPC status; error.code is the HTTP status.
			if got := fakekit.ErrorField(body, "status"); got != c.Code {
				t.Errorf("%s: error.status = %v, want %v", c.Name, got, c.Code)
			}
			if got := fakekit.ErrorField(body, "code"); got != float64(c.Status) {
				t.Errorf("%s: error.code = %v, want %d", c.Name, got, c.Status)
			}
			if msg, ok := fakekit.ErrorField(body, "message").(string); !ok || msg == "" {
				t.Errorf("%s: error.message missing in %v", c.Name, body)
			}
		},
	}.Run(t, []fakekit.RequestCase{
		{Name: "valid", Path: genPath, Key: testKey, Body: validBody, Status: 200},
		{Name: "valid on v1", Path: "/v1/models/gemini-2.5-flash:generateContent", Key: testKey, Body: validBody, Status: 200},
		{Name: "key as query parameter", Path: genPath + "?key=" + testKey, Key: "", Body: validBody, Status: 200},
		{Name: "responseSchema instead", Path: genPath, Key: testKey, Body: `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"OBJECT"}}}`, Status: 200},
		{Name: "plain text answer", Path: genPath, Key: testKey, Body: `{"contents":[{"parts":[{"text":"hi"}]}]}`, Status: 200},
		{Name: "wrong key", Path: genPath, Key: "AIza-wrong", Body: validBody, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "no key", Path: genPath, Key: "", Body: validBody, Status: 403, Code: "PERMISSION_DENIED"},
		{Name: "unknown path", Path: "/v1beta/models/gemini-2.5-flash:predict", Key: testKey, Body: validBody, Status: 404},
		{Name: "chat completions path", Path: "/v1/chat/completions", Key: testKey, Body: validBody, Status: 404},
		{Name: "not JSON", Path: genPath, Key: testKey, Body: `{"contents":`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "unknown top-level field", Path: genPath, Key: testKey, Body: `{"contents":[{"parts":[{"text":"hi"}]}],"automaticContinuation":false}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "unknown generationConfig field", Path: genPath, Key: testKey, Body: `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"httpOptions":{}}}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "no contents", Path: genPath, Key: testKey, Body: `{}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "empty contents", Path: genPath, Key: testKey, Body: `{"contents":[]}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "bad role", Path: genPath, Key: testKey, Body: `{"contents":[{"role":"assistant","parts":[{"text":"hi"}]}]}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "no parts", Path: genPath, Key: testKey, Body: `{"contents":[{"role":"user","parts":[]}]}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "empty text part", Path: genPath, Key: testKey, Body: `{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":""}]}]}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "both schemas", Path: genPath, Key: testKey, Body: `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"OBJECT"},"responseJsonSchema":{"type":"object"}}}`, Status: 400, Code: "INVALID_ARGUMENT"},
		{Name: "schema without JSON mime type", Path: genPath, Key: testKey, Body: `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"responseJsonSchema":{"type":"object"}}}`, Status: 400, Code: "INVALID_ARGUMENT"},
	})
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{ThoughtsTokens: 5})
	status, header, body := post(t, f.URL()+genPath, testKey, validBody)
	if status != 200 {
		t.Fatalf("POST = %d, want 200", status)
	}
	if got := header.Get("x-request-id"); got != "" {
		t.Errorf("x-request-id = %q, want none (the API sends no request ID header)", got)
	}
	if got := header.Get("Server"); got != "scaffolding on HTTPServer2" {
		t.Errorf("Server = %q, want Google's front end", got)
	}
	if id, _ := body["responseId"].(string); !responseIDShape.MatchString(id) {
		t.Errorf("responseId = %q, want a base64url ID", id)
	}
	if body["modelVersion"] != "gemini-2.5-flash" {
		t.Errorf("modelVersion = %v, want the requested model", body["modelVersion"])
	}
	cands, _ := body["candidates"].([]any)
	if len(cands) != 1 {
		t.Fatalf("candidates = %v, want one", body["candidates"])
	}
	cand := cands[0].(map[string]any)
	if cand["finishReason"] != "STOP" || cand["index"] != 0.0 {
		t.Errorf("finishReason, index = %v, %v; want STOP, 0", cand["finishReason"], cand["index"])
	}
	content := cand["content"].(map[string]any)
	parts := content["parts"].([]any)
	if content["role"] != "model" || len(parts) != 1 || parts[0].(map[string]any)["text"] != `{"a":"ok"}` {
		t.Errorf("content = %v, want one model part with {\"a\":\"ok\"}", content)
	}
	usage := body["usageMetadata"].(map[string]any)
	p, c, th, tot := usage["promptTokenCount"].(float64), usage["candidatesTokenCount"].(float64), usage["thoughtsTokenCount"].(float64), usage["totalTokenCount"].(float64)
	if p <= 0 || c <= 0 || th != 5 || tot != p+c+th {
		t.Errorf("usageMetadata = %v, want positive counts that add up, thoughts 5", usage)
	}
}

func TestFakeErrorShapes(t *testing.T) {
	t.Parallel()
	detailTypes := func(body map[string]any) []string {
		details, _ := fakekit.ErrorField(body, "details").([]any)
		var types []string
		for _, d := range details {
			types = append(types, d.(map[string]any)["@type"].(string))
		}
		return types
	}
	tests := []struct {
		fault      Fault
		wantStatus int
		wantRPC    string
		wantTypes  []string
	}{
		{Fault{Kind: RateLimit, RetryDelay: "7s"}, 429, "RESOURCE_EXHAUSTED", []string{"type.googleapis.com/google.rpc.QuotaFailure", "type.googleapis.com/google.rpc.Help", "type.googleapis.com/google.rpc.RetryInfo"}},
		{Fault{Kind: Quota}, 429, "RESOURCE_EXHAUSTED", []string{"type.googleapis.com/google.rpc.QuotaFailure", "type.googleapis.com/google.rpc.Help"}},
		{Fault{Kind: Unauthorized}, 400, "INVALID_ARGUMENT", []string{"type.googleapis.com/google.rpc.ErrorInfo", "type.googleapis.com/google.rpc.LocalizedMessage"}},
		{Fault{Kind: HTTPError, Status: 403, Reason: "SERVICE_DISABLED"}, 403, "PERMISSION_DENIED", []string{"type.googleapis.com/google.rpc.ErrorInfo"}},
		{Fault{Kind: ServerError, Status: 503}, 503, "UNAVAILABLE", nil},
		{Fault{Kind: RegionUnsupported}, 400, "FAILED_PRECONDITION", nil},
	}
	for _, tt := range tests {
		f := newFake(t, Options{})
		f.Enqueue(tt.fault)
		status, _, body := post(t, f.URL()+genPath, testKey, validBody)
		if status != tt.wantStatus || fakekit.ErrorField(body, "status") != tt.wantRPC {
			t.Errorf("%s: POST = %d %v, want %d %s", tt.fault.Kind, status, fakekit.ErrorField(body, "status"), tt.wantStatus, tt.wantRPC)
		}
		if got := detailTypes(body); !slices.Equal(got, tt.wantTypes) {
			t.Errorf("%s: detail types = %v, want %v", tt.fault.Kind, got, tt.wantTypes)
		}
	}

	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: Quota, RetryDelay: "43s"})
	_, _, body := post(t, f.URL()+genPath, testKey, validBody)
	details := fakekit.ErrorField(body, "details").([]any)
	v := details[0].(map[string]any)["violations"].([]any)[0].(map[string]any)
	if !strings.Contains(v["quotaId"].(string), "PerDay") || v["quotaValue"] != "250" {
		t.Errorf("Quota violation = %v, want a per-day quotaId and quotaValue \"250\" (an int64 as a string)", v)
	}
	if got := details[2].(map[string]any)["retryDelay"]; got != "43s" {
		t.Errorf("RetryInfo.retryDelay = %v, want 43s", got)
	}
}

func TestFakeBlockedAnswers(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: Finish}, Fault{Kind: PromptBlocked, BlockReason: "PROHIBITED_CONTENT"}, Fault{Kind: Finish, FinishReason: "CONTINUATION"})

	_, _, body := post(t, f.URL()+genPath, testKey, validBody)
	cand := body["candidates"].([]any)[0].(map[string]any)
	if _, ok := cand["content"]; ok || cand["finishReason"] != "SAFETY" || cand["safetyRatings"] == nil {
		t.Errorf("SAFETY candidate = %v, want no content, finishReason SAFETY and safety ratings", cand)
	}

	_, _, body = post(t, f.URL()+genPath, testKey, validBody)
	if _, ok := body["candidates"]; ok {
		t.Errorf("blocked prompt answered candidates %v, want none", body["candidates"])
	}
	if fb, _ := body["promptFeedback"].(map[string]any); fb["blockReason"] != "PROHIBITED_CONTENT" {
		t.Errorf("promptFeedback = %v, want blockReason PROHIBITED_CONTENT", body["promptFeedback"])
	}

	_, _, body = post(t, f.URL()+genPath, testKey, validBody)
	cand = body["candidates"].([]any)[0].(map[string]any)
	if tok, _ := cand["continuationToken"].(string); tok == "" || cand["finishReason"] != "CONTINUATION" {
		t.Errorf("CONTINUATION candidate = %v, want a continuationToken", cand)
	}
}

func TestFakeRandomFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	fakekit.CheckSeeded(t, 40, func(seed int64) func() int {
		f := newFake(t, Options{FaultRate: 0.5, Seed: seed})
		return func() int { status, _, _ := post(t, f.URL()+genPath, testKey, validBody); return status }
	}, []int{200, 429, 500, 503})
}

// TestMinimalInstance keeps the one case fakekit's own tests lack.
func TestMinimalInstance(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"number","exclusiveMinimum":1}`)
	if got, want := MinimalInstance(schema), "2"; got != want {
		t.Errorf("MinimalInstance(%s) = %s, want %s", schema, got, want)
	}
}

func TestFakeBatchValidates(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	const create = "/v1beta/models/gemini-2.5-flash:batchGenerateContent"
	request := `{"request":` + validBody + `,"metadata":{"key":"job_1"}}`
	tests := []struct {
		name       string
		key        string
		body       string
		wantStatus int
		wantRPC    any
	}{
		{"valid", testKey, `{"batch":{"displayName":"b","inputConfig":{"requests":{"requests":[` + request + `]}}}}`, 200, nil},
		{"no key", "", `{"batch":{"displayName":"b","inputConfig":{"requests":{"requests":[` + request + `]}}}}`, 403, "PERMISSION_DENIED"},
		{"wrong key", "AIza-wrong", `{"batch":{"displayName":"b","inputConfig":{"requests":{"requests":[` + request + `]}}}}`, 400, "INVALID_ARGUMENT"},
		{"no display name", testKey, `{"batch":{"inputConfig":{"requests":{"requests":[` + request + `]}}}}`, 400, "INVALID_ARGUMENT"},
		{"no input", testKey, `{"batch":{"displayName":"b"}}`, 400, "INVALID_ARGUMENT"},
		{"empty requests", testKey, `{"batch":{"displayName":"b","inputConfig":{"requests":{"requests":[]}}}}`, 400, "INVALID_ARGUMENT"},
		{"invalid request", testKey, `{"batch":{"displayName":"b","inputConfig":{"requests":{"requests":[{"request":{"contents":[]}}]}}}}`, 400, "INVALID_ARGUMENT"},
		{"unknown file", testKey, `{"batch":{"displayName":"b","inputConfig":{"fileName":"files/nope"}}}`, 404, "NOT_FOUND"},
		{"not JSON", testKey, `{"batch":`, 400, "INVALID_ARGUMENT"},
	}
	for _, tt := range tests {
		status, _, body := post(t, f.URL()+create, tt.key, tt.body)
		if status != tt.wantStatus || (tt.wantRPC != nil && fakekit.ErrorField(body, "status") != tt.wantRPC) {
			t.Errorf("%s: POST = %d %v, want %d %v", tt.name, status, fakekit.ErrorField(body, "status"), tt.wantStatus, tt.wantRPC)
		}
	}
	if n := f.BatchCounts(); n.CreateCalls != len(tests) || n.Created != 1 {
		t.Errorf("counts = %+v, want %d creating calls, 1 created", n, len(tests))
	}
	if n := f.Calls(); n != 0 {
		t.Errorf("Calls() = %d, want 0: batch routes are counted apart", n)
	}
}
