package processortest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Fault is one of the suite's fault kinds; Harness.Start's Fake maps each
// onto the provider fake's own scripted fault. What the fake must answer:
//
//	RateLimit      429, the provider's rate-limit error, with Script.RetryAfter
//	               as Retry-After and Script.RetryAfterMS as retry-after-ms
//	               (whichever is set) and no other wait header
//	Quota          the provider's quota or billing fault (429 insufficient_quota, 402, …)
//	Auth           401, the provider's invalid-key error
//	ServerError    500, the provider's server error
//	Disconnect     close the connection without answering
//	Hang           hold the request without answering until the client leaves
//	HangAfterHeaders  200, headers and half the body, then hold until the client leaves
//	Truncated      200, the model's JSON cut mid-document
//	SchemaInvalid  200, the model answers SchemaInvalidOutput
//	Refusal        200, the model refuses, with Script.Message as its text
//
// Error kinds put Script.Message, when set, into the provider's error
// message: the suite sends a canary there and checks it never reaches an
// error string.
type Fault string

// Fault kinds.
const (
	RateLimit        Fault = "rate_limit"
	Quota            Fault = "quota"
	Auth             Fault = "auth"
	ServerError      Fault = "server_error"
	Disconnect       Fault = "disconnect"
	Hang             Fault = "hang"
	HangAfterHeaders Fault = "hang_after_headers"
	Truncated        Fault = "truncated"
	SchemaInvalid    Fault = "schema_invalid"
	Refusal          Fault = "refusal"
)

// SchemaInvalidOutput is what the model answers under SchemaInvalid: valid
// JSON that does not match Schema.
const SchemaInvalidOutput = `{"unexpected":true}`

// Schema is the schema the suite's requests carry.
const Schema = `{"type":"object","properties":{"category":{"type":"string","enum":["ok","harmful"]},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["category","confidence"],"additionalProperties":false}`

// Canary is the marker the suite puts in inputs, prompts and provider
// error messages; no error's text may contain it.
const Canary = "CANARY-7f3a Jane Roe 555-0100"

// Script is one scripted answer for the fake's next call.
type Script struct {
	Fault Fault
	// RetryAfter is the Retry-After value of a RateLimit (seconds or an
	// HTTP-date); RetryAfterMS its retry-after-ms value. The suite sets
	// one of them.
	RetryAfter   string
	RetryAfterMS int
	// Message goes into the provider's error message or refusal text.
	Message string
}

// Fake is one running provider fake as the suite drives it.
type Fake struct {
	URL             string       // the base URL New is given
	Enqueue         func(Script) // scripts the next call's answer
	Calls           func() int   // requests received so far
	CallsContaining func(s string) int
}

// Server is what every provider fake has: a base URL, a fault queue of its
// own fault type F, and a call counter.
type Server[F any] interface {
	URL() string
	Enqueue(faults ...F)
	Calls() int
	CallsContaining(s string) int
}

// NewFake returns srv as the suite drives it, fault mapping each Script
// onto the fake's own fault.
func NewFake[F any](srv Server[F], fault func(Script) F) Fake {
	return Fake{
		URL:             srv.URL(),
		Enqueue:         func(s Script) { srv.Enqueue(fault(s)) },
		Calls:           srv.Calls,
		CallsContaining: srv.CallsContaining,
	}
}

// Harness adapts one provider to Exercise.
type Harness struct {
	// Start starts a fresh fake for one case and registers its Close with
	// t.Cleanup (NewFake builds the Fake from the fake's usual methods).
	Start func(t *testing.T) Fake
	// Open builds the processor under test from c: Common with, per case,
	// the fake's base URL, a per-call timeout and sometimes an HTTPClient.
	// It adds what the adapter's Config needs beyond processor.Common.
	Open func(c processor.Common) (stet.Processor, error)
	// Common is a valid configuration (ID, APIKey, Model; BaseURL only
	// when the adapter has no default) that the cases start from.
	Common processor.Common
	// Kind and Capabilities are what Info must report besides Common's
	// fields.
	Kind         string
	Capabilities []string
	// InfoModel is what Info reports as the model when that is not
	// Common.Model.
	InfoModel string
	// Answer reads, from the response header and body of a successful
	// call, what the Extraction must carry; nil checks only that RequestID
	// is set and Raw is the body.
	Answer func(header http.Header, body []byte) Answer
	// AuthStatus is the status of the provider's invalid-key answer (401
	// for most; Gemini's wrong key is 400 API_KEY_INVALID); 0 does not
	// check it.
	AuthStatus int
	// Params, when set, builds the extract params for prompt (the suite's
	// default: Prompt and Input both prompt, SchemaName "conformance_v1",
	// Schema).
	Params func(prompt string) stet.ExtractParams
	// ValidatesSchema says the adapter itself rejects output that does not
	// match the schema (invalid_output). Otherwise validation is the
	// pipeline's and SchemaInvalidOutput must come back as the Output.
	ValidatesSchema bool
	// SchemaOptional says the adapter accepts params without a schema (the
	// record's shape is its own). Otherwise a missing schema, like one
	// that is not JSON, must fail unsupported without a call.
	SchemaOptional bool
	// Lacks names the Fault kinds the provider has no concept of, with the
	// reason; their cases are skipped with it.
	Lacks map[Fault]string
	// Batch, when its Open is set, adds ExerciseBatch's cases as the
	// subtest "batch"; its Common and Params default to h's.
	Batch BatchHarness
	// Injection, when its Wire is set, adds the injection cases as the
	// subtest "injection" (InjectionHarness).
	Injection InjectionHarness
}

