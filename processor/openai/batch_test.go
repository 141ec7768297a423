package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// batchParams are the extract params of job id: testParams with its own
// prompt.
func batchParams(id string) stet.ExtractParams {
	p := testParams("Classify report " + id + ": the <b>dose</b> & timing felt wrong.")
	p.JobID = id
	return p
}

func batchItems(ids ...string) []stet.BatchItem {
	items := make([]stet.BatchItem, 0, len(ids))
	for _, id := range ids {
		items = append(items, stet.BatchItem{JobID: id, Params: batchParams(id)})
	}
	return items
}

// submit submits ids as batch batchID and fails the test on error.
func submit(t *testing.T, c *Client, batchID string, ids ...string) *stet.BatchHandle {
	t.Helper()
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: batchID, Items: batchItems(ids...)})
	if err != nil {
		t.Fatalf("SubmitBatch(%q) = %v", batchID, err)
	}
	return h
}

func TestBatchRequestGolden(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	items := batchItems("job_01GOLDEN1", "job_01GOLDEN2")
	items[1].Params.Repair = []stet.RepairTurn{{Output: []byte(`{"category":"maybe"}`), Problems: []string{`/category: value must be one of "ok", "harmful", "medical_advice"`}}}
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01GOLDEN", Items: items})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}

	files := f.Files()
	if len(files) != 1 {
		t.Fatalf("fake holds %d files, want the one input file", len(files))
	}
	in := files[0]
	if in.ID != h.InputFileID || in.Purpose != "batch" || in.Filename != "bat_01GOLDEN.jsonl" {
		t.Errorf("input file = %s %q %q, want %s purpose batch named bat_01GOLDEN.jsonl", in.ID, in.Purpose, in.Filename, h.InputFileID)
	}
	if _, err := c.BatchStatus(t.Context(), h.ProviderID); err != nil {
		t.Fatal(err)
	}
	for _, ff := range f.Files()[1:] {
		if ff.Purpose != "batch_output" || !ff.ExpiresAt.Equal(ff.CreatedAt.Add(30*24*time.Hour)) {
			t.Errorf("results file = %s %q expiring %v, want batch_output 30 days after %v (output_expires_after)", ff.ID, ff.Purpose, ff.ExpiresAt, ff.CreatedAt)
		}
	}
	processortest.Golden(t, "batch_input.golden.jsonl", in.Content)

	batches := f.Batches()
	if len(batches) != 1 {
		t.Fatalf("fake holds %d batches, want 1", len(batches))
	}
	body := bytes.ReplaceAll(batches[0].CreateBody, []byte(in.ID), []byte("FILE_ID"))
	processortest.GoldenJSON(t, "batch_create.golden.json", body)

	// Each line's body is byte for byte what the sync path sends.
	lines := bytes.Split(bytes.TrimSpace(in.Content), []byte("\n"))
	if len(lines) != len(items) {
		t.Fatalf("input file has %d lines, want %d", len(lines), len(items))
	}
	for i, it := range items {
		var line struct {
			CustomID string          `json:"custom_id"`
			Body     json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(lines[i], &line); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		var sent processortest.Last[[]byte]
		sf := newFake(t, openaifake.Options{Respond: func(req openaifake.Request) string {
			sent.Set(req.Body)
			return openaifake.MinimalInstance(req.Schema)
		}})
		if _, err := newTestClient(t, sf, 0).Extract(t.Context(), it.Params); err != nil {
			t.Fatalf("Extract(%s) = %v", it.JobID, err)
		}
		if line.CustomID != it.JobID || !bytes.Equal(line.Body, sent.Get()) {
			t.Errorf("line %d = custom_id %q body %s, want %q and the sync body %s", i, line.CustomID, line.Body, it.JobID, sent.Get())
		}
	}
}

func TestBatchStateMapping(t *testing.T) {
	t.Parallel()
	processortest.CheckBatchStates(t, "batchState", batchState, map[string]stet.BatchState{
		"validating":  stet.BatchSubmitted,
		"in_progress": stet.BatchInProgress,
		"finalizing":  stet.BatchInProgress,
		"cancelling":  stet.BatchInProgress,
		"completed":   stet.BatchCompleted,
		"failed":      stet.BatchFailed,
		"expired":     stet.BatchExpired,
		"cancelled":   stet.BatchCancelled,
		"queued":      stet.BatchUnknown,
		"":            stet.BatchUnknown,
	})
}

// completionJSON is a chat.completion body with one choice.
func completionJSON(content, refusal, finish string) string {
	q := func(s string) string {
		if s == "" {
			return "null"
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":` + q(content) + `,"refusal":` + q(refusal) + `},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
}

func responseLine(status int, body string) string {
	return fmt.Sprintf(`{"id":"batch_req_1","custom_id":"job_1","response":{"status_code":%d,"request_id":"req_item1","body":%s},"error":null}`, status, body)
}

func errorLine(code string) string {
	return `{"id":"batch_req_1","custom_id":"job_1","response":null,"error":{"code":"` + code + `","message":"the message may quote the document"}}`
}

func TestBatchItemClassification(t *testing.T) {
	t.Parallel()
	apiErr := func(typ, code string) string {
		return `{"error":{"message":"m","type":"` + typ + `","param":null,"code":"` + code + `"}}`
	}
	tests := []struct {
		name       string
		line       string
		skip       bool
		wantClass  stet.FailureClass
		wantCode   string
		wantStatus int
		wantReqID  string
	}{
		{name: "ok", line: responseLine(200, completionJSON(`{"category":"ok"}`, "", "stop")), wantStatus: 200, wantReqID: "req_item1"},
		{name: "schema-invalid JSON passes", line: responseLine(200, completionJSON(`{"unexpected":true}`, "", "stop")), wantStatus: 200, wantReqID: "req_item1"},
		{name: "not JSON", line: responseLine(200, completionJSON(`{"category":`, "", "stop")), wantClass: stet.FailureInvalidOutput, wantStatus: 200, wantReqID: "req_item1"},
		{name: "finish_reason length", line: responseLine(200, completionJSON(`{"cat`, "", "length")), wantClass: stet.FailureInvalidOutput, wantCode: "length", wantStatus: 200, wantReqID: "req_item1"},
		{name: "refusal", line: responseLine(200, completionJSON("", "I can't help with that.", "stop")), wantClass: stet.FailureRefusal, wantCode: "refusal", wantStatus: 200, wantReqID: "req_item1"},
		{name: "content filter", line: responseLine(200, completionJSON("", "", "content_filter")), wantClass: stet.FailureRefusal, wantCode: "content_filter", wantStatus: 200, wantReqID: "req_item1"},
		{name: "no choices", line: responseLine(200, `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`), wantClass: stet.FailureTransient, wantStatus: 200, wantReqID: "req_item1"},
		{name: "body not an object", line: responseLine(200, `"captive portal"`), wantClass: stet.FailureTransient, wantStatus: 200, wantReqID: "req_item1"},
		{name: "400 invalid request", line: responseLine(400, apiErr("invalid_request_error", "context_length_exceeded")), wantClass: stet.FailureUnsupported, wantCode: "context_length_exceeded", wantStatus: 400, wantReqID: "req_item1"},
		{name: "500 server error", line: responseLine(500, `{"error":{"message":"m","type":"server_error","param":null,"code":null}}`), wantClass: stet.FailureTransient, wantCode: "server_error", wantStatus: 500, wantReqID: "req_item1"},
		{name: "429 rate limit", line: responseLine(429, apiErr("requests", "rate_limit_exceeded")), wantClass: stet.FailureRateLimited, wantCode: "rate_limit_exceeded", wantStatus: 429, wantReqID: "req_item1"},
		{name: "429 quota", line: responseLine(429, apiErr("insufficient_quota", "insufficient_quota")), wantClass: stet.FailureQuota, wantCode: "insufficient_quota", wantStatus: 429, wantReqID: "req_item1"},
		{name: "expired", line: errorLine("batch_expired"), wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemExpired, wantReqID: "batch_req_1"},
		{name: "cancelled", line: errorLine("batch_cancelled"), wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemCancelled, wantReqID: "batch_req_1"},
		{name: "request timeout", line: errorLine("request_timeout"), wantClass: stet.FailureTransient, wantCode: "request_timeout", wantReqID: "batch_req_1"},
		{name: "free-text error code dropped", line: errorLine("Jane Roe said"), wantClass: stet.FailureTransient, wantReqID: "batch_req_1"},
		{name: "neither response nor error", line: `{"id":"batch_req_1","custom_id":"job_1","response":null,"error":null}`, wantClass: stet.FailureTransient, wantReqID: "batch_req_1"},
		{name: "no custom_id", line: `{"id":"batch_req_1","response":null,"error":{"code":"batch_expired"}}`, skip: true},
		{name: "not a JSON line", line: `{"id":"batch_req_1","custom_id":"job_1",`, skip: true},
	}
	c, err := New(Config{Common: processor.Common{ID: "openai-test", Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		got, ok := c.itemResult([]byte(tt.line))
		if ok == tt.skip {
			t.Errorf("%s: itemResult reported = %v, want %v", tt.name, ok, !tt.skip)
			continue
		}
		if tt.skip {
			continue
		}
		if got.JobID != "job_1" {
			t.Errorf("%s: JobID = %q, want job_1", tt.name, got.JobID)
		}
		if tt.wantClass == stet.FailureNone {
			if got.Err != nil || got.Extraction == nil {
				t.Errorf("%s: itemResult = %+v, want an extraction", tt.name, got)
				continue
			}
			e := got.Extraction
			if !json.Valid(e.Output) || string(e.Raw) != tt.line || e.RequestID != tt.wantReqID || e.StatusCode != 200 ||
				e.Model != "gpt-4.1-mini-2025-04-14" || e.InputTokens != 11 || e.OutputTokens != 7 {
				t.Errorf("%s: Extraction = %+v, want the item's output, line, request id, model and usage", tt.name, e)
			}
			continue
		}
		if got.Extraction != nil {
			t.Errorf("%s: Extraction = %+v, want nil beside an error", tt.name, got.Extraction)
		}
		pe := processortest.AsProcessorError(t, tt.name, got.Err)
		if pe.Class != tt.wantClass || pe.Code != tt.wantCode || pe.StatusCode != tt.wantStatus || pe.RequestID != tt.wantReqID {
			t.Errorf("%s: error = class %q code %q status %d request %q, want %q %q %d %q",
				tt.name, pe.Class, pe.Code, pe.StatusCode, pe.RequestID, tt.wantClass, tt.wantCode, tt.wantStatus, tt.wantReqID)
		}
		if strings.Contains(pe.Error(), "document") || strings.Contains(pe.Error(), "Jane") {
			t.Errorf("%s: Error() = %q quotes the provider's message", tt.name, pe.Error())
		}
	}
}

func TestSubmitBatchBeforeCreate(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	var (
		calls    int
		fileSeen string
	)
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{
		BatchID: "bat_01BEFORE",
		Items:   batchItems("job_a", "job_b", "job_c"),
		BeforeCreate: func(_ context.Context, fileID string) error {
			calls++
			fileSeen = fileID
			if s := f.BatchStats(); s.Uploads != 1 || s.CreateCalls != 0 {
				t.Errorf("BeforeCreate saw uploads %d, create calls %d; want 1 and 0", s.Uploads, s.CreateCalls)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	if calls != 1 {
		t.Errorf("BeforeCreate called %d times, want 1", calls)
	}
	s := f.BatchStats()
	if s.Uploads != 1 || s.CreateCalls != 1 || s.Created != 1 {
		t.Errorf("BatchStats() = %+v, want 1 upload, 1 create call, 1 created", s)
	}
	batches := f.Batches()
	if len(batches) != 1 {
		t.Fatalf("fake holds %d batches, want 1", len(batches))
	}
	b := batches[0]
	want := stet.BatchHandle{ProviderID: b.ID, InputFileID: b.InputFileID, State: stet.BatchSubmitted, CreatedAt: b.CreatedAt, RequestCount: 3}
	got := *h
	got.RequestID = ""
	if got != want {
		t.Errorf("SubmitBatch() = %+v, want %+v", got, want)
	}
	if !strings.HasPrefix(h.RequestID, "req_") {
		t.Errorf("RequestID = %q, want the create call's x-request-id", h.RequestID)
	}
	if fileSeen != b.InputFileID || b.Label != "bat_01BEFORE" || b.Items != 3 {
		t.Errorf("fake batch = %+v; BeforeCreate saw file %q; want the uploaded file and label bat_01BEFORE with 3 items", b, fileSeen)
	}
}

func TestSubmitBatchAbortsAndReusesInputFile(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	errLedger := errors.New("ledger write failed")
	var recorded string
	_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{
		BatchID: "bat_01ABORT",
		Items:   batchItems("job_a", "job_b"),
		BeforeCreate: func(_ context.Context, fileID string) error {
			recorded = fileID
			return errLedger
		},
	})
	if !errors.Is(err, errLedger) {
		t.Fatalf("SubmitBatch() with a failing BeforeCreate = %v, want it to wrap the BeforeCreate error", err)
	}
	if s := f.BatchStats(); s.Uploads != 1 || s.CreateCalls != 0 || s.Created != 0 {
		t.Errorf("after an aborted submit BatchStats() = %+v, want 1 upload and nothing created", s)
	}
	if recorded == "" {
		t.Fatal("BeforeCreate got no input file id")
	}

	var seen []string
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{
		BatchID:     "bat_01ABORT",
		Items:       batchItems("job_a", "job_b"),
		InputFileID: recorded,
		BeforeCreate: func(_ context.Context, fileID string) error {
			seen = append(seen, fileID)
			return nil
		},
	})
	if err != nil {
		t.Fatalf("SubmitBatch(InputFileID) = %v", err)
	}
	if s := f.BatchStats(); s.Uploads != 1 || s.CreateCalls != 1 || s.Created != 1 {
		t.Errorf("after reusing the file BatchStats() = %+v, want still 1 upload, 1 created", s)
	}
	if !slices.Equal(seen, []string{recorded}) || h.InputFileID != recorded || f.Batches()[0].InputFileID != recorded {
		t.Errorf("BeforeCreate saw %v, handle file %q, batch file %q; want the recorded %q", seen, h.InputFileID, f.Batches()[0].InputFileID, recorded)
	}
}

func TestSubmitBatchRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	dup := batchItems("job_a", "job_a")
	noSchema := batchItems("job_a")
	noSchema[0].Params.Schema = nil
	tests := []struct {
		name string
		b    stet.BatchSubmit
	}{
		{"no batch id", stet.BatchSubmit{Items: batchItems("job_a")}},
		{"no items", stet.BatchSubmit{BatchID: "bat_1"}},
		{"repeated job id", stet.BatchSubmit{BatchID: "bat_1", Items: dup}},
		{"no schema", stet.BatchSubmit{BatchID: "bat_1", Items: noSchema}},
		{"too many items", stet.BatchSubmit{BatchID: "bat_1", Items: make([]stet.BatchItem, BatchMaxItems+1)}},
	}
	for _, tt := range tests {
		f := newFake(t, openaifake.Options{})
		c := newTestClient(t, f, 0)
		called := false
		tt.b.BeforeCreate = func(context.Context, string) error { called = true; return nil }
		_, err := c.SubmitBatch(t.Context(), tt.b)
		if pe := processortest.AsProcessorError(t, "SubmitBatch("+tt.name+")", err); pe.Class != stet.FailureUnsupported {
			t.Errorf("SubmitBatch(%s): class = %q, want unsupported", tt.name, pe.Class)
		}
		if s := f.BatchStats(); s != (openaifake.BatchStats{}) || called {
			t.Errorf("SubmitBatch(%s): BatchStats() = %+v, BeforeCreate called %v; want nothing sent", tt.name, s, called)
		}
	}
}

func TestSubmitBatchCreateRefused(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	f.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "9"})
	c := newTestClient(t, f, 0)
	_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_1", Items: batchItems("job_a")})
	pe := processortest.AsProcessorError(t, "SubmitBatch() against a 429", err)
	if pe.Class != stet.FailureRateLimited || pe.RetryAfter != 9*time.Second {
		t.Errorf("SubmitBatch() against a 429 = class %q, RetryAfter %v; want rate_limited, 9s", pe.Class, pe.RetryAfter)
	}
	if s := f.BatchStats(); s.CreateCalls != 1 || s.Created != 0 {
		t.Errorf("BatchStats() = %+v, want 1 create call and nothing created", s)
	}
}

func TestBatchAzureUnsupported(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c, err := New(Config{Common: processor.Common{ID: "azure", BaseURL: strings.TrimSuffix(f.URL(), "/v1"), APIKey: testKey, Model: "dep"}, AzureAPIVersion: "2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, errSubmit := c.SubmitBatch(ctx, stet.BatchSubmit{BatchID: "bat_1", Items: batchItems("job_a"), BeforeCreate: func(context.Context, string) error {
		t.Error("BeforeCreate called for an Azure client")
		return nil
	}})
	_, errFind := c.FindBatch(ctx, stet.BatchQuery{BatchID: "bat_1"})
	_, errStatus := c.BatchStatus(ctx, "batch_1")
	_, errResults := c.BatchResults(ctx, &stet.BatchStatus{State: stet.BatchCompleted, OutputFileID: "file-1"})
	for i, err := range []error{errSubmit, errFind, errStatus, errResults} {
		pe := processortest.AsProcessorError(t, fmt.Sprintf("batch method %d on Azure", i), err)
		if pe.Class != stet.FailureUnsupported || pe.Code != codeAzureBatch {
			t.Errorf("batch method %d on Azure = class %q code %q, want unsupported %s", i, pe.Class, pe.Code, codeAzureBatch)
		}
	}
	if s := f.BatchStats(); s != (openaifake.BatchStats{}) || f.Calls() != 0 {
		t.Errorf("Azure batch calls reached the fake: %+v, %d sync calls", s, f.Calls())
	}
	// The OpenAI client is not mistaken for Azure.
	if newTestClient(t, f, 0).azure() {
		t.Error("azure() = true for an OpenAI client")
	}
}

func TestFindBatchAfterInterruptedSubmit(t *testing.T) {
	t.Parallel()
	for _, kind := range []openaifake.FaultKind{openaifake.CreateThenHang, openaifake.CreateThenReset} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, openaifake.Options{})
			c := newTestClient(t, f, 300*time.Millisecond)
			submit(t, c, "bat_other", "job_x") // someone else's batch
			f.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: kind})
			started := time.Now()
			var fileID string
			_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{
				BatchID: "bat_01LOST",
				Items:   batchItems("job_a", "job_b"),
				BeforeCreate: func(_ context.Context, id string) error {
					fileID = id
					return nil
				},
			})
			if pe := processortest.AsProcessorError(t, "SubmitBatch() with the answer lost", err); pe.Class != stet.FailureTransient {
				t.Errorf("SubmitBatch() with the answer lost: class = %q, want transient", pe.Class)
			}
			before := f.BatchStats()
			if before.Created != 2 || before.CreateCalls != 2 {
				t.Fatalf("BatchStats() = %+v, want the lost create to have created a batch", before)
			}
			got, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_01LOST", SubmittedAt: started, ItemCount: 2, InputFileID: fileID})
			if err != nil {
				t.Fatalf("FindBatch() = %v", err)
			}
			var lost openaifake.Batch
			for _, b := range f.Batches() {
				if b.Label == "bat_01LOST" {
					lost = b
				}
			}
			if len(got) != 1 || got[0].ProviderID != lost.ID || got[0].InputFileID != fileID || got[0].State != stet.BatchSubmitted {
				t.Errorf("FindBatch() = %+v, want exactly the lost batch %s from file %s", got, lost.ID, fileID)
			}
			after := f.BatchStats()
			if after.Created != before.Created || after.CreateCalls != before.CreateCalls || after.Uploads != before.Uploads {
				t.Errorf("FindBatch() changed the fake: %+v, then %+v", before, after)
			}
		})
	}
}

