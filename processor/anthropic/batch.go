package anthropic

// The Message Batches side of the processor: stet.BatchProcessor on top of
// the SDK's MessageBatchService. It submits each batch with exactly one
// creating call, never retries, never sends text from FindBatch, BatchStatus
// or BatchResults, and classifies every failure into a *stet.ProcessorError
// whose Error string carries no provider message, prompt, output or ID.
//
// Wire facts relied on, and where they come from:
//
//   - POST /v1/messages/batches {"requests":[{"custom_id","params"}]}
//     creates a batch; params is a Messages request body, so each item's
//     params are byte for byte what Extract sends for the same
//     ExtractParams. custom_id is unique in the batch and matches
//     ^[a-zA-Z0-9_-]{1,64}$. A batch holds at most 100,000 requests or
//     256 MB. (SDK messagebatch.go MessageBatchNewParams and its
//     MessageBatchNewParamsRequest; batch processing guide.)
//   - A batch carries no metadata, display name or Idempotency-Key, and the
//     create call is not idempotent: an ambiguous create is reconciled by
//     listing (FindBatch), never by resending. (SDK messagebatch.go:
//     MessageBatchNewParams has only requests plus workspace and user
//     profile headers.)
//   - GET /v1/messages/batches/{id} returns a message_batch:
//     processing_status in_progress | canceling | ended; request_counts
//     {processing, succeeded, errored, canceled, expired}, whose sum is
//     the batch's request count; created_at, expires_at (24 h after
//     creation), ended_at, cancel_initiated_at, archived_at (results gone);
//     results_url once processing ends. (SDK messagebatch.go MessageBatch,
//     MessageBatchRequestCounts.)
//   - GET /v1/messages/batches?limit&after_id&before_id lists the most
//     recently created first as {"data","has_more","first_id","last_id"};
//     the next, older page is after_id=last_id; limit is 1 to 1000. (SDK
//     messagebatch.go List, MessageBatchListParams;
//     packages/pagination/pagination.go Page.GetNextPage.)
//   - GET /v1/messages/batches/{id}/results streams JSONL, one line per
//     request in no particular order: {"custom_id","result":R} where R is
//     {"type":"succeeded","message":M} | {"type":"errored","error":
//     {"type":"error","error":{"type","message"},"request_id"}} |
//     {"type":"canceled"} | {"type":"expired"}. (SDK messagebatch.go
//     ResultsStreaming, MessageBatchIndividualResponse,
//     MessageBatchResultUnion; shared/shared.go ErrorResponse.) results_url
//     names the same route; stet fetches by ID under the configured base
//     URL so that the API key never goes to a host a response named.
//   - Params are validated asynchronously: an invalid request ends as an
//     errored item (invalid_request_error), not as a failed create.
//     Results are available for 29 days after the batch is created.
//     (Batch processing guide,
//     platform.claude.com/docs/en/build-with-claude/batch-processing.)

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

var _ stet.BatchProcessor = (*Client)(nil)

const (
	// BatchResultsRetention is how long the API keeps a batch's results:
	// 29 days after the batch was created.
	BatchResultsRetention = 29 * 24 * time.Hour
	// BatchMaxItems is the API's limit on requests per batch.
	BatchMaxItems = 100_000
	// batchMaxBytes is the API's limit on a create body (256 MB).
	batchMaxBytes = 256_000_000
	// maxResultsBytes bounds a results file read into memory.
	maxResultsBytes = 1 << 30
	// findBatchSkew allows for the provider's clock running behind ours.
	findBatchSkew = 2 * time.Minute
	// listPageSize and maxListPages bound FindBatch's listing.
	listPageSize = 100
	maxListPages = 200
)

// Codes of failures stet decides here rather than the provider.
const (
	codeBatchNotFound = "batch_not_found"
	codeBatchNotEnded = "batch_not_ended"
	codeRedirect      = "redirect"
)

var errNotABatch = errors.New("response is not a message batch")

// BatchInfo declares the Message Batches API's guarantees: no idempotent
// submission, results kept 29 days, 100,000 requests per batch.
func (c *Client) BatchInfo() stet.BatchInfo {
	return stet.BatchInfo{
		IdempotentSubmit: false,
		ResultsRetention: BatchResultsRetention,
		MaxItems:         BatchMaxItems,
	}
}

