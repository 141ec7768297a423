package infrai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
)

const testBatchID = "bat_01JTESTBATCH0000000000000"

// batchItems returns n items with distinct job IDs and prompts.
func batchItems(n int) []stet.BatchItem {
	items := make([]stet.BatchItem, n)
	for i := range items {
		p := testParams(fmt.Sprintf("Classify report %d: the pharmacy was closed <again> & again.", i+1))
		p.JobID = fmt.Sprintf("job_%02d", i+1)
		items[i] = stet.BatchItem{JobID: p.JobID, Params: p}
	}
	return items
}

func submitOf(items []stet.BatchItem) stet.BatchSubmit {
	return stet.BatchSubmit{BatchID: testBatchID, Items: items}
}

// sentRequest is one request as the client sent it.
type sentRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

// requestRecorder keeps every request the client sends.
type requestRecorder struct {
	mu   sync.Mutex
	sent []sentRequest
}

func (rr *requestRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		body = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	rr.mu.Lock()
	rr.sent = append(rr.sent, sentRequest{req.Method, req.URL.Path, req.Header.Clone(), body})
	rr.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (rr *requestRecorder) requests() []sentRequest {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]sentRequest(nil), rr.sent...)
}

func clientWith(t *testing.T, f *infraifake.Server, hc *http.Client, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{Common: processor.Common{ID: testID, BaseURL: f.URL(), APIKey: testKey, Model: testModel, HTTPClient: hc, Timeout: timeout, Subprocessors: []string{"openai"}}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return c
}

func TestBatchSubmitGolden(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		syncBody = map[string][]byte{}
	)
	f := newFake(t, infraifake.Options{Respond: func(req infraifake.Request) string {
		mu.Lock()
		defer mu.Unlock()
		if req.IdempotencyKey != "" { // the chat route, not a batch item
			syncBody[req.Messages[0].Content] = req.Body
		}
		return infraifake.MinimalInstance(req.Schema)
	}})
	rr := &requestRecorder{}
	c := clientWith(t, f, &http.Client{Transport: rr}, 0)
	items := batchItems(2)
	items[1].Params.Repair = []stet.RepairTurn{{Output: []byte(`{"category":"maybe"}`), Problems: []string{"/category: value must be one of \"ok\", \"harmful\", \"medical_advice\""}}}

	h, err := c.SubmitBatch(t.Context(), submitOf(items))
	if err != nil {
		t.Fatalf("SubmitBatch() = %v, want success", err)
	}
	sent := rr.requests()
	if len(sent) != 1 || sent[0].method != http.MethodPost || sent[0].path != "/v1/ai/batch/submit" {
		t.Fatalf("SubmitBatch() sent %d requests (first %s %s), want one POST /v1/ai/batch/submit", len(sent), sent[0].method, sent[0].path)
	}
	got := sent[0]
	for k, want := range map[string]string{
		"Authorization":   "Bearer " + testKey,
		"Content-Type":    "application/json",
		"Accept":          "application/json",
		"Idempotency-Key": testBatchID,
	} {
		if v := got.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if canon, err := canonicalJSON(json.RawMessage(got.body)); err != nil || !bytes.Equal(canon, got.body) {
		t.Errorf("submit body is not canonical JSON:\n%s", got.body)
	}
	processortest.Golden(t, "batch_submit.golden.json", got.body)

	// Each item's body is byte for byte what Extract sends for the same job.
	var wire struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Body     json.RawMessage `json:"body"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(got.body, &wire); err != nil || len(wire.Requests) != len(items) {
		t.Fatalf("submit body has %d requests (%v), want %d", len(wire.Requests), err, len(items))
	}
	for i, it := range items {
		if _, err := c.Extract(t.Context(), it.Params); err != nil {
			t.Fatalf("Extract(%s) = %v", it.JobID, err)
		}
		mu.Lock()
		sb := syncBody[it.Params.Prompt.Reveal()]
		mu.Unlock()
		item, err := canonicalJSON(wire.Requests[i].Body)
		if err != nil {
			t.Fatal(err)
		}
		if wire.Requests[i].CustomID != it.JobID || !bytes.Equal(item, sb) {
			t.Errorf("request %d = custom_id %q body %s, want %q and the sync body %s", i, wire.Requests[i].CustomID, item, it.JobID, sb)
		}
	}
	if h.RequestCount != 2 || h.State != stet.BatchSubmitted || !uuidV7.MatchString(h.RequestID) || h.InputFileID != "" {
		t.Errorf("SubmitBatch() = %+v, want 2 requests, submitted, a UUID v7 request ID, no input file", h)
	}
}

func TestBatchStateMapping(t *testing.T) {
	t.Parallel()
	processortest.CheckBatchStates(t, "batchState", batchState, map[string]stet.BatchState{
		"queued":      stet.BatchSubmitted,
		"pending":     stet.BatchSubmitted,
		"validating":  stet.BatchSubmitted,
		"running":     stet.BatchInProgress,
		"processing":  stet.BatchInProgress,
		"finalizing":  stet.BatchInProgress,
		"cancelling":  stet.BatchInProgress,
		"completed":   stet.BatchCompleted,
		" Completed ": stet.BatchCompleted,
		"succeeded":   stet.BatchCompleted,
		"failed":      stet.BatchFailed,
		"cancelled":   stet.BatchCancelled,
		"canceled":    stet.BatchCancelled,
		"expired":     stet.BatchExpired,
		"EXPIRED":     stet.BatchExpired,
		"warming_up":  stet.BatchInProgress,
	})
	// Every stet state a provider can report is reachable.
	reached := map[stet.BatchState]bool{}
	for _, s := range batchStates {
		reached[s] = true
	}
	for _, s := range []stet.BatchState{stet.BatchSubmitted, stet.BatchInProgress, stet.BatchCompleted, stet.BatchFailed, stet.BatchExpired, stet.BatchCancelled} {
		if !reached[s] {
			t.Errorf("no provider word maps to %q", s)
		}
	}
}

// TestBatchStatusLifecycle polls a batch scripted to end on the third poll,
// with an unknown running word, and checks every field a caller reads.
func TestBatchStatusLifecycle(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	f.ScriptBatch(testBatchID, infraifake.BatchScript{PollsToEnd: 3, Running: "warming_up", Items: map[string]infraifake.Fault{"job_02": {Kind: infraifake.Refusal}, "job_03": {Kind: infraifake.ErrorCode, Code: CodeVendorDown}}})
	rt := &processortest.RecordingTransport{}
	c := clientWith(t, f, rt.Client(), 0)
	h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(3)))
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	for poll, want := range []struct {
		word  string
		state stet.BatchState
	}{{"warming_up", stet.BatchInProgress}, {"warming_up", stet.BatchInProgress}, {"completed", stet.BatchCompleted}} {
		st, err := c.BatchStatus(t.Context(), h.ProviderID)
		if err != nil {
			t.Fatalf("poll %d: BatchStatus() = %v", poll+1, err)
		}
		_, _, body := rt.Last()
		var env struct {
			Metadata struct {
				RequestID string `json:"request_id"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatal(err)
		}
		if st.ProviderState != want.word || st.State != want.state {
			t.Errorf("poll %d: state = %q (%q), want %q (%q)", poll+1, st.State, st.ProviderState, want.state, want.word)
		}
		if !bytes.Equal(st.Raw, body) || st.StatusCode != http.StatusOK || st.RequestID != env.Metadata.RequestID || st.ProviderID != h.ProviderID {
			t.Errorf("poll %d: Raw, StatusCode, RequestID, ProviderID = %q, %d, %q, %q; want the body, 200, %q, %q", poll+1, st.Raw, st.StatusCode, st.RequestID, st.ProviderID, env.Metadata.RequestID, h.ProviderID)
		}
		if st.Total != 3 {
			t.Errorf("poll %d: Total = %d, want 3", poll+1, st.Total)
		}
		terminal := want.state.Terminal()
		if (st.ResultsURL != "") != terminal {
			t.Errorf("poll %d: ResultsURL = %q, want one only once the batch ended", poll+1, st.ResultsURL)
		}
		if terminal && (st.Succeeded != 2 || st.Failed != 1) {
			t.Errorf("poll %d: Succeeded, Failed = %d, %d; want 2, 1", poll+1, st.Succeeded, st.Failed)
		}
	}
	if n := f.BatchCounts().StatusCalls; n != 3 {
		t.Errorf("status calls = %d, want 3 (one per BatchStatus)", n)
	}
}

