package infraifake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

const (
	testKey    = "ifr_pk_proj_test"
	testSchema = `{"type":"object","properties":{"category":{"type":"string","enum":["ok","harmful","medical_advice"]},"flags":{"type":"array","items":{"type":"string"}},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["category","flags","confidence"],"additionalProperties":false}`
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func newFake(t *testing.T, opts Options) *Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, New(opts))
}

// post sends body to the fake and returns the status, headers and raw body.
func post(t testing.TB, url, key, idemKey, body string) (int, http.Header, []byte) {
	t.Helper()
	h := http.Header{"Idempotency-Key": {idemKey}} // "" sends none
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return fakekit.Send(t, http.MethodPost, url, h, body)
}

// fakeEnvelope is the envelope as a client reads it.
type fakeEnvelope struct {
	OK    *bool           `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Metadata map[string]any `json:"metadata"`
}

func decodeEnvelope(t testing.TB, raw []byte) fakeEnvelope {
	t.Helper()
	var env fakeEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("fake answered non-JSON %q: %v", raw, err)
	}
	return env
}

const validBody = `{"messages":[{"content":"hi","role":"user"}],"model":"gpt-4.1-mini","response_format":{"json_schema":{"name":"s","schema":{"properties":{"a":{"type":"string"}},"required":["a"],"type":"object"},"strict":true},"type":"json_schema"}}` + "\n"

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	fakekit.RequestTable[[]byte]{
		Root: f.HTTP.URL(), Calls: f.Calls,
		Post: func(t testing.TB, url, key, body string) (int, http.Header, []byte) {
			return post(t, url, key, "", body)
		},
		Check: func(c fakekit.RequestCase, header http.Header, raw []byte) {
			env := decodeEnvelope(t, raw)
			id, _ := env.Metadata["request_id"].(string)
			if !uuidV7.MatchString(id) || header.Get("X-Request-Id") != id {
				t.Errorf("%s: metadata.request_id = %q, X-Request-Id = %q; want the same UUID v7", c.Name, id, header.Get("X-Request-Id"))
			}
			wantOK := c.Status == 200
			if env.OK == nil || *env.OK != wantOK {
				t.Errorf("%s: ok = %v, want %v", c.Name, env.OK, wantOK)
			}
			if wantOK {
				if env.Error != nil {
					t.Errorf("%s: error = %+v, want null", c.Name, env.Error)
				}
				return
			}
			if env.Error == nil || env.Error.Code != c.Code || env.Error.Message == "" {
				t.Errorf("%s: error = %+v, want code %s and a message", c.Name, env.Error, c.Code)
			}
			if string(env.Data) != "null" {
				t.Errorf("%s: data = %s, want null", c.Name, env.Data)
			}
		},
	}.Run(t, []fakekit.RequestCase{
		{Name: "valid", Path: "/v1/chat/completions", Key: testKey, Body: validBody, Status: 200},
		{Name: "valid, not canonical", Path: "/v1/chat/completions", Key: testKey, Body: `{"model":"m", "messages":[{"role":"user","content":"hi"}]}`, Status: 200},
		{Name: "wrong key", Path: "/v1/chat/completions", Key: "ifr_wrong", Body: validBody, Status: 401, Code: codeInvalidAPIKey},
		{Name: "no key", Path: "/v1/chat/completions", Key: "", Body: validBody, Status: 401, Code: codeInvalidAPIKey},
		{Name: "unknown path", Path: "/v1/ai/chat", Key: testKey, Body: validBody, Status: 404, Code: "NOT_FOUND"},
		{Name: "not JSON", Path: "/v1/chat/completions", Key: testKey, Body: `{"model":`, Status: 400, Code: codeInvalidRequest},
		{Name: "missing model", Path: "/v1/chat/completions", Key: testKey, Body: `{"messages":[{"role":"user","content":"hi"}]}`, Status: 400, Code: codeInvalidRequest},
		{Name: "empty messages", Path: "/v1/chat/completions", Key: testKey, Body: `{"model":"m","messages":[]}`, Status: 400, Code: codeInvalidRequest},
		{Name: "json_schema without schema", Path: "/v1/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true}}}`, Status: 400, Code: codeInvalidRequest},
		{Name: "json_schema not strict", Path: "/v1/chat/completions", Key: testKey, Body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}}`, Status: 400, Code: codeInvalidRequest},
	})
	if got := f.Executions(); got != 2 {
		t.Errorf("Executions() = %d, want 2 (only valid requests execute)", got)
	}
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, completion []byte) {
		t.Helper()
		var c map[string]any
		if err := json.Unmarshal(completion, &c); err != nil {
			t.Fatalf("completion is not JSON: %v", err)
		}
		if id, _ := c["id"].(string); !strings.HasPrefix(id, "chatcmpl-") || c["object"] != "chat.completion" || c["model"] != "gpt-4.1-mini" {
			t.Errorf("id, object, model = %v, %v, %v; want chatcmpl-…, chat.completion, gpt-4.1-mini", c["id"], c["object"], c["model"])
		}
		choices, _ := c["choices"].([]any)
		if len(choices) != 1 {
			t.Fatalf("choices = %v, want one", c["choices"])
		}
		choice := choices[0].(map[string]any)
		msg := choice["message"].(map[string]any)
		if choice["finish_reason"] != "stop" || msg["role"] != "assistant" || msg["content"] != `{"a":"ok"}` {
			t.Errorf("choice = %v, want stop with assistant content {\"a\":\"ok\"}", choice)
		}
		if r, ok := msg["refusal"]; !ok || r != nil {
			t.Errorf("message.refusal = %v (present %v), want null", r, ok)
		}
		usage := c["usage"].(map[string]any)
		p, n, tot := usage["prompt_tokens"].(float64), usage["completion_tokens"].(float64), usage["total_tokens"].(float64)
		if p <= 0 || n <= 0 || tot != p+n {
			t.Errorf("usage = %v, want positive counts that add up", usage)
		}
	}
	t.Run("envelope", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, Options{Vendor: "deepseek"})
		status, _, raw := post(t, f.URL()+"/chat/completions", testKey, "k1", validBody)
		if status != 200 {
			t.Fatalf("POST = %d %s, want 200", status, raw)
		}
		env := decodeEnvelope(t, raw)
		if env.OK == nil || !*env.OK || env.Error != nil {
			t.Errorf("ok, error = %v, %v; want true, null", env.OK, env.Error)
		}
		for _, k := range []string{"cost_usd", "latency_ms", "vendor", "cache_hit", "request_id"} {
			if _, ok := env.Metadata[k]; !ok {
				t.Errorf("metadata.%s missing in %v", k, env.Metadata)
			}
		}
		if env.Metadata["vendor"] != "deepseek" || env.Metadata["cache_hit"] != false || env.Metadata["cost_usd"].(float64) <= 0 {
			t.Errorf("metadata = %v, want vendor deepseek, cache_hit false, a positive cost", env.Metadata)
		}
		check(t, env.Data)
	})
	t.Run("bare", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, Options{Bare: true})
		status, header, raw := post(t, f.URL()+"/chat/completions", testKey, "k1", validBody)
		if status != 200 || !uuidV7.MatchString(header.Get("X-Request-Id")) {
			t.Fatalf("POST = %d with X-Request-Id %q, want 200 and a UUID v7", status, header.Get("X-Request-Id"))
		}
		check(t, raw)
		status, _, raw = post(t, f.URL()+"/chat/completions", "ifr_wrong", "", validBody)
		var e struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || status != 401 || e.Error["code"] != codeInvalidAPIKey || e.Error["type"] != "authentication_error" {
			t.Errorf("bare error = %d %s, want 401 with an OpenAI-shaped error carrying INVALID_API_KEY", status, raw)
		}
	})
}

func TestFakeIdempotency(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC))
	f := newFake(t, Options{Clock: clock})
	url := f.URL() + "/chat/completions"

	status, _, first := post(t, url, testKey, "key-1", validBody)
	if status != 200 {
		t.Fatalf("first POST = %d, want 200", status)
	}
	// The same body differently spelled is the same request.
	spaced := strings.Replace(validBody, `"model":`, `"model" : `, 1)
	status, _, replay := post(t, url, testKey, "key-1", spaced)
	if status != 200 || !bytes.Equal(replay, first) {
		t.Errorf("replay = %d %s, want 200 and the stored answer %s", status, replay, first)
	}
	if f.Executions() != 1 || f.Replays() != 1 {
		t.Errorf("after a replay: executions, replays = %d, %d; want 1, 1", f.Executions(), f.Replays())
	}
	other := strings.Replace(validBody, `"hi"`, `"hello"`, 1)
	status, _, raw := post(t, url, testKey, "key-1", other)
	if env := decodeEnvelope(t, raw); status != 409 || env.Error == nil || env.Error.Code != codeIdempotencyConflict {
		t.Errorf("same key, other body = %d %s, want 409 IDEMPOTENCY_CONFLICT", status, raw)
	}
	// Without a key every request executes.
	post(t, url, testKey, "", validBody)
	post(t, url, testKey, "", validBody)
	if f.Executions() != 3 {
		t.Errorf("after two keyless requests: executions = %d, want 3", f.Executions())
	}
	// Just inside the window the answer is still replayed; past it, not.
	clock.Advance(24*time.Hour - time.Second)
	if _, _, raw := post(t, url, testKey, "key-1", validBody); !bytes.Equal(raw, first) || f.Executions() != 3 {
		t.Errorf("replay just inside the window = %s (executions %d), want the stored answer", raw, f.Executions())
	}
	clock.Advance(time.Second)
	if status, _, raw := post(t, url, testKey, "key-1", other); status != 200 || bytes.Equal(raw, first) || f.Executions() != 4 {
		t.Errorf("key reused after the window = %d (executions %d), want a new execution", status, f.Executions())
	}
	if f.Calls() != 7 {
		t.Errorf("Calls() = %d, want 7", f.Calls())
	}
}

func TestFakeConcurrentSameKey(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: Delay, Delay: 50 * time.Millisecond})
	const n = 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		bodies [][]byte
	)
	for range n {
		wg.Go(func() {
			// Not post: t.Fatal must not be called from another goroutine.
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.URL()+"/chat/completions", strings.NewReader(validBody))
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Idempotency-Key", "same-key")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("POST: %v", err)
				return
			}
			defer res.Body.Close()
			raw, err := io.ReadAll(res.Body)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && res.StatusCode == 200 {
				bodies = append(bodies, raw)
			}
		})
	}
	wg.Wait()
	if len(bodies) != n {
		t.Fatalf("%d of %d concurrent requests answered 200", len(bodies), n)
	}
	for _, b := range bodies[1:] {
		if !bytes.Equal(b, bodies[0]) {
			t.Errorf("concurrent answers differ: %s vs %s", b, bodies[0])
		}
	}
	if f.Calls() != n || f.Executions() != 1 || f.Replays() != n-1 {
		t.Errorf("calls, executions, replays = %d, %d, %d; want %d, 1, %d", f.Calls(), f.Executions(), f.Replays(), n, n-1)
	}
}

func TestFakeRandomFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	fakekit.CheckSeeded(t, 40, func(seed int64) func() int {
		f := newFake(t, Options{FaultRate: 0.5, Seed: seed})
		return func() int {
			status, _, _ := post(t, f.URL()+"/chat/completions", testKey, "", validBody)
			return status
		}
	}, []int{200, 429, 500, 503})
}

func TestStatusForCode(t *testing.T) {
	t.Parallel()
	tests := map[string]int{
		codeRateLimitExceeded: 429, "RATE_LIMIT_TOKENS": 429, codeVendorQuotaExceeded: 429,
		codeInsufficientCredit: 402, codePaymentRequired: 402, codeInvalidAPIKey: 401,
		codeModuleNotAvailableInRegion: 403, codeIdempotencyConflict: 409,
		codeVendorDown: 502, codeVendorTimeout: 504, codeMaintenance: 503,
		codeInternalError: 500, "": 500, codeInvalidRequest: 400,
	}
	for code, want := range tests {
		if got := StatusForCode(code); got != want {
			t.Errorf("StatusForCode(%q) = %d, want %d", code, got, want)
		}
	}
}

// TestMinimalInstance keeps the cases fakekit's own tests lack: the fake's
// default answer to the profile schema the adapter's tests send, and
// exclusiveMinimum.
func TestMinimalInstance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, want string
	}{
		{"exclusiveMinimum", `{"type":"number","exclusiveMinimum":0}`, `1`},
		{"profile schema", testSchema, `{"category":"ok","confidence":0,"flags":[]}`},
	}
	for _, tt := range tests {
		if got := MinimalInstance(json.RawMessage(tt.schema)); got != tt.want {
			t.Errorf("MinimalInstance(%s) = %s, want %s", tt.name, got, tt.want)
		}
	}
}
