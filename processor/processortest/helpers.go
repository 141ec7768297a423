package processortest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// update is the -update flag every adapter's golden tests share: with it,
// Golden rewrites the files instead of comparing.
var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Golden compares got with testdata/name; -update rewrites the file.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update if intended):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// GoldenJSON indents body, which must be JSON, and compares it with
// testdata/name as Golden does.
func GoldenJSON(t *testing.T, name string, body []byte) {
	t.Helper()
	Golden(t, name, Indent(t, body))
}

// Indent returns raw, which must be JSON, indented by two spaces and ending
// in a newline: the form golden files keep.
func Indent(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, raw)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// AsProcessorError fails the test unless err is a *stet.ProcessorError,
// which it returns; what names the call in the message.
func AsProcessorError(t *testing.T, what string, err error) *stet.ProcessorError {
	t.Helper()
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		t.Fatalf("%s = %v (%T), want a *stet.ProcessorError", what, err, err)
	}
	return pe
}

// RecordingTransport is an http.RoundTripper over http.DefaultTransport
// that keeps the last request URL and the last response's header and body
// the client saw. It is safe for concurrent use.
type RecordingTransport struct {
	mu     sync.Mutex
	url    string
	header http.Header
	body   []byte
}

// RoundTrip sends req and records the answer.
func (rt *RecordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	rt.url, rt.header, rt.body = req.URL.String(), res.Header.Clone(), body
	rt.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// Client returns an *http.Client that sends through rt.
func (rt *RecordingTransport) Client() *http.Client { return &http.Client{Transport: rt} }

// Last returns the last request URL and response header and body.
func (rt *RecordingTransport) Last() (url string, header http.Header, body []byte) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.url, rt.header, rt.body
}

// Reply returns a handler that answers status, header and body; the
// Content-Type is application/json unless header sets one.
func Reply(status int, header http.Header, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range header {
			w.Header()[http.CanonicalHeaderKey(k)] = v
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// OffWire is one answer the provider's fake does not give (a proxy's, a
// compatible server's, a broken one) and the error it must become.
type OffWire struct {
	Name       string
	Handler    http.HandlerFunc
	Class      stet.FailureClass
	Status     int
	Code       string
	RequestID  string
	RetryAfter time.Duration
}

// ExerciseOffWire runs each case, in parallel, against its own server:
// open builds the processor pointed at the server's URL, and one Extract
// of params must fail as the case says.
func ExerciseOffWire(t *testing.T, open func(baseURL string) (stet.Processor, error), params stet.ExtractParams, cases []OffWire) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.Handler)
			defer srv.Close()
			p, err := open(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Extract(t.Context(), params)
			pe := AsProcessorError(t, "Extract()", err)
			if pe.Class != tc.Class || pe.StatusCode != tc.Status || pe.Code != tc.Code {
				t.Errorf("Extract() = class %q status %d code %q, want %q %d %q (cause %v)", pe.Class, pe.StatusCode, pe.Code, tc.Class, tc.Status, tc.Code, pe.Err)
			}
			if pe.RequestID != tc.RequestID || pe.RetryAfter != tc.RetryAfter {
				t.Errorf("Extract() = RequestID %q RetryAfter %v, want %q %v", pe.RequestID, pe.RetryAfter, tc.RequestID, tc.RetryAfter)
			}
		})
	}
}

// ModerationSchema is the schema adapters' own tests send: a category,
// flags and a confidence.
const ModerationSchema = `{"type":"object","properties":{"category":{"type":"string","enum":["ok","harmful","medical_advice"]},"flags":{"type":"array","items":{"type":"string"}},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["category","flags","confidence"],"additionalProperties":false}`

// Params returns the extract params adapters' own tests send: prompt, the
// given schema as moderation_v1, attempt 1 of job_01TEST, and an input the
// LLM adapters do not use.
func Params(prompt, schema string) stet.ExtractParams {
	return stet.ExtractParams{
		JobID:      "job_01TEST",
		Attempt:    1,
		Prompt:     stet.NewText(prompt),
		Input:      stet.NewText("unused by this processor"),
		SchemaName: "moderation_v1",
		Schema:     json.RawMessage(schema),
	}
}

// CanaryOutput is model output quoting the canary, for a fake's Respond
// hook in ExerciseCanary cases.
const CanaryOutput = `{"category":"ok","note":"` + Canary + `","flags":[]}`