func TestBatchStatusFailures(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	// A row's With is the API key of the lookup (default: the test key).
	processortest.BatchStatusHarness[infraifake.Fault, string]{
		Open: func(t *testing.T, key string) processortest.BatchLookup[infraifake.Fault] {
			f := newFake(t, infraifake.Options{})
			c := newTestClient(t, f, 0)
			c.now = func() time.Time { return now }
			h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(1)))
			if err != nil {
				t.Fatalf("SubmitBatch() = %v", err)
			}
			if key != "" {
				c.apiKey = key
			}
			return processortest.BatchLookup[infraifake.Fault]{
				Processor:   c,
				ProviderID:  h.ProviderID,
				Script:      func(ft infraifake.Fault) { f.EnqueueBatch(infraifake.BatchStatusRoute, ft) },
				StatusCalls: func() int { return f.BatchCounts().StatusCalls },
				Check: func(t *testing.T, _ *stet.BatchStatus, _ *stet.ProcessorError) {
					if n := f.BatchCounts().Created; n != 1 {
						t.Errorf("batches created = %d, want 1 (a lookup creates nothing)", n)
					}
				},
			}
		},
		RequestID: uuidV7, // the answer's
	}.Run(t, []processortest.BatchStatusCase[infraifake.Fault, string]{
		{Name: "429 seconds", Fault: &infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, RetryAfter: "7"}, Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: 7 * time.Second},
		{Name: "429 http-date", Fault: &infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, RetryAfter: now.Add(90 * time.Second).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: CodeRateLimitExceeded, RetryAfter: 90 * time.Second},
		{Name: "429 retry-after-ms", Fault: &infraifake.Fault{Kind: infraifake.ErrorCode, Status: 429, Code: "TOO_MANY", RetryAfterMS: 1500}, Class: stet.FailureRateLimited, Status: 429, Code: "TOO_MANY", RetryAfter: 1500 * time.Millisecond},
		{Name: "404 unknown batch", ID: "batch_nosuch", Class: stet.FailureUnsupported, Status: 404, Code: "batch_not_found"},
		{Name: "401", With: "ifr_pk_wrong", Class: stet.FailureAuth, Status: 401, Code: CodeInvalidAPIKey},
		{Name: "503", Fault: &infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeMaintenance, RetryAfter: "30"}, Class: stet.FailureTransient, Status: 503, Code: CodeMaintenance, RetryAfter: 30 * time.Second},
		{Name: "500", Fault: &infraifake.Fault{Kind: infraifake.ErrorCode}, Class: stet.FailureTransient, Status: 500, Code: CodeInternalError},
		{Name: "redirect", Fault: &infraifake.Fault{Kind: infraifake.Redirect}, Class: stet.FailureTransient, Status: 302},
		{Name: "reset", Fault: &infraifake.Fault{Kind: infraifake.Disconnect}, Class: stet.FailureTransient},
	})
}

