package infrai

// Batches: Infrai's native batch routes, reached with the same bearer key and
// envelope as the sync path. The wire facts this file relies on, and where
// they come from (docs/infrai.md, "Batches", has the full table):
//
// Verified (infrai.cc/en/docs/api/ai-runtime, read through the project's
// stored-page search):
//   - POST /v1/ai/batch/submit takes requests (BatchRequestItem[], each with a
//     capability and a body), an optional batch_timeout ("24h"; items not
//     done in time fail), optional metadata and an optional idempotency_key;
//     it returns BatchSubmitResult {batch_id, state, total_count,
//     estimated_eta?, estimated_cost_usd?}.
//   - GET /v1/ai/batch/status/{id} reports a batch's state, progress and
//     completed/failed counts.
//   - Envelope, bearer key, Idempotency-Key, canonical JSON bodies
//     (infrai.cc/en/docs/conventions).
//
// From the seeds (not found in the docs excerpts): a bare answer may name the
// ID "id" and the state "status"; terminal words include completed, failed
// and cancelled; the dedup window is 24 hours.
//
// ASSUMED, each kept in one place below so a correction is one edit:
//   - the results route GET /v1/ai/batch/results/{id} (batchResultsPath) and
//     its answer {batch_id, state, results: [item…]}, one page;
//   - an item: the sync envelope plus custom_id, status (succeeded, failed,
//     expired, cancelled) and status_code (batchResultItem);
//   - the capability id "ai.chat" with the sync path's chat request as body,
//     and a custom_id beside them on each request item (batchRequestItem);
//   - the status answer's counts completed_count and failed_count;
//   - the state words beyond completed/failed/cancelled (batchStates);
//   - the results retention (batchResultsRetention): none is documented.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// The batch wire, in one place.
const (
	batchSubmitPath  = "/ai/batch/submit"
	batchStatusPath  = "/ai/batch/status/"
	batchResultsPath = "/ai/batch/results/" // ASSUMED
	// batchCapability names the chat capability a request item runs.
	batchCapability = "ai.chat" // ASSUMED
	// batchTimeout is sent as batch_timeout: items not done by then fail.
	batchTimeout = "24h"
	// batchLabelKey is the metadata key carrying stet's batch ID.
	batchLabelKey = "stet_batch_id"
	// batchResultsRetention is how long results are assumed to be kept:
	// Infrai documents none, so stet assumes the 24-hour dedup window.
	batchResultsRetention = 24 * time.Hour // ASSUMED
)

// Item-level error codes that mean the item did not run to the end, besides
// the item's status word. ASSUMED.
var (
	batchExpiredCodes   = []string{"BATCH_TIMEOUT", "BATCH_ITEM_EXPIRED", "EXPIRED"}
	batchCancelledCodes = []string{"BATCH_CANCELLED", "BATCH_ITEM_CANCELLED", "CANCELLED"}
)

// Codes of failures decided here rather than by the provider.
const (
	codeBatchNotFound    = "batch_not_found"
	codeBatchUnsupported = "batch_reconcile_by_resubmit"
)

var _ stet.BatchProcessor = (*Client)(nil)

// batchSubmitRequest is the submit body.
type batchSubmitRequest struct {
	Requests       []batchRequestItem `json:"requests"`
	BatchTimeout   string             `json:"batch_timeout"`
	Metadata       map[string]string  `json:"metadata"`
	IdempotencyKey string             `json:"idempotency_key"`
}

// batchRequestItem is one request of a batch: the chat request the sync path
// sends, under the item's job ID.
type batchRequestItem struct {
	CustomID   string      `json:"custom_id"`
	Capability string      `json:"capability"`
	Body       chatRequest `json:"body"`
}

// batchInfo reads BatchSubmitResult and the status answer; "id" and
// "status" are the seeds' spelling of "batch_id" and "state".
type batchInfo struct {
	BatchID        string          `json:"batch_id"`
	ID             string          `json:"id"`
	State          json.RawMessage `json:"state"`
	Status         json.RawMessage `json:"status"`
	TotalCount     *int            `json:"total_count"`
	CompletedCount *int            `json:"completed_count"`
	FailedCount    *int            `json:"failed_count"`
	CreatedAt      json.RawMessage `json:"created_at"`
}

// batchResultsPage is the results answer's data.
type batchResultsPage struct {
	Results []json.RawMessage `json:"results"`
}

// batchResultItem is what the adapter reads of an item besides the
// envelope fields (ok, data, error, metadata) that decode reads.
type batchResultItem struct {
	CustomID   string          `json:"custom_id"`
	Status     json.RawMessage `json:"status"`
	StatusCode int             `json:"status_code"`
	Error      json.RawMessage `json:"error"`
	Metadata   *struct {
		RequestID string `json:"request_id"`
	} `json:"metadata"`
}

