package gemini

// The Batch API side of the processor: BatchClient, a stet.BatchProcessor
// over the Gemini API's batchGenerateContent, batches and Files endpoints.
// It must never create a batch outside SubmitBatch's one creating call,
// never retry on its own, and never put a provider ID, document text or
// model output into an error string.
//
// Batch wire facts relied on, and where they come from. The SDK source is
// google.golang.org/genai@v1.77.0 in the module cache (batches.go,
// files.go, api_client.go, transformer.go, types.go); the docs were read
// through the search tool (ai.google.dev/api/batch-mode, the Batch API
// guide ai.google.dev/gemini-api/docs/batch-api, the Files API notes):
//   - Create: POST {base}/v1beta/models/{model}:batchGenerateContent with
//     {"batch":{"displayName","inputConfig":{"requests":{"requests":[
//     {"request":GenerateContentRequest,"metadata":{…}}]}}}} or inputConfig
//     {"fileName":"files/…"} (createBatchJobParametersToMldev,
//     batchJobSourceToMldev, inlinedRequestToMldev). displayName is
//     required; there is no idempotency key. The answer is a long-running
//     Operation {"name":"batches/…","metadata":GenerateContentBatch,
//     "done","response","error"}.
//   - The batch (Operation.metadata): name, model, displayName, state
//     BATCH_STATE_{PENDING,RUNNING,SUCCEEDED,FAILED,CANCELLED,EXPIRED} (the
//     SDK's tJobState rewrites them to JOB_STATE_*; both are read here),
//     batchStats {requestCount, successfulRequestCount, failedRequestCount,
//     pendingRequestCount} as int64 strings, create/update/endTime,
//     inputConfig, and once ended output {"inlinedResponses":
//     {"inlinedResponses":[{"response"|"error","metadata"}]}} or
//     {"responsesFile":"files/…"}, mirrored in Operation.response. The
//     SDK's BatchJob drops batchStats, the wire state word and per-item
//     error details, so the body captured off the wire is parsed here.
//   - Get: GET {base}/v1beta/batches/{id}. List: GET
//     {base}/v1beta/batches?pageSize=&pageToken= answering {"operations",
//     "nextPageToken"}; the Gemini API has no list filter (the SDK refuses
//     one), so FindBatch pages through every batch.
//   - Inline requests suit batches whose whole request stays under 20 MB
//     (Batch API guide); above that, a JSONL file, one {"key","request"} a
//     line, goes through the Files API resumable upload (POST
//     {base}/upload/v1beta/files with X-Goog-Upload-Command start, then the
//     bytes to X-Goog-Upload-URL with "upload, finalize"; Files.Upload,
//     apiClient.upload). Its results come back as a JSONL file, one
//     {"key","response"|"error"} a line, read with GET
//     {base}/v1beta/files/{id}:download?alt=media (Files.Download, which
//     does not look at the HTTP status: this file does).
//   - Inline responses come in request order and echo each request's
//     metadata; stet puts the job ID there as {"key": JobID}, so results
//     are matched by key, never by position.
//   - A per-item error is a google.rpc.Status {code (the canonical code
//     number), message, details}. Nothing documents how an item of a
//     cancelled or expired batch is reported: CANCELLED is read as a
//     cancelled item and DEADLINE_EXCEEDED as an expired one (both
//     transient, as the same status would be on the sync path).
//   - Batches pending or running for 48 hours expire (Batch API guide);
//     files are stored for 48 hours (Files API). No retention of a finished
//     batch object is documented, so BatchResultsRetention is the 48 hours
//     of a results file, counted from the batch's end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/genai"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

