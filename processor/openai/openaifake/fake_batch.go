package openaifake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// The Server's Batch API: POST /v1/files (multipart), GET /v1/files/{id},
// GET /v1/files/{id}/content, DELETE /v1/files/{id}, POST /v1/batches,
// GET /v1/batches (newest first, after/limit), GET /v1/batches/{id} and
// POST /v1/batches/{id}/cancel, with the shapes of the SDK's FileObject,
// Batch and CursorPage and the API's error object. Batches live in memory;
// their items are answered, when the batch ends, by the same answer logic
// as the sync route (Options.Respond, or a minimal instance of the
// schema), with per-item and per-route scripting. The sync fault queue,
// FaultRate and the RPM/TPM limits apply to the sync route only.

// BatchOptions configures the Server's Batch API.
type BatchOptions struct {
	// PollsToEnd is how many status lookups (GET /v1/batches/{id}) a batch
	// takes to end: 1, the default, ends it on the first lookup after its
	// creation; earlier lookups see it in_progress. Negative: batches end
	// only when cancelled. Listing does not move a batch.
	PollsToEnd int
	// End is how batches end unless ScriptBatchEnd says otherwise:
	// completed by default.
	End BatchEnd
	// ListLimit, when positive, caps the page size of GET /v1/batches below
	// the API's 100, so tests can exercise paging with a few batches.
	ListLimit int
}

// BatchMetadataKey is the batch metadata key that labels a batch with
// stet's batch ID, as the adapter sets it (openai.BatchMetadataKey; the
// adapter's tests check the two agree). ScriptBatchEnd finds batches by it.
const BatchMetadataKey = "stet_batch_id"

// BatchMaxItems is the API's limit on requests in one batch; a larger
// input file fails validation.
const BatchMaxItems = 50000

// batchEndpoint is the only endpoint the fake's batches run.
const batchEndpoint = "/v1/chat/completions"

// BatchEnd is how a Server batch ends.
type BatchEnd string

// Batch ends. Items ScriptBatchItem does not script are answered normally
// in a completed batch, with batch_expired in an expired one and with
// batch_cancelled in a cancelled one; a failed batch answers none.
const (
	BatchEndCompleted BatchEnd = "completed"
	BatchEndFailed    BatchEnd = "failed"
	BatchEndExpired   BatchEnd = "expired"
	BatchEndCancelled BatchEnd = "cancelled"
)

// BatchRoute names a Batch API route, for EnqueueBatch.
type BatchRoute string

// Batch API routes.
const (
	BatchRouteUpload     BatchRoute = "upload"      // POST /v1/files
	BatchRouteFile       BatchRoute = "file"        // GET /v1/files/{id}
	BatchRouteContent    BatchRoute = "content"     // GET /v1/files/{id}/content
	BatchRouteDeleteFile BatchRoute = "delete_file" // DELETE /v1/files/{id}
	BatchRouteCreate     BatchRoute = "create"      // POST /v1/batches
	BatchRouteList       BatchRoute = "list"        // GET /v1/batches
	BatchRouteStatus     BatchRoute = "status"      // GET /v1/batches/{id}
	BatchRouteCancel     BatchRoute = "cancel"      // POST /v1/batches/{id}/cancel
)

// Fault kinds of the Batch API. Route faults (EnqueueBatch) also take the
// error kinds RateLimit, Quota, Unauthorized, ServerError, HTTPError,
// Disconnect and Delay; item faults (ScriptBatchItem) also take the answer
// kinds TruncatedJSON, SchemaInvalid, Refusal, ContentFilter, Length and
// the error kinds, which become the item's response status and body.
const (
	// Redirect answers Status (default 302) with Location from Header,
	// by default the same path on another origin.
	Redirect FaultKind = "redirect"
	// HugeBody answers normally with the JSON padded past 2 MiB.
	HugeBody FaultKind = "huge_body"
	// CreateThenHang does the route's work (a create creates the batch, an
	// upload stores the file, a status lookup counts as a poll) and then
	// holds the connection without answering until the client gives up.
	CreateThenHang FaultKind = "create_then_hang"
	// CreateThenReset does the route's work and closes the connection
	// without answering.
	CreateThenReset FaultKind = "create_then_reset"

	// ItemOK answers the item normally, even in an expired or cancelled
	// batch.
	ItemOK FaultKind = "item_ok"
	// ItemExpired reports the item with error code batch_expired.
	ItemExpired FaultKind = "item_expired"
	// ItemCancelled reports the item with error code batch_cancelled.
	ItemCancelled FaultKind = "item_cancelled"
	// ItemError reports the item with error Code (default request_timeout)
	// and no response.
	ItemError FaultKind = "item_error"
)

