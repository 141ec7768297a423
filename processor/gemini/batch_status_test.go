package gemini

// Tests of the batch read side: status lookups, results, how batches end,
// and what the SDK can and cannot decode.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// statusClient is the client `stet batch status` uses: no redirects, a
// timeout, bodies capped at 1 MiB.
func statusClient(refuse func(*http.Request, []*http.Request) error) func(http.RoundTripper) *http.Client {
	return func(wire http.RoundTripper) *http.Client {
		return &http.Client{
			Timeout:       20 * time.Second,
			CheckRedirect: refuse,
			Transport:     processortest.CappedTransport{Next: wire, Limit: 1 << 20},
		}
	}
}

func TestBatchStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	useLast := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	refuse := func(*http.Request, []*http.Request) error { return errors.New("redirects are refused") }
	// A row's With, when set, makes the lookup's HTTP client over the
	// recording transport.
	type with = func(wire http.RoundTripper) *http.Client
	processortest.BatchStatusHarness[geminifake.Fault, with]{
		Open: func(t *testing.T, client with) processortest.BatchLookup[geminifake.Fault] {
			f := newFake(t, geminifake.Options{Batch: geminifake.BatchOptions{PollsToEnd: 5}})
			setup := newBatchClient(t, f, nil)
			setup.inlineLimit = 1 // a file batch: nothing to leave out of Raw
			h, err := setup.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_status", Items: batchItems("s")})
			if err != nil {
				t.Fatal(err)
			}
			// A transport of its own: no connection the setup used, which
			// net/http would retry a reset GET on.
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			rec := &wireRecorder{}
			wire := chainTransport{rec: rec, next: tr}
			c := newBatchClient(t, f, func(cfg *Config) {
				cfg.HTTPClient = &http.Client{Transport: wire}
				if client != nil {
					cfg.HTTPClient = client(wire)
				}
			})
			c.now = func() time.Time { return now }
			return processortest.BatchLookup[geminifake.Fault]{
				Processor:   c,
				ProviderID:  h.ProviderID,
				Script:      func(ft geminifake.Fault) { f.EnqueueBatchStatus(ft) },
				StatusCalls: func() int { return f.BatchCounts().StatusCalls },
				Check: func(t *testing.T, st *stet.BatchStatus, pe *stet.ProcessorError) {
					if pe != nil {
						return
					}
					if st.ProviderID != h.ProviderID || st.State != stet.BatchInProgress || st.ProviderState != geminifake.BatchStateRunning || st.Total != 1 {
						t.Errorf("BatchStatus() = %+v, want %s running, 1 item", st, h.ProviderID)
					}
					if st.InputFileID != h.InputFileID || st.InputFileID == "" {
						t.Errorf("InputFileID = %q, want %q", st.InputFileID, h.InputFileID)
					}
					got := rec.last(t, http.MethodGet, "/v1beta/"+h.ProviderID)
					if !bytes.Equal(st.Raw, got.answer) {
						t.Errorf("Raw differs from the body received (%d and %d bytes)", len(st.Raw), len(got.answer))
					}
				},
			}
		},
	}.Run(t, []processortest.BatchStatusCase[geminifake.Fault, with]{
		{Name: "through the status client", With: statusClient(refuse), Status: 200},
		{Name: "429 Retry-After seconds", Fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: "3"}, With: statusClient(refuse), Class: stet.FailureRateLimited, Status: 429, Code: "RESOURCE_EXHAUSTED", RetryAfter: 3 * time.Second},
		{Name: "429 Retry-After HTTP-date", Fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: now.Add(30 * time.Second).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "RESOURCE_EXHAUSTED", RetryAfter: 30 * time.Second},
		{Name: "429 retry-after-ms", Fault: &geminifake.Fault{Kind: geminifake.RateLimit, Header: http.Header{"Retry-After-Ms": {"1500"}}}, Class: stet.FailureRateLimited, Status: 429, Code: "RESOURCE_EXHAUSTED", RetryAfter: 1500 * time.Millisecond},
		{Name: "429 RetryInfo", Fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "9s"}, Class: stet.FailureRateLimited, Status: 429, Code: "RESOURCE_EXHAUSTED", RetryAfter: 9 * time.Second},
		{Name: "404 unknown batch", ID: "batches/doesnotexist", Class: stet.FailureUnsupported, Status: 404, Code: codeBatchNotFound},
		{Name: "401", Fault: &geminifake.Fault{Kind: geminifake.HTTPError, Status: 401}, Class: stet.FailureAuth, Status: 401, Code: "UNAUTHENTICATED"},
		{Name: "bad key", Fault: &geminifake.Fault{Kind: geminifake.Unauthorized}, Class: stet.FailureAuth, Status: 400, Code: "API_KEY_INVALID"},
		{Name: "500", Fault: &geminifake.Fault{Kind: geminifake.ServerError}, Class: stet.FailureTransient, Status: 500, Code: "INTERNAL"},
		{Name: "503", Fault: &geminifake.Fault{Kind: geminifake.ServerError, Status: 503}, With: statusClient(refuse), Class: stet.FailureTransient, Status: 503, Code: "UNAVAILABLE"},
		{Name: "connection reset", Fault: &geminifake.Fault{Kind: geminifake.Disconnect}, Class: stet.FailureTransient},
		{Name: "redirect refused by the adapter's own client", Fault: &geminifake.Fault{Kind: geminifake.Redirect}, Class: stet.FailureTransient, Status: 302, Code: codeRedirect},
		{Name: "redirect, last response kept", Fault: &geminifake.Fault{Kind: geminifake.Redirect}, With: statusClient(useLast), Class: stet.FailureTransient, Status: 302, Code: codeRedirect},
		{Name: "redirect refused", Fault: &geminifake.Fault{Kind: geminifake.Redirect}, With: statusClient(refuse), Class: stet.FailureTransient, Status: 302, Code: codeRedirect},
		{Name: "huge body, no cap", Fault: &geminifake.Fault{Kind: geminifake.HugeBody}, Status: 200},
		{Name: "huge body through the status client", Fault: &geminifake.Fault{Kind: geminifake.HugeBody}, With: statusClient(refuse), Class: stet.FailureTransient, Status: 200},
	})

	t.Run("malformed id", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		c := newBatchClient(t, f, nil)
		for _, id := range []string{"", "batches/", "batches/a/b", "batches/../files/x", "operations/x?y"} {
			_, err := c.BatchStatus(t.Context(), id)
			if pe := processortest.AsProcessorError(t, "error", err); pe.Class != stet.FailureUnsupported {
				t.Errorf("BatchStatus(%q) = %v, want unsupported", id, err)
			}
		}
		if n := f.BatchCounts().StatusCalls; n != 0 {
			t.Errorf("status calls = %d, want 0", n)
		}
	})
}