const (
	// MaxInlineBatchBytes is the largest batch sent inline: the Batch API
	// guide keeps inline batches under 20 MB of total request size. Larger
	// batches go through an uploaded JSONL file.
	MaxInlineBatchBytes = 20_000_000
	// BatchResultsRetention is how long the provider keeps a finished
	// batch's results: the Files API's 48 hours.
	BatchResultsRetention = 48 * time.Hour
	// BatchKeyField is the request metadata field (and JSONL field) holding
	// the job ID.
	BatchKeyField = "key"

	batchFileMIMEType = "application/jsonl"
	// minTransferTimeout is the least time given to an upload or a
	// download, which can be hundreds of megabytes.
	minTransferTimeout = 10 * time.Minute
	// maxBatchBodyBytes bounds a batch object or a list page: an ended
	// inline batch carries its requests and answers, up to tens of
	// megabytes each.
	maxBatchBodyBytes = 256 << 20
	// maxResultsFileBytes bounds a results file.
	maxResultsFileBytes = 1 << 30
	// listPageSize is the page size FindBatch asks for.
	listPageSize = 50
	// maxListPages bounds a FindBatch scan; past it, nothing is established.
	maxListPages = 2000
)

// Codes of batch failures decided here rather than read from the provider.
const (
	codeInvalidBatch     = "invalid_batch"
	codeInvalidSchema    = "invalid_schema"
	codeBatchNotFound    = "batch_not_found"
	codeBatchNotTerminal = "batch_not_terminal"
	codeResultsNotFound  = "batch_results_not_found"
	codeInvalidResponse  = "invalid_response"
	codeRedirect         = "redirect"
	codeTooLarge         = "response_too_large"
	codeFindIncomplete   = "find_incomplete"
	codeEmptyItem        = "empty_item"
)

var errSDKPanic = errors.New("the SDK failed on the answer")

// BatchClient is the Gemini processor with its batch API: a stet.Processor
// (the embedded Client) and a stet.BatchProcessor. It is safe for concurrent
// use.
type BatchClient struct {
	*Client
	batches *genai.Batches
	files   *genai.Files
	// inlineLimit is MaxInlineBatchBytes; tests lower it.
	inlineLimit int
}

var _ stet.BatchProcessor = (*BatchClient)(nil)

// NewBatch returns a BatchClient for cfg. It makes no network call.
func NewBatch(cfg Config) (*BatchClient, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	sdk, err := newSDK(cfg, base, func(next http.RoundTripper) http.RoundTripper { return batchTransport{next: next} })
	if err != nil {
		return nil, err
	}
	return &BatchClient{Client: c, batches: sdk.Batches, files: sdk.Files, inlineLimit: MaxInlineBatchBytes}, nil
}

// Info declares the processor's identity and data boundary; it adds the
// "batch" capability to the Client's.
func (c *BatchClient) Info() stet.ProcessorInfo {
	info := c.Client.Info()
	info.Capabilities = append(info.Capabilities, "batch")
	return info
}

// BatchInfo declares what the Gemini Batch API guarantees.
func (c *BatchClient) BatchInfo() stet.BatchInfo {
	return stet.BatchInfo{
		IdempotentSubmit: false,
		ResultsRetention: BatchResultsRetention,
		MaxItems:         0, // no documented limit on requests
	}
}

// SubmitBatch sends the items as one batch labelled with b.BatchID (its
// displayName): inline when the batch fits MaxInlineBatchBytes, else as a
// JSONL file uploaded first (or b.InputFileID, uploaded by an earlier
// attempt). It calls b.BeforeCreate with the file's ID (empty inline) right
// before the one creating call, which is never retried here.
func (c *BatchClient) SubmitBatch(ctx context.Context, b stet.BatchSubmit) (*stet.BatchHandle, error) {
	if err := checkSubmit(b); err != nil {
		return nil, err
	}
	inline, jsonl, err := c.batchRequests(b.Items)
	if err != nil {
		return nil, err
	}
	var fileID string
	switch {
	case b.InputFileID != "":
		name, ok := resourceName("files/", b.InputFileID)
		if !ok {
			return nil, invalidBatch("input file id is malformed")
		}
		fileID = name
	case inlineSize(jsonl, len(b.Items), b.BatchID) > c.inlineLimit:
		fileID, err = c.upload(ctx, b.BatchID, jsonl)
		if err != nil {
			return nil, err
		}
	}
	src := &genai.BatchJobSource{InlinedRequests: inline}
	if fileID != "" {
		src = &genai.BatchJobSource{FileName: fileID}
	}
	if b.BeforeCreate != nil {
		if err := b.BeforeCreate(ctx, fileID); err != nil {
			return nil, err
		}
	}

	call, callCtx, cancel := c.startCall(ctx, c.timeout, maxBatchBodyBytes)
	defer cancel()
	err = guard(func() error {
		_, err := c.batches.Create(callCtx, c.model, src, &genai.CreateBatchJobConfig{DisplayName: b.BatchID})
		return err
	})
	// A 2xx the SDK could not decode still created the batch: read it.
	if err != nil && !call.answered() {
		return nil, c.callError(ctx, callCtx, err, call, "")
	}
	op, err := parseOperation(call.Raw)
	if err != nil {
		return nil, invalidAnswer(call, err)
	}
	h, ok := op.handle(call.RequestID)
	if !ok {
		return nil, invalidAnswer(call, errors.New("answer carries no batch name"))
	}
	if h.InputFileID == "" {
		h.InputFileID = fileID
	}
	if h.RequestCount == 0 {
		h.RequestCount = len(b.Items)
	}
	return &h, nil
}

