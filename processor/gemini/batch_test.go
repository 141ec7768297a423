package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/processortest"
)

const canary = "CANARY Jane Roe 555-0100"

// wireRecorder records every request the client sends and every answer it
// reads, and events the test adds between them.
type wireRecorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
	status              int
	answer              []byte
}

func (rt *wireRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := recorded{method: req.Method, path: req.URL.Path, query: req.URL.RawQuery, header: req.Header.Clone(), body: body}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		answer, rerr := io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(answer))
		if rerr != nil {
			return nil, rerr
		}
		rec.status, rec.answer = res.StatusCode, answer
	}
	rt.add(rec)
	return res, err
}

func (rt *wireRecorder) add(rec recorded) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.events = append(rt.events, rec)
}

func (rt *wireRecorder) all() []recorded {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.events)
}

// last returns the last request whose method and path suffix match.
func (rt *wireRecorder) last(t *testing.T, method, suffix string) recorded {
	t.Helper()
	events := rt.all()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].method == method && strings.HasSuffix(events[i].path, suffix) {
			return events[i]
		}
	}
	t.Fatalf("no %s request to …%s among %d", method, suffix, len(events))
	return recorded{}
}

func newBatchClient(t *testing.T, f *geminifake.Server, modify func(*Config)) *BatchClient {
	t.Helper()
	cfg := Config{Common: processor.Common{ID: "gemini-batch", BaseURL: f.URL(), APIKey: testKey, Model: testModel, Region: "us", Retention: "55d", Timeout: 10 * time.Second}}
	if modify != nil {
		modify(&cfg)
	}
	c, err := NewBatch(cfg)
	if err != nil {
		t.Fatalf("NewBatch() = %v", err)
	}
	return c
}

func batchItems(names ...string) []stet.BatchItem {
	items := make([]stet.BatchItem, 0, len(names))
	for _, n := range names {
		p := testParams("Classify the report below.\n\nReport: " + n + " says the dose <b>&</b> timing felt wrong.")
		p.JobID = "job_" + n
		items = append(items, stet.BatchItem{JobID: p.JobID, Params: p})
	}
	return items
}

// withCanary adds the canary to every item's prompt.
func withCanary(items []stet.BatchItem) []stet.BatchItem {
	for i := range items {
		items[i].Params.Prompt = stet.NewText(items[i].Params.Prompt.Reveal() + " " + canary)
	}
	return items
}

func TestBatchRequestGolden(t *testing.T) {
	t.Parallel()
	items := batchItems("alpha", "beta")
	items[1].Params.Repair = []stet.RepairTurn{{Output: []byte(`{"category":"maybe"}`), Problems: []string{`/category: value must be one of "ok", "harmful", "medical_advice"`}}}

	t.Run("inline", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		rec := &wireRecorder{}
		c := newBatchClient(t, f, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })
		if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01GOLDEN", Items: items}); err != nil {
			t.Fatalf("SubmitBatch() = %v", err)
		}
		create := rec.last(t, http.MethodPost, "/v1beta/models/"+testModel+":batchGenerateContent")
		if key := create.header.Get("x-goog-api-key"); key != testKey {
			t.Errorf("x-goog-api-key = %q, want the configured key", key)
		}
		processortest.GoldenJSON(t, "batch_create_inline.golden.json", create.body)
		if n := f.BatchCounts().Uploads; n != 0 {
			t.Errorf("uploads = %d, want 0 for an inline batch", n)
		}
	})

	t.Run("file", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		rec := &wireRecorder{}
		c := newBatchClient(t, f, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })
		c.inlineLimit = 1
		h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01GOLDEN", Items: items})
		if err != nil {
			t.Fatalf("SubmitBatch() = %v", err)
		}
		if !strings.HasPrefix(h.InputFileID, "files/") {
			t.Fatalf("InputFileID = %q, want the uploaded file", h.InputFileID)
		}
		create := rec.last(t, http.MethodPost, ":batchGenerateContent")
		processortest.GoldenJSON(t, "batch_create_file.golden.json", bytes.ReplaceAll(create.body, []byte(h.InputFileID), []byte("files/FILE_ID")))
		jsonl, ok := f.File(h.InputFileID)
		if !ok {
			t.Fatalf("fake holds no file %s", h.InputFileID)
		}
		processortest.Golden(t, "batch_input.golden.jsonl", jsonl)

		start := rec.all()[0]
		if start.path != "/upload/v1beta/files" || start.header.Get("X-Goog-Upload-Command") != "start" {
			t.Fatalf("first request = %s %s, want the upload start", start.method, start.path)
		}
		if got := start.header.Get("X-Goog-Upload-Header-Content-Type"); got != "application/jsonl" {
			t.Errorf("upload content type = %q, want application/jsonl", got)
		}
		if !bytes.Contains(start.body, []byte(`"displayName":"bat_01GOLDEN"`)) {
			t.Errorf("upload start body = %s, want the batch ID as display name", start.body)
		}
	})
}

