package azurecsfake

import (
	"cmp"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

const testKey = "0123456789abcdef0123456789abcdef"

func newFake(t *testing.T, opts Options) *Server {
	opts.APIKey = cmp.Or(opts.APIKey, testKey)
	return fakekit.Started(t, New(opts))
}

// post sends body to the fake with key and decodes the answer.
var post = fakekit.KeyPoster{Header: "Ocp-Apim-Subscription-Key"}.Post

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestFakeValidatesRequests(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	const analyze = "/contentsafety/text:analyze?api-version=2024-09-01"
	fakekit.RequestTable[map[string]any]{
		Root: f.URL(), Calls: f.Calls, Post: post,
		Check: func(c fakekit.RequestCase, header http.Header, body map[string]any) {
			if !uuidPattern.MatchString(header.Get("apim-request-id")) {
				t.Errorf("%s: apim-request-id = %q, want a UUID", c.Name, header.Get("apim-request-id"))
			}
			if c.Status == 200 {
				return
			}
			if got := fakekit.ErrorField(body, "code"); got != c.Code {
				t.Errorf("%s: error.code = %v, want %v", c.Name, got, c.Code)
			}
			if msg, _ := fakekit.ErrorField(body, "message").(string); msg == "" {
				t.Errorf("%s: error.message missing in %v", c.Name, body)
			}
		},
	}.Run(t, []fakekit.RequestCase{
		{Name: "valid", Path: analyze, Key: testKey, Body: `{"text":"hi"}`, Status: 200},
		{Name: "valid on 2023-10-01", Path: "/contentsafety/text:analyze?api-version=2023-10-01", Key: testKey, Body: `{"text":"hi"}`, Status: 200},
		{Name: "empty text", Path: analyze, Key: testKey, Body: `{"text":""}`, Status: 200},
		{Name: "no key", Path: analyze, Key: "", Body: `{"text":"hi"}`, Status: 401, Code: "401"},
		{Name: "wrong key", Path: analyze, Key: "other", Body: `{"text":"hi"}`, Status: 401, Code: "401"},
		{Name: "no api-version", Path: "/contentsafety/text:analyze", Key: testKey, Body: `{"text":"hi"}`, Status: 404, Code: "404"},
		{Name: "unknown api-version", Path: "/contentsafety/text:analyze?api-version=2020-01-01", Key: testKey, Body: `{"text":"hi"}`, Status: 404, Code: "404"},
		{Name: "wrong path", Path: "/contentsafety/image:analyze?api-version=2024-09-01", Key: testKey, Body: `{"text":"hi"}`, Status: 404, Code: "404"},
		{Name: "not JSON", Path: analyze, Key: testKey, Body: `{"text":`, Status: 400, Code: "InvalidRequestBody"},
		{Name: "no text", Path: analyze, Key: testKey, Body: `{"categories":["Hate"]}`, Status: 400, Code: "InvalidRequestBody"},
		{Name: "text too long", Path: analyze, Key: testKey, Body: `{"text":"` + strings.Repeat("ü", maxTextLength+1) + `"}`, Status: 400, Code: "InvalidRequestBody"},
		{Name: "unknown category", Path: analyze, Key: testKey, Body: `{"text":"hi","categories":["Spam"]}`, Status: 400, Code: "InvalidRequestBody"},
		{Name: "unknown output type", Path: analyze, Key: testKey, Body: `{"text":"hi","outputType":"TwoLevels"}`, Status: 400, Code: "InvalidRequestBody"},
	})
}

func TestFakeResponseShape(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{Table: []Rule{
		{Contains: "awful", Severities: Severities{hate: 3, violence: 7, selfHarm: 9}},
	}})
	const url = "/contentsafety/text:analyze?api-version=2024-09-01"
	tests := []struct {
		name string
		body string
		want []wireCategory
	}{
		{"default zero, all categories", `{"text":"fine"}`, []wireCategory{{hate, 0}, {selfHarm, 0}, {sexual, 0}, {violence, 0}}},
		{"four levels round down", `{"text":"awful","outputType":"FourSeverityLevels"}`, []wireCategory{{hate, 2}, {selfHarm, 6}, {sexual, 0}, {violence, 6}}},
		{"eight levels kept", `{"text":"awful","outputType":"EightSeverityLevels"}`, []wireCategory{{hate, 3}, {selfHarm, 7}, {sexual, 0}, {violence, 7}}},
		{"only requested categories, in request order", `{"text":"awful","categories":["Violence","Hate"]}`, []wireCategory{{violence, 6}, {hate, 2}}},
	}
	for _, tt := range tests {
		status, header, body := post(t, f.URL()+url, testKey, tt.body)
		if status != 200 {
			t.Fatalf("%s: POST = %d %v", tt.name, status, body)
		}
		if ct := header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("%s: Content-Type = %q", tt.name, ct)
		}
		if bl, ok := body["blocklistsMatch"].([]any); !ok || len(bl) != 0 {
			t.Errorf("%s: blocklistsMatch = %v, want []", tt.name, body["blocklistsMatch"])
		}
		raw, _ := json.Marshal(body["categoriesAnalysis"])
		var got []wireCategory
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: categoriesAnalysis = %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: categoriesAnalysis = %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}

func TestFakeFaultRateIsReproducible(t *testing.T) {
	t.Parallel()
	run := func() []int {
		f := newFake(t, Options{FaultRate: 0.5, Seed: 42})
		var statuses []int
		for range 20 {
			status, _, _ := post(t, f.URL()+"/contentsafety/text:analyze?api-version=2024-09-01", testKey, `{"text":"hi"}`)
			statuses = append(statuses, status)
		}
		return statuses
	}
	a, b := run(), run()
	faults := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draws: %v vs %v", a, b)
		}
		if a[i] != 200 {
			faults++
		}
	}
	if faults == 0 || faults == len(a) {
		t.Errorf("FaultRate 0.5 gave %d faults in %d calls, want some but not all", faults, len(a))
	}
}

func TestFakeDelayThenAnswer(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.Enqueue(Fault{Kind: Delay, Delay: 10 * time.Millisecond, Header: http.Header{"X-Test": {"delayed"}}})
	status, header, body := post(t, f.URL()+"/contentsafety/text:analyze?api-version=2024-09-01", testKey, `{"text":"hi"}`)
	if status != 200 || header.Get("X-Test") != "delayed" || body["categoriesAnalysis"] == nil {
		t.Errorf("POST after a Delay fault = %d %v %v, want 200 with the fault's header and an analysis", status, header, body)
	}
}