// checkSubmit refuses, before anything is sent, a submission the API would
// refuse or stet could not match results to.
func checkSubmit(b stet.BatchSubmit) error {
	if b.BatchID == "" || len(b.BatchID) > 512 {
		return invalidBatch("batch id is empty or longer than a display name")
	}
	if len(b.Items) == 0 {
		return invalidBatch("batch has no items")
	}
	seen := make(map[string]bool, len(b.Items))
	for _, it := range b.Items {
		if it.JobID == "" || seen[it.JobID] {
			return invalidBatch("batch item job ids must be present and unique")
		}
		seen[it.JobID] = true
		if len(it.Params.Schema) == 0 || !json.Valid(it.Params.Schema) {
			return &stet.ProcessorError{
				Class: stet.FailureUnsupported,
				Code:  codeInvalidSchema,
				Err:   errors.New("a batch item carries no valid JSON schema"),
			}
		}
	}
	return nil
}

func invalidBatch(why string) *stet.ProcessorError {
	return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeInvalidBatch, Err: errors.New(why)}
}

// batchRequests builds each item's request twice over: as the SDK's inline
// request and as a JSONL line {"key","request"} for the file route. Both
// carry the request the sync path sends (Client.request).
func (c *BatchClient) batchRequests(items []stet.BatchItem) ([]*genai.InlinedRequest, []byte, error) {
	inline := make([]*genai.InlinedRequest, 0, len(items))
	var jsonl bytes.Buffer
	for _, it := range items {
		contents, config := c.request(it.Params)
		inline = append(inline, &genai.InlinedRequest{
			Contents: contents,
			Config:   config,
			Metadata: map[string]string{BatchKeyField: it.JobID},
		})
		req, err := wireRequestBody(contents, config)
		if err != nil {
			return nil, nil, invalidBatch("encode a batch request: " + err.Error())
		}
		line, err := json.Marshal(map[string]any{BatchKeyField: it.JobID, "request": req})
		if err != nil {
			return nil, nil, invalidBatch("encode a batch line: " + err.Error())
		}
		jsonl.Write(line)
		jsonl.WriteByte('\n')
	}
	return inline, jsonl.Bytes(), nil
}

// wireRequestBody is the GenerateContentRequest the SDK puts on the wire
// for contents and config (generateContentParametersToMldev): contents as
// given, and the generationConfig fields Client.request sets. A field added
// there must be added here; TestJSONLMatchesInline compares the two.
func wireRequestBody(contents []*genai.Content, config *genai.GenerateContentConfig) (map[string]any, error) {
	raw, err := json.Marshal(contents)
	if err != nil {
		return nil, err
	}
	var cs []any
	if err := json.Unmarshal(raw, &cs); err != nil {
		return nil, err
	}
	gc := map[string]any{}
	if config.ResponseMIMEType != "" {
		gc["responseMimeType"] = config.ResponseMIMEType
	}
	if config.ResponseJsonSchema != nil {
		raw, err := json.Marshal(config.ResponseJsonSchema)
		if err != nil {
			return nil, err
		}
		var schema any
		if err := json.Unmarshal(raw, &schema); err != nil {
			return nil, err
		}
		gc["responseJsonSchema"] = schema
	}
	if config.MaxOutputTokens != 0 {
		gc["maxOutputTokens"] = config.MaxOutputTokens
	}
	if config.Temperature != nil {
		gc["temperature"] = *config.Temperature
	}
	return map[string]any{"contents": cs, "generationConfig": gc}, nil
}