// BatchStats counts what the Server's Batch API received and did.
type BatchStats struct {
	Uploads     int // POST /v1/files received
	CreateCalls int // POST /v1/batches received
	// Created counts batches created, those whose answer a fault lost
	// included.
	Created       int
	StatusCalls   int // GET /v1/batches/{id} received
	ListCalls     int // GET /v1/batches received
	ContentCalls  int // GET /v1/files/{id}/content received
	ResultFetches int // output or error file contents served
	CancelCalls   int
	FileDeletes   int // DELETE /v1/files/{id} received
}

// Batch is a batch the Server holds.
type Batch struct {
	ID           string
	Status       string
	Label        string // metadata stet_batch_id
	Metadata     map[string]string
	InputFileID  string
	OutputFileID string
	ErrorFileID  string
	Items        int // lines of the input file
	Polls        int // status lookups so far
	CreatedAt    time.Time
	CreateBody   []byte // the create request as received
}

// File is a file the Server holds.
type File struct {
	ID        string
	Purpose   string
	Filename  string
	Bytes     int
	CreatedAt time.Time
	ExpiresAt time.Time // zero: kept until deleted
	Deleted   bool
	Content   []byte
}

// EnqueueBatch scripts faults for the next calls of route, in order.
func (f *Server) EnqueueBatch(route BatchRoute, faults ...Fault) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.faults[route] = append(f.batch.faults[route], faults...)
}

// ScriptBatchItem scripts the answer of every batch item with this
// custom_id (a stet job ID) when its batch ends.
func (f *Server) ScriptBatchItem(customID string, ft Fault) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.items[customID] = ft
}

// ScriptBatchEnd scripts how the batches labelled label (metadata
// stet_batch_id) end.
func (f *Server) ScriptBatchEnd(label string, end BatchEnd) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.ends[label] = end
}

// BatchStats returns what the Batch API has counted so far.
func (f *Server) BatchStats() BatchStats { return fakekit.Snapshot(&f.batch.mu, &f.batch.stats) }

// Batches returns the batches the Server holds, oldest first.
func (f *Server) Batches() []Batch {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	out := make([]Batch, 0, len(f.batch.order))
	for _, id := range f.batch.order {
		b := f.batch.batches[id]
		out = append(out, Batch{
			ID:           b.wire.ID,
			Status:       b.wire.Status,
			Label:        b.wire.Metadata[BatchMetadataKey],
			Metadata:     maps.Clone(b.wire.Metadata),
			InputFileID:  b.wire.InputFileID,
			OutputFileID: deref(b.wire.OutputFileID),
			ErrorFileID:  deref(b.wire.ErrorFileID),
			Items:        len(b.lines),
			Polls:        b.polls,
			CreatedAt:    time.Unix(b.wire.CreatedAt, 0).UTC(),
			CreateBody:   slices.Clone(b.createBody),
		})
	}
	return out
}

// Files returns the files the Server holds, deleted ones included, oldest
// first.
func (f *Server) Files() []File {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	out := make([]File, 0, len(f.batch.fileOrder))
	for _, id := range f.batch.fileOrder {
		ff := *f.batch.files[id]
		ff.Content = slices.Clone(ff.Content)
		out = append(out, ff)
	}
	return out
}

// BatchItemsContaining returns the number of uploaded batch request lines
// whose user messages contain s.
func (f *Server) BatchItemsContaining(s string) int {
	return f.batch.inputs.Containing(s)
}