// TestBatchStatusStrictClient uses a client like the one stet batch status
// uses: redirects refused with an error, a timeout, bodies capped at 1 MiB.
func TestBatchStatusStrictClient(t *testing.T) {
	t.Parallel()
	strict := &http.Client{
		Timeout:   20 * time.Second,
		Transport: processortest.CappedTransport{Limit: 1 << 20},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("redirects are refused")
		},
	}
	f := newFake(t, infraifake.Options{})
	c := clientWith(t, f, strict, 0)
	h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(2)))
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	if st, err := c.BatchStatus(t.Context(), h.ProviderID); err != nil || st.State != stet.BatchCompleted {
		t.Fatalf("BatchStatus() through the strict client = %+v, %v; want completed", st, err)
	}
	for _, ft := range []infraifake.Fault{{Kind: infraifake.Redirect}, {Kind: infraifake.HugeBody}} {
		f.EnqueueBatch(infraifake.BatchStatusRoute, ft)
		st, err := c.BatchStatus(t.Context(), h.ProviderID)
		pe := processortest.AsProcessorError(t, fmt.Sprintf("BatchStatus() with %s", ft.Kind), err)
		if st != nil || pe.Class != stet.FailureTransient {
			t.Errorf("BatchStatus() with %s = %v, class %q; want nil, transient", ft.Kind, st, pe.Class)
		}
	}
	// Without the cap the huge answer is still a valid status.
	f.EnqueueBatch(infraifake.BatchStatusRoute, infraifake.Fault{Kind: infraifake.HugeBody})
	if st, err := newTestClient(t, f, 0).BatchStatus(t.Context(), h.ProviderID); err != nil || len(st.Raw) <= 2<<20 {
		t.Errorf("BatchStatus() with a huge body and no cap = %v; want a status with the whole body", err)
	}
}