func TestFindBatchNoneCreated(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	submit(t, c, "bat_other", "job_x")
	f.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.ServerError, Status: http.StatusBadGateway})
	started := time.Now()
	_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01NONE", Items: batchItems("job_a")})
	if pe := processortest.AsProcessorError(t, "SubmitBatch() against a 502", err); pe.Class != stet.FailureTransient {
		t.Errorf("SubmitBatch() against a 502: class = %q, want transient", pe.Class)
	}
	got, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_01NONE", SubmittedAt: started})
	if err != nil || len(got) != 0 {
		t.Errorf("FindBatch() = %+v, %v; want none and no error", got, err)
	}
	if s := f.BatchStats(); s.Created != 1 || s.ListCalls != 1 {
		t.Errorf("BatchStats() = %+v, want only the other batch created and one list call", s)
	}
}

func TestFindBatchPagesBackToTheCutoff(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	clock := stet.NewManualClock(t0.Add(-2 * time.Hour))
	f := newFake(t, openaifake.Options{Clock: clock, Batch: openaifake.BatchOptions{ListLimit: 2}})
	c := newTestClient(t, f, 0)
	for i := range 5 {
		submit(t, c, fmt.Sprintf("bat_old%d", i), "job_x")
	}
	clock.Advance(2*time.Hour - time.Minute)
	first := submit(t, c, "bat_01TWICE", "job_a")
	second := submit(t, c, "bat_01TWICE", "job_a") // two that cannot be told apart
	clock.Advance(time.Minute)
	for i := range 3 {
		submit(t, c, fmt.Sprintf("bat_new%d", i), "job_y")
	}

	got, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_01TWICE", SubmittedAt: t0.Add(-time.Minute)})
	if err != nil {
		t.Fatalf("FindBatch() = %v", err)
	}
	ids := []string{}
	for _, h := range got {
		ids = append(ids, h.ProviderID)
	}
	if want := []string{second.ProviderID, first.ProviderID}; !slices.Equal(ids, want) {
		t.Errorf("FindBatch() = %v, want both labelled batches newest first %v", ids, want)
	}
	// Pages of two, newest first: [new2 new1] [new0 twice] [twice old4]
	// [old3 old2]: the first page all older than the cutoff ends the scan.
	if n := f.BatchStats().ListCalls; n != 4 {
		t.Errorf("list calls = %d, want 4 (stop after a page older than the cutoff)", n)
	}

	// Without a submission time, every page is read.
	got, err = c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_old0"})
	if err != nil || len(got) != 1 {
		t.Errorf("FindBatch(bat_old0, no time) = %+v, %v; want the oldest batch", got, err)
	}
	if n := f.BatchStats().ListCalls; n != 4+5 {
		t.Errorf("list calls = %d, want 9 (all five pages of ten batches)", n)
	}
}

