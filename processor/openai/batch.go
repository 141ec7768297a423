package openai

// The Batch API side of Client: stet.BatchProcessor over OpenAI's Files and
// Batches endpoints. It must never create a batch outside SubmitBatch's one
// creating call, never retry on its own, and never put a provider ID,
// document text or model output into an error string.
//
// Batch wire facts relied on, and where they come from. The SDK source is
// github.com/openai/openai-go/v3@v3.98.0 in the module cache:
//   - Input: a JSONL file uploaded with purpose "batch" (multipart POST
//     /files, FileService.New, file.go); one request a line,
//     {"custom_id","method":"POST","url":"/v1/chat/completions","body"}, the
//     body being exactly the Chat Completions request the sync path sends.
//     At most 50,000 requests and 200 MB a file (BatchNewParams.InputFileID
//     in batch.go). Batch input files expire after 30 days unless told
//     otherwise (FileNewParams.ExpiresAfter in file.go).
//   - Create: POST /batches {input_file_id, endpoint, completion_window
//     "24h" (the only window), metadata (16 pairs, keys ≤ 64 and values
//     ≤ 512 characters), output_expires_after {anchor "created_at",
//     seconds 3600…2592000}} (BatchNewParams in batch.go). Neither the SDK
//     nor the reference knows an Idempotency-Key (the SDK sends none, so
//     net/http never replays the POST either): an ambiguous create is
//     reconciled by listing, never resent. stet sets output_expires_after to the 30-day
//     maximum, which makes BatchInfo.ResultsRetention a stated fact rather
//     than a guess about defaults.
//   - Status: GET /batches/{id}; status is one of validating, failed,
//     in_progress, finalizing, completed, expired, cancelling, cancelled
//     (BatchStatus constants in batch.go); output_file_id, error_file_id,
//     request_counts {total, completed, failed}, and *_at unix times.
//   - List: GET /batches?after=&limit= (limit 1…100, default 20), a cursor
//     page {data, has_more} whose next page starts after the last ID
//     (BatchListParams in batch.go, CursorPage.GetNextPage in
//     packages/pagination); the page also carries object "list", first_id
//     and last_id (Azure's mirror of the reference, batches-list-batches).
//     Neither the SDK nor the reference states the order. OpenAI lists
//     batches newest first, as the services cloning the route document
//     (DigitalOcean's and OpenRouter's list-batches references); FindBatch
//     relies on it only to stop early, a page past the cutoff.
//   - Results: GET /files/{id}/content of output_file_id (requests that
//     succeeded) and error_file_id (requests that did not), JSONL lines
//     {"id","custom_id","response":{"status_code","request_id","body"},
//     "error":null} or with "response":null and "error":{"code","message"}.
//     Documented error codes: batch_expired (not run before the window
//     closed), batch_cancelled (the batch was cancelled first),
//     request_timeout (OpenAI's OpenAPI spec, BatchRequestOutputError, read
//     through the docs search: docs.rs openai-client-base
//     BatchRequestOutputError.md).
//
// Azure OpenAI batches (their own deployment type and routes) are not
// supported: with Config.AzureAPIVersion set, every batch method
// answers unsupported without a network call.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/openai/openai-go/v3/shared/constant"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

const (
	// BatchMaxItems is the API's limit on requests in one batch.
	BatchMaxItems = 50000
	// BatchResultsRetention is how long output and error files are kept:
	// stet asks for the API's maximum with output_expires_after.
	BatchResultsRetention = 30 * 24 * time.Hour
	// BatchMetadataKey is the batch metadata key holding stet's batch ID.
	BatchMetadataKey = "stet_batch_id"

	batchEndpoint = "/v1/chat/completions"
	// maxBatchInputBytes is the API's limit on an input file (200 MB).
	maxBatchInputBytes = 200_000_000
	// findSkew is how far before the submission FindBatch still looks, for
	// clock skew between stet and the provider.
	findSkew = 10 * time.Minute
	// findPageSize is the API's largest list page.
	findPageSize = 100
	// maxFindPages bounds a FindBatch scan; past it, nothing is established.
	maxFindPages = 500
	// maxBatchObjectBytes bounds a batch, file or error object: a few
	// kilobytes at most, so a megabyte is a misbehaving server.
	maxBatchObjectBytes = 1 << 20
	// maxBatchListBytes bounds one list page of up to 100 batches.
	maxBatchListBytes = 8 << 20
	// maxBatchFileBytes bounds a results file;
	// processor.MaxResponseBytes bounds one of its lines.
	maxBatchFileBytes = 1 << 30
	// minFileTimeout is the least time given to an upload or a download,
	// which can be hundreds of megabytes.
	minFileTimeout = 10 * time.Minute
)