// fakeBatches is the Batch API's state, under its own lock.
type fakeBatches struct {
	mu        sync.Mutex
	opts      BatchOptions
	files     map[string]*File
	fileOrder []string
	batches   map[string]*fakeBatch
	order     []string // creation order
	faults    map[BatchRoute][]Fault
	items     map[string]Fault
	ends      map[string]BatchEnd
	inputs    fakekit.Calls // user text of every uploaded batch line
	stats     BatchStats
}

func newFakeBatches(opts BatchOptions) *fakeBatches {
	return &fakeBatches{
		opts:    opts,
		files:   map[string]*File{},
		batches: map[string]*fakeBatch{},
		faults:  map[BatchRoute][]Fault{},
		items:   map[string]Fault{},
		ends:    map[string]BatchEnd{},
	}
}

type fakeBatch struct {
	wire       wireBatch
	createBody []byte
	lines      []fakeLine
	invalid    []wireBatchError // validation errors: the batch fails
	polls      int
	outputTTL  time.Duration
}

type fakeLine struct {
	customID string
	body     json.RawMessage
}

// The Batch object, fields in the API's order.
type wireBatch struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            string            `json:"model,omitempty"`
	Errors           *wireBatchErrors  `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    wireRequestCounts `json:"request_counts"`
	Usage            *wireBatchUsage   `json:"usage"`
	Metadata         map[string]string `json:"metadata"`
}

type wireBatchErrors struct {
	Object string           `json:"object"`
	Data   []wireBatchError `json:"data"`
}

type wireBatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

type wireRequestCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

type wireBatchUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

// One line of an output or error file.
type wireBatchLine struct {
	ID       string             `json:"id"`
	CustomID string             `json:"custom_id"`
	Response *wireBatchResponse `json:"response"`
	Error    *wireItemError     `json:"error"`
}

type wireBatchResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type wireItemError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// The File object.
type wireFile struct {
	Object        string  `json:"object"`
	ID            string  `json:"id"`
	Purpose       string  `json:"purpose"`
	Filename      string  `json:"filename"`
	Bytes         int     `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	ExpiresAt     *int64  `json:"expires_at"`
	Status        string  `json:"status"`
	StatusDetails *string `json:"status_details"`
}

// batchAnswer is a route's answer before it is written.
type batchAnswer struct {
	status      int
	body        []byte
	contentType string
}

const (
	maxFakeUpload     = 256 << 20
	fakeFileRetention = 30 * 24 * time.Hour
	hugeBodyBytes     = 2 << 20
)

// isBatchPath reports whether p is a Files or Batches route.
func isBatchPath(p string) bool {
	return p == "/v1/files" || strings.HasPrefix(p, "/v1/files/") ||
		p == "/v1/batches" || strings.HasPrefix(p, "/v1/batches/")
}

// batchRoute parses method and path into a route and its object ID.
func batchRoute(method, p string) (BatchRoute, string, bool) {
	rest := strings.Split(strings.TrimPrefix(p, "/v1/"), "/")
	switch {
	case len(rest) == 1 && rest[0] == "files" && method == http.MethodPost:
		return BatchRouteUpload, "", true
	case len(rest) == 2 && rest[0] == "files" && rest[1] != "" && method == http.MethodGet:
		return BatchRouteFile, rest[1], true
	case len(rest) == 2 && rest[0] == "files" && rest[1] != "" && method == http.MethodDelete:
		return BatchRouteDeleteFile, rest[1], true
	case len(rest) == 3 && rest[0] == "files" && rest[1] != "" && rest[2] == "content" && method == http.MethodGet:
		return BatchRouteContent, rest[1], true
	case len(rest) == 1 && rest[0] == "batches" && method == http.MethodPost:
		return BatchRouteCreate, "", true
	case len(rest) == 1 && rest[0] == "batches" && method == http.MethodGet:
		return BatchRouteList, "", true
	case len(rest) == 2 && rest[0] == "batches" && rest[1] != "" && method == http.MethodGet:
		return BatchRouteStatus, rest[1], true
	case len(rest) == 3 && rest[0] == "batches" && rest[1] != "" && rest[2] == "cancel" && method == http.MethodPost:
		return BatchRouteCancel, rest[1], true
	}
	return "", "", false
}