// SubmitBatch creates one message batch whose requests are the items'
// Messages requests, custom_id the job ID. It calls b.BeforeCreate with an
// empty file ID (requests go inline) right before the one creating call
// and creates nothing if that fails. A failure of the creating call itself
// is ambiguous: the batch may exist, and the caller reconciles with
// FindBatch before anything else.
func (c *Client) SubmitBatch(ctx context.Context, b stet.BatchSubmit) (*stet.BatchHandle, error) {
	body, err := c.batchBody(b.Items)
	if err != nil {
		return nil, err
	}
	if b.BeforeCreate != nil {
		if err := b.BeforeCreate(ctx, ""); err != nil {
			return nil, err
		}
	}
	timeout := c.timeout + transferTime(len(body))
	callCtx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	var capt batchCapture
	params := param.Override[sdk.MessageBatchNewParams](json.RawMessage(body))
	resp, err := c.messages.Batches.New(callCtx, params, capt.options(timeout)...)
	if err != nil {
		return nil, c.batchError(ctx, callCtx, err, &capt)
	}
	if pe := capt.unexpectedStatus(); pe != nil {
		return nil, pe
	}
	if resp == nil || resp.ID == "" {
		return nil, capt.Fail(stet.FailureTransient, "", errNotABatch)
	}
	state, err := batchState(string(resp.ProcessingStatus), !resp.CancelInitiatedAt.IsZero())
	if err != nil {
		return nil, capt.Fail(stet.FailureTransient, "", err)
	}
	return &stet.BatchHandle{
		ProviderID:   resp.ID,
		State:        state,
		CreatedAt:    resp.CreatedAt,
		RequestCount: requestTotal(resp.RequestCounts),
		RequestID:    capt.RequestID,
	}, nil
}

// transferTime is extra time for sending n bytes, at a pessimistic
// 512 KiB/s, so that a full 256 MB batch is not cut by the timeout meant
// for one message.
func transferTime(n int) time.Duration {
	return time.Duration(n) * time.Second / (512 << 10)
}

// batchRequest is one request of a create body.
type batchRequest struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

// batchBody builds the create body, checking first what the API would
// refuse for the whole batch: no items, too many, a job ID that is no
// custom_id, a duplicate, an item without a schema, too many bytes.
func (c *Client) batchBody(items []stet.BatchItem) ([]byte, error) {
	invalid := func(code string, err error) error {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: code, Err: err}
	}
	switch {
	case len(items) == 0:
		return nil, invalid("empty_batch", errors.New("batch has no items"))
	case len(items) > BatchMaxItems:
		return nil, invalid("too_many_items", errors.New("batch has more items than the API accepts"))
	}
	reqs := make([]batchRequest, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		switch {
		case !validCustomID(it.JobID):
			return nil, invalid("invalid_custom_id", errors.New("a job ID is not a valid custom_id"))
		case seen[it.JobID]:
			return nil, invalid("duplicate_custom_id", errors.New("two items share a job ID"))
		case !isObject(it.Params.Schema):
			return nil, invalid("invalid_schema", errors.New("an item carries no JSON schema object"))
		}
		seen[it.JobID] = true
		// The params go out exactly as Extract would send them.
		raw, err := c.params(it.Params).MarshalJSON()
		if err != nil {
			return nil, invalid("", fmt.Errorf("encode batch item: %w", err))
		}
		reqs = append(reqs, batchRequest{CustomID: it.JobID, Params: raw})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Requests []batchRequest `json:"requests"`
	}{reqs}); err != nil {
		return nil, invalid("", fmt.Errorf("encode batch: %w", err))
	}
	if buf.Len() > batchMaxBytes {
		return nil, invalid("batch_too_large", errors.New("batch body is over the API's size limit"))
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// validCustomID reports whether id is a custom_id the API accepts,
// ^[a-zA-Z0-9_-]{1,64}$.
func validCustomID(id string) bool { return validID(id, 64) }

// validBatchID reports whether id can be a batch ID ("msgbatch_…"); it
// becomes a path segment.
func validBatchID(id string) bool { return validID(id, 128) }

// validID reports whether id is 1 to maxLen of [A-Za-z0-9_-].
func validID(id string, maxLen int) bool {
	if id == "" || len(id) > maxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		ch := id[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return false
		}
	}
	return true
}

