package gemini

// What the batch side reads off the wire: the google.rpc codes, the batch
// state words, the Operation and list shapes, redaction of the texts a
// batch object carries, and the per-call record its transport fills.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// rpcCodes are the google.rpc.Code names by number, with the HTTP status
// Google's front end pairs with each.
var rpcCodes = [...]struct {
	name string
	http int
}{
	{"OK", 200}, {"CANCELLED", 499}, {"UNKNOWN", 500}, {"INVALID_ARGUMENT", 400},
	{"DEADLINE_EXCEEDED", 504}, {"NOT_FOUND", 404}, {"ALREADY_EXISTS", 409},
	{"PERMISSION_DENIED", 403}, {"RESOURCE_EXHAUSTED", 429}, {"FAILED_PRECONDITION", 400},
	{"ABORTED", 409}, {"OUT_OF_RANGE", 400}, {"UNIMPLEMENTED", 501}, {"INTERNAL", 500},
	{"UNAVAILABLE", 503}, {"DATA_LOSS", 500}, {"UNAUTHENTICATED", 401},
}

// mapBatchState maps the provider's state word onto stet's. The SDK's
// JOB_STATE_* spellings are accepted too. done and failed (Operation.done
// and Operation.error) decide when the word is missing; a word this code
// does not know keeps the batch in progress, so that it is polled on
// rather than abandoned.
func mapBatchState(word string, done, failed bool) stet.BatchState {
	w := strings.TrimPrefix(strings.TrimPrefix(word, "BATCH_STATE_"), "JOB_STATE_")
	switch w {
	case "PENDING", "QUEUED":
		return stet.BatchSubmitted
	case "RUNNING", "CANCELLING", "PAUSED", "UPDATING":
		return stet.BatchInProgress
	case "SUCCEEDED", "PARTIALLY_SUCCEEDED":
		return stet.BatchCompleted
	case "FAILED":
		return stet.BatchFailed
	case "CANCELLED":
		return stet.BatchCancelled
	case "EXPIRED":
		return stet.BatchExpired
	case "", "UNSPECIFIED":
		switch {
		case done && failed:
			return stet.BatchFailed
		case done:
			return stet.BatchCompleted
		}
		return stet.BatchSubmitted
	default:
		return stet.BatchInProgress
	}
}

// The wire shapes read here.
type (
	batchOp struct {
		Name     string           `json:"name"`
		Done     bool             `json:"done"`
		Metadata *batchMeta       `json:"metadata"`
		Response *batchOutput     `json:"response"`
		Error    *batchStatusBody `json:"error"`
	}
	batchMeta struct {
		Name        string `json:"name"`
		Model       string `json:"model"`
		DisplayName string `json:"displayName"`
		State       string `json:"state"`
		CreateTime  string `json:"createTime"`
		UpdateTime  string `json:"updateTime"`
		EndTime     string `json:"endTime"`
		InputConfig *struct {
			FileName string `json:"fileName"`
		} `json:"inputConfig"`
		Output     *batchOutput `json:"output"`
		BatchStats *struct {
			RequestCount           flexInt `json:"requestCount"`
			SuccessfulRequestCount flexInt `json:"successfulRequestCount"`
			FailedRequestCount     flexInt `json:"failedRequestCount"`
			PendingRequestCount    flexInt `json:"pendingRequestCount"`
		} `json:"batchStats"`
	}
	batchOutput struct {
		ResponsesFile    string `json:"responsesFile"`
		InlinedResponses *struct {
			InlinedResponses []json.RawMessage `json:"inlinedResponses"`
		} `json:"inlinedResponses"`
	}
	// batchItem is an inline response or a results file line.
	batchItem struct {
		Key      string           `json:"key"`
		Metadata map[string]any   `json:"metadata"`
		Response json.RawMessage  `json:"response"`
		Error    *batchStatusBody `json:"error"`
	}
	// batchStatusBody is a google.rpc.Status; the message is never read.
	batchStatusBody struct {
		Code    int               `json:"code"`
		Status  string            `json:"status"`
		Details []json.RawMessage `json:"details"`
	}
	batchListPage struct {
		Operations    []*batchOp `json:"operations"`
		NextPageToken string     `json:"nextPageToken"`
	}
)

// flexInt is an int64 sent as a JSON string, as proto3 JSON does, or as a
// number.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("count is not an integer: %w", err)
	}
	*n = flexInt(v)
	return nil
}

func parseOperation(raw []byte) (*batchOp, error) {
	var op batchOp
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, fmt.Errorf("decode batch: %w", err)
	}
	return &op, nil
}

func (op *batchOp) meta() *batchMeta {
	if op.Metadata == nil {
		return &batchMeta{}
	}
	return op.Metadata
}

// output is the batch's output: metadata.output, which the SDK reads, or
// Operation.response, which mirrors it.
func (op *batchOp) output() *batchOutput {
	for _, out := range []*batchOutput{op.meta().Output, op.Response} {
		if out != nil && (out.ResponsesFile != "" || out.InlinedResponses != nil) {
			return out
		}
	}
	return nil
}

func (op *batchOp) state() stet.BatchState {
	return mapBatchState(op.meta().State, op.Done, op.Error != nil)
}

func (out *batchOutput) inlineResponses() []json.RawMessage {
	if out.InlinedResponses == nil {
		return nil
	}
	return out.InlinedResponses.InlinedResponses
}