// Codes of batch failures decided here rather than read from the provider.
const (
	codeAzureBatch       = "azure_batch_unsupported"
	codeInvalidBatch     = "invalid_batch"
	codeBatchTooLarge    = "batch_too_large"
	codeBatchNotFound    = "batch_not_found"
	codeBatchNotTerminal = "batch_not_terminal"
	codeResultsNotFound  = "batch_results_not_found"
	codeRedirect         = "redirect"
	codeTooLarge         = "response_too_large"
	codeFindIncomplete   = "find_incomplete"
)

var (
	errRedirect   = errors.New("openai batch call answered with a redirect")
	errNoBatchID  = errors.New("answer carries no batch id")
	errLineTooBig = errors.New("results line over the size limit")
)

var _ stet.BatchProcessor = (*Client)(nil)

// BatchInfo declares what OpenAI's Batch API guarantees.
func (c *Client) BatchInfo() stet.BatchInfo {
	return stet.BatchInfo{
		IdempotentSubmit: false,
		ResultsRetention: BatchResultsRetention,
		MaxItems:         BatchMaxItems,
	}
}

// SubmitBatch uploads the items as one JSONL input file (unless
// b.InputFileID names one an earlier attempt uploaded), calls b.BeforeCreate
// with the file's ID, and creates the batch, labelled with b.BatchID in its
// metadata. The create is the one creating call; it is never retried here.
func (c *Client) SubmitBatch(ctx context.Context, b stet.BatchSubmit) (*stet.BatchHandle, error) {
	if err := c.batchSupported(); err != nil {
		return nil, err
	}
	if err := validateSubmit(b); err != nil {
		return nil, err
	}
	fileID := b.InputFileID
	if fileID == "" {
		input, err := c.batchInput(b.Items)
		if err != nil {
			return nil, err
		}
		fileID, err = c.uploadInput(ctx, b.BatchID, input)
		if err != nil {
			return nil, err
		}
	}

	params := sdk.BatchNewParams{
		InputFileID:      fileID,
		Endpoint:         sdk.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: sdk.BatchNewParamsCompletionWindow24h,
		Metadata:         shared.Metadata{BatchMetadataKey: b.BatchID},
		OutputExpiresAfter: sdk.BatchNewParamsOutputExpiresAfter{
			Anchor:  constant.CreatedAt("created_at"),
			Seconds: int64(BatchResultsRetention / time.Second),
		},
	}
	if b.BeforeCreate != nil {
		if err := b.BeforeCreate(ctx, fileID); err != nil {
			return nil, fmt.Errorf("openai batch: before create: %w", err)
		}
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	call := batchCall{limit: maxBatchObjectBytes}
	svc := c.batchService()
	batch, err := svc.New(callCtx, params, option.WithMiddleware(call.middleware))
	if err != nil {
		return nil, c.classifyBatch(ctx, callCtx, err, &call)
	}
	if batch == nil || batch.ID == "" {
		// The provider may have created something we cannot name: the
		// caller reconciles, as after a timeout.
		return nil, call.Fail(stet.FailureTransient, "", errNoBatchID)
	}
	h := handle(*batch, call.RequestID)
	if h.InputFileID == "" {
		h.InputFileID = fileID
	}
	if h.RequestCount == 0 {
		// Still validating: the provider has not counted the lines yet.
		h.RequestCount = len(b.Items)
	}
	return &h, nil
}

// FindBatch lists the provider's batches, newest first, back to ten minutes
// before q.SubmittedAt (every batch when it is zero), and returns every
// batch seen that is labelled with q.BatchID or made from q.InputFileID. It
// creates nothing. An empty answer means the
// whole window was read and holds no such batch; when the window cannot be
// read to its end the answer is an error, never an empty list.
func (c *Client) FindBatch(ctx context.Context, q stet.BatchQuery) ([]stet.BatchHandle, error) {
	if err := c.batchSupported(); err != nil {
		return nil, err
	}
	if q.BatchID == "" {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeInvalidBatch, Err: errors.New("batch query without a batch id")}
	}
	var cutoff int64
	if !q.SubmittedAt.IsZero() {
		cutoff = q.SubmittedAt.Add(-findSkew).Unix()
	}
	svc := c.batchService()
	var (
		found []stet.BatchHandle
		after string
	)
	for range maxFindPages {
		params := sdk.BatchListParams{Limit: sdk.Int(findPageSize)}
		if after != "" {
			params.After = sdk.String(after)
		}
		callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
		call := batchCall{limit: maxBatchListBytes}
		page, err := svc.List(callCtx, params, option.WithMiddleware(call.middleware))
		if err != nil {
			pe := c.classifyBatch(ctx, callCtx, err, &call)
			cancel()
			return nil, pe
		}
		cancel()
		older := cutoff != 0
		for _, b := range page.Data {
			if b.CreatedAt >= cutoff {
				older = false
			}
			if b.Metadata[BatchMetadataKey] == q.BatchID || (q.InputFileID != "" && b.InputFileID == q.InputFileID) {
				found = append(found, handle(b, call.RequestID))
			}
		}
		// A whole page older than the cutoff ends the scan: one page more
		// than strictly needed, so that batches created in the same
		// second, listed slightly out of order, are still seen.
		if older || !page.HasMore || len(page.Data) == 0 {
			return found, nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
	return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeFindIncomplete, Err: fmt.Errorf("batch list longer than %d pages", maxFindPages)}
}

// BatchStatus performs one status lookup. A missing batch is unsupported
// with Code "batch_not_found"; the rest is classified as the sync path does.
func (c *Client) BatchStatus(ctx context.Context, providerID string) (*stet.BatchStatus, error) {
	if err := c.batchSupported(); err != nil {
		return nil, err
	}
	if providerID == "" {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotFound, Err: errors.New("empty provider batch id")}
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	call := batchCall{limit: maxBatchObjectBytes}
	svc := c.batchService()
	b, err := svc.Get(callCtx, providerID, option.WithMiddleware(call.middleware))
	if err != nil {
		pe := c.classifyBatch(ctx, callCtx, err, &call)
		if pe.StatusCode == http.StatusNotFound {
			pe.Class, pe.Code = stet.FailureUnsupported, codeBatchNotFound
		}
		return nil, pe
	}
	if b == nil || b.ID == "" {
		return nil, call.Fail(stet.FailureTransient, "", errNoBatchID)
	}
	st := &stet.BatchStatus{
		ProviderID:    b.ID,
		ProviderState: string(b.Status),
		State:         batchState(string(b.Status)),
		InputFileID:   b.InputFileID,
		OutputFileID:  b.OutputFileID,
		ErrorFileID:   b.ErrorFileID,
		Total:         int(b.RequestCounts.Total),
		Succeeded:     int(b.RequestCounts.Completed),
		Failed:        int(b.RequestCounts.Failed),
		RequestID:     call.RequestID,
		StatusCode:    call.Status,
		Raw:           call.Raw,
	}
	if st.State.Terminal() && (b.OutputFileID != "" || b.ErrorFileID != "") {
		st.ResultsExpireAt = resultsExpireAt(*b)
	}
	return st, nil
}

// BatchResults downloads the output and error files of a finished batch
// and returns one result per line that names a custom_id, output file
// first, in file order. It deletes nothing: fetching twice is harmless.
func (c *Client) BatchResults(ctx context.Context, st *stet.BatchStatus) ([]stet.BatchResult, error) {
	if err := c.batchSupported(); err != nil {
		return nil, err
	}
	if st == nil || !st.State.Terminal() {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchNotTerminal, Err: errors.New("results asked of a batch that has not ended")}
	}
	var (
		results []stet.BatchResult
		seen    = map[string]bool{}
	)
	for _, fileID := range []string{st.OutputFileID, st.ErrorFileID} {
		if fileID == "" {
			continue
		}
		err := c.readResults(ctx, fileID, func(line []byte) {
			r, ok := c.itemResult(line)
			if !ok || seen[r.JobID] {
				// Unattributable, or a second answer for one item: the
				// first one stands.
				return
			}
			seen[r.JobID] = true
			results = append(results, r)
		})
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// batchSupported refuses Azure OpenAI, whose batches live elsewhere.
func (c *Client) batchSupported() error {
	if c.azure() {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeAzureBatch, Err: errors.New("azure openai batch is not supported")}
	}
	return nil
}

// azure reports whether the client speaks Azure OpenAI. Client records no
// flag for it, so the chat service is asked where a request would go: the
// middleware sees the final URL and stops the request before it is sent.
func (c *Client) azure() bool { return c.onAzure }

// batchService and fileService share the chat service's options: base
// URL, key, HTTP client and no SDK retries.
func (c *Client) batchService() sdk.BatchService { return sdk.NewBatchService(c.chat.Options...) }
func (c *Client) fileService() sdk.FileService   { return sdk.NewFileService(c.chat.Options...) }

// validateSubmit checks what the API would refuse, before anything is sent.
func validateSubmit(b stet.BatchSubmit) error {
	invalid := func(code, why string) error {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: code, Err: errors.New(why)}
	}
	switch {
	case b.BatchID == "" || len(b.BatchID) > 512:
		return invalid(codeInvalidBatch, "batch id must be 1 to 512 characters")
	case len(b.Items) == 0 && b.InputFileID == "":
		return invalid(codeInvalidBatch, "batch without items")
	case len(b.Items) > BatchMaxItems:
		return invalid(codeBatchTooLarge, "more items than the batch api accepts")
	}
	seen := make(map[string]bool, len(b.Items))
	for i, it := range b.Items {
		if it.JobID == "" || seen[it.JobID] {
			return invalid(codeInvalidBatch, fmt.Sprintf("item %d: job id empty or repeated", i))
		}
		seen[it.JobID] = true
		if len(it.Params.Schema) == 0 || !json.Valid(it.Params.Schema) {
			return invalid("invalid_schema", fmt.Sprintf("item %d: extract params carry no valid JSON schema", i))
		}
	}
	return nil
}

