package fakekit

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Started registers s's Close with t.Cleanup and returns s: a fake started
// for one test.
func Started[S interface{ Close() }](t testing.TB, s S) S {
	t.Cleanup(s.Close)
	return s
}

// KeyHeader returns the header that carries a credential: name set to
// prefix+key, or no header when key is empty.
func KeyHeader(name, prefix, key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{name: {prefix + key}}
}

// KeyPoster posts to a fake from a test with the credential a provider
// reads from one header: Header set to Prefix and the key.
type KeyPoster struct{ Header, Prefix string }

// Post sends body to url with key (no credential when key is empty) and
// decodes the answer as SendJSON does.
func (p KeyPoster) Post(t testing.TB, url, key, body string) (int, http.Header, map[string]any) {
	t.Helper()
	return SendJSON(t, http.MethodPost, url, KeyHeader(p.Header, p.Prefix, key), body)
}

// ErrorField reads error.<field> of a decoded error body, or nil.
func ErrorField(body map[string]any, field string) any {
	e, _ := body["error"].(map[string]any)
	return e[field]
}

// RequestCase is one row of a fake's request-validation table: a POST of
// Body to Path (below the fake's root URL) with Key, the status the fake
// must answer and, for an error, the provider's error Type and Code (""
// where the provider has none or the row does not check it).
type RequestCase struct {
	Name   string
	Path   string
	Key    string
	Body   string
	Status int
	Type   string
	Code   string
}

// RequestTable checks a fake's request validation from a test. B is the
// answer as Post returns it (a decoded object or the raw body).
type RequestTable[B any] struct {
	Root  string     // the fake's root URL; a case's Path is appended
	Calls func() int // the fake's call counter
	Post  func(t testing.TB, url, key, body string) (int, http.Header, B)
	// Check checks the rest of an answer whose status was the case's, and
	// reports with t.Errorf naming the case.
	Check func(c RequestCase, header http.Header, body B)
}

// Run posts every case, checks its status and has Check look at the rest;
// afterwards the fake must have counted every request.
func (r RequestTable[B]) Run(t testing.TB, cases []RequestCase) {
	t.Helper()
	for _, c := range cases {
		status, header, body := r.Post(t, r.Root+c.Path, c.Key, c.Body)
		if status != c.Status {
			shown := any(body)
			if raw, ok := shown.([]byte); ok {
				shown = string(raw)
			}
			t.Errorf("%s: POST = %d %v, want %d", c.Name, status, shown, c.Status)
			continue
		}
		r.Check(c, header, body)
	}
	if got := r.Calls(); got != len(cases) {
		t.Errorf("Calls() = %d, want %d (every request counts)", got, len(cases))
	}
}

// Send sends one request to a fake from a test and returns the status,
// the header and the raw body. The request is JSON (Content-Type
// application/json) with header on top; a header whose only value is ""
// is removed. No body is sent when body is empty. Failures are reported
// with t.Error, never t.Fatal, so Send is safe from any goroutine; they
// come back as status 0.
func Send(t testing.TB, method, url string, header http.Header, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Error(err)
		return 0, nil, nil
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		if len(v) == 1 && v[0] == "" {
			req.Header.Del(k)
			continue
		}
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, nil, nil
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Error(err)
		return 0, nil, nil
	}
	return res.StatusCode, res.Header, raw
}

// SendJSON is Send with the answer decoded as a JSON object. An HTML
// answer (a proxy's page) comes back as a nil map; any other answer that
// is not JSON is reported.
func SendJSON(t testing.TB, method, url string, header http.Header, body string) (int, http.Header, map[string]any) {
	t.Helper()
	status, h, raw := Send(t, method, url, header, body)
	if status == 0 || strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		return status, h, nil
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Errorf("fake answered non-JSON %q: %v", raw, err)
	}
	return status, h, out
}

// CheckSeeded checks a fake's random faults from a test: start(seed)
// starts the fake with that seed and returns one call to it, which
// CheckSeeded makes n times, keeping the statuses. The same seed must give
// the same statuses, seed 7 others than seed 42, and the distinct statuses
// must be want (ascending): the fake's seed reaches the draws and its
// random faults are the ones it documents.
func CheckSeeded(t testing.TB, n int, start func(seed int64) (call func() int), want []int) {
	t.Helper()
	run := func(seed int64) []int {
		call := start(seed)
		statuses := make([]int, n)
		for i := range statuses {
			statuses[i] = call()
		}
		return statuses
	}
	a := run(42)
	if b := run(42); !slices.Equal(a, b) {
		t.Errorf("statuses with seed 42 differ between runs:\n%v\n%v", a, b)
	}
	if got := slices.Compact(slices.Sorted(slices.Values(a))); !slices.Equal(got, want) {
		t.Errorf("%d calls answered %v, want each of %v", len(a), got, want)
	}
	if slices.Equal(a, run(7)) {
		t.Errorf("seeds 42 and 7 gave the same fault sequence %v", a)
	}
}