func (f *Server) serveBatch(w http.ResponseWriter, r *http.Request) {
	route, id, ok := batchRoute(r.Method, r.URL.Path)
	if !ok {
		writeAPIError(w, http.StatusNotFound, nil, apiError{
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")",
			Type:    "invalid_request_error",
		})
		return
	}
	f.batch.count(route)
	if !f.batchAuthorized(w, r) {
		return
	}
	ft := f.batch.nextFault(route)
	switch ft.Kind {
	case "", HugeBody, CreateThenHang, CreateThenReset:
	case Delay:
		if !f.HTTP.Sleep(r, ft.Delay) {
			return
		}
	case Redirect:
		h := http.Header{"Location": {"https://elsewhere.invalid" + r.URL.RequestURI()}}
		fakekit.MergeHeader(h, ft.Header)
		writeBatchAnswer(w, batchAnswer{status: cmp.Or(ft.Status, http.StatusFound), body: []byte{}}, h)
		return
	default:
		batchRouteFault(w, ft)
		return
	}

	var a batchAnswer
	switch route {
	case BatchRouteUpload:
		a = f.batchUpload(r)
	case BatchRouteFile:
		a = f.batchGetFile(id)
	case BatchRouteContent:
		a = f.batchContent(id)
	case BatchRouteDeleteFile:
		a = f.batchDeleteFile(id)
	case BatchRouteCreate:
		a = f.batchCreate(r)
	case BatchRouteList:
		a = f.batchList(r)
	case BatchRouteStatus:
		a = f.batchStatus(id)
	case BatchRouteCancel:
		a = f.batchCancel(id)
	}

	switch ft.Kind {
	case CreateThenHang:
		f.HTTP.Hold(r)
		panic(http.ErrAbortHandler)
	case CreateThenReset:
		panic(http.ErrAbortHandler)
	case HugeBody:
		a.body = pad(a.body)
	}
	writeBatchAnswer(w, a, ft.Header)
}

// count counts a call received on route.
func (fb *fakeBatches) count(route BatchRoute) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	switch route {
	case BatchRouteUpload:
		fb.stats.Uploads++
	case BatchRouteCreate:
		fb.stats.CreateCalls++
	case BatchRouteStatus:
		fb.stats.StatusCalls++
	case BatchRouteList:
		fb.stats.ListCalls++
	case BatchRouteContent:
		fb.stats.ContentCalls++
	case BatchRouteCancel:
		fb.stats.CancelCalls++
	case BatchRouteDeleteFile:
		fb.stats.FileDeletes++
	}
}

func (fb *fakeBatches) nextFault(route BatchRoute) Fault {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	q := fb.faults[route]
	if len(q) == 0 {
		return Fault{}
	}
	fb.faults[route] = q[1:]
	return q[0]
}

// batchAuthorized checks the bearer key as the sync route does.
func (f *Server) batchAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if f.opts.APIKey == "" {
		return true
	}
	switch got := r.Header.Get("Authorization"); {
	case got == "":
		writeAPIError(w, http.StatusUnauthorized, nil, apiError{
			Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
			Type:    "invalid_request_error",
		})
		return false
	case got != "Bearer "+f.opts.APIKey:
		writeAPIError(w, http.StatusUnauthorized, nil, invalidKey())
		return false
	}
	return true
}

// batchRouteFault answers a route with a scripted error.
func batchRouteFault(w http.ResponseWriter, ft Fault) {
	switch ft.Kind {
	case Disconnect:
		panic(http.ErrAbortHandler)
	case RateLimit:
		h := ft.retryHeaders()
		writeAPIError(w, http.StatusTooManyRequests, []http.Header{h, ft.Header}, ft.override(apiError{
			Message: "Rate limit reached for requests. Please try again later.",
			Type:    "requests",
			Code:    "rate_limit_exceeded",
		}))
	default:
		status, e := errorAnswer(ft)
		writeAPIError(w, status, []http.Header{ft.Header}, e)
	}
}

