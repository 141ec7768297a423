package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
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

func checkGolden(t *testing.T, name string, got []byte) {
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

func indent(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, raw)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func asPE(t *testing.T, err error) *stet.ProcessorError {
	t.Helper()
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *stet.ProcessorError", err, err)
	}
	return pe
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
		checkGolden(t, "batch_create_inline.golden.json", indent(t, create.body))
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
		checkGolden(t, "batch_create_file.golden.json", indent(t, bytes.ReplaceAll(create.body, []byte(h.InputFileID), []byte("files/FILE_ID"))))
		jsonl, ok := f.File(h.InputFileID)
		if !ok {
			t.Fatalf("fake holds no file %s", h.InputFileID)
		}
		checkGolden(t, "batch_input.golden.jsonl", jsonl)

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
	{name: "truncated", fault: &geminifake.Fault{Kind: geminifake.TruncatedJSON}, wantClass: stet.FailureInvalidOutput},
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
				pe := asPE(t, r.Err)
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

func TestSubmitBatchBeforeCreate(t *testing.T) {
	t.Parallel()
	errAbort := errors.New("ledger refused the intent")
	for _, mode := range []string{"inline", "file"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, geminifake.Options{})
			rec := &wireRecorder{}
			c := newBatchClient(t, f, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })
			if mode == "file" {
				c.inlineLimit = 1
			}
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
			if mode == "file" {
				want = append([]string{"POST /upload/v1beta/files", "POST /upload/v1beta/files"}, want...)
			}
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
			if (mode == "file") != (b.InputFile != "") || counts.Uploads != boolInt(mode == "file") {
				t.Errorf("input file %q, uploads %d, want a file only in file mode", b.InputFile, counts.Uploads)
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
			if wantUploads := boolInt(mode == "file"); n.Uploads != wantUploads {
				t.Errorf("after an aborted submission: %d uploads, want %d", n.Uploads, wantUploads)
			}
		})
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
		pe := asPE(t, err)
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
			if pe := asPE(t, err); pe.Class != stet.FailureTransient {
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
		if pe := asPE(t, err); pe.Class != stet.FailureRateLimited || pe.RetryAfter != 2*time.Second {
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

// capTransport fails a body read past limit bytes, as the lead's status
// client does.
type capTransport struct {
	next  http.RoundTripper
	limit int64
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("response body over the client's limit")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	res.Body = &cappedBody{ReadCloser: res.Body, left: t.limit + 1}
	return res, nil
}

// statusClient is the client `stet batch status` uses: no redirects, a
// timeout, bodies capped at 1 MiB.
func statusClient(refuse func(*http.Request, []*http.Request) error) func(http.RoundTripper) *http.Client {
	return func(wire http.RoundTripper) *http.Client {
		return &http.Client{
			Timeout:       20 * time.Second,
			CheckRedirect: refuse,
			Transport:     capTransport{next: wire, limit: 1 << 20},
		}
	}
}

func TestBatchStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	useLast := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	refuse := func(*http.Request, []*http.Request) error { return errors.New("redirects are refused") }
	tests := []struct {
		name           string
		fault          *geminifake.Fault
		client         func(wire http.RoundTripper) *http.Client
		id             string // default: the submitted batch
		wantClass      stet.FailureClass
		wantStatus     int
		wantCode       string
		wantRetryAfter time.Duration
	}{
		{name: "through the status client", client: statusClient(refuse), wantStatus: 200},
		{name: "429 Retry-After seconds", fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: "3"}, client: statusClient(refuse), wantClass: stet.FailureRateLimited, wantStatus: 429, wantCode: "RESOURCE_EXHAUSTED", wantRetryAfter: 3 * time.Second},
		{name: "429 Retry-After HTTP-date", fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: now.Add(30 * time.Second).Format(http.TimeFormat)}, wantClass: stet.FailureRateLimited, wantStatus: 429, wantCode: "RESOURCE_EXHAUSTED", wantRetryAfter: 30 * time.Second},
		{name: "429 retry-after-ms", fault: &geminifake.Fault{Kind: geminifake.RateLimit, Header: http.Header{"Retry-After-Ms": {"1500"}}}, wantClass: stet.FailureRateLimited, wantStatus: 429, wantCode: "RESOURCE_EXHAUSTED", wantRetryAfter: 1500 * time.Millisecond},
		{name: "429 RetryInfo", fault: &geminifake.Fault{Kind: geminifake.RateLimit, RetryDelay: "9s"}, wantClass: stet.FailureRateLimited, wantStatus: 429, wantCode: "RESOURCE_EXHAUSTED", wantRetryAfter: 9 * time.Second},
		{name: "404 unknown batch", id: "batches/doesnotexist", wantClass: stet.FailureUnsupported, wantStatus: 404, wantCode: codeBatchNotFound},
		{name: "401", fault: &geminifake.Fault{Kind: geminifake.HTTPError, Status: 401}, wantClass: stet.FailureAuth, wantStatus: 401, wantCode: "UNAUTHENTICATED"},
		{name: "bad key", fault: &geminifake.Fault{Kind: geminifake.Unauthorized}, wantClass: stet.FailureAuth, wantStatus: 400, wantCode: "API_KEY_INVALID"},
		{name: "500", fault: &geminifake.Fault{Kind: geminifake.ServerError}, wantClass: stet.FailureTransient, wantStatus: 500, wantCode: "INTERNAL"},
		{name: "503", fault: &geminifake.Fault{Kind: geminifake.ServerError, Status: 503}, client: statusClient(refuse), wantClass: stet.FailureTransient, wantStatus: 503, wantCode: "UNAVAILABLE"},
		{name: "connection reset", fault: &geminifake.Fault{Kind: geminifake.Disconnect}, wantClass: stet.FailureTransient},
		{name: "redirect followed to a page", fault: &geminifake.Fault{Kind: geminifake.Redirect}, wantClass: stet.FailureTransient, wantStatus: 200, wantCode: codeInvalidResponse},
		{name: "redirect, last response kept", fault: &geminifake.Fault{Kind: geminifake.Redirect}, client: statusClient(useLast), wantClass: stet.FailureTransient, wantStatus: 302, wantCode: codeRedirect},
		{name: "redirect refused", fault: &geminifake.Fault{Kind: geminifake.Redirect}, client: statusClient(refuse), wantClass: stet.FailureTransient, wantStatus: 302, wantCode: codeRedirect},
		{name: "huge body, no cap", fault: &geminifake.Fault{Kind: geminifake.HugeBody}, wantStatus: 200},
		{name: "huge body through the status client", fault: &geminifake.Fault{Kind: geminifake.HugeBody}, client: statusClient(refuse), wantClass: stet.FailureTransient, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
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
				if tt.client != nil {
					cfg.HTTPClient = tt.client(wire)
				}
			})
			c.now = func() time.Time { return now }
			if tt.fault != nil {
				f.EnqueueBatchStatus(*tt.fault)
			}
			id := orDefault(tt.id, h.ProviderID)
			st, err := c.BatchStatus(t.Context(), id)
			if n := f.BatchCounts().StatusCalls; n != 1 {
				t.Errorf("status calls = %d, want 1", n)
			}
			if tt.wantClass != stet.FailureNone {
				pe := asPE(t, err)
				if pe.Class != tt.wantClass || pe.StatusCode != tt.wantStatus || pe.Code != tt.wantCode || pe.RetryAfter != tt.wantRetryAfter {
					t.Errorf("BatchStatus() = class %q status %d code %q retry %v, want %q %d %q %v", pe.Class, pe.StatusCode, pe.Code, pe.RetryAfter, tt.wantClass, tt.wantStatus, tt.wantCode, tt.wantRetryAfter)
				}
				if strings.Contains(err.Error(), strings.TrimPrefix(h.ProviderID, "batches/")) {
					t.Errorf("BatchStatus() error %q names the batch", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("BatchStatus() = %v", err)
			}
			if st.ProviderID != h.ProviderID || st.State != stet.BatchInProgress || st.ProviderState != geminifake.BatchStateRunning || st.StatusCode != tt.wantStatus || st.Total != 1 {
				t.Errorf("BatchStatus() = %+v, want %s running, status %d, 1 item", st, h.ProviderID, tt.wantStatus)
			}
			if st.InputFileID != h.InputFileID || st.InputFileID == "" {
				t.Errorf("InputFileID = %q, want %q", st.InputFileID, h.InputFileID)
			}
			got := rec.last(t, http.MethodGet, "/v1beta/"+h.ProviderID)
			if !bytes.Equal(st.Raw, got.answer) {
				t.Errorf("Raw differs from the body received (%d and %d bytes)", len(st.Raw), len(got.answer))
			}
		})
	}

	t.Run("malformed id", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, geminifake.Options{})
		c := newBatchClient(t, f, nil)
		for _, id := range []string{"", "batches/", "batches/a/b", "batches/../files/x", "operations/x?y"} {
			_, err := c.BatchStatus(t.Context(), id)
			if pe := asPE(t, err); pe.Class != stet.FailureUnsupported {
				t.Errorf("BatchStatus(%q) = %v, want unsupported", id, err)
			}
		}
		if n := f.BatchCounts().StatusCalls; n != 0 {
			t.Errorf("status calls = %d, want 0", n)
		}
	})
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
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
			classes := map[string]stet.FailureClass{}
			for _, r := range second {
				classes[r.JobID] = stet.ClassOf(r.Err)
			}
			wantClasses := map[string]stet.FailureClass{
				"job_ok": stet.FailureNone, "job_invalid": stet.FailureInvalidOutput, "job_refusal": stet.FailureRefusal,
				"job_expired": stet.FailureTransient, "job_errored": stet.FailureTransient,
			}
			if !reflect.DeepEqual(classes, wantClasses) {
				t.Errorf("classes = %v, want %v", classes, wantClasses)
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
		if pe := asPE(t, err); pe.Class != stet.FailureTransient || pe.Code != codeBatchNotTerminal {
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
	if pe := asPE(t, err); pe.Code != codeBatchNotFound {
		t.Errorf("BatchStatus() after delete = %v, want %s", err, codeBatchNotFound)
	}
	if n := f.BatchCounts(); n.Deletes != 1 || len(f.Batches()) != 1 {
		t.Errorf("fake after delete: %+v, %d held; want 1 delete, 1 batch left", n, len(f.Batches()))
	}
}

func TestBatchInfo(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	c := newBatchClient(t, f, nil)
	if got := c.BatchInfo(); got.IdempotentSubmit || got.ResultsRetention != 48*time.Hour || got.MaxItems != 0 {
		t.Errorf("BatchInfo() = %+v, want not idempotent, 48h retention, no item limit", got)
	}
	if caps := c.Info().Capabilities; !slices.Equal(caps, []string{"sync", "json_schema", "batch"}) {
		t.Errorf("Info().Capabilities = %v, want sync, json_schema, batch", caps)
	}
	if caps := c.Client.Info().Capabilities; slices.Contains(caps, "batch") {
		t.Errorf("Client.Info() capabilities changed to %v", caps)
	}
}