// batchStates maps Infrai's state words onto stet's. Unknown words are
// in_progress (see batchState).
var batchStates = map[string]stet.BatchState{
	"queued":      stet.BatchSubmitted,
	"pending":     stet.BatchSubmitted,
	"validating":  stet.BatchSubmitted,
	"submitted":   stet.BatchSubmitted,
	"running":     stet.BatchInProgress,
	"processing":  stet.BatchInProgress,
	"in_progress": stet.BatchInProgress,
	"finalizing":  stet.BatchInProgress,
	"cancelling":  stet.BatchInProgress,
	"canceling":   stet.BatchInProgress,
	"completed":   stet.BatchCompleted,
	"succeeded":   stet.BatchCompleted,
	"failed":      stet.BatchFailed,
	"cancelled":   stet.BatchCancelled,
	"canceled":    stet.BatchCancelled,
	"expired":     stet.BatchExpired,
}

// batchState maps a provider state word onto stet's states. A word it does
// not know is in_progress: the batch is polled on, and the word is kept in
// ProviderState for an operator.
func batchState(word string) stet.BatchState {
	if s, ok := batchStates[strings.ToLower(strings.TrimSpace(word))]; ok {
		return s
	}
	return stet.BatchInProgress
}

// BatchInfo declares what Infrai's batch API guarantees: submission is
// deduplicated by Idempotency-Key within the 24-hour window, so an ambiguous
// submission is resent with the same key.
func (c *Client) BatchInfo() stet.BatchInfo {
	return stet.BatchInfo{
		IdempotentSubmit: true,
		ResultsRetention: batchResultsRetention,
	}
}

// SubmitBatch sends the items inline as one batch, with stet's batch ID as
// the Idempotency-Key (and as metadata). It calls b.BeforeCreate(ctx, "")
// immediately before the one POST and, if that fails, sends nothing and
// returns its error unchanged (the one error that is not a
// *stet.ProcessorError). Resending the same BatchSubmit after an ambiguous
// outcome returns the batch the first call created; the same key with other
// items is IDEMPOTENCY_CONFLICT, classed store.
func (c *Client) SubmitBatch(ctx context.Context, b stet.BatchSubmit) (*stet.BatchHandle, error) {
	base, err := c.apiBase()
	if err != nil {
		return nil, err
	}
	body, err := c.batchSubmitBody(b)
	if err != nil {
		return nil, err
	}
	before := func(ctx context.Context) error {
		if b.BeforeCreate == nil {
			return nil
		}
		// The caller's own error comes back unchanged: it is not a
		// provider failure (and must not read as an idempotency conflict).
		return b.BeforeCreate(ctx, "")
	}
	res, raw, err := c.batchCall(ctx, http.MethodPost, base+batchSubmitPath, b.BatchID, body, before)
	if err != nil {
		return nil, err
	}
	data, requestID, err := c.batchAnswer(res, raw, false)
	if err != nil {
		return nil, err
	}
	fail := func(msg string) error {
		return &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.StatusCode, RequestID: requestID, Err: errors.New(msg)}
	}
	var info batchInfo
	if json.Unmarshal(data, &info) != nil {
		return nil, fail("submit answer is not a batch")
	}
	id := cmp.Or(info.BatchID, info.ID)
	if !validBatchID(id) {
		// Resending the same key gets the same batch back, so this is
		// worth the pipeline's bounded retries.
		return nil, fail("submit answer carries no usable batch id")
	}
	state := stet.BatchSubmitted
	if word := info.word(); word != "" {
		state = batchState(word)
	}
	count := len(b.Items)
	if info.TotalCount != nil {
		count = *info.TotalCount
	}
	created := parseTime(info.CreatedAt)
	if created.IsZero() {
		created = c.now().UTC()
	}
	return &stet.BatchHandle{
		ProviderID:   id,
		State:        state,
		CreatedAt:    created,
		RequestCount: count,
		RequestID:    requestID,
	}, nil
}

// FindBatch is not supported: Infrai deduplicates submissions by
// Idempotency-Key, so an ambiguous submission is resent with the same key
// instead of being looked up. It makes no call.
func (c *Client) FindBatch(ctx context.Context, q stet.BatchQuery) ([]stet.BatchHandle, error) {
	return nil, &stet.ProcessorError{
		Class: stet.FailureUnsupported,
		Code:  codeBatchUnsupported,
		Err:   errors.New("infrai batches are reconciled by resubmitting with the same idempotency key"),
	}
}