// errorAnswer is the status and error object of Quota, Unauthorized,
// ServerError, HTTPError and unknown kinds.
func errorAnswer(ft Fault) (int, apiError) {
	switch ft.Kind {
	case Quota:
		return http.StatusTooManyRequests, ft.override(quotaError())
	case Unauthorized:
		return http.StatusUnauthorized, ft.override(invalidKey())
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		typ := "invalid_request_error"
		if status >= 500 {
			typ = "server_error"
		}
		return status, ft.override(apiError{Message: http.StatusText(status), Type: typ})
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		return status, ft.override(apiError{Message: "The server had an error while processing your request. Sorry about that!", Type: "server_error"})
	default:
		return http.StatusInternalServerError, apiError{Message: "unknown fake fault " + string(ft.Kind), Type: "server_error"}
	}
}

func writeBatchAnswer(w http.ResponseWriter, a batchAnswer, extra http.Header) {
	h := w.Header()
	setDefaultHeaders(h)
	if a.contentType != "" {
		h.Set("Content-Type", a.contentType)
	}
	fakekit.Reply(w, a.status, a.body, extra)
}

// pad makes body larger than hugeBodyBytes: a padding member in front of
// a JSON object, blank lines after anything else.
func pad(body []byte) []byte {
	if len(body) > 0 && body[0] == '{' {
		out := []byte(`{"padding":"` + strings.Repeat("x", hugeBodyBytes) + `"`)
		if len(body) > 2 {
			out = append(out, ',')
		}
		return append(out, body[1:]...)
	}
	return append(body, bytes.Repeat([]byte("\n"), hugeBodyBytes)...)
}

func okAnswer(v any) batchAnswer { return batchAnswer{status: http.StatusOK, body: fakekit.Marshal(v)} }

func errAnswer(status int, e apiError) batchAnswer {
	return batchAnswer{status: status, body: apiErrorBody(e)}
}

func missingParam(param string) batchAnswer {
	return errAnswer(http.StatusBadRequest, apiError{
		Message: "Missing required parameter: '" + param + "'.",
		Type:    "invalid_request_error",
		Param:   param,
		Code:    "missing_required_parameter",
	})
}

func invalidParam(param, msg string) batchAnswer {
	return errAnswer(http.StatusBadRequest, apiError{Message: msg, Type: "invalid_request_error", Param: param, Code: "invalid_value"})
}

func noSuchFile(id string) batchAnswer {
	return errAnswer(http.StatusNotFound, apiError{Message: "No such File object: " + id, Type: "invalid_request_error", Param: "id"})
}

func noSuchBatch(id string) batchAnswer {
	return errAnswer(http.StatusNotFound, apiError{Message: "No batch found with id '" + id + "'.", Type: "invalid_request_error"})
}