// ExerciseCanary covers, beyond the suite's canary, the provider's own
// faults: for each fault in faults, in parallel, run must start a fake that
// answers CanaryOutput, script the fault and Extract p (base with the
// canary in its prompt and in a repair turn's output), returning how many
// calls the fake saw carrying Canary and the error. The call must fail
// once, with a *stet.ProcessorError whose text, code and request ID carry
// no canary.
func ExerciseCanary[F any](t *testing.T, base stet.ExtractParams, faults []F, name func(F) string, run func(t *testing.T, fault F, p stet.ExtractParams) (int, error)) {
	t.Helper()
	p := base
	p.Prompt = stet.NewText("Classify this report: " + Canary)
	p.Repair = []stet.RepairTurn{{Output: []byte(`{"note":"` + Canary + `"}`), Problems: []string{"/category: missing"}}}
	for i, ft := range faults {
		what := fmt.Sprintf("%d_%s", i, name(ft))
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			n, err := run(t, ft, p)
			if err == nil {
				t.Fatalf("Extract() with %s = nil error, want a failure", what)
			}
			if n != 1 {
				t.Fatalf("fake saw the canary in %d calls, want 1 (the canary must reach the provider)", n)
			}
			pe := AsProcessorError(t, "Extract() with "+what, err)
			noCanary(t, "Extract() with "+what, err)
			if strings.Contains(pe.Code, "CANARY") || strings.Contains(pe.RequestID, "CANARY") {
				t.Errorf("Extract() with %s: Code %q / RequestID %q carry the canary", what, pe.Code, pe.RequestID)
			}
		})
	}
}

// ExerciseNoRetries covers the provider answers an SDK would retry on its
// own beyond the suite's (500, 429, a dropped connection): for each fault,
// in parallel, open starts a fake and the processor under test, the fault
// is scripted three times and params extracted once. The call must fail
// after exactly one request.
func ExerciseNoRetries[F any](t *testing.T, open func(t *testing.T) (Server[F], stet.Processor), params stet.ExtractParams, faults []F, name func(F) string) {
	t.Helper()
	for _, ft := range faults {
		t.Run(name(ft), func(t *testing.T) {
			t.Parallel()
			f, p := open(t)
			f.Enqueue(ft, ft, ft)
			_, err := p.Extract(t.Context(), params)
			if err == nil {
				t.Fatalf("Extract() with %s = nil error, want a failure", name(ft))
			}
			if n := f.Calls(); n != 1 {
				t.Errorf("fake calls after %s = %d, want 1", name(ft), n)
			}
		})
	}
}

// Outcome is what one Extract must come to: success (FailureNone) with
// Status, or a *stet.ProcessorError with exactly these fields.
type Outcome struct {
	Class      stet.FailureClass
	Status     int
	Code       string
	RetryAfter time.Duration
}

// Check compares one Extract's result with o and returns its
// *stet.ProcessorError, or nil after a success; what names the call.
func (o Outcome) Check(t *testing.T, what string, ext *stet.Extraction, err error) *stet.ProcessorError {
	t.Helper()
	if o.Class == stet.FailureNone {
		if err != nil {
			t.Fatalf("%s = %v, want success", what, err)
		}
		if ext.StatusCode != o.Status || !json.Valid(ext.Output) {
			t.Errorf("%s = status %d output %s, want status %d and JSON", what, ext.StatusCode, ext.Output, o.Status)
		}
		return nil
	}
	pe := AsProcessorError(t, what, err)
	if got := (Outcome{pe.Class, pe.StatusCode, pe.Code, pe.RetryAfter}); got != o {
		t.Errorf("%s = %+v, want %+v (cause %v)", what, got, o, pe.Err)
	}
	return pe
}

// Last keeps the last value Set was given, for a fake's Respond hook to
// record the request it saw; it is safe for concurrent use.
type Last[R any] struct {
	mu sync.Mutex
	v  R
}

// Set records v.
func (l *Last[R]) Set(v R) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v = v
}

// Record returns a fake's Respond hook that Sets each request on l and
// answers what answer returns for it.
func (l *Last[R]) Record(answer func(R) string) func(R) string {
	return func(req R) string {
		l.Set(req)
		return answer(req)
	}
}

// Get returns the last value Set was given.
func (l *Last[R]) Get() R {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v
}

// GoldenPrompt is the prompt request golden files carry: markup and an
// ampersand that must reach the provider unescaped.
const GoldenPrompt = "Classify the report below.\n\nReport: patient <b>[EMAIL]</b> says the dose & timing felt wrong."