// inlineSize estimates the size of the inline create request: each inline
// entry {"metadata":{"key":…},"request":…} is its JSONL line plus a few
// bytes, and the envelope a few hundred.
func inlineSize(jsonl []byte, items int, displayName string) int {
	return len(jsonl) + 24*items + len(displayName) + 1024
}

// upload sends the JSONL through the Files API, labelled with the batch ID,
// and returns the file's name ("files/…").
func (c *BatchClient) upload(ctx context.Context, batchID string, jsonl []byte) (string, error) {
	call, callCtx, cancel := c.startCall(ctx, max(c.timeout, minTransferTimeout), maxBatchBodyBytes)
	defer cancel()
	var f *genai.File
	err := guard(func() (err error) {
		f, err = c.files.Upload(callCtx, bytes.NewReader(jsonl), &genai.UploadFileConfig{
			MIMEType:    batchFileMIMEType,
			DisplayName: batchID,
		})
		return err
	})
	if err != nil {
		return "", c.callError(ctx, callCtx, err, call, "")
	}
	name, ok := resourceName("files/", f.Name)
	if !ok {
		return "", invalidAnswer(call, errors.New("upload answer carries no file name"))
	}
	return name, nil
}

// FindBatch lists every batch and returns those whose displayName is
// q.BatchID. It never creates anything.
func (c *BatchClient) FindBatch(ctx context.Context, q stet.BatchQuery) ([]stet.BatchHandle, error) {
	if q.BatchID == "" {
		return nil, invalidBatch("query has no batch id")
	}
	var found []stet.BatchHandle
	token := ""
	seen := map[string]bool{}
	for range maxListPages {
		page, call, err := c.listPage(ctx, token)
		if err != nil {
			return nil, err
		}
		for _, op := range page.Operations {
			if op.meta().DisplayName != q.BatchID {
				continue
			}
			if h, ok := op.handle(call.RequestID); ok {
				found = append(found, h)
			}
		}
		if page.NextPageToken == "" {
			return found, nil
		}
		if seen[page.NextPageToken] {
			return nil, &stet.ProcessorError{
				Class: stet.FailureTransient, StatusCode: call.Status, Code: codeFindIncomplete, RequestID: call.RequestID,
				Err: errors.New("batch list repeats a page token"),
			}
		}
		seen[page.NextPageToken] = true
		token = page.NextPageToken
	}
	return nil, &stet.ProcessorError{
		Class: stet.FailureTransient, Code: codeFindIncomplete,
		Err: fmt.Errorf("batch list longer than %d pages", maxListPages),
	}
}

// listPage fetches one page of the batch list.
func (c *BatchClient) listPage(ctx context.Context, token string) (*batchListPage, *batchCall, error) {
	call, callCtx, cancel := c.startCall(ctx, c.timeout, maxBatchBodyBytes)
	defer cancel()
	err := guard(func() error {
		_, err := c.batches.List(callCtx, &genai.ListBatchJobsConfig{PageSize: listPageSize, PageToken: token})
		return err
	})
	if err != nil && !call.answered() {
		return nil, nil, c.callError(ctx, callCtx, err, call, "")
	}
	var page batchListPage
	if err := json.Unmarshal(call.Raw, &page); err != nil {
		return nil, nil, invalidAnswer(call, fmt.Errorf("decode batch list: %w", err))
	}
	return &page, call, nil
}