// chainTransport records through rec, sending through next.
type chainTransport struct {
	rec  *wireRecorder
	next http.RoundTripper
}

func (t chainTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	rec := recorded{method: req.Method, path: req.URL.Path, query: req.URL.RawQuery}
	if err == nil {
		answer, rerr := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if rerr != nil {
			t.rec.add(rec)
			return nil, rerr
		}
		res.Body = io.NopCloser(bytes.NewReader(answer))
		rec.status, rec.answer = res.StatusCode, answer
	}
	t.rec.add(rec)
	return res, err
}

// TestBatchStatusProgress polls an inline batch to its end and checks the
// states, counts, retention and that Raw carries neither the prompts nor
// the answers the API echoes.
func TestBatchStatusProgress(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{Batch: geminifake.BatchOptions{PollsToEnd: 3}, Respond: func(geminifake.Request) string {
		return `{"category":"ok","flags":["OUTPUT-MARKER"],"confidence":1}`
	}})
	c := newBatchClient(t, f, nil)
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_progress", Items: withCanary(batchItems("a", "b"))})
	if err != nil {
		t.Fatal(err)
	}
	if h.State != stet.BatchSubmitted {
		t.Errorf("handle state = %s, want submitted", h.State)
	}
	want := []struct {
		state stet.BatchState
		word  string
	}{
		{stet.BatchInProgress, geminifake.BatchStateRunning},
		{stet.BatchInProgress, geminifake.BatchStateRunning},
		{stet.BatchCompleted, geminifake.BatchStateSucceeded},
		{stet.BatchCompleted, geminifake.BatchStateSucceeded},
	}
	for i, w := range want {
		st, err := c.BatchStatus(t.Context(), h.ProviderID)
		if err != nil {
			t.Fatalf("poll %d: BatchStatus() = %v", i+1, err)
		}
		if st.State != w.state || st.ProviderState != w.word {
			t.Errorf("poll %d: state %s (%s), want %s (%s)", i+1, st.State, st.ProviderState, w.state, w.word)
		}
		if !json.Valid(st.Raw) || !bytes.Contains(st.Raw, []byte(w.word)) || !bytes.Contains(st.Raw, []byte(h.ProviderID)) {
			t.Errorf("poll %d: Raw = %s, want the batch's JSON", i+1, st.Raw)
		}
		if bytes.Contains(st.Raw, []byte("CANARY")) || bytes.Contains(st.Raw, []byte("OUTPUT-MARKER")) {
			t.Errorf("poll %d: Raw carries a prompt or an answer: %s", i+1, st.Raw)
		}
		if st.State.Terminal() {
			if st.Total != 2 || st.Succeeded != 2 || st.Failed != 0 {
				t.Errorf("poll %d: counts %d/%d/%d, want 2 total, 2 succeeded", i+1, st.Total, st.Succeeded, st.Failed)
			}
			if d := time.Until(st.ResultsExpireAt); d < 47*time.Hour || d > 49*time.Hour {
				t.Errorf("poll %d: ResultsExpireAt in %v, want about 48h", i+1, d)
			}
		} else if !st.ResultsExpireAt.IsZero() {
			t.Errorf("poll %d: ResultsExpireAt set on a running batch", i+1)
		}
	}
}