// TestJSONLMatchesInline checks that a JSONL line carries the request the
// SDK puts inline, and that both are the request the sync path sends.
func TestJSONLMatchesInline(t *testing.T) {
	t.Parallel()
	var (
		mu         sync.Mutex
		syncBodies []json.RawMessage
	)
	f := newFake(t, geminifake.Options{Respond: func(req geminifake.Request) string {
		mu.Lock()
		defer mu.Unlock()
		syncBodies = append(syncBodies, req.Body)
		return geminifake.MinimalInstance(req.Schema)
	}})
	temp := float32(0.25)
	rec := &wireRecorder{}
	c := newBatchClient(t, f, func(cfg *Config) {
		cfg.HTTPClient = &http.Client{Transport: rec}
		cfg.Temperature, cfg.MaxOutputTokens = &temp, 1024
	})
	items := batchItems("one", "two")
	items[1].Params.Repair = []stet.RepairTurn{{Output: nil, Problems: []string{"not valid JSON"}}}

	if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_inline", Items: items}); err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	var created struct {
		Batch struct {
			InputConfig struct {
				Requests struct {
					Requests []struct {
						Request  any               `json:"request"`
						Metadata map[string]string `json:"metadata"`
					} `json:"requests"`
				} `json:"requests"`
			} `json:"inputConfig"`
		} `json:"batch"`
	}
	if err := json.Unmarshal(rec.last(t, http.MethodPost, ":batchGenerateContent").body, &created); err != nil {
		t.Fatal(err)
	}
	inline := created.Batch.InputConfig.Requests.Requests
	_, jsonl, err := c.batchRequests(items)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(jsonl)), "\n")
	if len(inline) != len(items) || len(lines) != len(items) {
		t.Fatalf("inline requests %d, JSONL lines %d; want %d each", len(inline), len(lines), len(items))
	}
	for i, it := range items {
		var line struct {
			Key     string `json:"key"`
			Request any    `json:"request"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &line); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		if line.Key != it.JobID || inline[i].Metadata[BatchKeyField] != it.JobID {
			t.Errorf("item %d: line key %q, inline metadata %v; want %q", i, line.Key, inline[i].Metadata, it.JobID)
		}
		if !reflect.DeepEqual(line.Request, inline[i].Request) {
			t.Errorf("item %d: JSONL request\n%v\ndiffers from the SDK's inline request\n%v", i, line.Request, inline[i].Request)
		}
		if _, err := c.Extract(t.Context(), it.Params); err != nil {
			t.Fatalf("Extract(item %d) = %v", i, err)
		}
		mu.Lock()
		var syncReq any
		err := json.Unmarshal(syncBodies[len(syncBodies)-1], &syncReq)
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(syncReq, inline[i].Request) {
			t.Errorf("item %d: inline request\n%v\ndiffers from the sync request\n%v", i, inline[i].Request, syncReq)
		}
	}
}

func TestMapBatchState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		word         string
		done, failed bool
		want         stet.BatchState
	}{
		{"BATCH_STATE_PENDING", false, false, stet.BatchSubmitted},
		{"BATCH_STATE_RUNNING", false, false, stet.BatchInProgress},
		{"BATCH_STATE_SUCCEEDED", true, false, stet.BatchCompleted},
		{"BATCH_STATE_FAILED", true, true, stet.BatchFailed},
		{"BATCH_STATE_CANCELLED", true, false, stet.BatchCancelled},
		{"BATCH_STATE_EXPIRED", true, false, stet.BatchExpired},
		{"JOB_STATE_PENDING", false, false, stet.BatchSubmitted},
		{"JOB_STATE_QUEUED", false, false, stet.BatchSubmitted},
		{"JOB_STATE_RUNNING", false, false, stet.BatchInProgress},
		{"JOB_STATE_CANCELLING", false, false, stet.BatchInProgress},
		{"JOB_STATE_SUCCEEDED", true, false, stet.BatchCompleted},
		{"JOB_STATE_PARTIALLY_SUCCEEDED", true, false, stet.BatchCompleted},
		{"JOB_STATE_FAILED", true, true, stet.BatchFailed},
		{"JOB_STATE_CANCELLED", true, false, stet.BatchCancelled},
		{"JOB_STATE_EXPIRED", true, false, stet.BatchExpired},
		{"BATCH_STATE_UNSPECIFIED", false, false, stet.BatchSubmitted},
		{"", false, false, stet.BatchSubmitted},
		{"", true, false, stet.BatchCompleted},
		{"", true, true, stet.BatchFailed},
		{"BATCH_STATE_SOMETHING_NEW", false, false, stet.BatchInProgress},
	}
	for _, tt := range tests {
		if got := mapBatchState(tt.word, tt.done, tt.failed); got != tt.want {
			t.Errorf("mapBatchState(%q, done %v, error %v) = %q, want %q", tt.word, tt.done, tt.failed, got, tt.want)
		}
	}
}

func TestItemErrorStatuses(t *testing.T) {
	t.Parallel()
	const (
		perDay    = `{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}`
		retry     = `{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}`
		keyReason = `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}`
	)
	details := func(ds ...string) []json.RawMessage {
		var out []json.RawMessage
		for _, d := range ds {
			out = append(out, json.RawMessage(d))
		}
		return out
	}
	tests := []struct {
		name           string
		status         batchStatusBody
		wantClass      stet.FailureClass
		wantCode       string
		wantRetryAfter time.Duration
	}{
		{"RESOURCE_EXHAUSTED per minute", batchStatusBody{Code: 8, Details: details(retry)}, stet.FailureRateLimited, "RESOURCE_EXHAUSTED", 12 * time.Second},
		{"RESOURCE_EXHAUSTED per day", batchStatusBody{Code: 8, Details: details(perDay)}, stet.FailureQuota, "RESOURCE_EXHAUSTED", 0},
		{"INVALID_ARGUMENT", batchStatusBody{Code: 3}, stet.FailureUnsupported, "INVALID_ARGUMENT", 0},
		{"INVALID_ARGUMENT bad key", batchStatusBody{Code: 3, Details: details(keyReason)}, stet.FailureAuth, "API_KEY_INVALID", 0},
		{"FAILED_PRECONDITION", batchStatusBody{Code: 9}, stet.FailureUnsupported, "FAILED_PRECONDITION", 0},
		{"PERMISSION_DENIED", batchStatusBody{Code: 7}, stet.FailureAuth, "PERMISSION_DENIED", 0},
		{"UNAUTHENTICATED", batchStatusBody{Code: 16}, stet.FailureAuth, "UNAUTHENTICATED", 0},
		{"INTERNAL", batchStatusBody{Code: 13}, stet.FailureTransient, "INTERNAL", 0},
		{"UNAVAILABLE", batchStatusBody{Code: 14}, stet.FailureTransient, "UNAVAILABLE", 0},
		{"CANCELLED", batchStatusBody{Code: 1}, stet.FailureTransient, stet.CodeBatchItemCancelled, 0},
		{"DEADLINE_EXCEEDED", batchStatusBody{Code: 4}, stet.FailureTransient, stet.CodeBatchItemExpired, 0},
		{"status name only", batchStatusBody{Status: "INVALID_ARGUMENT"}, stet.FailureUnsupported, "INVALID_ARGUMENT", 0},
		{"HTTP status as code", batchStatusBody{Code: 429}, stet.FailureRateLimited, "", 0},
		{"nothing", batchStatusBody{}, stet.FailureTransient, "", 0},
	}
	c := &BatchClient{Client: &Client{now: time.Now}}
	for _, tt := range tests {
		pe := c.itemError(&tt.status)
		if pe.Class != tt.wantClass || pe.Code != tt.wantCode || pe.RetryAfter != tt.wantRetryAfter {
			t.Errorf("itemError(%s) = class %q code %q retry %v, want %q %q %v", tt.name, pe.Class, pe.Code, pe.RetryAfter, tt.wantClass, tt.wantCode, tt.wantRetryAfter)
		}
	}
}

// itemCase scripts one item and says how it must be classified; wantClass
// FailureNone is a success, missing an item the results leave out.
type itemCase struct {
	name           string
	fault          *geminifake.Fault
	wantClass      stet.FailureClass
	wantCode       string
	wantRetryAfter time.Duration
	missing        bool
}

var itemCases = []itemCase{
	{name: "ok"},
	{name: "ok_scripted", fault: &geminifake.Fault{Kind: geminifake.BatchItemOK}},
	{name: "schema_invalid", fault: &geminifake.Fault{Kind: geminifake.SchemaInvalid}}, // the pipeline validates the schema
	{name: "max_tokens", fault: &geminifake.Fault{Kind: geminifake.MaxTokens}, wantClass: stet.FailureInvalidOutput, wantCode: "MAX_TOKENS"},
	{name: "safety", fault: &geminifake.Fault{Kind: geminifake.Finish}, wantClass: stet.FailureRefusal, wantCode: "SAFETY"},
	{name: "prohibited", fault: &geminifake.Fault{Kind: geminifake.Finish, FinishReason: "PROHIBITED_CONTENT"}, wantClass: stet.FailureRefusal, wantCode: "PROHIBITED_CONTENT"},
	{name: "recitation", fault: &geminifake.Fault{Kind: geminifake.Finish, FinishReason: "RECITATION"}, wantClass: stet.FailureInvalidOutput, wantCode: "RECITATION"},
	{name: "blocked", fault: &geminifake.Fault{Kind: geminifake.PromptBlocked}, wantClass: stet.FailureRefusal, wantCode: "prompt.SAFETY"},
	{name: "rate", fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "7s", Message: canary}, wantClass: stet.FailureRateLimited, wantCode: "RESOURCE_EXHAUSTED", wantRetryAfter: 7 * time.Second},
	{name: "quota", fault: &geminifake.Fault{Kind: geminifake.Quota}, wantClass: stet.FailureQuota, wantCode: "RESOURCE_EXHAUSTED"},
	{name: "server", fault: &geminifake.Fault{Kind: geminifake.ServerError, Message: canary}, wantClass: stet.FailureTransient, wantCode: "INTERNAL"},
	{name: "unavailable", fault: &geminifake.Fault{Kind: geminifake.ServerError, Status: 503}, wantClass: stet.FailureTransient, wantCode: "UNAVAILABLE"},
	{name: "invalid", fault: &geminifake.Fault{Kind: geminifake.HTTPError, Status: 400, Message: canary}, wantClass: stet.FailureUnsupported, wantCode: "INVALID_ARGUMENT"},
	{name: "region", fault: &geminifake.Fault{Kind: geminifake.RegionUnsupported}, wantClass: stet.FailureUnsupported, wantCode: "FAILED_PRECONDITION"},
	{name: "bad_key", fault: &geminifake.Fault{Kind: geminifake.Unauthorized}, wantClass: stet.FailureAuth, wantCode: "API_KEY_INVALID"},
	{name: "expired", fault: &geminifake.Fault{Kind: geminifake.BatchItemExpired}, wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemExpired},
	{name: "cancelled", fault: &geminifake.Fault{Kind: geminifake.BatchItemCancelled}, wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemCancelled},
	{name: "missing", fault: &geminifake.Fault{Kind: geminifake.BatchItemMissing}, missing: true},
}

// runToResults submits items, polls until the batch ends and fetches its
// results.
func runToResults(t *testing.T, c *BatchClient, batchID string, items []stet.BatchItem) (*stet.BatchStatus, []stet.BatchResult) {
	t.Helper()
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: batchID, Items: items})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	var st *stet.BatchStatus
	for range 10 {
		if st, err = c.BatchStatus(t.Context(), h.ProviderID); err != nil {
			t.Fatalf("BatchStatus() = %v", err)
		}
		if st.State.Terminal() {
			break
		}
	}
	if !st.State.Terminal() {
		t.Fatalf("batch still %s after 10 polls", st.State)
	}
	results, err := c.BatchResults(t.Context(), st)
	if err != nil {
		t.Fatalf("BatchResults() = %v", err)
	}
	return st, results
}

func TestBatchItemClassification(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"inline", "file"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, geminifake.Options{Respond: func(req geminifake.Request) string {
				return `{"category":"ok","flags":[],"confidence":0.5,"note":"` + canary + `"}`
			}})
			c := newBatchClient(t, f, nil)
			if mode == "file" {
				c.inlineLimit = 1
			}
			var names []string
			for _, ic := range itemCases {
				names = append(names, ic.name)
				if ic.fault != nil {
					f.ScriptBatchItem("job_"+ic.name, *ic.fault)
				}
			}
			st, results := runToResults(t, c, "bat_classify_"+mode, withCanary(batchItems(names...)))
			if st.State != stet.BatchCompleted || st.ProviderState != geminifake.BatchStateSucceeded {
				t.Errorf("status = %s (%s), want completed (BATCH_STATE_SUCCEEDED)", st.State, st.ProviderState)
			}
			if f.CallsContaining(canary) != len(itemCases) {
				t.Errorf("fake saw the canary in %d items, want %d", f.CallsContaining(canary), len(itemCases))
			}
			byJob := map[string]stet.BatchResult{}
			for _, r := range results {
				if _, dup := byJob[r.JobID]; dup {
					t.Errorf("job %s reported twice", r.JobID)
				}
				byJob[r.JobID] = r
			}
			for _, ic := range itemCases {
				r, ok := byJob["job_"+ic.name]
				switch {
				case ic.missing:
					if ok {
						t.Errorf("%s: reported %+v, want it absent", ic.name, r)
					}
					continue
				case !ok:
					t.Errorf("%s: not reported", ic.name)
					continue
				}
				if ic.wantClass == stet.FailureNone {
					if r.Err != nil || r.Extraction == nil {
						t.Errorf("%s: result = %v, %v; want an extraction", ic.name, r.Extraction, r.Err)
						continue
					}
					e := r.Extraction
					if !json.Valid(e.Output) || e.Model != testModel || e.RequestID == "" || e.InputTokens == 0 || e.OutputTokens == 0 {
						t.Errorf("%s: extraction = output %s model %q request %q tokens %d/%d, want JSON, the model, an ID and counts", ic.name, e.Output, e.Model, e.RequestID, e.InputTokens, e.OutputTokens)
					}
					if !bytes.Contains(e.Raw, []byte(`"responseId"`)) || !bytes.Contains(e.Raw, []byte(e.RequestID)) {
						t.Errorf("%s: Raw = %s, want the item's raw answer", ic.name, e.Raw)
					}
					continue
				}
				if r.Extraction != nil {
					t.Errorf("%s: extraction %s beside an error", ic.name, r.Extraction.Output)
				}
				pe := processortest.AsProcessorError(t, "error", r.Err)
				if pe.Class != ic.wantClass || pe.Code != ic.wantCode || pe.RetryAfter != ic.wantRetryAfter {
					t.Errorf("%s: class %q code %q retry %v, want %q %q %v", ic.name, pe.Class, pe.Code, pe.RetryAfter, ic.wantClass, ic.wantCode, ic.wantRetryAfter)
				}
				if ic.wantClass == stet.FailureInvalidOutput && len(pe.Problems) == 0 {
					t.Errorf("%s: invalid_output without Problems", ic.name)
				}
				if strings.Contains(r.Err.Error(), "CANARY") || strings.Contains(pe.Code, "CANARY") {
					t.Errorf("%s: error %q carries the canary", ic.name, r.Err)
				}
			}
			if len(results) != len(itemCases)-1 {
				t.Errorf("results = %d, want %d", len(results), len(itemCases)-1)
			}
		})
	}
}

// TestSubmitBatchBeforeCreate checks the file path: the upload comes
// before BeforeCreate, the creating call after it. processortest covers
// the inline path.
func TestSubmitBatchBeforeCreate(t *testing.T) {
	t.Parallel()
	errAbort := errors.New("ledger refused the intent")
	f := newFake(t, geminifake.Options{})
	rec := &wireRecorder{}
	c := newBatchClient(t, f, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })
	c.inlineLimit = 1 // every batch goes through a file
	items := batchItems("a", "b", "c")

	calls := 0
	var gotFile string
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_ok", Items: items, BeforeCreate: func(ctx context.Context, fileID string) error {
		calls++
		gotFile = fileID
		if n := f.BatchCounts(); n.CreateCalls != 0 {
			t.Errorf("BeforeCreate: %d creating calls already made, want 0", n.CreateCalls)
		}
		rec.add(recorded{method: "BEFORE_CREATE"})
		return nil
	}})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v", err)
	}
	if calls != 1 {
		t.Errorf("BeforeCreate calls = %d, want 1", calls)
	}
	var seq []string
	for _, e := range rec.all() {
		seq = append(seq, e.method+" "+e.path)
	}
	want := []string{"BEFORE_CREATE ", "POST /v1beta/models/" + testModel + ":batchGenerateContent"}
	want = append([]string{"POST /upload/v1beta/files", "POST /upload/v1beta/files"}, want...)
	if !slices.Equal(seq, want) {
		t.Errorf("requests = %q, want %q", seq, want)
	}
	counts := f.BatchCounts()
	batches := f.Batches()
	if counts.CreateCalls != 1 || counts.Created != 1 || len(batches) != 1 {
		t.Fatalf("fake: %d creating calls, %d created, %d held; want 1 each", counts.CreateCalls, counts.Created, len(batches))
	}
	b := batches[0]
	if h.ProviderID != b.ID || h.State != stet.BatchSubmitted || h.RequestCount != 3 || h.CreatedAt.IsZero() || h.InputFileID != b.InputFile || gotFile != b.InputFile {
		t.Errorf("handle = %+v (BeforeCreate saw file %q), want the fake's batch %+v, submitted, 3 items", h, gotFile, b)
	}
	if b.DisplayName != "bat_ok" || b.Items != 3 || !slices.Equal(b.Keys, []string{"job_a", "job_b", "job_c"}) {
		t.Errorf("fake batch = %+v, want display name bat_ok and the three job keys", b)
	}
	if b.InputFile == "" || counts.Uploads != 1 {
		t.Errorf("input file %q, uploads %d, want one uploaded file", b.InputFile, counts.Uploads)
	}

	// An error from BeforeCreate aborts before anything is created.
	f2 := newFake(t, geminifake.Options{})
	c2 := newBatchClient(t, f2, nil)
	c2.inlineLimit = c.inlineLimit
	_, err = c2.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_abort", Items: items, BeforeCreate: func(context.Context, string) error { return errAbort }})
	if !errors.Is(err, errAbort) {
		t.Errorf("SubmitBatch() with a failing BeforeCreate = %v, want its error", err)
	}
	n := f2.BatchCounts()
	if n.CreateCalls != 0 || n.Created != 0 || len(f2.Batches()) != 0 {
		t.Errorf("after an aborted submission: %d creating calls, %d created, %d held; want none", n.CreateCalls, n.Created, len(f2.Batches()))
	}
	if n.Uploads != 1 {
		t.Errorf("after an aborted submission: %d uploads, want 1", n.Uploads)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestSubmitBatchReusesInputFile(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	c := newBatchClient(t, f, nil)
	c.inlineLimit = 1
	items := batchItems("x", "y")

	var uploaded string
	_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_reuse", Items: items, BeforeCreate: func(_ context.Context, fileID string) error {
		uploaded = fileID
		return errors.New("crash before the intent was saved")
	}})
	if err == nil || uploaded == "" {
		t.Fatalf("first SubmitBatch() = %v with file %q, want an abort after the upload", err, uploaded)
	}

	c.inlineLimit = MaxInlineBatchBytes // the reuse must not depend on size
	var seen string
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_reuse", Items: items, InputFileID: uploaded, BeforeCreate: func(_ context.Context, fileID string) error {
		seen = fileID
		return nil
	}})
	if err != nil {
		t.Fatalf("second SubmitBatch() = %v", err)
	}
	n := f.BatchCounts()
	if n.Uploads != 1 || n.Created != 1 {
		t.Errorf("fake: %d uploads, %d created; want 1 and 1", n.Uploads, n.Created)
	}
	if seen != uploaded || h.InputFileID != uploaded || f.Batches()[0].InputFile != uploaded {
		t.Errorf("BeforeCreate saw %q, handle %q, batch input %q; want the first upload %q", seen, h.InputFileID, f.Batches()[0].InputFile, uploaded)
	}
}

func TestSubmitBatchRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	bad := batchItems("bad")
	bad[0].Params.Schema = json.RawMessage("{not json")
	tests := []struct {
		name string
		b    stet.BatchSubmit
		code string
	}{
		{"no batch id", stet.BatchSubmit{Items: batchItems("a")}, codeInvalidBatch},
		{"no items", stet.BatchSubmit{BatchID: "bat_x"}, codeInvalidBatch},
		{"duplicate job ids", stet.BatchSubmit{BatchID: "bat_x", Items: batchItems("a", "a")}, codeInvalidBatch},
		{"invalid schema", stet.BatchSubmit{BatchID: "bat_x", Items: bad}, codeInvalidSchema},
		{"malformed input file", stet.BatchSubmit{BatchID: "bat_x", Items: batchItems("a"), InputFileID: "files/../batches"}, codeInvalidBatch},
	}
	for _, tt := range tests {
		f := newFake(t, geminifake.Options{})
		c := newBatchClient(t, f, nil)
		called := false
		tt.b.BeforeCreate = func(context.Context, string) error { called = true; return nil }
		_, err := c.SubmitBatch(t.Context(), tt.b)
		pe := processortest.AsProcessorError(t, "error", err)
		if pe.Class != stet.FailureUnsupported || pe.Code != tt.code {
			t.Errorf("SubmitBatch(%s) = class %q code %q, want unsupported %q", tt.name, pe.Class, pe.Code, tt.code)
		}
		if n := f.BatchCounts(); called || n != (geminifake.BatchCounts{}) {
			t.Errorf("SubmitBatch(%s): BeforeCreate called %v, fake counts %+v; want nothing", tt.name, called, n)
		}
	}
}

func TestFindBatchAfterInterruptedSubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fault   geminifake.Fault
		timeout time.Duration
	}{
		{"connection reset after create", geminifake.Fault{Kind: geminifake.Disconnect}, 0},
		{"half an answer, then silence", geminifake.Fault{Kind: geminifake.TimeoutAfterAnswer}, 300 * time.Millisecond},
		{"no answer before the timeout", geminifake.Fault{Kind: geminifake.Delay, Delay: time.Minute}, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, geminifake.Options{Batch: geminifake.BatchOptions{ListPageSize: 2}})
			c := newBatchClient(t, f, nil)
			// Other batches before and after, so the match sits on a later page.
			for i := range 3 {
				if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: fmt.Sprintf("bat_other%d", i), Items: batchItems("o")}); err != nil {
					t.Fatal(err)
				}
			}
			f.EnqueueBatchCreate(tt.fault)
			if tt.timeout > 0 {
				c.timeout = tt.timeout
			}
			_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_lost", Items: batchItems("p", "q")})
			if pe := processortest.AsProcessorError(t, "error", err); pe.Class != stet.FailureTransient {
				t.Fatalf("SubmitBatch() = %v, want a transient failure", err)
			}
			c.timeout = 10 * time.Second
			if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_other_later", Items: batchItems("o")}); err != nil {
				t.Fatal(err)
			}
			before := f.BatchCounts()
			if before.Created != 5 {
				t.Fatalf("fake created %d batches, want 5 (the interrupted one included)", before.Created)
			}

			found, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_lost", ItemCount: 2})
			if err != nil {
				t.Fatalf("FindBatch() = %v", err)
			}
			var lost geminifake.Batch
			for _, b := range f.Batches() {
				if b.DisplayName == "bat_lost" {
					lost = b
				}
			}
			if len(found) != 1 || found[0].ProviderID != lost.ID || found[0].RequestCount != 2 || found[0].CreatedAt.IsZero() {
				t.Fatalf("FindBatch() = %+v, want the one batch %s with 2 items", found, lost.ID)
			}
			after := f.BatchCounts()
			if after.CreateCalls != before.CreateCalls || after.Created != before.Created || after.Uploads != before.Uploads {
				t.Errorf("FindBatch changed the fake: %+v → %+v", before, after)
			}
			if lists := after.ListCalls - before.ListCalls; lists != 3 {
				t.Errorf("FindBatch made %d list calls, want 3 pages of 2", lists)
			}
		})
	}

	t.Run("nothing created", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		c := newBatchClient(t, f, nil)
		if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_other", Items: batchItems("o")}); err != nil {
			t.Fatal(err)
		}
		f.EnqueueBatchCreate(geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "2s"})
		_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_refused", Items: batchItems("p")})
		if pe := processortest.AsProcessorError(t, "error", err); pe.Class != stet.FailureRateLimited || pe.RetryAfter != 2*time.Second {
			t.Fatalf("SubmitBatch() = %v (retry %v), want rate_limited after 2s", err, pe.RetryAfter)
		}
		found, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_refused"})
		if err != nil || len(found) != 0 {
			t.Errorf("FindBatch() = %+v, %v; want none", found, err)
		}
		if n := f.BatchCounts(); n.Created != 1 || n.CreateCalls != 2 {
			t.Errorf("fake: %d created of %d creating calls, want 1 of 2", n.Created, n.CreateCalls)
		}
	})

	t.Run("two with the same label", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		c := newBatchClient(t, f, nil)
		for range 2 {
			if _, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_twice", Items: batchItems("o")}); err != nil {
				t.Fatal(err)
			}
		}
		found, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_twice"})
		if err != nil || len(found) != 2 || found[0].ProviderID == found[1].ProviderID {
			t.Errorf("FindBatch() = %+v, %v; want both batches", found, err)
		}
	})
}