func TestFindBatchListFailureIsNotNone(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{Batch: openaifake.BatchOptions{ListLimit: 1}})
	c := newTestClient(t, f, 0)
	submit(t, c, "bat_1", "job_a")
	submit(t, c, "bat_2", "job_b")
	f.EnqueueBatch(openaifake.BatchRouteList, openaifake.Fault{}, openaifake.Fault{Kind: openaifake.ServerError})
	got, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_1"})
	if pe := processortest.AsProcessorError(t, "FindBatch() with a failing second page", err); pe.Class != stet.FailureTransient || got != nil {
		t.Errorf("FindBatch() with a failing second page = %+v, class %q; want no answer, transient", got, pe.Class)
	}
}

// strictClient is what `stet batch status` uses: no redirects, a timeout
// and a 1 MiB body cap.
func strictClient() *http.Client {
	return &http.Client{
		Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("redirects are refused")
		},
		Transport: processortest.CappedTransport{Limit: 1 << 20},
	}
}

func TestBatchStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	// A row's With is whether the lookup goes through strictClient.
	processortest.BatchStatusHarness[openaifake.Fault, bool]{
		Open: func(t *testing.T, strict bool) processortest.BatchLookup[openaifake.Fault] {
			f := newFake(t, openaifake.Options{})
			cfg := Config{Common: processor.Common{ID: "openai-test", BaseURL: f.URL(), APIKey: testKey, Model: testModel, Timeout: 10 * time.Second}}
			if strict {
				cfg.HTTPClient = strictClient()
			}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			c.now = func() time.Time { return now }
			return processortest.BatchLookup[openaifake.Fault]{
				Processor:   c,
				ProviderID:  submit(t, c, "bat_1", "job_a").ProviderID,
				Script:      func(ft openaifake.Fault) { f.EnqueueBatch(openaifake.BatchRouteStatus, ft) },
				StatusCalls: func() int { return f.BatchStats().StatusCalls },
			}
		},
		RequestID: regexp.MustCompile(`^req_`), // the x-request-id header
	}.Run(t, []processortest.BatchStatusCase[openaifake.Fault, bool]{
		{Name: "429 Retry-After seconds", Fault: &openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "7"}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 7 * time.Second},
		{Name: "429 Retry-After HTTP-date", Fault: &openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: now.Add(30 * time.Second).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 30 * time.Second},
		{Name: "429 retry-after-ms", Fault: &openaifake.Fault{Kind: openaifake.RateLimit, RetryAfterMS: 1500}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 1500 * time.Millisecond},
		{Name: "429 through the strict client", Fault: &openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "3"}, With: true, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_exceeded", RetryAfter: 3 * time.Second},
		{Name: "404", Fault: &openaifake.Fault{}, ID: "batch_unknown", Class: stet.FailureUnsupported, Status: 404, Code: "batch_not_found"},
		{Name: "401", Fault: &openaifake.Fault{Kind: openaifake.Unauthorized}, Class: stet.FailureAuth, Status: 401, Code: "invalid_api_key"},
		{Name: "500", Fault: &openaifake.Fault{Kind: openaifake.ServerError}, Class: stet.FailureTransient, Status: 500, Code: "server_error"},
		{Name: "503", Fault: &openaifake.Fault{Kind: openaifake.ServerError, Status: 503}, Class: stet.FailureTransient, Status: 503, Code: "server_error"},
		{Name: "connection reset", Fault: &openaifake.Fault{Kind: openaifake.Disconnect}, MaxCalls: 2, Class: stet.FailureTransient},
		{Name: "redirect refused by the client", Fault: &openaifake.Fault{Kind: openaifake.Redirect}, With: true, Class: stet.FailureUnsupported, Status: 302, Code: "redirect"},
		// The adapter's own client (processor.Common.Client) refuses every
		// redirect, to another origin or the same one.
		{Name: "redirect elsewhere, default client", Fault: &openaifake.Fault{Kind: openaifake.Redirect}, Class: stet.FailureUnsupported, Status: 302, Code: "redirect"},
		{Name: "redirect to the same origin, default client", Fault: &openaifake.Fault{Kind: openaifake.Redirect, Status: 307, Header: http.Header{"Location": {"/v1/batches"}}}, Class: stet.FailureUnsupported, Status: 307, Code: "redirect"},
		{Name: "redirect to the same origin not followed", Fault: &openaifake.Fault{Kind: openaifake.Redirect, Status: 307, Header: http.Header{"Location": {"/v1/batches"}}}, With: true, Class: stet.FailureUnsupported, Status: 307, Code: "redirect"},
		{Name: "huge body", Fault: &openaifake.Fault{Kind: openaifake.HugeBody}, Class: stet.FailureTransient, Status: 200, Code: "response_too_large"},
		{Name: "huge body through the strict client", Fault: &openaifake.Fault{Kind: openaifake.HugeBody}, With: true, Class: stet.FailureTransient, Status: 200},
	})
}