// TestSubmitBatchBeforeCreate checks Infrai's side of BeforeCreate (the
// conformance suite checks it runs once, before the creating call, and that
// its failure creates nothing): batches are inline, so there is no input
// file; the batch carries stet's batch ID as label, key and metadata; and
// BeforeCreate's own error comes back unchanged.
func TestSubmitBatchBeforeCreate(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	c := newTestClient(t, f, 0)
	b := submitOf(batchItems(2))
	b.BeforeCreate = func(ctx context.Context, inputFileID string) error {
		if inputFileID != "" {
			t.Errorf("BeforeCreate(%q), want no input file: Infrai batches are inline", inputFileID)
		}
		return nil
	}
	h, err := c.SubmitBatch(t.Context(), b)
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	got := f.Batches()
	if len(got) != 1 || got[0].ID != h.ProviderID || got[0].Label != testBatchID || got[0].IdempotencyKey != testBatchID || got[0].Items != 2 || got[0].Metadata["stet_batch_id"] != testBatchID {
		t.Errorf("fake holds %+v, want one batch %s labelled %s with 2 items", got, h.ProviderID, testBatchID)
	}

	errBoom := errors.New("ledger unavailable")
	b.BeforeCreate = func(context.Context, string) error { return errBoom }
	if h, err := newTestClient(t, newFake(t, infraifake.Options{}), 0).SubmitBatch(t.Context(), b); err != errBoom || h != nil {
		t.Errorf("SubmitBatch() with a failing BeforeCreate = %v, %v; want nil and its error unchanged", h, err)
	}
}

func TestSubmitBatchRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	c := newTestClient(t, f, 0)
	noSchema := batchItems(1)
	noSchema[0].Params.Schema = json.RawMessage("{not json")
	dup := batchItems(2)
	dup[1].JobID = dup[0].JobID
	for name, b := range map[string]stet.BatchSubmit{
		"no batch id":  {Items: batchItems(1)},
		"no items":     {BatchID: testBatchID},
		"bad schema":   submitOf(noSchema),
		"duplicate id": submitOf(dup),
	} {
		called := false
		b.BeforeCreate = func(context.Context, string) error { called = true; return nil }
		_, err := c.SubmitBatch(t.Context(), b)
		if got := stet.ClassOf(err); got != stet.FailureUnsupported || called {
			t.Errorf("SubmitBatch(%s) class = %q, BeforeCreate called %v; want unsupported, false", name, got, called)
		}
	}
	if n := f.BatchCounts().CreateCalls; n != 0 {
		t.Errorf("creating calls = %d, want 0", n)
	}
}

// TestSubmitBatchAmbiguous is drill 7 at the adapter: a submission whose
// answer is lost is resent with the same key, and exactly one batch exists.
func TestSubmitBatchAmbiguous(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault       infraifake.Fault
		createdLost int // batches the lost submission created
	}{
		{infraifake.Fault{Kind: infraifake.TimeoutAfterAnswer}, 1},
		{infraifake.Fault{Kind: infraifake.CreateThenDisconnect}, 1},
		{infraifake.Fault{Kind: infraifake.Disconnect}, 0},
		{infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeVendorDown}, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.fault.Kind), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, infraifake.Options{})
			f.EnqueueBatch(infraifake.BatchSubmitRoute, tt.fault)
			short := newTestClient(t, f, 300*time.Millisecond)
			b := submitOf(batchItems(3))
			if _, err := short.SubmitBatch(t.Context(), b); stet.ClassOf(err) != stet.FailureTransient {
				t.Fatalf("SubmitBatch() with %s = %v, want transient", tt.fault.Kind, err)
			}
			if n := f.BatchCounts().Created; n != tt.createdLost {
				t.Fatalf("batches after the lost submission = %d, want %d", n, tt.createdLost)
			}
			// Infrai is reconciled by resubmission, not lookup.
			if hs, err := short.FindBatch(t.Context(), stet.BatchQuery{BatchID: b.BatchID, ItemCount: 3}); hs != nil || stet.ClassOf(err) != stet.FailureUnsupported {
				t.Errorf("FindBatch() = %v, %v; want nil, unsupported", hs, err)
			}
			c := newTestClient(t, f, 0)
			h, err := c.SubmitBatch(t.Context(), b)
			if err != nil {
				t.Fatalf("resubmission = %v, want success", err)
			}
			again, err := c.SubmitBatch(t.Context(), b)
			if err != nil || again.ProviderID != h.ProviderID {
				t.Errorf("second resubmission = %v, %v; want the same batch %s", again, err, h.ProviderID)
			}
			got := f.Batches()
			if len(got) != 1 || got[0].ID != h.ProviderID || f.BatchCounts().Created != 1 || f.BatchCounts().CreateCalls != 3 {
				t.Errorf("fake holds %d batches (created %d, creating calls %d), want exactly one (1, 3)", len(got), f.BatchCounts().Created, f.BatchCounts().CreateCalls)
			}
		})
	}
}