// BatchStatus performs one GET of the batch. Raw is the answer as received,
// except that inline requests and inline responses are left out: the API
// echoes both in the batch object, and Raw must hold no document text.
func (c *BatchClient) BatchStatus(ctx context.Context, providerID string) (*stet.BatchStatus, error) {
	name, ok := resourceName("batches/", providerID)
	if !ok {
		return nil, invalidBatch("batch id is malformed")
	}
	op, call, err := c.getBatch(ctx, name)
	if err != nil {
		return nil, err
	}
	m := op.meta()
	word := processor.SafeCode(m.State)
	st := &stet.BatchStatus{
		ProviderID:    name,
		ProviderState: word,
		State:         op.state(),
		RequestID:     call.RequestID,
		StatusCode:    call.Status,
		Raw:           redactBatch(call.Raw),
	}
	if n, ok := resourceName("batches/", op.Name); ok {
		st.ProviderID = n
	}
	if m.InputConfig != nil {
		if f, ok := resourceName("files/", m.InputConfig.FileName); ok {
			st.InputFileID = f
		}
	}
	if out := op.output(); out != nil {
		if f, ok := resourceName("files/", out.ResponsesFile); ok {
			st.OutputFileID = f
		}
	}
	if s := m.BatchStats; s != nil {
		st.Total, st.Succeeded, st.Failed = int(s.RequestCount), int(s.SuccessfulRequestCount), int(s.FailedRequestCount)
	}
	if st.State.Terminal() {
		end := parseTime(m.EndTime)
		if end.IsZero() {
			end = parseTime(m.UpdateTime)
		}
		if !end.IsZero() {
			st.ResultsExpireAt = end.Add(BatchResultsRetention)
		}
	}
	return st, nil
}

// getBatch performs one GET of the batch and parses the answer.
func (c *BatchClient) getBatch(ctx context.Context, name string) (*batchOp, *batchCall, error) {
	call, callCtx, cancel := c.startCall(ctx, c.timeout, maxBatchBodyBytes)
	defer cancel()
	err := guard(func() error {
		_, err := c.batches.Get(callCtx, name, nil)
		return err
	})
	if err != nil && !call.answered() {
		return nil, nil, c.callError(ctx, callCtx, err, call, codeBatchNotFound)
	}
	op, err := parseOperation(call.Raw)
	if err != nil {
		return nil, nil, invalidAnswer(call, err)
	}
	return op, call, nil
}

// BatchResults fetches the results of an ended batch: the results file
// named by st.OutputFileID, or else the batch itself (one GET), whose
// inline responses are the results or which names the results file. Items
// without a key are not reported. Fetching twice is harmless.
func (c *BatchClient) BatchResults(ctx context.Context, st *stet.BatchStatus) ([]stet.BatchResult, error) {
	if st == nil {
		return nil, invalidBatch("no batch status")
	}
	name, ok := resourceName("batches/", st.ProviderID)
	if !ok {
		return nil, invalidBatch("batch id is malformed")
	}
	fileID := st.OutputFileID
	if fileID == "" {
		op, call, err := c.getBatch(ctx, name)
		if err != nil {
			return nil, err
		}
		if !op.state().Terminal() {
			return nil, &stet.ProcessorError{
				Class: stet.FailureTransient, StatusCode: call.Status, Code: codeBatchNotTerminal, RequestID: call.RequestID,
				Err: errors.New("batch has not ended"),
			}
		}
		out := op.output()
		if out == nil {
			return nil, nil // failed: nothing to report on
		}
		if out.ResponsesFile == "" {
			return c.inlineResults(out.inlineResponses(), call.Status), nil
		}
		fileID = out.ResponsesFile
	}
	data, call, err := c.download(ctx, fileID)
	if err != nil {
		return nil, err
	}
	return c.fileResults(data, call.Status), nil
}

// download reads a results file.
func (c *BatchClient) download(ctx context.Context, fileID string) ([]byte, *batchCall, error) {
	name, ok := resourceName("files/", fileID)
	if !ok {
		return nil, nil, invalidBatch("results file id is malformed")
	}
	call, callCtx, cancel := c.startCall(ctx, max(c.timeout, minTransferTimeout), maxResultsFileBytes)
	defer cancel()
	var data []byte
	err := guard(func() (err error) {
		data, err = c.files.Download(callCtx, genai.NewDownloadURIFromFile(&genai.File{DownloadURI: name}), nil)
		return err
	})
	if err == nil && call.Status/100 != 2 {
		// Files.Download returns whatever body came back, error pages too.
		err = fmt.Errorf("results download answered status %d", call.Status)
	}
	if err != nil {
		return nil, nil, c.callError(ctx, callCtx, err, call, codeResultsNotFound)
	}
	return data, call, nil
}