// batchInput renders the JSONL input file: one line per item whose body is
// byte for byte the request the sync path would send.
func (c *Client) batchInput(items []stet.BatchItem) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, it := range items {
		body, err := c.params(it.Params).MarshalJSON()
		if err != nil {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeInvalidBatch, Err: fmt.Errorf("encode item %d: %w", i, err)}
		}
		buf.WriteString(`{"custom_id":`)
		_ = enc.Encode(it.JobID) // a string always encodes; Encode adds a newline
		buf.Truncate(buf.Len() - 1)
		buf.WriteString(`,"method":"POST","url":"` + batchEndpoint + `","body":`)
		if err := json.Compact(&buf, body); err != nil {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeInvalidBatch, Err: fmt.Errorf("encode item %d: %w", i, err)}
		}
		buf.WriteString("}\n")
		if buf.Len() > maxBatchInputBytes {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeBatchTooLarge, Err: errors.New("input file over the batch api's 200 MB")}
		}
	}
	return buf.Bytes(), nil
}

// uploadInput uploads the input file and returns its ID. An upload creates
// no batch, so it is not the creating call.
func (c *Client) uploadInput(ctx context.Context, batchID string, input []byte) (string, error) {
	callCtx, cancel := context.WithTimeoutCause(ctx, c.fileTimeout(len(input)), errCallTimeout)
	defer cancel()
	call := batchCall{limit: maxBatchObjectBytes}
	svc := c.fileService()
	f, err := svc.New(callCtx, sdk.FileNewParams{
		File:    sdk.File(bytes.NewReader(input), processor.SchemaName(batchID)+".jsonl", "application/jsonl"),
		Purpose: sdk.FilePurposeBatch,
	}, option.WithMiddleware(call.middleware))
	if err != nil {
		return "", c.classifyBatch(ctx, callCtx, err, &call)
	}
	if f == nil || f.ID == "" {
		return "", call.Fail(stet.FailureTransient, "", errors.New("upload answer carries no file id"))
	}
	return f.ID, nil
}