// Answer is what a successful Extraction must carry, as the provider's
// answer says it.
type Answer struct {
	RequestID    string
	Model        string
	InputTokens  int
	OutputTokens int
	Output       string // "" does not check the output
}

func (h Harness) params(prompt string) stet.ExtractParams {
	if h.Params != nil {
		return h.Params(prompt)
	}
	return stet.ExtractParams{
		JobID: "job_conformance", Attempt: 1,
		Prompt: stet.NewText(prompt), Input: stet.NewText(prompt),
		SchemaName: "conformance_v1", Schema: json.RawMessage(Schema),
	}
}

// open builds the processor under test pointed at baseURL, failing t when
// it cannot.
func (h Harness) open(t *testing.T, baseURL string, timeout time.Duration, hc *http.Client) stet.Processor {
	t.Helper()
	c := h.Common
	c.BaseURL, c.Timeout, c.HTTPClient = baseURL, timeout, hc
	p, err := h.Open(c)
	if err != nil {
		t.Fatalf("Open(%s) = %v", c.ID, err)
	}
	return p
}

// want is what one case expects.
type want struct {
	class      stet.FailureClass
	status     int           // 0: not checked
	retryAfter time.Duration // with tolerance below
	tolerance  time.Duration
}

// ExerciseForms runs Exercise for each of an adapter's request or answer
// forms (structured output and tool use, an envelope and a bare answer),
// each a parallel subtest named by its form.
func ExerciseForms(t *testing.T, forms map[string]Harness) {
	t.Helper()
	for name, h := range forms {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			Exercise(t, h)
		})
	}
}