func (f *Server) batchCreate(r *http.Request) batchAnswer {
	body, err := fakekit.ReadBody(r, maxFakeRequest)
	var req struct {
		InputFileID        *string           `json:"input_file_id"`
		Endpoint           *string           `json:"endpoint"`
		CompletionWindow   *string           `json:"completion_window"`
		Metadata           map[string]string `json:"metadata"`
		OutputExpiresAfter *struct {
			Anchor  string `json:"anchor"`
			Seconds int64  `json:"seconds"`
		} `json:"output_expires_after"`
	}
	if err != nil || len(body) > maxFakeRequest || json.Unmarshal(body, &req) != nil {
		return errAnswer(http.StatusBadRequest, apiError{
			Message: "We could not parse the JSON body of your request. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.",
			Type:    "invalid_request_error",
		})
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return errAnswer(http.StatusBadRequest, apiError{Message: "Invalid Content-Type header, expected application/json.", Type: "invalid_request_error"})
	}
	switch {
	case req.InputFileID == nil:
		return missingParam("input_file_id")
	case req.Endpoint == nil:
		return missingParam("endpoint")
	case req.CompletionWindow == nil:
		return missingParam("completion_window")
	case *req.Endpoint != batchEndpoint:
		return invalidParam("endpoint", "Invalid value for 'endpoint': this server batches only /v1/chat/completions.")
	case *req.CompletionWindow != "24h":
		return invalidParam("completion_window", "Invalid value for 'completion_window': supported values are: '24h'.")
	case len(req.Metadata) > 16:
		return invalidParam("metadata", "Invalid 'metadata': too many properties. Expected an object with at most 16 properties.")
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return invalidParam("metadata", "Invalid 'metadata': keys are at most 64 and values at most 512 characters long.")
		}
	}
	outputTTL := fakeFileRetention
	if oe := req.OutputExpiresAfter; oe != nil {
		if oe.Anchor != "created_at" || oe.Seconds < 3600 || oe.Seconds > 2592000 {
			return invalidParam("output_expires_after", "Invalid 'output_expires_after': anchor must be 'created_at' and seconds between 3600 and 2592000.")
		}
		outputTTL = time.Duration(oe.Seconds) * time.Second
	}

	now := f.clock.Now()
	fb := f.batch
	fb.mu.Lock()
	defer fb.mu.Unlock()
	in, found := fb.file(*req.InputFileID)
	if !found {
		return noSuchFile(*req.InputFileID)
	}
	if in.Purpose != "batch" {
		return invalidParam("input_file_id", "Invalid 'input_file_id': the file must be uploaded with purpose 'batch'.")
	}
	b := &fakeBatch{
		createBody: body,
		outputTTL:  outputTTL,
		wire: wireBatch{
			ID:               "batch_" + fakekit.RandomHex(16),
			Object:           "batch",
			Endpoint:         *req.Endpoint,
			InputFileID:      in.ID,
			CompletionWindow: *req.CompletionWindow,
			Status:           "validating",
			CreatedAt:        now.Unix(),
			ExpiresAt:        ptr(now.Add(24 * time.Hour).Unix()),
			Metadata:         maps.Clone(req.Metadata),
		},
	}
	b.lines, b.invalid, b.wire.Model = parseBatchInput(in.Content, *req.Endpoint)
	fb.batches[b.wire.ID] = b
	fb.order = append(fb.order, b.wire.ID)
	fb.stats.Created++
	return okAnswer(b.wire)
}