// TestBatchResultsTwice checks what a second fetch costs on each path (a
// lookup inline, a download from a file) and that it changes nothing;
// processortest checks that both fetches agree.
func TestBatchResultsTwice(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"inline", "file"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, geminifake.Options{})
			c := newBatchClient(t, f, nil)
			if mode == "file" {
				c.inlineLimit = 1
			}
			f.ScriptBatchItem("job_invalid", geminifake.Fault{Kind: geminifake.TruncatedJSON})
			f.ScriptBatchItem("job_refusal", geminifake.Fault{Kind: geminifake.Finish})
			f.ScriptBatchItem("job_expired", geminifake.Fault{Kind: geminifake.BatchItemExpired})
			f.ScriptBatchItem("job_errored", geminifake.Fault{Kind: geminifake.ServerError, Status: 503})
			st, first := runToResults(t, c, "bat_twice_"+mode, batchItems("ok", "invalid", "refusal", "expired", "errored"))
			if (mode == "file") != (st.OutputFileID != "") {
				t.Errorf("OutputFileID = %q in %s mode", st.OutputFileID, mode)
			}
			before := f.BatchCounts()
			// The batch ended on the first lookup (PollsToEnd default);
			// an inline batch's results were one more lookup.
			if wantLookups := 1 + boolInt(mode == "inline"); before.StatusCalls != wantLookups {
				t.Errorf("status lookups before the second fetch = %d, want %d", before.StatusCalls, wantLookups)
			}
			second, err := c.BatchResults(t.Context(), st)
			if err != nil {
				t.Fatalf("second BatchResults() = %v", err)
			}
			after := f.BatchCounts()
			if len(first) != 5 || !sameResults(first, second) {
				t.Errorf("results differ between fetches or are not 5:\n%s\n%s", describe(first), describe(second))
			}
			if d := after.ResultsFetches - before.ResultsFetches; d != 1 {
				t.Errorf("second fetch counted %d results fetches, want 1", d)
			}
			if after.ResultsFetches != 2 && mode == "file" {
				t.Errorf("results fetches = %d, want 2 downloads", after.ResultsFetches)
			}
			if after.CreateCalls != 1 || after.Created != 1 || after.Uploads != before.Uploads || after.Cancels+after.Deletes != 0 {
				t.Errorf("fetching had side effects: %+v → %+v", before, after)
			}
			if s := f.Batches()[0].State; s != geminifake.BatchStateSucceeded {
				t.Errorf("batch state after fetches = %s, want %s", s, geminifake.BatchStateSucceeded)
			}
		})
	}
}