// FindBatch lists the batches created since q.SubmittedAt (less two
// minutes of clock skew), newest first, and returns those holding exactly
// q.ItemCount requests: batches carry no label, so the creation window and
// the request count are all there is to match on. The caller adopts one
// and confirms it by the custom_ids of its results. It returns an error,
// never an empty answer, when it could not read the whole window.
func (c *Client) FindBatch(ctx context.Context, q stet.BatchQuery) ([]stet.BatchHandle, error) {
	if q.SubmittedAt.IsZero() || q.ItemCount <= 0 {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "invalid_query", Err: errors.New("batch query needs a submission time and an item count")}
	}
	cutoff := q.SubmittedAt.Add(-findBatchSkew)
	found := []stet.BatchHandle{}
	cursor := ""
	for range maxListPages {
		page, capt, err := c.listBatches(ctx, cursor)
		if err != nil {
			return nil, err
		}
		for _, b := range page.Data {
			if b.ID == "" || b.CreatedAt.IsZero() {
				// Without these the window cannot be trusted: saying
				// "none" here could cause a second submission.
				return nil, capt.Fail(stet.FailureTransient, "", errNotABatch)
			}
			if b.CreatedAt.Before(cutoff) {
				return found, nil
			}
			total := requestTotal(b.RequestCounts)
			if total != q.ItemCount {
				continue
			}
			state, err := batchState(string(b.ProcessingStatus), !b.CancelInitiatedAt.IsZero())
			if err != nil {
				return nil, capt.Fail(stet.FailureTransient, "", err)
			}
			found = append(found, stet.BatchHandle{
				ProviderID:   b.ID,
				State:        state,
				CreatedAt:    b.CreatedAt,
				RequestCount: total,
				RequestID:    capt.RequestID,
			})
		}
		if !page.HasMore || len(page.Data) == 0 || page.LastID == "" {
			return found, nil
		}
		cursor = page.LastID
	}
	return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: "too_many_batches", Err: errors.New("batch listing did not reach the submission time")}
}

// batchPage is one page of the batch list.
type batchPage struct {
	Data    []sdk.MessageBatch
	HasMore bool
	LastID  string
}

// listBatches reads one page of the batch list, older than cursor if set.
func (c *Client) listBatches(ctx context.Context, cursor string) (*batchPage, *batchCapture, error) {
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	capt := &batchCapture{}
	params := sdk.MessageBatchListParams{Limit: sdk.Int(listPageSize)}
	if cursor != "" {
		params.AfterID = sdk.String(cursor)
	}
	page, err := c.messages.Batches.List(callCtx, params, capt.options(c.timeout)...)
	if err != nil {
		return nil, nil, c.batchError(ctx, callCtx, err, capt)
	}
	if pe := capt.unexpectedStatus(); pe != nil {
		return nil, nil, pe
	}
	if page == nil || !page.JSON.Data.Valid() {
		return nil, nil, capt.Fail(stet.FailureTransient, "", errors.New("response is not a batch list"))
	}
	return &batchPage{Data: page.Data, HasMore: page.HasMore, LastID: page.LastID}, capt, nil
}

// BatchStatus makes one GET /v1/messages/batches/{id}. A 404 is
// unsupported with Code "batch_not_found"; 429 is rate_limited with the
// Retry-After the API asked for.
func (c *Client) BatchStatus(ctx context.Context, providerID string) (*stet.BatchStatus, error) {
	if !validBatchID(providerID) {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("not a batch ID")}
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	var capt batchCapture
	b, err := c.messages.Batches.Get(callCtx, providerID, sdk.MessageBatchGetParams{}, capt.options(c.timeout)...)
	if err != nil {
		pe := c.batchError(ctx, callCtx, err, &capt)
		if pe.StatusCode == http.StatusNotFound {
			pe.Code = codeBatchNotFound
		}
		return nil, pe
	}
	if pe := capt.unexpectedStatus(); pe != nil {
		return nil, pe
	}
	if b == nil || b.ID == "" {
		return nil, capt.Fail(stet.FailureTransient, "", errNotABatch)
	}
	state, err := batchState(string(b.ProcessingStatus), !b.CancelInitiatedAt.IsZero())
	if err != nil {
		return nil, capt.Fail(stet.FailureTransient, "unknown_batch_state", err)
	}
	counts := b.RequestCounts
	st := &stet.BatchStatus{
		ProviderID:    b.ID,
		ProviderState: string(b.ProcessingStatus),
		State:         state,
		ResultsURL:    b.ResultsURL,
		Total:         requestTotal(counts),
		Succeeded:     int(counts.Succeeded),
		Failed:        int(counts.Errored + counts.Canceled + counts.Expired),
		RequestID:     capt.RequestID,
		StatusCode:    capt.Status,
		Raw:           capt.Raw,
	}
	switch {
	case !b.ArchivedAt.IsZero():
		st.ResultsExpireAt = b.ArchivedAt
	case !b.CreatedAt.IsZero():
		st.ResultsExpireAt = b.CreatedAt.Add(BatchResultsRetention)
	}
	return st, nil
}