// parseBatchInput reads an input file as the API validates it: one JSON
// request a line, each with a unique custom_id, method POST and the
// batch's endpoint as url.
func parseBatchInput(content []byte, endpoint string) ([]fakeLine, []wireBatchError, string) {
	var (
		lines   []fakeLine
		invalid []wireBatchError
		model   string
		seen    = map[string]bool{}
	)
	bad := func(n int, code, param, msg string) {
		e := wireBatchError{Code: code, Message: msg, Line: ptr(n)}
		if param != "" {
			e.Param = ptr(param)
		}
		invalid = append(invalid, e)
	}
	for i, raw := range splitLines(content) {
		n := i + 1
		var l struct {
			CustomID *string         `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		switch {
		case json.Unmarshal(raw, &l) != nil:
			bad(n, "invalid_json_line", "", "This line is not parseable as valid JSON.")
		case l.CustomID == nil || *l.CustomID == "":
			bad(n, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
		case seen[*l.CustomID]:
			bad(n, "duplicate_custom_id", "custom_id", "The custom_id for this request is a duplicate of another request.")
		case l.Method != http.MethodPost:
			bad(n, "invalid_method", "method", "The method for this request must be POST.")
		case l.URL != endpoint:
			bad(n, "mismatched_endpoint", "url", "The url for this request does not match the batch's endpoint.")
		case len(l.Body) == 0 || l.Body[0] != '{':
			bad(n, "missing_required_parameter", "body", "Missing required parameter: 'body'.")
		default:
			seen[*l.CustomID] = true
			lines = append(lines, fakeLine{customID: *l.CustomID, body: l.Body})
			if model == "" {
				var m struct {
					Model string `json:"model"`
				}
				_ = json.Unmarshal(l.Body, &m)
				model = m.Model
			}
		}
	}
	switch {
	case len(lines) == 0 && len(invalid) == 0:
		invalid = append(invalid, wireBatchError{Code: "empty_file", Message: "The input file is empty."})
	case len(lines) > BatchMaxItems:
		invalid = append(invalid, wireBatchError{Code: "too_many_requests", Message: "The input file holds more than 50,000 requests."})
	}
	return lines, invalid, model
}

func (f *Server) batchList(r *http.Request) batchAnswer {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return invalidParam("limit", "Invalid 'limit': expected an integer between 1 and 100.")
		}
		limit = n
	}
	fb := f.batch
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.opts.ListLimit > 0 {
		limit = min(limit, fb.opts.ListLimit)
	}
	start := len(fb.order) - 1 // newest first
	if after := q.Get("after"); after != "" {
		i := slices.Index(fb.order, after)
		if i < 0 {
			return invalidParam("after", "Invalid 'after': no batch found with id '"+after+"'.")
		}
		start = i - 1
	}
	page := struct {
		Object  string      `json:"object"`
		Data    []wireBatch `json:"data"`
		FirstID *string     `json:"first_id"`
		LastID  *string     `json:"last_id"`
		HasMore bool        `json:"has_more"`
	}{Object: "list", Data: []wireBatch{}}
	i := start
	for ; i >= 0 && len(page.Data) < limit; i-- {
		page.Data = append(page.Data, fb.batches[fb.order[i]].wire)
	}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = ptr(page.Data[0].ID), ptr(page.Data[n-1].ID)
	}
	page.HasMore = i >= 0
	return okAnswer(page)
}

// withBatch answers with do's answer for batch id, under fb.mu, or with
// the API's 404 when there is none.
func (f *Server) withBatch(id string, do func(fb *fakeBatches, b *fakeBatch, now time.Time) batchAnswer) batchAnswer {
	now := f.clock.Now()
	fb := f.batch
	fb.mu.Lock()
	defer fb.mu.Unlock()
	b, found := fb.batches[id]
	if !found {
		return noSuchBatch(id)
	}
	return do(fb, b, now)
}

func (f *Server) batchStatus(id string) batchAnswer {
	return f.withBatch(id, f.pollBatch)
}

// pollBatch counts a status lookup of b and moves it on. fb.mu is held.
func (f *Server) pollBatch(fb *fakeBatches, b *fakeBatch, now time.Time) batchAnswer {
	b.polls++
	polls := cmp.Or(fb.opts.PollsToEnd, 1)
	switch {
	case terminal(b.wire.Status):
	case len(b.invalid) > 0:
		b.wire.Status = "failed"
		b.wire.FailedAt = ptr(now.Unix())
		b.wire.Errors = &wireBatchErrors{Object: "list", Data: b.invalid}
	case b.wire.Status == "cancelling":
		f.endBatch(b, now, BatchEndCancelled)
	case polls > 0 && b.polls >= polls:
		f.endBatch(b, now, cmp.Or(fb.ends[b.wire.Metadata[BatchMetadataKey]], fb.opts.End, BatchEndCompleted))
	default:
		b.wire.Status = "in_progress"
		if b.wire.InProgressAt == nil {
			b.wire.InProgressAt = ptr(now.Unix())
		}
		b.wire.RequestCounts.Total = len(b.lines)
	}
	return okAnswer(b.wire)
}

func (f *Server) batchCancel(id string) batchAnswer {
	return f.withBatch(id, func(_ *fakeBatches, b *fakeBatch, now time.Time) batchAnswer {
		switch {
		case terminal(b.wire.Status):
			return errAnswer(http.StatusConflict, apiError{Message: "Cannot cancel a batch with status '" + b.wire.Status + "'.", Type: "invalid_request_error"})
		case b.wire.Status != "cancelling":
			b.wire.Status = "cancelling"
			b.wire.CancellingAt = ptr(now.Unix())
		}
		return okAnswer(b.wire)
	})
}

func terminal(status string) bool {
	switch status {
	case "completed", "failed", "expired", "cancelled":
		return true
	}
	return false
}

// splitLines returns the non-blank lines of a JSONL file.
func splitLines(content []byte) [][]byte {
	var out [][]byte
	for l := range bytes.SplitSeq(content, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