func sameResults(a, b []stet.BatchResult) bool {
	return describe(a) == describe(b)
}

func describe(rs []stet.BatchResult) string {
	var sb strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&sb, "%s class=%s", r.JobID, stet.ClassOf(r.Err))
		if pe := (*stet.ProcessorError)(nil); errors.As(r.Err, &pe) {
			fmt.Fprintf(&sb, " code=%s", pe.Code)
		}
		if r.Extraction != nil {
			fmt.Fprintf(&sb, " output=%s raw=%x id=%s", r.Extraction.Output, r.Extraction.Raw, r.Extraction.RequestID)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func TestBatchEnds(t *testing.T) {
	t.Parallel()
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		f.ScriptBatchEnd("bat_fail", geminifake.BatchStateFailed)
		c := newBatchClient(t, f, nil)
		st, results := runToResults(t, c, "bat_fail", batchItems("a", "b"))
		if st.State != stet.BatchFailed || st.ProviderState != geminifake.BatchStateFailed {
			t.Errorf("state = %s (%s), want failed", st.State, st.ProviderState)
		}
		if len(results) != 0 {
			t.Errorf("results = %s, want none", describe(results))
		}
	})
	t.Run("expired with partial results", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		f.ScriptBatchEnd("bat_exp", geminifake.BatchStateExpired)
		f.ScriptBatchItem("job_done", geminifake.Fault{Kind: geminifake.BatchItemOK})
		c := newBatchClient(t, f, nil)
		st, results := runToResults(t, c, "bat_exp", batchItems("done", "late"))
		if st.State != stet.BatchExpired {
			t.Errorf("state = %s, want expired", st.State)
		}
		got := describe(results)
		if len(results) != 2 || results[0].Extraction == nil || !strings.Contains(got, "job_late class=transient code="+stet.CodeBatchItemExpired) {
			t.Errorf("results = %s, want job_done answered and job_late expired", got)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{Batch: geminifake.BatchOptions{PollsToEnd: 10}})
		c := newBatchClient(t, f, nil)
		h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_cancel", Items: batchItems("a")})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.batches.Cancel(t.Context(), h.ProviderID, nil); err != nil {
			t.Fatalf("SDK Cancel() against the fake = %v", err)
		}
		st, err := c.BatchStatus(t.Context(), h.ProviderID)
		if err != nil || st.State != stet.BatchCancelled {
			t.Fatalf("BatchStatus() = %+v, %v; want cancelled", st, err)
		}
		results, err := c.BatchResults(t.Context(), st)
		if err != nil || !strings.Contains(describe(results), "job_a class=transient code="+stet.CodeBatchItemCancelled) {
			t.Errorf("BatchResults() = %s, %v; want job_a cancelled", describe(results), err)
		}
	})
	t.Run("not ended", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{Batch: geminifake.BatchOptions{PollsToEnd: 10}})
		c := newBatchClient(t, f, nil)
		h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_early", Items: batchItems("a")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: h.ProviderID, State: stet.BatchCompleted})
		if pe := processortest.AsProcessorError(t, "error", err); pe.Class != stet.FailureTransient || pe.Code != codeBatchNotTerminal {
			t.Errorf("BatchResults() of a running batch = %v, want transient %s", err, codeBatchNotTerminal)
		}
	})
}