// fileTimeout gives a transfer of n bytes the call timeout, at least
// minFileTimeout, plus a second a megabyte.
func (c *Client) fileTimeout(n int) time.Duration {
	return max(c.timeout, minFileTimeout) + time.Duration(n>>20)*time.Second
}

// readResults streams one results file to line, one JSONL line at a time.
func (c *Client) readResults(ctx context.Context, fileID string, line func([]byte)) error {
	callCtx, cancel := context.WithTimeoutCause(ctx, c.fileTimeout(0), errCallTimeout)
	defer cancel()
	call := batchCall{}
	svc := c.fileService()
	res, err := svc.Content(processor.WithBodyLimit(callCtx, processor.MaxBatchResultsBytes), fileID, option.WithMiddleware(call.middleware))
	if err != nil {
		pe := c.classifyBatch(ctx, callCtx, err, &call)
		if pe.StatusCode == http.StatusNotFound {
			pe.Class, pe.Code = stet.FailureUnsupported, codeResultsNotFound
		}
		return pe
	}
	defer res.Body.Close()
	counted := &countingReader{r: io.LimitReader(res.Body, maxBatchFileBytes+1)}
	br := bufio.NewReaderSize(counted, 64<<10)
	for {
		raw, err := readLine(br)
		if len(bytes.TrimSpace(raw)) > 0 {
			line(raw)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c.classifyBatch(ctx, callCtx, fmt.Errorf("read results file: %w", err), &call)
		}
	}
	if counted.n > maxBatchFileBytes {
		return c.classifyBatch(ctx, callCtx, processor.ErrBodyTooLarge, &call)
	}
	return nil
}