func TestBatchStatusProgress(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			t.Parallel()
			clock := stet.NewManualClock(time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC))
			f := newFake(t, openaifake.Options{Clock: clock, Batch: openaifake.BatchOptions{PollsToEnd: 3}})
			rt := &processortest.RecordingTransport{}
			hc := rt.Client()
			if strict {
				hc = strictClient()
			}
			c, err := New(Config{Common: processor.Common{ID: "openai-test", BaseURL: f.URL(), APIKey: testKey, Model: testModel, HTTPClient: hc}})
			if err != nil {
				t.Fatal(err)
			}
			f.ScriptBatchItem("job_b", openaifake.Fault{Kind: openaifake.ServerError})
			h := submit(t, c, "bat_1", "job_a", "job_b", "job_c")
			var states []stet.BatchState
			var last *stet.BatchStatus
			for range 3 {
				clock.Advance(time.Hour)
				st, err := c.BatchStatus(t.Context(), h.ProviderID)
				if err != nil {
					t.Fatalf("BatchStatus() = %v", err)
				}
				states = append(states, st.State)
				last = st
			}
			if want := []stet.BatchState{stet.BatchInProgress, stet.BatchInProgress, stet.BatchCompleted}; !slices.Equal(states, want) {
				t.Errorf("states over 3 polls = %v, want %v", states, want)
			}
			b := f.Batches()[0]
			endedAt := clock.Now().Truncate(time.Second)
			if last.ProviderID != h.ProviderID || last.ProviderState != "completed" || last.InputFileID != h.InputFileID ||
				last.OutputFileID != b.OutputFileID || last.ErrorFileID != b.ErrorFileID || last.OutputFileID == "" || last.ErrorFileID == "" ||
				last.Total != 3 || last.Succeeded != 2 || last.Failed != 1 || last.StatusCode != 200 ||
				!last.ResultsExpireAt.Equal(endedAt.Add(30*24*time.Hour)) {
				t.Errorf("final BatchStatus() = %+v, want completed with the fake's files, 3/2/1 counts, results expiring 30 days after %v", last, endedAt)
			}
			var raw map[string]any
			if err := json.Unmarshal(last.Raw, &raw); err != nil || raw["id"] != h.ProviderID || raw["status"] != "completed" {
				t.Errorf("Raw = %s, want the batch object as received", last.Raw)
			}
			if !strict {
				_, header, body := rt.Last()
				if !bytes.Equal(last.Raw, body) || last.RequestID != header.Get("x-request-id") {
					t.Errorf("Raw, RequestID = %s, %q; want the body %s and x-request-id %q", last.Raw, last.RequestID, body, header.Get("x-request-id"))
				}
			}
		})
	}
}