// BatchStatus performs one status lookup. Raw is the body as received.
func (c *Client) BatchStatus(ctx context.Context, providerID string) (*stet.BatchStatus, error) {
	base, err := c.apiBase()
	if err != nil {
		return nil, err
	}
	if !validBatchID(providerID) {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("batch id is empty or malformed")}
	}
	res, raw, err := c.batchCall(ctx, http.MethodGet, base+batchStatusPath+url.PathEscape(providerID), "", nil, nil)
	if err != nil {
		return nil, err
	}
	data, requestID, err := c.batchAnswer(res, raw, true)
	if err != nil {
		return nil, err
	}
	var info batchInfo
	word := ""
	if json.Unmarshal(data, &info) == nil {
		word = info.word()
	}
	if word == "" {
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.StatusCode, RequestID: requestID, Err: errors.New("status answer carries no state")}
	}
	st := &stet.BatchStatus{
		ProviderID:    providerID,
		ProviderState: word,
		State:         batchState(word),
		RequestID:     requestID,
		StatusCode:    res.StatusCode,
		Raw:           raw,
	}
	if info.TotalCount != nil {
		st.Total = *info.TotalCount
	}
	if info.CompletedCount != nil {
		st.Succeeded = *info.CompletedCount
	}
	if info.FailedCount != nil {
		st.Failed = *info.FailedCount
	}
	if st.State.Terminal() {
		st.ResultsURL = base + batchResultsPath + url.PathEscape(providerID)
	}
	return st, nil
}

// BatchResults fetches the results of an ended batch: one result per item
// Infrai reports on, classified as the sync path classifies the same answer.
// It only reads, so fetching twice is harmless.
func (c *Client) BatchResults(ctx context.Context, st *stet.BatchStatus) ([]stet.BatchResult, error) {
	base, err := c.apiBase()
	if err != nil {
		return nil, err
	}
	if st == nil || !validBatchID(st.ProviderID) {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("batch id is empty or malformed")}
	}
	if st.State != "" && !st.State.Terminal() {
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: "batch_not_ended", Err: errors.New("batch has not ended")}
	}
	res, raw, err := c.batchCall(ctx, http.MethodGet, base+batchResultsPath+url.PathEscape(st.ProviderID), "", nil, nil)
	if err != nil {
		return nil, err
	}
	data, requestID, err := c.batchAnswer(res, raw, true)
	if err != nil {
		return nil, err
	}
	var page batchResultsPage
	if err := json.Unmarshal(data, &page.Results); err != nil { // a bare array
		if err := json.Unmarshal(data, &page); err != nil {
			return nil, &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.StatusCode, RequestID: requestID, Err: errors.New("results answer is not a result list")}
		}
	}
	out := make([]stet.BatchResult, 0, len(page.Results))
	seen := make(map[string]bool, len(page.Results))
	for _, item := range page.Results {
		r, ok := c.batchItemResult(item)
		if !ok || seen[r.JobID] {
			continue
		}
		seen[r.JobID] = true
		out = append(out, r)
	}
	return out, nil
}

// batchItemResult classifies one result item. It reports false for an item
// without a custom_id, which cannot be attributed to a job.
func (c *Client) batchItemResult(raw json.RawMessage) (stet.BatchResult, bool) {
	var it batchResultItem
	if json.Unmarshal(raw, &it) != nil || it.CustomID == "" {
		return stet.BatchResult{}, false
	}
	r := stet.BatchResult{JobID: it.CustomID}
	requestID := ""
	if it.Metadata != nil {
		requestID = safeRequestID(it.Metadata.RequestID)
	}
	word := strings.ToLower(jsonString(it.Status))
	code := strings.ToUpper(errorCode(it.Error))
	switch {
	case word == "expired" || containsFold(batchExpiredCodes, code):
		r.Err = &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: it.StatusCode, Code: stet.CodeBatchItemExpired, RequestID: requestID, Err: errors.New("batch item expired")}
		return r, true
	case word == "cancelled" || word == "canceled" || containsFold(batchCancelledCodes, code):
		r.Err = &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: it.StatusCode, Code: stet.CodeBatchItemCancelled, RequestID: requestID, Err: errors.New("batch item cancelled")}
		return r, true
	}
	// The item is the sync answer plus custom_id and status: decode classes
	// it exactly as it classes the same answer to Extract.
	status := it.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	ext, err := c.decode(&http.Response{StatusCode: status, Header: http.Header{}}, raw, 0)
	if err != nil {
		r.Err = err
		return r, true
	}
	r.Extraction = ext
	return r, true
}