func TestSubmitBatchConflictAndWindow(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC))
	f := newFake(t, infraifake.Options{Clock: clock})
	c := newTestClient(t, f, 0)
	first, err := c.SubmitBatch(t.Context(), submitOf(batchItems(2)))
	if err != nil {
		t.Fatal(err)
	}
	// Same key, other items: stet's ledger and what it sent disagree.
	_, err = c.SubmitBatch(t.Context(), submitOf(batchItems(3)))
	pe := processortest.AsProcessorError(t, "SubmitBatch() with changed items", err)
	if pe.Class != stet.FailureStore || pe.Code != CodeIdempotencyConflict || pe.StatusCode != http.StatusConflict || pe.RetryAfter != 0 {
		t.Errorf("SubmitBatch() with changed items = %v (retry %v), want store IDEMPOTENCY_CONFLICT 409 without a wait", pe, pe.RetryAfter)
	}
	if n := f.BatchCounts().Created; n != 1 {
		t.Errorf("batches after a conflict = %d, want 1", n)
	}
	// Past the window the key is forgotten: the same submission creates.
	clock.Advance(24*time.Hour + time.Second)
	later, err := c.SubmitBatch(t.Context(), submitOf(batchItems(2)))
	if err != nil || later.ProviderID == first.ProviderID || f.BatchCounts().Created != 2 {
		t.Errorf("SubmitBatch() after the window = %v, %v, created %d; want a new batch (2)", later, err, f.BatchCounts().Created)
	}
}

func TestFakeBatchConcurrentSameKey(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	c := newTestClient(t, f, 0)
	b := submitOf(batchItems(2))
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			h, err := c.SubmitBatch(t.Context(), b)
			if err != nil {
				t.Errorf("SubmitBatch() = %v", err)
				return
			}
			ids[i] = h.ProviderID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Errorf("concurrent submissions got batches %v, want one", ids)
			break
		}
	}
	if f.BatchCounts().Created != 1 || f.BatchCounts().CreateCalls != n {
		t.Errorf("created, creating calls = %d, %d; want 1, %d", f.BatchCounts().Created, f.BatchCounts().CreateCalls, n)
	}
}