// JSONField returns the value at a dotted path ("usage.input_tokens") in a
// JSON object, or nil.
func JSONField(body []byte, path string) any {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// JSONString is JSONField as a string ("" when it is none).
func JSONString(body []byte, path string) string {
	s, _ := JSONField(body, path).(string)
	return s
}

// JSONInt is JSONField as an int (0 when it is no number).
func JSONInt(body []byte, path string) int {
	n, _ := JSONField(body, path).(float64)
	return int(n)
}

// Classification is one row of an adapter's table of the answers only its
// provider gives: the fake's scripted fault, the per-call timeout (0: ten
// seconds) and the outcome the Extract must have. Problem, when set, is
// the one problem an invalid_output must carry.
type Classification[F any] struct {
	Name       string
	Fault      F
	Timeout    time.Duration
	Class      stet.FailureClass
	Status     int
	Code       string
	RetryAfter time.Duration
	Problem    string
}

// ClassificationHarness runs a table of Classification rows.
type ClassificationHarness[F any] struct {
	// Open starts a fresh fake and the processor under test, with the
	// per-call timeout and the clock the rows' dates are computed against.
	Open func(t *testing.T, timeout time.Duration) (Server[F], stet.Processor)
	// Params are what each row extracts.
	Params stet.ExtractParams
	// RequestID, when set, is what an error's RequestID must match when the
	// row's answer has a Status: the provider's request ID.
	RequestID *regexp.Regexp
	// InvalidOutput, when set, says whether an invalid_output error's
	// Output is the invalid answer it must keep (KeptOutput, CutOutput).
	InvalidOutput func(output []byte) bool
	// Check, when set, checks what else the provider adds to an outcome;
	// pe is nil after a success.
	Check func(t *testing.T, c Classification[F], ext *stet.Extraction, pe *stet.ProcessorError)
}

// KeptOutput is a ClassificationHarness.InvalidOutput: the answer is kept.
func KeptOutput(output []byte) bool { return len(output) > 0 }

// CutOutput is a ClassificationHarness.InvalidOutput: the answer, cut
// short, is kept: there is output and it is not JSON.
func CutOutput(output []byte) bool { return len(output) > 0 && !json.Valid(output) }

// Run runs each row in a parallel subtest: the fault is scripted, one
// Extract made, and the fake must have been called once, the outcome be
// the row's and an invalid_output carry a reason (the row's Problem when
// it names one).
func (h ClassificationHarness[F]) Run(t *testing.T, cases []Classification[F]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			f, p := h.Open(t, cmp.Or(c.Timeout, 10*time.Second))
			f.Enqueue(c.Fault)
			ext, err := p.Extract(t.Context(), h.Params)
			if n := f.Calls(); n != 1 {
				t.Errorf("fake calls = %d, want 1", n)
			}
			what := "Extract() with " + c.Name
			pe := Outcome{Class: c.Class, Status: c.Status, Code: c.Code, RetryAfter: c.RetryAfter}.Check(t, what, ext, err)
			if pe != nil && c.Class == stet.FailureInvalidOutput {
				if c.Problem != "" && !slices.Equal(pe.Problems, []string{c.Problem}) {
					t.Errorf("%s: Problems = %q, want [%q]", what, pe.Problems, c.Problem)
				}
				if len(pe.Problems) == 0 {
					t.Errorf("%s: Problems empty, want a reason", what)
				}
			}
			if pe != nil && h.RequestID != nil && c.Status != 0 && !h.RequestID.MatchString(pe.RequestID) {
				t.Errorf("%s: RequestID = %q, want the provider's (%s)", what, pe.RequestID, h.RequestID)
			}
			if pe != nil && h.InvalidOutput != nil && c.Class == stet.FailureInvalidOutput && !h.InvalidOutput(pe.Output) {
				t.Errorf("%s: Output = %q, want the invalid answer", what, pe.Output)
			}
			if h.Check != nil {
				h.Check(t, c, ext, pe)
			}
		})
	}
}

// CappedTransport is Next (http.DefaultTransport when nil) with every
// response body capped at Limit bytes, as the `stet batch status` client
// caps them: a read past Limit fails.
type CappedTransport struct {
	Next  http.RoundTripper
	Limit int64
}

// RoundTrip sends req through Next and caps the answer's body.
func (t CappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.Next
	if next == nil {
		next = http.DefaultTransport
	}
	res, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	res.Body = http.MaxBytesReader(nil, res.Body, t.Limit)
	return res, nil
}

// MustOpen returns what open makes of c with baseURL and timeout (0: the
// adapter's default), failing t when open fails: an adapter's own tests'
// client for their fake.
func MustOpen[P any](t testing.TB, open func(processor.Common) (P, error), c processor.Common, baseURL string, timeout time.Duration) P {
	t.Helper()
	c.BaseURL, c.Timeout = baseURL, timeout
	p, err := open(c)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return p
}