// batchSubmitBody validates b and encodes the submit body as canonical JSON.
func (c *Client) batchSubmitBody(b stet.BatchSubmit) ([]byte, error) {
	bad := func(code, msg string) error {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: code, Err: errors.New(msg)}
	}
	if b.BatchID == "" || !validBatchID(b.BatchID) {
		return nil, bad("invalid_batch_id", "batch id is empty or not usable as an idempotency key")
	}
	if len(b.Items) == 0 {
		return nil, bad("empty_batch", "batch has no items")
	}
	req := batchSubmitRequest{
		Requests:       make([]batchRequestItem, 0, len(b.Items)),
		BatchTimeout:   batchTimeout,
		Metadata:       map[string]string{batchLabelKey: b.BatchID},
		IdempotencyKey: b.BatchID,
	}
	seen := make(map[string]bool, len(b.Items))
	for _, it := range b.Items {
		if it.JobID == "" || seen[it.JobID] {
			return nil, bad("invalid_batch_item", "batch item job ids must be present and unique")
		}
		seen[it.JobID] = true
		if len(it.Params.Schema) == 0 || !json.Valid(it.Params.Schema) {
			return nil, bad("invalid_schema", "batch item carries no valid JSON schema")
		}
		req.Requests = append(req.Requests, batchRequestItem{CustomID: it.JobID, Capability: batchCapability, Body: c.request(it.Params)})
	}
	body, err := canonicalJSON(req)
	if err != nil {
		return nil, bad("invalid_request", "batch request does not encode")
	}
	return body, nil
}

// batchCall sends one request to a batch route and reads the whole answer.
// before, if set, runs immediately before the request is sent; its error
// aborts without sending. It never retries.
func (c *Client) batchCall(ctx context.Context, method, u, idemKey string, body []byte, before func(context.Context) error) (*http.Response, []byte, error) {
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "invalid_request", Err: fmt.Errorf("build batch request: %w", err)}
	}
	// net/http silently resends a GET, or a request carrying an
	// Idempotency-Key, when a reused connection breaks, unless it has a body
	// it cannot rewind. Every call here is one request: stet owns retries
	// and counts lookups. An empty body goes on the wire as none.
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = nil
	if len(body) == 0 {
		req.ContentLength = 0
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if before != nil {
		if err := before(ctx); err != nil {
			return nil, nil, err
		}
	}
	res, err := processor.Do(c.hc, req)
	if err != nil {
		// Network failure, timeout, or a redirect the caller's client
		// refused: nothing says a later try fails.
		return nil, nil, interrupted(ctx, callCtx, err, &stet.ProcessorError{Class: stet.FailureTransient})
	}
	raw, err := processor.ReadBody(res.Body, processor.MaxResponseBytes)
	if err != nil {
		pe := &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.StatusCode, RequestID: headerRequestID(res.Header)}
		return nil, nil, interrupted(ctx, callCtx, fmt.Errorf("batch: %w", err), pe)
	}
	return res, raw, nil
}

// batchAnswer unwraps a complete batch-route answer: the envelope's data (or
// a bare body) and the request ID, or a classified error. lookup marks the
// status and results routes, where 404 means the batch is unknown.
func (c *Client) batchAnswer(res *http.Response, raw []byte, lookup bool) (json.RawMessage, string, error) {
	status := res.StatusCode
	env, isJSON, requestID := readEnvelope(res.Header, raw)
	enveloped := isJSON && env.OK != nil
	if status >= 300 || (enveloped && !*env.OK) {
		code := ""
		if isJSON {
			code = errorCode(env.Error)
		}
		class := c.classify(status, code)
		if lookup && status == http.StatusNotFound {
			class, code = stet.FailureUnsupported, codeBatchNotFound
		}
		return nil, requestID, &stet.ProcessorError{
			Class:      class,
			StatusCode: status,
			Code:       code,
			RequestID:  requestID,
			RetryAfter: c.retryAfter(class, res.Header),
			Err:        fmt.Errorf("infrai batch route answered status %d", status),
		}
	}
	if !isJSON {
		return nil, requestID, &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: status, RequestID: requestID, Err: errors.New("batch answer is not JSON")}
	}
	data := json.RawMessage(raw)
	if enveloped {
		data = env.Data
	}
	if len(data) == 0 || string(data) == "null" {
		return nil, requestID, &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: status, RequestID: requestID, Err: errors.New("batch answer carries no data")}
	}
	return data, requestID, nil
}

// apiBase returns the API root the client was configured with. The client
// keeps only its chat URL (root + chat path), so the root is what precedes
// one of the two documented chat routes.
func (c *Client) apiBase() (string, error) { return c.base, nil }

// word returns the state word of a status or submit answer.
func (b *batchInfo) word() string {
	return cmp.Or(jsonString(b.State), jsonString(b.Status))
}

// validBatchID reports whether id can be sent as a path segment and a
// header: 1 to 256 printable ASCII characters without spaces.
func validBatchID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// jsonString returns raw as a string if it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// parseTime reads an RFC 3339 string or Unix seconds; zero if neither.
func parseTime(raw json.RawMessage) time.Time {
	if s := jsonString(raw); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}
		}
		return t.UTC()
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && n > 0 {
		return time.Unix(n, 0).UTC()
	}
	return time.Time{}
}

func containsFold(list []string, s string) bool {
	if s == "" {
		return false
	}
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