// inlineResults classifies each inline response.
func (c *BatchClient) inlineResults(items []json.RawMessage, status int) []stet.BatchResult {
	var out []stet.BatchResult
	seen := map[string]bool{}
	for _, raw := range items {
		var it batchItem
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		key := metadataKey(it.Metadata)
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, c.itemResult(key, raw, it.Response, it.Error, status))
	}
	return out
}

// fileResults classifies each line of a results file. A line that cannot
// be read or names no key reports on no item.
func (c *BatchClient) fileResults(data []byte, status int) []stet.BatchResult {
	var out []stet.BatchResult
	seen := map[string]bool{}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var it batchItem
		if json.Unmarshal(line, &it) != nil {
			continue
		}
		key := it.Key
		if key == "" {
			key = metadataKey(it.Metadata)
		}
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, c.itemResult(key, line, it.Response, it.Error, status))
	}
	return out
}

// itemResult classifies one item exactly as the sync path classifies the
// same answer: a response goes through Client.result, an error status
// through the sync taxonomy.
func (c *BatchClient) itemResult(key string, raw []byte, resp json.RawMessage, status *batchStatusBody, httpStatus int) stet.BatchResult {
	r := stet.BatchResult{JobID: key}
	switch {
	case len(resp) > 0 && string(resp) != "null":
		var gr genai.GenerateContentResponse
		if err := json.Unmarshal(resp, &gr); err != nil {
			r.Err = &stet.ProcessorError{
				Class: stet.FailureTransient, StatusCode: httpStatus, Code: codeInvalidResponse,
				Err: fmt.Errorf("decode batch item response: %w", err),
			}
			return r
		}
		ext, err := c.result(&gr, &capture{Status: httpStatus, Raw: raw}, 0)
		if err != nil {
			r.Err = err
			return r
		}
		r.Extraction = ext
	case status != nil:
		r.Err = c.itemError(status)
	default:
		r.Err = &stet.ProcessorError{
			Class: stet.FailureTransient, StatusCode: httpStatus, Code: codeEmptyItem,
			Err: errors.New("batch item carries neither a response nor an error"),
		}
	}
	return r
}

// itemError classifies a per-item google.rpc.Status. It has no HTTP status
// of its own; the one Google pairs with its code decides as on the sync
// path.
func (c *BatchClient) itemError(s *batchStatusBody) *stet.ProcessorError {
	name, httpStatus := s.Status, 0
	switch {
	case s.Code >= 100:
		httpStatus = s.Code // an HTTP status where a code was expected
	case s.Code > 0 && s.Code < len(rpcCodes):
		name, httpStatus = rpcCodes[s.Code].name, rpcCodes[s.Code].http
	default:
		for _, rc := range rpcCodes[1:] {
			if rc.name == name {
				httpStatus = rc.http
			}
		}
	}
	switch name {
	case "CANCELLED":
		return &stet.ProcessorError{Class: stet.FailureTransient, Code: stet.CodeBatchItemCancelled, Err: errors.New("batch item cancelled")}
	case "DEADLINE_EXCEEDED":
		return &stet.ProcessorError{Class: stet.FailureTransient, Code: stet.CodeBatchItemExpired, Err: errors.New("batch item expired")}
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"status": name, "details": s.Details}})
	e := parseError(body)
	if httpStatus == 0 {
		httpStatus = http.StatusInternalServerError // no usable code: a server fault
	}
	return &stet.ProcessorError{
		Class:      errorClass(httpStatus, e),
		Code:       e.code(),
		RetryAfter: c.retryAfter(nil, e),
		Err:        errors.New("batch item failed"),
	}
}