func TestBatchItemClassification(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, newFake(t, infraifake.Options{}), 0)
	const rid = `"metadata":{"request_id":"0190f7a4-1111-7abc-8def-0123456789ab"}`
	completion := func(content, finish string, refusal string) string {
		msg := `"content":` + content
		if refusal != "" {
			msg += `,"refusal":` + refusal
		}
		return `"data":{"model":"gpt-4.1-mini-2025","choices":[{"message":{` + msg + `},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":11,"completion_tokens":5}}`
	}
	tests := []struct {
		name  string
		item  string
		class stet.FailureClass
		code  string
	}{
		{"ok", `{"custom_id":"job_01","status":"succeeded","status_code":200,"ok":true,` + completion(`"{\"category\":\"ok\"}"`, "stop", "") + `,"error":null,` + rid + `}`, stet.FailureNone, ""},
		{"native result", `{"custom_id":"job_01","ok":true,"data":{"content":"{}","finish_reason":"stop","usage":{"input_tokens":3,"output_tokens":1}},` + rid + `}`, stet.FailureNone, ""},
		{"not JSON", `{"custom_id":"job_01","status":"succeeded","ok":true,` + completion(`"{\"category\":"`, "stop", "") + `,` + rid + `}`, stet.FailureInvalidOutput, ""},
		{"length", `{"custom_id":"job_01","status":"succeeded","ok":true,` + completion(`"{\"cat"`, "length", "") + `,` + rid + `}`, stet.FailureInvalidOutput, "length"},
		{"refusal", `{"custom_id":"job_01","status":"succeeded","ok":true,` + completion(`null`, "stop", `"I can't help"`) + `,` + rid + `}`, stet.FailureRefusal, "refusal"},
		{"content filter", `{"custom_id":"job_01","status":"succeeded","ok":true,` + completion(`null`, "content_filter", "") + `,` + rid + `}`, stet.FailureRefusal, "content_filter"},
		{"invalid request", `{"custom_id":"job_01","status":"failed","status_code":400,"ok":false,"data":null,"error":{"code":"INVALID_REQUEST","message":"bad"},` + rid + `}`, stet.FailureUnsupported, "INVALID_REQUEST"},
		{"server error", `{"custom_id":"job_01","status":"failed","status_code":502,"ok":false,"data":null,"error":{"code":"VENDOR_DOWN","message":"down"},` + rid + `}`, stet.FailureTransient, "VENDOR_DOWN"},
		{"server error no status", `{"custom_id":"job_01","status":"failed","ok":false,"error":{"code":"INTERNAL_ERROR"},` + rid + `}`, stet.FailureTransient, "INTERNAL_ERROR"},
		{"rate limit", `{"custom_id":"job_01","status":"failed","status_code":429,"ok":false,"error":{"code":"RATE_LIMIT_EXCEEDED"},` + rid + `}`, stet.FailureRateLimited, "RATE_LIMIT_EXCEEDED"},
		{"quota", `{"custom_id":"job_01","status":"failed","status_code":402,"ok":false,"error":{"code":"INSUFFICIENT_CREDIT"},` + rid + `}`, stet.FailureQuota, "INSUFFICIENT_CREDIT"},
		{"region", `{"custom_id":"job_01","status":"failed","status_code":403,"ok":false,"error":{"code":"MODULE_NOT_AVAILABLE_IN_REGION"},` + rid + `}`, stet.FailureUnsupported, "MODULE_NOT_AVAILABLE_IN_REGION"},
		{"expired word", `{"custom_id":"job_01","status":"expired","ok":false,"error":{"code":"BATCH_TIMEOUT"},` + rid + `}`, stet.FailureTransient, stet.CodeBatchItemExpired},
		{"expired code", `{"custom_id":"job_01","status":"failed","ok":false,"error":{"code":"BATCH_TIMEOUT"},` + rid + `}`, stet.FailureTransient, stet.CodeBatchItemExpired},
		{"cancelled word", `{"custom_id":"job_01","status":"cancelled","ok":false,` + rid + `}`, stet.FailureTransient, stet.CodeBatchItemCancelled},
		{"canceled code", `{"custom_id":"job_01","status":"failed","ok":false,"error":{"code":"BATCH_CANCELLED"},` + rid + `}`, stet.FailureTransient, stet.CodeBatchItemCancelled},
		{"no answer", `{"custom_id":"job_01","status":"succeeded"}`, stet.FailureTransient, ""},
	}
	for _, tt := range tests {
		r, ok := c.batchItemResult(json.RawMessage(tt.item))
		if !ok || r.JobID != "job_01" {
			t.Errorf("batchItemResult(%s) = %+v, %v; want job_01", tt.name, r, ok)
			continue
		}
		if got := stet.ClassOf(r.Err); got != tt.class {
			t.Errorf("batchItemResult(%s) class = %q (%v), want %q", tt.name, got, r.Err, tt.class)
			continue
		}
		if tt.class == stet.FailureNone {
			e := r.Extraction
			if e == nil || !json.Valid(e.Output) || !bytes.Equal(e.Raw, []byte(tt.item)) || e.RequestID != "0190f7a4-1111-7abc-8def-0123456789ab" || e.InputTokens == 0 || e.OutputTokens == 0 || e.Model == "" {
				t.Errorf("batchItemResult(%s) extraction = %+v, want output, the item as Raw, its request ID, tokens, model", tt.name, e)
			}
			continue
		}
		pe := processortest.AsProcessorError(t, "batchItemResult("+tt.name+")", r.Err)
		if pe.Code != tt.code || r.Extraction != nil {
			t.Errorf("batchItemResult(%s) code = %q, want %q", tt.name, pe.Code, tt.code)
		}
	}
	for _, item := range []string{`{"status":"succeeded","ok":true}`, `not json`, `{"custom_id":""}`} {
		if r, ok := c.batchItemResult(json.RawMessage(item)); ok {
			t.Errorf("batchItemResult(%s) = %+v, want no result: it cannot be attributed", item, r)
		}
	}
}