// readLine returns the next line without its newline, refusing lines over
// processor.MaxResponseBytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > processor.MaxResponseBytes {
			return nil, errLineTooBig
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// batchLine is one line of an output or error file.
type batchLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code any `json:"code"`
	} `json:"error"`
}

// itemResult classifies one results line as the sync path classifies the
// same answer. ok is false for a line that names no item.
func (c *Client) itemResult(line []byte) (stet.BatchResult, bool) {
	var l batchLine
	if json.Unmarshal(line, &l) != nil || l.CustomID == "" {
		return stet.BatchResult{}, false
	}
	r := stet.BatchResult{JobID: l.CustomID}
	requestID := l.ID
	if l.Response != nil && l.Response.RequestID != "" {
		requestID = l.Response.RequestID
	}
	fail := func(class stet.FailureClass, status int, code string, err error) (stet.BatchResult, bool) {
		r.Err = &stet.ProcessorError{Class: class, StatusCode: status, Code: code, RequestID: requestID, Err: err}
		return r, true
	}
	if l.Error != nil {
		code := codeString(l.Error.Code)
		switch code {
		case "batch_expired":
			return fail(stet.FailureTransient, 0, stet.CodeBatchItemExpired, errors.New("batch item expired before it ran"))
		case "batch_cancelled":
			return fail(stet.FailureTransient, 0, stet.CodeBatchItemCancelled, errors.New("batch cancelled before the item ran"))
		default:
			// request_timeout and whatever else the provider reports
			// without an HTTP answer: worth another try.
			return fail(stet.FailureTransient, 0, code, errors.New("batch item failed without an answer"))
		}
	}
	if l.Response == nil {
		return fail(stet.FailureTransient, 0, "", errors.New("batch item has neither response nor error"))
	}
	status := l.Response.StatusCode
	if status < 200 || status > 299 {
		code := errorCode(l.Response.Body)
		return fail(statusClass(status, code), status, code, errors.New("batch item answered with an error status"))
	}
	var resp sdk.ChatCompletion
	if err := json.Unmarshal(l.Response.Body, &resp); err != nil {
		return fail(stet.FailureTransient, status, "", fmt.Errorf("batch item body is not a chat completion: %w", err))
	}
	capt := capture{Status: status, RequestID: requestID, Raw: line}
	ext, err := c.result(&resp, &capt, 0)
	if err != nil {
		r.Err = err
		return r, true
	}
	r.Extraction = ext
	return r, true
}