// batchState maps processing_status onto stet's states. canceling is still
// running; a batch that ended after a cancellation was asked for is
// cancelled (its unprocessed items come back canceled).
func batchState(status string, cancelInitiated bool) (stet.BatchState, error) {
	switch sdk.MessageBatchProcessingStatus(status) {
	case sdk.MessageBatchProcessingStatusInProgress, sdk.MessageBatchProcessingStatusCanceling:
		return stet.BatchInProgress, nil
	case sdk.MessageBatchProcessingStatusEnded:
		if cancelInitiated {
			return stet.BatchCancelled, nil
		}
		return stet.BatchCompleted, nil
	default:
		return "", errors.New("unknown batch processing_status")
	}
}

func requestTotal(c sdk.MessageBatchRequestCounts) int {
	return int(c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired)
}

// BatchResults fetches the results file of an ended batch and classifies
// each line as Extract would classify the same answer. Lines without a
// custom_id, and repeats of one, are left out. Fetching is a GET with no
// side effect, so fetching twice is harmless.
func (c *Client) BatchResults(ctx context.Context, st *stet.BatchStatus) ([]stet.BatchResult, error) {
	if st == nil || !validBatchID(st.ProviderID) {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("not a batch ID")}
	}
	if !st.State.Terminal() {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotEnded, Err: errors.New("batch has not ended")}
	}
	// A results line is a few kilobytes; allow for reading them all.
	timeout := c.timeout + transferTime(st.Total*8<<10)
	callCtx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	capt := batchCapture{stream: true}
	var res *http.Response
	stream := c.messages.Batches.ResultsStreaming(processor.WithBodyLimit(callCtx, processor.MaxBatchResultsBytes), st.ProviderID, sdk.MessageBatchResultsParams{},
		append(capt.options(timeout), option.WithResponseInto(&res))...)
	defer stream.Close()
	if err := stream.Err(); err != nil {
		pe := c.batchError(ctx, callCtx, err, &capt)
		if pe.StatusCode == http.StatusNotFound {
			pe.Code = codeBatchNotFound
		}
		return nil, pe
	}
	if pe := capt.unexpectedStatus(); pe != nil {
		return nil, pe
	}
	if res == nil || res.Body == nil {
		return nil, capt.Fail(stet.FailureTransient, "", errors.New("results response has no body"))
	}
	results, err := c.readResults(res.Body, capt.Status)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		} else if callCtx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(callCtx))
		}
		return nil, capt.Fail(stet.FailureTransient, "", err)
	}
	return results, nil
}

// readResults reads a results file: one JSON object a line. A line that is
// not JSON fails the whole read (the file is cut or corrupt, and another
// fetch may do better); a line that is JSON but odd becomes that item's
// transient failure.
func (c *Client) readResults(r io.Reader, status int) ([]stet.BatchResult, error) {
	lr := &io.LimitedReader{R: r, N: maxResultsBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 64<<10), processor.MaxResponseBytes)
	var out []stet.BatchResult
	seen := map[string]bool{}
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		raw := bytes.Clone(line)
		var item resultLine
		if err := json.Unmarshal(raw, &item); err != nil {
			return nil, errors.New("results line is not JSON")
		}
		if item.CustomID == "" || seen[item.CustomID] {
			continue
		}
		seen[item.CustomID] = true
		out = append(out, c.itemResult(item, raw, status))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	if lr.N <= 0 {
		return nil, processor.ErrBodyTooLarge
	}
	return out, nil
}

// resultLine is one line of a results file.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	} `json:"result"`
}