// Exercise runs the conformance cases of stet.Processor against h, each a
// parallel subtest with its own fake.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	const timeout = 10 * time.Second
	const short = 300 * time.Millisecond
	yearAhead := time.Now().Add(365 * 24 * time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name    string
		script  *Script
		timeout time.Duration
		want    want
	}{
		{"answer", nil, timeout, want{class: stet.FailureNone, status: 200}},
		{"429 Retry-After seconds", &Script{Fault: RateLimit, RetryAfter: "7"}, timeout, want{class: stet.FailureRateLimited, status: 429, retryAfter: 7 * time.Second}},
		{"429 Retry-After HTTP-date", &Script{Fault: RateLimit}, timeout, want{class: stet.FailureRateLimited, status: 429, retryAfter: 30 * time.Second, tolerance: 3 * time.Second}},
		{"429 Retry-After a year ahead is capped", &Script{Fault: RateLimit, RetryAfter: yearAhead}, timeout, want{class: stet.FailureRateLimited, status: 429, retryAfter: processor.MaxRetryAfter}},
		{"429 retry-after-ms", &Script{Fault: RateLimit, RetryAfterMS: 1500}, timeout, want{class: stet.FailureRateLimited, status: 429, retryAfter: 1500 * time.Millisecond}},
		{"quota", &Script{Fault: Quota, Message: Canary}, timeout, want{class: stet.FailureQuota}},
		{"auth", &Script{Fault: Auth, Message: Canary}, timeout, want{class: stet.FailureAuth, status: h.AuthStatus}},
		{"server error", &Script{Fault: ServerError, Message: Canary}, timeout, want{class: stet.FailureTransient, status: 500}},
		{"disconnect", &Script{Fault: Disconnect}, timeout, want{class: stet.FailureTransient}},
		{"timeout before the answer", &Script{Fault: Hang}, short, want{class: stet.FailureTransient}},
		{"timeout after headers", &Script{Fault: HangAfterHeaders}, short, want{class: stet.FailureTransient}},
		{"truncated output", &Script{Fault: Truncated}, timeout, want{class: stet.FailureInvalidOutput, status: 200}},
		{"schema-invalid output", &Script{Fault: SchemaInvalid}, timeout, want{class: stet.FailureInvalidOutput, status: 200}},
		{"refusal", &Script{Fault: Refusal, Message: "I will not discuss " + Canary}, timeout, want{class: stet.FailureRefusal, status: 200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.script != nil {
				if why, ok := h.Lacks[tc.script.Fault]; ok {
					t.Skipf("provider lacks %s: %s", tc.script.Fault, why)
				}
			}
			f := h.Start(t)
			w := tc.want
			if tc.script != nil {
				s := *tc.script
				if s.Fault == RateLimit && s.RetryAfter == "" && s.RetryAfterMS == 0 {
					s.RetryAfter = time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
				}
				f.Enqueue(s)
				if s.Fault == SchemaInvalid && !h.ValidatesSchema {
					w.class = stet.FailureNone
				}
			}
			p := h.open(t, f.URL, tc.timeout, nil)
			ext, err := p.Extract(t.Context(), h.params("Classify: "+Canary))
			if n := f.Calls(); n != 1 {
				t.Errorf("provider calls for one Extract = %d, want 1 (no retries of its own)", n)
			}
			if n := f.CallsContaining(Canary); n != 1 {
				t.Errorf("CallsContaining(canary) = %d, want 1: the fake must see the prompt", n)
			}
			check(t, tc.script, w, ext, err)
		})
	}
	exerciseRedirects(t, h)
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		p := h.open(t, deadURL(t), timeout, nil)
		_, err := p.Extract(t.Context(), h.params("Classify: "+Canary))
		check(t, nil, want{class: stet.FailureTransient}, nil, err)
	})
	t.Run("concurrent use", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		p := h.open(t, f.URL, timeout, nil)
		errs := make(chan error, 8)
		for i := range 8 {
			go func() {
				// Each call is its own job, as in production: an adapter
				// that derives an idempotency key from job and attempt
				// must see eight keys, not one key with eight bodies.
				params := h.params(fmt.Sprintf("Classify report %d: %s", i, Canary))
				params.JobID = fmt.Sprintf("%s_%d", params.JobID, i)
				_, err := p.Extract(t.Context(), params)
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Errorf("concurrent Extract = %v, want success", err)
			}
		}
		if n := f.Calls(); n != 8 {
			t.Errorf("provider calls for 8 concurrent Extracts = %d, want 8", n)
		}
	})
	// Answers no fake gives: a proxy in front of the provider, a captive
	// portal, the caller giving up mid-call.
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    want
	}{
		{"proxy 502 with an HTML page", Reply(http.StatusBadGateway, http.Header{"Content-Type": {"text/html"}}, "<html><body>502 Bad Gateway</body></html>"), want{class: stet.FailureTransient, status: 502}},
		{"200 that is not JSON", Reply(http.StatusOK, nil, "<html>captive portal</html>"), want{class: stet.FailureTransient, status: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			_, err := h.open(t, srv.URL, timeout, nil).Extract(t.Context(), h.params("Classify: "+Canary))
			checkErr(t, "Extract() from a "+tc.name, tc.want, err)
		})
	}
	t.Run("caller cancels mid-call", func(t *testing.T) {
		t.Parallel()
		errShutdown := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			cancel(errShutdown)
			<-r.Context().Done()
		}))
		defer srv.Close()
		_, err := h.open(t, srv.URL, timeout, nil).Extract(ctx, h.params("Classify: "+Canary))
		checkErr(t, "Extract() cancelled mid-call", want{class: stet.FailureTransient}, err)
		if !errors.Is(err, errShutdown) {
			t.Errorf("Extract() cancelled mid-call = %v, want it to wrap the cause %v", err, errShutdown)
		}
	})
	if h.Batch.Open != nil {
		b := h.Batch
		if b.Common.ID == "" {
			b.Common = h.Common
		}
		if b.Params == nil {
			b.Params = h.Params
		}
		t.Run("batch", func(t *testing.T) {
			t.Parallel()
			ExerciseBatch(t, b)
		})
	}
	if h.Injection.Wire != nil {
		t.Run("injection", func(t *testing.T) {
			t.Parallel()
			exerciseInjection(t, h)
		})
	}
	t.Run("invalid schema makes no call", func(t *testing.T) {
		t.Parallel()
		schemas := []string{"{not json"}
		if !h.SchemaOptional {
			schemas = append(schemas, "")
		}
		for _, schema := range schemas {
			f := h.Start(t)
			params := h.params("Classify: " + Canary)
			params.Schema = json.RawMessage(schema)
			_, err := h.open(t, f.URL, timeout, nil).Extract(t.Context(), params)
			if got := stet.ClassOf(err); got != stet.FailureUnsupported {
				t.Errorf("Extract(schema %q): class = %q, want unsupported", schema, got)
			}
			if n := f.Calls(); n != 0 {
				t.Errorf("Extract(schema %q): provider calls = %d, want 0", schema, n)
			}
		}
	})
	t.Run("disconnect on a warm connection", func(t *testing.T) {
		// net/http resends on its own a request that broke on a reused
		// connection when it thinks it safe (an Idempotency-Key makes it so).
		t.Parallel()
		if why, ok := h.Lacks[Disconnect]; ok {
			t.Skipf("provider lacks %s: %s", Disconnect, why)
		}
		f := h.Start(t)
		p := h.open(t, f.URL, timeout, nil)
		params := h.params("Classify: " + Canary)
		if _, err := p.Extract(t.Context(), params); err != nil {
			t.Fatalf("warm-up Extract() = %v, want success", err)
		}
		f.Enqueue(Script{Fault: Disconnect})
		params.Attempt++
		_, err := p.Extract(t.Context(), params)
		check(t, &Script{Fault: Disconnect}, want{class: stet.FailureTransient}, nil, err)
		if n := f.Calls(); n != 2 {
			t.Errorf("provider calls after a warm-up and a disconnect = %d, want 2", n)
		}
	})
	t.Run("answer metadata", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		rt := &RecordingTransport{}
		p := h.open(t, f.URL, timeout, rt.Client())
		got, err := p.Extract(t.Context(), h.params("Classify: "+Canary))
		if err != nil {
			t.Fatalf("Extract() = %v, want success", err)
		}
		_, header, body := rt.Last()
		want := Answer{RequestID: got.RequestID, Model: got.Model, InputTokens: got.InputTokens, OutputTokens: got.OutputTokens}
		if h.Answer != nil {
			want = h.Answer(header, body)
		}
		if got.RequestID == "" || got.RequestID != want.RequestID {
			t.Errorf("RequestID = %q, want the provider's %q", got.RequestID, want.RequestID)
		}
		if got.StatusCode != http.StatusOK {
			t.Errorf("StatusCode = %d, want 200", got.StatusCode)
		}
		if got.Model != want.Model {
			t.Errorf("Model = %q, want %q", got.Model, want.Model)
		}
		if got.InputTokens != want.InputTokens || got.OutputTokens != want.OutputTokens {
			t.Errorf("tokens = %d in, %d out; want %d, %d", got.InputTokens, got.OutputTokens, want.InputTokens, want.OutputTokens)
		}
		if !bytes.Equal(got.Raw, body) {
			t.Errorf("Raw = %q, want the response body %q", got.Raw, body)
		}
		if want.Output != "" && string(got.Output) != want.Output {
			t.Errorf("Output = %s, want %s", got.Output, want.Output)
		}
		if got.Latency <= 0 {
			t.Errorf("Latency = %v, want > 0", got.Latency)
		}
	})
	t.Run("open validates", func(t *testing.T) {
		t.Parallel()
		bad := map[string]func(*processor.Common){
			"no id":             func(c *processor.Common) { c.ID = "" },
			"relative base url": func(c *processor.Common) { c.BaseURL = "api.example.com/v1" },
			"ftp base url":      func(c *processor.Common) { c.BaseURL = "ftp://example.com/v1" },
			"negative timeout":  func(c *processor.Common) { c.Timeout = -time.Second },
		}
		if h.Common.Model != "" {
			bad["no model"] = func(c *processor.Common) { c.Model = "" }
		}
		for name, change := range bad {
			c := h.Common
			change(&c)
			if _, err := h.Open(c); err == nil {
				t.Errorf("Open(%s) = nil error, want an error", name)
			}
		}
		if _, err := h.Open(h.Common); err != nil {
			t.Errorf("Open(defaults) = %v, want nil", err)
		}
	})
	t.Run("info", func(t *testing.T) {
		t.Parallel()
		c := h.Common
		c.Region, c.Retention, c.ZeroRetention = "eu", "30d", true
		c.Subprocessors = []string{"Sub-processor Inc."}
		p, err := h.Open(c)
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		c.Subprocessors[0] = "changed by the caller"
		got := p.Info()
		if len(got.Capabilities) > 0 {
			got.Capabilities[0] = "changed by a reader"
		}
		got.Capabilities = append(got.Capabilities, "changed by the caller")
		got = p.Info()
		if h.InfoModel != "" {
			c.Model = h.InfoModel
		}
		if got.ID != c.ID || got.Kind != h.Kind || (c.Model != "" && got.Model != c.Model) || got.Region != "eu" || got.Retention != "30d" ||
			!got.ZeroRetention || !got.SendsTextOffHost || !slices.Equal(got.Subprocessors, []string{"Sub-processor Inc."}) ||
			!slices.Equal(got.Capabilities, h.Capabilities) {
			t.Errorf("Info() = %+v, want ID %q, Kind %q, Model %q, eu, 30d, zero retention, off host, Subprocessors [Sub-processor Inc.], Capabilities %v",
				got, c.ID, h.Kind, c.Model, h.Capabilities)
		}
	})
}