// handle describes the batch for the caller; false if the answer names no
// usable batch.
func (op *batchOp) handle(requestID string) (stet.BatchHandle, bool) {
	m := op.meta()
	name, ok := resourceName("batches/", op.Name)
	if !ok {
		if name, ok = resourceName("batches/", m.Name); !ok {
			return stet.BatchHandle{}, false
		}
	}
	h := stet.BatchHandle{
		ProviderID: name,
		State:      op.state(),
		CreatedAt:  parseTime(m.CreateTime),
		RequestID:  requestID,
	}
	if m.InputConfig != nil {
		if f, ok := resourceName("files/", m.InputConfig.FileName); ok {
			h.InputFileID = f
		}
	}
	if m.BatchStats != nil {
		h.RequestCount = int(m.BatchStats.RequestCount)
	}
	return h, true
}

func metadataKey(m map[string]any) string {
	s, _ := m[BatchKeyField].(string)
	return s
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// resourceName returns prefix+id for id given with or without the prefix,
// or false unless id is a plain resource ID: it goes into URL paths, the
// ledger and logs.
func resourceName(prefix, id string) (string, bool) {
	rest := strings.TrimPrefix(id, prefix)
	if rest == "" || len(rest) > 128 {
		return "", false
	}
	for i := 0; i < len(rest); i++ {
		if !isNameByte(rest[i]) {
			return "", false
		}
	}
	return prefix + rest, true
}

// redactBatch returns the batch body as received, less the inline requests
// (metadata.inputConfig.requests) and inline responses (metadata.output and
// response inlinedResponses), which carry document text and model output.
// Only a body that had them is re-encoded.
func redactBatch(raw []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return raw
	}
	changed := dropField(top, "response", "inlinedResponses")
	var meta map[string]json.RawMessage
	if json.Unmarshal(top["metadata"], &meta) == nil {
		in := dropField(meta, "inputConfig", "requests")
		out := dropField(meta, "output", "inlinedResponses")
		if in || out {
			b, err := json.Marshal(meta)
			if err != nil {
				return nil
			}
			top["metadata"] = b
			changed = true
		}
	}
	if !changed {
		return raw
	}
	b, err := json.Marshal(top)
	if err != nil {
		return nil
	}
	return b
}

// dropField deletes obj[field][key] and reports whether it was there.
func dropField(obj map[string]json.RawMessage, field, key string) bool {
	var inner map[string]json.RawMessage
	if json.Unmarshal(obj[field], &inner) != nil {
		return false
	}
	if _, ok := inner[key]; !ok {
		return false
	}
	delete(inner, key)
	b, err := json.Marshal(inner)
	if err != nil {
		return false
	}
	obj[field] = b
	return true
}

// batchCall records what the wire said for one batch call, as capture does
// for Extract, with its own body limit.
type batchCall struct {
	capture
	limit int64
}

// answered reports whether a 2xx body was read in full.
func (call *batchCall) answered() bool { return call.Status/100 == 2 && call.Raw != nil }

type batchCallKey struct{}

// startCall prepares one call: its timeout, and its record carried in the
// context for batchTransport.
func (c *BatchClient) startCall(ctx context.Context, timeout time.Duration, limit int64) (*batchCall, context.Context, context.CancelFunc) {
	call := &batchCall{limit: limit}
	callCtx, cancel := context.WithTimeoutCause(processor.WithBodyLimit(ctx, max(limit, processor.MaxResponseBytes)), timeout, errCallTimeout)
	return call, context.WithValue(callCtx, batchCallKey{}, call), cancel
}

// batchTransport fills the batchCall carried by the request's context. The
// SDK calls it synchronously from the calling goroutine. An upload is two
// requests or more; the record keeps the last.
type batchTransport struct{ next http.RoundTripper }

func (t batchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	call, _ := req.Context().Value(batchCallKey{}).(*batchCall)
	if call == nil {
		return t.next.RoundTrip(req)
	}
	return record(&call.capture, t.next, req, call.limit)
}

// callError classifies a failed batch call as the sync path classifies
// failed calls, and adds what only batch calls meet: a refused redirect
// (Google's API never redirects; a proxy or captive portal does, and may be
// fixed), a missing batch or file (404: asking again finds nothing either),
// and an answer over the size limit.
func (c *BatchClient) callError(parent, callCtx context.Context, err error, call *batchCall, notFoundCode string) *stet.ProcessorError {
	pe := c.classifyError(parent, callCtx, err, &call.capture)
	switch {
	case call.Status >= 300 && call.Status < 400:
		pe.Class, pe.Code = stet.FailureTransient, codeRedirect
	case call.Status == http.StatusNotFound && notFoundCode != "":
		pe.Class, pe.Code = stet.FailureUnsupported, notFoundCode
	case errors.Is(err, processor.ErrBodyTooLarge):
		pe.Class, pe.Code = stet.FailureTransient, codeTooLarge
	}
	return pe
}

// invalidAnswer is a 2xx answer that is not what the API sends: a proxy's
// page, a truncated body. Worth another try.
func invalidAnswer(call *batchCall, err error) *stet.ProcessorError {
	return call.Fail(stet.FailureTransient, codeInvalidResponse, err)
}

// guard runs an SDK call, turning a panic on a malformed answer (the SDK
// asserts types on decoded JSON) into an error.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errSDKPanic
		}
	}()
	return f()
}