// itemResult classifies one results line; raw is the line as received.
func (c *Client) itemResult(item resultLine, raw []byte, status int) stet.BatchResult {
	br := stet.BatchResult{JobID: item.CustomID}
	switch item.Result.Type {
	case "succeeded":
		var msg sdk.Message
		if err := json.Unmarshal(item.Result.Message, &msg); err != nil {
			br.Err = &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: status, Err: errors.New("batch item message is not a message")}
			return br
		}
		capt := &capture{Status: status, RequestID: processor.SafeCode(msg.ID), Raw: raw}
		ext, err := c.result(&msg, c.itemTool(&msg), capt, 0)
		if err != nil {
			br.Err = err
			return br
		}
		br.Extraction = ext
	case "errored":
		br.Err = itemError(item.Result.Error)
	case "canceled":
		br.Err = &stet.ProcessorError{Class: stet.FailureTransient, Code: stet.CodeBatchItemCancelled, Err: errors.New("batch item cancelled before it ran")}
	case "expired":
		br.Err = &stet.ProcessorError{Class: stet.FailureTransient, Code: stet.CodeBatchItemExpired, Err: errors.New("batch item expired before it ran")}
	default:
		br.Err = &stet.ProcessorError{Class: stet.FailureTransient, Err: errors.New("unknown batch result type")}
	}
	return br
}

// itemTool is the tool whose call is the answer. A batch result does not
// say which schema its request named, but the request offered one tool and
// forced it, so the first tool call is that tool's.
func (c *Client) itemTool(msg *sdk.Message) string {
	if !c.toolUse {
		return ""
	}
	for _, block := range msg.Content {
		if block.Type == "tool_use" && block.Name != "" {
			return block.Name
		}
	}
	return "requested"
}

// errorTypeStatus is the HTTP status the API answers each error type with
// on the synchronous route, so that an errored item is classified as the
// same error of a synchronous call would be.
var errorTypeStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// itemError classifies an errored item's error object
// {"type":"error","error":{"type","message"},"request_id"}. No HTTP status
// was read for the item, so StatusCode stays 0; an unknown type is
// transient.
func itemError(raw json.RawMessage) *stet.ProcessorError {
	body := parseErrorBody(raw)
	code := processor.SafeCode(body.Error.Details.ErrorCode)
	if code == "" {
		code = processor.SafeCode(body.Error.Type)
	}
	return &stet.ProcessorError{
		Class:     errorClass(errorTypeStatus[body.Error.Type], body),
		Code:      code,
		RequestID: processor.SafeCode(body.RequestID),
		Err:       errors.New("batch item errored"),
	}
}

// batchCapture is a capture that also records a response that came with an
// error (a redirect an HTTP client refused to follow) and, for the results
// file, leaves a 2xx body unread for streaming.
type batchCapture struct {
	capture
	stream bool
}

func (b *batchCapture) options(timeout time.Duration) []option.RequestOption {
	return []option.RequestOption{
		option.WithMiddleware(b.middleware),
		option.WithRequestTimeout(timeout),
	}
}

func (b *batchCapture) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	b.Sent = true
	res, err := next(req)
	if res != nil {
		b.Note(res, "request-id")
	}
	if err != nil || (b.stream && res.StatusCode >= 200 && res.StatusCode < 300) {
		return res, err
	}
	if err := b.Keep(res, processor.MaxResponseBytes); err != nil {
		return nil, err
	}
	return res, nil
}

// unexpectedStatus fails a call the SDK took for a success although its
// status was not 2xx: a redirect the HTTP client did not follow.
func (b *batchCapture) unexpectedStatus() *stet.ProcessorError {
	switch {
	case b.Status >= 200 && b.Status < 300:
		return nil
	case b.Status >= 300 && b.Status < 400:
		return b.Fail(stet.FailureTransient, codeRedirect, errors.New("batch call answered with a redirect, which is not followed"))
	default:
		return b.Fail(stet.FailureTransient, "", fmt.Errorf("batch call answered status %d", b.Status))
	}
}

// batchError classifies a failed batch call as Extract's are classified,
// with one addition: a redirect the HTTP client refused is named.
func (c *Client) batchError(parent, callCtx context.Context, err error, capt *batchCapture) *stet.ProcessorError {
	if capt.Status >= 300 && capt.Status < 400 {
		return capt.Fail(stet.FailureTransient, codeRedirect, fmt.Errorf("batch call answered with a redirect, which is not followed: %w", err))
	}
	return c.classifyError(parent, callCtx, err, &capt.capture)
}