// TestResultsParsing feeds results the fake never writes: lines without a
// key or not JSON report on no item, a key reported twice counts once, an
// item with neither response nor error is a transient failure.
func TestResultsParsing(t *testing.T) {
	t.Parallel()
	c := &BatchClient{Client: &Client{model: testModel, now: time.Now}}
	answer := `{"candidates":[{"content":{"parts":[{"text":"{\"a\":1}"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2},"modelVersion":"gemini-2.5-flash-001","responseId":"resp-1"}`
	file := strings.Join([]string{
		`{"key":"job_1","response":` + answer + `}`,
		`{"key":"job_1","error":{"code":13,"message":"later duplicate"}}`,
		`{"response":` + answer + `}`,
		`not json at all`,
		``,
		`{"key":"job_2","response":null}`,
		`{"metadata":{"key":"job_3"},"error":{"code":3,"message":"bad"}}`,
	}, "\n")
	inline := []json.RawMessage{
		json.RawMessage(`{"metadata":{"key":"job_1"},"response":` + answer + `}`),
		json.RawMessage(`{"metadata":{"key":"job_1"},"error":{"code":13}}`),
		json.RawMessage(`{"metadata":{"other":"x"},"response":` + answer + `}`),
		json.RawMessage(`{"metadata":{"key":"job_2"}}`),
		json.RawMessage(`{"metadata":{"key":"job_3"},"error":{"code":3}}`),
	}
	want := "job_1 class= output={\"a\":1}"
	for name, results := range map[string][]stet.BatchResult{"file": c.fileResults([]byte(file), 200), "inline": c.inlineResults(inline, 200)} {
		got := describe(results)
		if len(results) != 3 || !strings.HasPrefix(got, want) ||
			!strings.Contains(got, "job_2 class=transient code="+codeEmptyItem) ||
			!strings.Contains(got, "job_3 class=unsupported code=INVALID_ARGUMENT") {
			t.Errorf("%s results =\n%s\nwant job_1 answered once, job_2 empty, job_3 invalid", name, got)
		}
		if e := results[0].Extraction; e == nil || e.RequestID != "resp-1" || e.Model != "gemini-2.5-flash-001" || e.InputTokens != 3 || e.OutputTokens != 2 || e.StatusCode != 200 {
			t.Errorf("%s: job_1 extraction = %+v, want the item's ID, model and counts", name, e)
		}
	}
}

// TestBatchReadsSendNoText checks that FindBatch, BatchStatus and
// BatchResults send no body and nothing of the document.
func TestBatchReadsSendNoText(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	rec := &wireRecorder{}
	c := newBatchClient(t, f, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_reads", Items: withCanary(batchItems("a"))})
	if err != nil {
		t.Fatal(err)
	}
	sent := len(rec.all())
	if _, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_reads"}); err != nil {
		t.Fatal(err)
	}
	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchResults(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.all()[sent:] {
		if e.method != http.MethodGet || len(e.body) != 0 || strings.Contains(e.query, "CANARY") {
			t.Errorf("read sent %s %s?%s with a %d-byte body, want a bodiless GET", e.method, e.path, e.query, len(e.body))
		}
	}
}

// TestSDKCannotDecodeItemErrors pins why the adapter parses the captured
// body: the SDK's JobError takes details as strings, so it fails on an
// ended batch holding a per-item error with google.rpc details, while
// BatchStatus and BatchResults read it.
func TestSDKCannotDecodeItemErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	f.ScriptBatchItem("job_limited", geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "7s"})
	c := newBatchClient(t, f, nil)
	st, results := runToResults(t, c, "bat_details", batchItems("limited", "fine"))
	if _, err := c.batches.Get(t.Context(), st.ProviderID, nil); err == nil {
		t.Errorf("SDK Get() of a batch with item error details = nil error; the adapter may rely on the SDK's decoding again")
	}
	if got := describe(results); !strings.Contains(got, "job_limited class=rate_limited") || !strings.Contains(got, "job_fine class= ") {
		t.Errorf("BatchResults() = %s, want job_limited rate limited and job_fine answered", got)
	}
}