// resultSummary is what a test compares of one result.
func resultSummary(r stet.BatchResult) string {
	if r.Err != nil {
		var pe *stet.ProcessorError
		if !errors.As(r.Err, &pe) {
			return r.JobID + " unclassified " + r.Err.Error()
		}
		return fmt.Sprintf("%s %s %s %d", r.JobID, pe.Class, pe.Code, pe.StatusCode)
	}
	return fmt.Sprintf("%s ok %s", r.JobID, r.Extraction.Output)
}

func TestBatchResultsMixed(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	f.ScriptBatchItem("job_invalid", openaifake.Fault{Kind: openaifake.TruncatedJSON})
	f.ScriptBatchItem("job_length", openaifake.Fault{Kind: openaifake.Length})
	f.ScriptBatchItem("job_refusal", openaifake.Fault{Kind: openaifake.Refusal})
	f.ScriptBatchItem("job_filter", openaifake.Fault{Kind: openaifake.ContentFilter})
	f.ScriptBatchItem("job_expired", openaifake.Fault{Kind: openaifake.ItemExpired})
	f.ScriptBatchItem("job_cancelled", openaifake.Fault{Kind: openaifake.ItemCancelled})
	f.ScriptBatchItem("job_timeout", openaifake.Fault{Kind: openaifake.ItemError})
	f.ScriptBatchItem("job_500", openaifake.Fault{Kind: openaifake.ServerError})
	f.ScriptBatchItem("job_400", openaifake.Fault{Kind: openaifake.HTTPError, Code: "context_length_exceeded"})
	f.ScriptBatchItem("job_429", openaifake.Fault{Kind: openaifake.RateLimit})
	ids := []string{"job_ok", "job_invalid", "job_length", "job_refusal", "job_filter", "job_expired", "job_cancelled", "job_timeout", "job_500", "job_400", "job_429", "job_ok2"}
	h := submit(t, c, "bat_mixed", ids...)
	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil || st.State != stet.BatchCompleted {
		t.Fatalf("BatchStatus() = %+v, %v; want completed after one poll", st, err)
	}
	if st.Succeeded != 6 || st.Failed != 6 {
		t.Errorf("counts = %d succeeded, %d failed; want 6 and 6", st.Succeeded, st.Failed)
	}
	before := f.BatchStats()
	filesBefore := len(f.Files())

	first, err := c.BatchResults(t.Context(), st)
	if err != nil {
		t.Fatalf("BatchResults() = %v", err)
	}
	minimal := openaifake.MinimalInstance(json.RawMessage(testSchema))
	want := []string{
		// The output file: answers with status 200, in input order.
		"job_ok ok " + minimal,
		"job_invalid invalid_output  200",
		"job_length invalid_output length 200",
		"job_refusal refusal refusal 200",
		"job_filter refusal content_filter 200",
		"job_ok2 ok " + minimal,
		// The error file.
		"job_expired transient batch_item_expired 0",
		"job_cancelled transient batch_item_cancelled 0",
		"job_timeout transient request_timeout 0",
		"job_500 transient server_error 500",
		"job_400 unsupported context_length_exceeded 400",
		"job_429 rate_limited rate_limit_exceeded 429",
	}
	var got []string
	for _, r := range first {
		got = append(got, resultSummary(r))
	}
	if !slices.Equal(got, want) {
		t.Errorf("BatchResults() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range first {
		if r.Extraction == nil {
			continue
		}
		e := r.Extraction
		var line struct {
			CustomID string `json:"custom_id"`
			Response struct {
				RequestID string `json:"request_id"`
			} `json:"response"`
		}
		if err := json.Unmarshal(e.Raw, &line); err != nil || line.CustomID != r.JobID || e.RequestID != line.Response.RequestID ||
			!strings.HasPrefix(e.RequestID, "req_") || e.Model != testModel || e.InputTokens == 0 || e.OutputTokens == 0 {
			t.Errorf("%s: Extraction = %+v (raw %s), want the item's line, request id, model and usage", r.JobID, e, e.Raw)
		}
	}

	second, err := c.BatchResults(t.Context(), st)
	if err != nil {
		t.Fatalf("BatchResults() again = %v", err)
	}
	if len(second) != len(first) {
		t.Fatalf("second fetch gave %d results, want %d", len(second), len(first))
	}
	for i := range first {
		a, b := first[i], second[i]
		if resultSummary(a) != resultSummary(b) || (a.Extraction != nil && !bytes.Equal(a.Extraction.Raw, b.Extraction.Raw)) {
			t.Errorf("result %d differs between fetches: %s, then %s", i, resultSummary(a), resultSummary(b))
		}
	}
	after := f.BatchStats()
	wantAfter := before
	wantAfter.ContentCalls += 4
	wantAfter.ResultFetches += 4
	if after != wantAfter {
		t.Errorf("BatchStats() after two fetches = %+v, want %+v (two fetches of two files, nothing else)", after, wantAfter)
	}
	if n := len(f.Files()); n != filesBefore {
		t.Errorf("fake holds %d files after fetching, want %d", n, filesBefore)
	}
	if b := f.Batches()[0]; b.Status != "completed" {
		t.Errorf("batch status after fetching = %q, want completed", b.Status)
	}
}

func TestBatchResultsOfEndedBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		end       openaifake.BatchEnd
		cancel    bool
		wantState stet.BatchState
		want      []string
	}{
		{
			name: "expired", end: openaifake.BatchEndExpired, wantState: stet.BatchExpired,
			want: []string{"job_done ok " + openaifake.MinimalInstance(json.RawMessage(testSchema)), "job_a transient batch_item_expired 0", "job_b transient batch_item_expired 0"},
		},
		{
			name: "cancelled", cancel: true, wantState: stet.BatchCancelled,
			want: []string{"job_done ok " + openaifake.MinimalInstance(json.RawMessage(testSchema)), "job_a transient batch_item_cancelled 0", "job_b transient batch_item_cancelled 0"},
		},
		{name: "failed", end: openaifake.BatchEndFailed, wantState: stet.BatchFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, openaifake.Options{Batch: openaifake.BatchOptions{PollsToEnd: 2}})
			c := newTestClient(t, f, 0)
			f.ScriptBatchItem("job_done", openaifake.Fault{Kind: openaifake.ItemOK})
			if tt.end != "" {
				f.ScriptBatchEnd("bat_ended", tt.end)
			}
			h := submit(t, c, "bat_ended", "job_done", "job_a", "job_b")
			if tt.cancel {
				if status, _ := batchCallRaw(t, f, http.MethodPost, "/batches/"+h.ProviderID+"/cancel", "", nil); status != 200 {
					t.Fatalf("cancel = %d, want 200", status)
				}
			}
			st, err := c.BatchStatus(t.Context(), h.ProviderID)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.cancel && st.State != stet.BatchInProgress {
				t.Errorf("first poll of two: state %q, want in_progress", st.State)
			}
			if !tt.cancel {
				if st, err = c.BatchStatus(t.Context(), h.ProviderID); err != nil {
					t.Fatal(err)
				}
			}
			if st.State != tt.wantState {
				t.Fatalf("state = %q (%s), want %q", st.State, st.ProviderState, tt.wantState)
			}
			results, err := c.BatchResults(t.Context(), st)
			if err != nil {
				t.Fatalf("BatchResults() = %v", err)
			}
			var got []string
			for _, r := range results {
				got = append(got, resultSummary(r))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("BatchResults() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBatchResultsRefusals(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	c := newTestClient(t, f, 0)
	h := submit(t, c, "bat_1", "job_a")

	_, err := c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: h.ProviderID, State: stet.BatchInProgress})
	if pe := processortest.AsProcessorError(t, "BatchResults(in progress)", err); pe.Class != stet.FailureUnsupported || pe.Code != "batch_not_terminal" {
		t.Errorf("BatchResults(in progress) = class %q code %q, want unsupported batch_not_terminal", pe.Class, pe.Code)
	}
	if _, err := c.BatchResults(t.Context(), nil); stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("BatchResults(nil) = %v, want unsupported", err)
	}

	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	batchCallRaw(t, f, http.MethodDelete, "/files/"+st.OutputFileID, "", nil)
	_, err = c.BatchResults(t.Context(), st)
	if pe := processortest.AsProcessorError(t, "BatchResults(deleted output)", err); pe.Class != stet.FailureUnsupported || pe.Code != "batch_results_not_found" || pe.StatusCode != 404 {
		t.Errorf("BatchResults(deleted output) = class %q code %q status %d, want unsupported batch_results_not_found 404", pe.Class, pe.Code, pe.StatusCode)
	}

	f.EnqueueBatch(openaifake.BatchRouteContent, openaifake.Fault{Kind: openaifake.ServerError, Status: 503})
	_, err = c.BatchResults(t.Context(), &stet.BatchStatus{State: stet.BatchCompleted, OutputFileID: "file-any"})
	if pe := processortest.AsProcessorError(t, "BatchResults(503)", err); pe.Class != stet.FailureTransient || pe.StatusCode != 503 {
		t.Errorf("BatchResults(503) = class %q status %d, want transient 503", pe.Class, pe.StatusCode)
	}
}

func TestBatchCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	const marker = "CANARY Jane Roe 555-0100"
	f := newFake(t, openaifake.Options{Respond: func(openaifake.Request) string { return `{"note":"` + marker + `"}` }})
	c := newTestClient(t, f, 0)
	f.ScriptBatchItem("job_a", openaifake.Fault{Kind: openaifake.Refusal, Message: "I won't discuss " + marker})
	f.ScriptBatchItem("job_b", openaifake.Fault{Kind: openaifake.HTTPError, Status: 400, Message: marker, Code: marker})
	f.ScriptBatchItem("job_c", openaifake.Fault{Kind: openaifake.ItemError, Code: "request_timeout", Message: marker})
	f.ScriptBatchItem("job_d", openaifake.Fault{Kind: openaifake.TruncatedJSON})
	items := processortest.WithPrompt(batchItems("job_a", "job_b", "job_c", "job_d"), "Classify: "+marker)
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_canary", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.BatchItemsContaining(marker); n != 4 {
		t.Fatalf("fake saw the marker in %d batch items, want 4 (the canary must reach the provider)", n)
	}
	st, results := processortest.StatusAndResults(t, c, h.ProviderID)
	if len(results) != 4 {
		t.Fatalf("BatchResults() = %d results, want 4", len(results))
	}
	_, errStatus := c.BatchStatus(t.Context(), "batch_"+marker)
	errs := []error{errStatus}
	for _, r := range results {
		errs = append(errs, r.Err)
	}
	processortest.NoCanaryErrors(t, errs, h.ProviderID, st.OutputFileID)
}