// check compares one Extract's outcome with w.
func check(t *testing.T, s *Script, w want, ext *stet.Extraction, err error) {
	t.Helper()
	what := "Extract()"
	if s != nil {
		what = fmt.Sprintf("Extract() with %s", s.Fault)
	}
	if w.class == stet.FailureNone {
		if err != nil {
			t.Fatalf("%s = %v, want success", what, err)
		}
		if !json.Valid(ext.Output) {
			t.Errorf("%s: Output = %q, want JSON", what, ext.Output)
		}
		if s != nil && s.Fault == SchemaInvalid && string(ext.Output) != SchemaInvalidOutput {
			t.Errorf("%s: Output = %s, want the model's %s unchanged", what, ext.Output, SchemaInvalidOutput)
		}
		if w.status != 0 && ext.StatusCode != w.status {
			t.Errorf("%s: StatusCode = %d, want %d", what, ext.StatusCode, w.status)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s = %v, nil error; want a *stet.ProcessorError", what, ext)
	}
	checkErr(t, what, w, err)
}

// checkErr compares a failed call's error with w; the error's text must
// carry neither the canary nor any of ids.
func checkErr(t *testing.T, what string, w want, err error, ids ...string) {
	t.Helper()
	pe := AsProcessorError(t, what, err)
	if pe.Class != w.class {
		t.Errorf("%s: class = %q, want %q (cause %v)", what, pe.Class, w.class, pe.Err)
	}
	if w.status != 0 && pe.StatusCode != w.status {
		t.Errorf("%s: StatusCode = %d, want %d", what, pe.StatusCode, w.status)
	}
	if w.class == stet.FailureRateLimited {
		if d := pe.RetryAfter - w.retryAfter; d > 0 || -d > w.tolerance {
			t.Errorf("%s: RetryAfter = %v, want %v (within %v, at most processor.MaxRetryAfter)", what, pe.RetryAfter, w.retryAfter, w.tolerance)
		}
	}
	if pe.RetryAfter > processor.MaxRetryAfter {
		t.Errorf("%s: RetryAfter = %v, over the cap %v", what, pe.RetryAfter, processor.MaxRetryAfter)
	}
	if w.class == stet.FailureInvalidOutput && len(pe.Problems) == 0 {
		t.Errorf("%s: Problems empty, want what was wrong (for the repair prompt)", what)
	}
	noCanary(t, what, err, ids...)
}

// noCanary fails when err's text carries the canary.
func noCanary(t *testing.T, what string, err error, extra ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{err.Error(), fmt.Sprint(err), fmt.Sprintf("%+v", err)} {
		if strings.Contains(s, "CANARY") || strings.Contains(s, "Jane Roe") {
			t.Errorf("%s: error text %q carries the canary", what, s)
		}
		for _, x := range extra {
			if x != "" && strings.Contains(s, x) {
				t.Errorf("%s: error text %q carries the provider ID %q", what, s, x)
			}
		}
	}
}

// deadURL returns the base URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	// No path: a refused connection never reads it, and some adapters
	// (Anthropic's SDK adds v1/ itself) refuse a base URL ending in /v1.
	return "http://" + addr
}