// TestBatchResultsMixed runs a batch with every item outcome through the
// fake, then fetches its results twice.
func TestBatchResultsMixed(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	items := batchItems(9)
	want := map[string]struct {
		class stet.FailureClass
		code  string
	}{
		"job_01": {stet.FailureNone, ""},
		"job_02": {stet.FailureInvalidOutput, ""},
		"job_03": {stet.FailureRefusal, "refusal"},
		"job_04": {stet.FailureTransient, stet.CodeBatchItemExpired},
		"job_05": {stet.FailureTransient, CodeVendorDown},
		"job_06": {stet.FailureInvalidOutput, "length"},
		"job_07": {stet.FailureTransient, stet.CodeBatchItemCancelled},
		"job_08": {stet.FailureUnsupported, CodeInvalidRequest},
		"job_09": {stet.FailureRefusal, "content_filter"},
	}
	f.ScriptBatch(testBatchID, infraifake.BatchScript{Items: map[string]infraifake.Fault{
		"job_02": {Kind: infraifake.TruncatedJSON},
		"job_03": {Kind: infraifake.Refusal},
		"job_04": {Kind: infraifake.ItemExpired},
		"job_05": {Kind: infraifake.ErrorCode, Code: CodeVendorDown},
		"job_06": {Kind: infraifake.Length},
		"job_07": {Kind: infraifake.ItemCancelled},
		"job_08": {Kind: infraifake.ErrorCode, Code: CodeInvalidRequest},
		"job_09": {Kind: infraifake.ContentFilter},
	}})
	c := newTestClient(t, f, 0)
	h, err := c.SubmitBatch(t.Context(), submitOf(items))
	if err != nil {
		t.Fatal(err)
	}
	// Results of a batch not known to have ended are not fetched.
	if _, err := c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: h.ProviderID, State: stet.BatchInProgress}); stet.ClassOf(err) != stet.FailureTransient || f.BatchCounts().ResultsFetches != 0 {
		t.Errorf("BatchResults() of a running batch = %v with %d fetches, want transient and no fetch", err, f.BatchCounts().ResultsFetches)
	}
	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil || st.State != stet.BatchCompleted {
		t.Fatalf("BatchStatus() = %+v, %v; want completed", st, err)
	}
	first, err := c.BatchResults(t.Context(), st)
	if err != nil {
		t.Fatalf("BatchResults() = %v", err)
	}
	if len(first) != len(items) {
		t.Fatalf("BatchResults() gave %d results, want %d", len(first), len(items))
	}
	for _, r := range first {
		w, ok := want[r.JobID]
		if !ok {
			t.Errorf("result for unknown job %q", r.JobID)
			continue
		}
		var code string
		var pe *stet.ProcessorError
		if errors.As(r.Err, &pe) {
			code = pe.Code
		}
		if got := stet.ClassOf(r.Err); got != w.class || code != w.code {
			t.Errorf("result %s = %q code %q, want %q code %q", r.JobID, got, code, w.class, w.code)
		}
	}
	ok := first[0].Extraction
	if first[0].JobID != "job_01" || ok == nil || string(ok.Output) != infraifake.MinimalInstance(json.RawMessage(testSchema)) || !uuidV7.MatchString(ok.RequestID) || ok.Model != testModel || ok.InputTokens == 0 || ok.OutputTokens == 0 || !bytes.Contains(ok.Raw, []byte(`"custom_id":"job_01"`)) {
		t.Errorf("result job_01 = %+v, want the minimal instance with request ID, model, tokens and its item as Raw", ok)
	}

	second, err := c.BatchResults(t.Context(), st)
	if err != nil || !reflect.DeepEqual(first, second) {
		t.Errorf("second BatchResults() = %v, differs from the first: %v", err, !reflect.DeepEqual(first, second))
	}
	if f.BatchCounts().ResultsFetches != 2 || f.BatchCounts().Created != 1 || f.BatchCounts().CreateCalls != 1 || f.BatchCounts().StatusCalls != 1 {
		t.Errorf("fetches, created, creating calls, status calls = %d, %d, %d, %d; want 2, 1, 1, 1", f.BatchCounts().ResultsFetches, f.BatchCounts().Created, f.BatchCounts().CreateCalls, f.BatchCounts().StatusCalls)
	}
	if n := f.CallsContaining("Classify report 4:"); n != 1 {
		t.Errorf("fake saw item 4's prompt %d times, want 1", n)
	}
}

func TestBatchEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		end      string
		state    stet.BatchState
		results  int
		itemCode string // of the unscripted items
	}{
		{"failed", stet.BatchFailed, 0, ""},
		{"expired", stet.BatchExpired, 3, stet.CodeBatchItemExpired},
		{"cancelled", stet.BatchCancelled, 3, stet.CodeBatchItemCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.end, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, infraifake.Options{})
			// job_01 finished before the end; the rest did not.
			f.SetBatchScript(infraifake.BatchScript{End: tt.end, Items: map[string]infraifake.Fault{"job_01": {}}})
			c := newTestClient(t, f, 0)
			h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(3)))
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.BatchStatus(t.Context(), h.ProviderID)
			if err != nil || st.State != tt.state || st.ProviderState != tt.end {
				t.Fatalf("BatchStatus() = %+v, %v; want %q", st, err, tt.state)
			}
			rs, err := c.BatchResults(t.Context(), st)
			if err != nil || len(rs) != tt.results {
				t.Fatalf("BatchResults() = %d results, %v; want %d", len(rs), err, tt.results)
			}
			for _, r := range rs {
				var pe *stet.ProcessorError
				switch {
				case r.JobID == "job_01" && (r.Err != nil || r.Extraction == nil):
					t.Errorf("job_01 = %v, want its answer", r.Err)
				case r.JobID != "job_01" && (!errors.As(r.Err, &pe) || pe.Class != stet.FailureTransient || pe.Code != tt.itemCode):
					t.Errorf("%s = %v, want transient %s", r.JobID, r.Err, tt.itemCode)
				}
			}
		})
	}
}