// codeString keeps a string or numeric error code if it is safe to show.
func codeString(v any) string {
	switch v := v.(type) {
	case string:
		return processor.SafeCode(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// batchState maps OpenAI's batch status onto stet's words. A status this
// code does not know is unknown: an operator looks rather than stet guess
// whether the batch has ended.
func batchState(s string) stet.BatchState {
	switch sdk.BatchStatus(s) {
	case sdk.BatchStatusValidating:
		return stet.BatchSubmitted
	case sdk.BatchStatusInProgress, sdk.BatchStatusFinalizing, sdk.BatchStatusCancelling:
		return stet.BatchInProgress
	case sdk.BatchStatusCompleted:
		return stet.BatchCompleted
	case sdk.BatchStatusFailed:
		return stet.BatchFailed
	case sdk.BatchStatusExpired:
		return stet.BatchExpired
	case sdk.BatchStatusCancelled:
		return stet.BatchCancelled
	default:
		return stet.BatchUnknown
	}
}

// handle describes a batch as stet records it.
func handle(b sdk.Batch, requestID string) stet.BatchHandle {
	return stet.BatchHandle{
		ProviderID:   b.ID,
		InputFileID:  b.InputFileID,
		State:        batchState(string(b.Status)),
		CreatedAt:    time.Unix(b.CreatedAt, 0).UTC(),
		RequestCount: int(b.RequestCounts.Total),
		RequestID:    requestID,
	}
}

// resultsExpireAt is when the output files expire: 30 days after they were
// written. The batch does not say when that was; the earliest end-phase
// time it records is no later, so the estimate errs early.
func resultsExpireAt(b sdk.Batch) time.Time {
	var at int64
	for _, t := range []int64{b.FinalizingAt, b.CompletedAt, b.ExpiredAt, b.CancellingAt, b.CancelledAt, b.FailedAt} {
		if t > 0 && (at == 0 || t < at) {
			at = t
		}
	}
	if at == 0 {
		return time.Time{}
	}
	return time.Unix(at, 0).UTC().Add(BatchResultsRetention)
}

// batchCall records what the wire said for one batch or file call. Unlike
// the sync capture it keeps the status of a response that came with an
// error (a redirect the HTTP client refused to follow), refuses a 3xx, and
// leaves a successful body to the caller when limit is zero.
type batchCall struct {
	capture
	limit int64
}

func (bc *batchCall) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if res != nil {
		bc.Note(res, "x-request-id")
	}
	if err != nil {
		return res, err
	}
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		_ = res.Body.Close()
		return nil, errRedirect
	}
	limit := bc.limit
	if res.StatusCode >= 400 {
		limit = maxBatchObjectBytes
	}
	if limit == 0 {
		return res, nil
	}
	if err := bc.Keep(res, limit); err != nil {
		return nil, err
	}
	return res, nil
}

// classifyBatch classifies a batch or file call's error: redirects and
// oversized answers here, the rest as the sync path does.
func (c *Client) classifyBatch(parent, callCtx context.Context, err error, call *batchCall) *stet.ProcessorError {
	switch {
	case errors.Is(err, errRedirect) || (call.Status >= 300 && call.Status < 400):
		// The same request will be redirected again: a base URL or proxy
		// problem for an operator, not a retry.
		return call.Fail(stet.FailureUnsupported, codeRedirect, err)
	case errors.Is(err, processor.ErrBodyTooLarge) || errors.Is(err, errLineTooBig):
		return call.Fail(stet.FailureTransient, codeTooLarge, err)
	}
	return c.classifyError(parent, callCtx, err, &call.capture)
}