// TestFakeSpeaksSDK checks that the SDK itself reads the fake's answers.
func TestFakeSpeaksSDK(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	c := newBatchClient(t, f, nil)
	ctx := t.Context()
	inline, err := c.SubmitBatch(ctx, stet.BatchSubmit{BatchID: "bat_sdk_inline", Items: batchItems("a", "b")})
	if err != nil {
		t.Fatal(err)
	}
	c.inlineLimit = 1
	file, err := c.SubmitBatch(ctx, stet.BatchSubmit{BatchID: "bat_sdk_file", Items: batchItems("c")})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*stet.BatchHandle{inline, file} {
		if _, err := c.BatchStatus(ctx, h.ProviderID); err != nil {
			t.Fatal(err)
		}
	}

	job, err := c.batches.Get(ctx, inline.ProviderID, nil)
	if err != nil {
		t.Fatalf("SDK Get() = %v", err)
	}
	if job.Name != inline.ProviderID || job.DisplayName != "bat_sdk_inline" || job.State != genai.JobStateSucceeded || job.Model != "models/"+testModel || job.CreateTime.IsZero() {
		t.Errorf("SDK Get() = %+v, want the succeeded inline batch", job)
	}
	if job.Dest == nil || len(job.Dest.InlinedResponses) != 2 || job.Dest.InlinedResponses[1].Metadata[BatchKeyField] != "job_b" ||
		job.Dest.InlinedResponses[0].Response == nil || len(job.Dest.InlinedResponses[0].Response.Candidates) != 1 {
		t.Errorf("SDK Get() dest = %+v, want two inline responses keyed by job", job.Dest)
	}
	fjob, err := c.batches.Get(ctx, file.ProviderID, nil)
	if err != nil || fjob.Dest == nil || fjob.Dest.FileName == "" {
		t.Fatalf("SDK Get(file batch) = %+v, %v; want a results file", fjob, err)
	}
	data, err := c.files.Download(ctx, genai.NewDownloadURIFromFile(&genai.File{DownloadURI: fjob.Dest.FileName}), nil)
	if err != nil || !bytes.Contains(data, []byte(`"key":"job_c"`)) {
		t.Errorf("SDK Download() = %q, %v; want the results line of job_c", data, err)
	}

	page, err := c.batches.List(ctx, &genai.ListBatchJobsConfig{PageSize: 1})
	if err != nil || len(page.Items) != 1 || page.NextPageToken == "" {
		t.Fatalf("SDK List(page size 1) = %+v, %v; want one batch and a next page", page, err)
	}
	next, err := page.Next(ctx)
	if err != nil || len(next.Items) != 1 || next.Items[0].Name != file.ProviderID {
		t.Errorf("SDK List() second page = %+v, %v; want the file batch", next, err)
	}

	if _, err := c.batches.Delete(ctx, inline.ProviderID, nil); err != nil {
		t.Fatalf("SDK Delete() = %v", err)
	}
	_, err = c.BatchStatus(ctx, inline.ProviderID)
	if pe := processortest.AsProcessorError(t, "error", err); pe.Code != codeBatchNotFound {
		t.Errorf("BatchStatus() after delete = %v, want %s", err, codeBatchNotFound)
	}
	if n := f.BatchCounts(); n.Deletes != 1 || len(f.Batches()) != 1 {
		t.Errorf("fake after delete: %+v, %d held; want 1 delete, 1 batch left", n, len(f.Batches()))
	}
}

func TestBatchCapabilities(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	c := newBatchClient(t, f, nil)
	if caps := c.Info().Capabilities; !slices.Equal(caps, []string{"sync", "json_schema", "batch"}) {
		t.Errorf("Info().Capabilities = %v, want sync, json_schema, batch", caps)
	}
	if caps := c.Client.Info().Capabilities; slices.Contains(caps, "batch") {
		t.Errorf("Client.Info() capabilities changed to %v", caps)
	}
}