func TestBatchResultsUnknownBatch(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, newFake(t, infraifake.Options{}), 0)
	_, err := c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: "batch_nosuch", State: stet.BatchCompleted})
	pe := processortest.AsProcessorError(t, "BatchResults() of an unknown batch", err)
	if pe.Class != stet.FailureUnsupported || pe.Code != "batch_not_found" || pe.StatusCode != 404 {
		t.Errorf("BatchResults() of an unknown batch = %v, want unsupported batch_not_found 404", pe)
	}
	for _, st := range []*stet.BatchStatus{nil, {State: stet.BatchCompleted}} {
		if _, err := c.BatchResults(t.Context(), st); stet.ClassOf(err) != stet.FailureUnsupported {
			t.Errorf("BatchResults(%+v) = %v, want unsupported", st, err)
		}
	}
}

func TestBatchRoutesFollowChatPath(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{ChatPath: "/v1/ai/chat"})
	c, err := New(Config{Common: processor.Common{ID: testID, BaseURL: f.URL(), APIKey: testKey, Model: testModel, Subprocessors: []string{"openai"}}, ChatPath: "/ai/chat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitBatch(t.Context(), submitOf(batchItems(1))); err != nil {
		t.Errorf("SubmitBatch() with chat_path /ai/chat = %v, want success", err)
	}
	odd, err := New(Config{Common: processor.Common{ID: testID, BaseURL: f.URL(), APIKey: testKey, Model: testModel, Subprocessors: []string{"openai"}}, ChatPath: "/proxy/chat"})
	if err != nil {
		t.Fatal(err)
	}
	// Batch routes live under the API root whatever the chat path: an
	// unknown batch is a 404 there, not a call to the chat route.
	if _, err := odd.BatchStatus(t.Context(), "batch_x"); stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("BatchStatus() of an unknown batch with chat_path /proxy/chat = %v, want unsupported", err)
	}
	if n := f.BatchCounts().CreateCalls + f.BatchCounts().StatusCalls; n != 2 {
		t.Errorf("batch calls = %d, want 2", n)
	}
}

// TestBatchCanaryNeverInErrors sends a marker in every prompt and in the
// provider's messages, and checks no batch error carries it or the provider
// batch ID: Infrai's item codes, a canary as the code, a resubmission
// conflict and a status-route error naming the batch (the conformance suite
// covers refusals, server errors and an unknown batch).
func TestBatchCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	const marker = "CANARY Jane Roe 555-0100"
	f := newFake(t, infraifake.Options{Respond: func(infraifake.Request) string {
		return `{"category":"ok","note":"` + marker + `","flags":[]}`
	}})
	f.ScriptBatch(testBatchID, infraifake.BatchScript{Items: map[string]infraifake.Fault{
		"job_01": {Kind: infraifake.ErrorCode, Code: CodeInvalidRequest, Message: marker},
		"job_02": {Kind: infraifake.ErrorCode, Status: 400, Code: marker, Message: marker},
		"job_03": {Kind: infraifake.Length},
		"job_04": {Kind: infraifake.ItemExpired},
	}})
	c := newTestClient(t, f, 0)
	items := processortest.WithPrompt(batchItems(4), "Classify: "+marker)
	h, err := c.SubmitBatch(t.Context(), submitOf(items))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.CallsContaining(marker); n != len(items) {
		t.Fatalf("fake saw the marker in %d items, want %d (the canary must reach the provider)", n, len(items))
	}
	var errs []error
	_, rs := processortest.StatusAndResults(t, c, h.ProviderID)
	for _, r := range rs {
		errs = append(errs, r.Err)
	}
	_, err = c.SubmitBatch(t.Context(), submitOf(items[:2]))
	errs = append(errs, err)
	f.EnqueueBatch(infraifake.BatchStatusRoute, infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, Message: marker + " " + h.ProviderID})
	_, err = c.BatchStatus(t.Context(), h.ProviderID)
	errs = append(errs, err)
	_, err = c.BatchStatus(t.Context(), h.ProviderID+"x")
	errs = append(errs, err)
	processortest.NoCanaryErrors(t, errs, h.ProviderID)
}

func TestBatchResultsBeforeEnd(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{})
	c := newTestClient(t, f, 0)
	h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(1)))
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	_, err = c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: h.ProviderID})
	if pe := processortest.AsProcessorError(t, "BatchResults() before the end", err); pe.StatusCode != http.StatusConflict || pe.Class != stet.FailureTransient {
		t.Errorf("BatchResults() before the end = %v, want transient 409", pe)
	}
}
