package geminifake

// The Server's batch routes: the Gemini API batch and Files endpoints the SDK
// calls for the Gemini API backend (see the adapter's batch.go for the wire facts), kept in
// memory, with scriptable outcomes and faults. Items are answered with the
// sync route's answer logic (Respond, MinimalInstance) and the same Fault
// kinds, scripted per job ID; the sync fault queue (Enqueue) is left alone.

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Batch fault kinds. BatchItem* script one item's outcome (ScriptBatchItem);
// Redirect and HugeBody script a status lookup (EnqueueBatchStatus).
const (
	BatchItemOK        FaultKind = "batch_item_ok"        // answered normally (the default)
	BatchItemExpired   FaultKind = "batch_item_expired"   // error status DEADLINE_EXCEEDED
	BatchItemCancelled FaultKind = "batch_item_cancelled" // error status CANCELLED
	BatchItemMissing   FaultKind = "batch_item_missing"   // left out of the output
	Redirect           FaultKind = "redirect"             // 302 to a sign-in page on the fake (Header may set Location)
	HugeBody           FaultKind = "huge_body"            // 200, the batch padded past 2 MiB
)

// Batch states on the wire.
const (
	BatchStatePending   = "BATCH_STATE_PENDING"
	BatchStateRunning   = "BATCH_STATE_RUNNING"
	BatchStateSucceeded = "BATCH_STATE_SUCCEEDED"
	BatchStateFailed    = "BATCH_STATE_FAILED"
	BatchStateCancelled = "BATCH_STATE_CANCELLED"
	BatchStateExpired   = "BATCH_STATE_EXPIRED"
)

const (
	fakeBatchType       = "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch"
	fakeBatchOutputType = "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatchOutput"
	fakeListPageSize    = 50
	hugeBodyPadding     = 2 << 20
)

// Wire facts the fake shares with the adapter's batch.go, copied: a fake
// does not import its adapter.
const (
	// maxInlineBatchBytes is the largest inline batch request accepted
	// (gemini.maxInlineBatchBytes).
	maxInlineBatchBytes = 20_000_000
	// batchKeyField is the request metadata field (and JSONL field) holding
	// the job ID (gemini.BatchKeyField).
	batchKeyField     = "key"
	batchFileMIMEType = "application/jsonl"
)

// rpcCodeNames are the google.rpc.Code names by number.
var rpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// BatchOptions configures the Server's batch routes.
type BatchOptions struct {
	// PollsToEnd is how many status lookups (GET batches/{id}) a batch
	// takes to end: lookups before it answer RUNNING, the one that reaches
	// it answers the ended batch. Zero means 1: a batch ends on the first
	// lookup after its creation.
	PollsToEnd int
	// ListPageSize caps the operations of one list page; default 50.
	ListPageSize int
}

// BatchCounts counts what the batch routes received.
type BatchCounts struct {
	CreateCalls int // batchGenerateContent requests received
	Created     int // batches created, by faulted creates too
	StatusCalls int // GET batches/{id}, faulted ones included
	ListCalls   int // GET batches
	// ResultsFetches counts answers that carried results: a lookup of an
	// ended inline batch (its responses come with it) or a results file
	// download.
	ResultsFetches int
	Uploads        int // files uploaded (finalized)
	Downloads      int // file downloads
	Cancels        int
	Deletes        int
}

// Batch describes a batch the Server holds.
type Batch struct {
	ID          string // "batches/…"
	DisplayName string
	Model       string
	Items       int      // requests in the batch
	Keys        []string // the items' keys (job IDs), in order
	InputFile   string   // "files/…" for a file batch
	OutputFile  string   // the results file of an ended file batch
	State       string   // BATCH_STATE_*
}

type fakeBatchState struct {
	mu           sync.Mutex
	batches      map[string]*fakeBatch
	order        []string
	files        map[string]*fakeFile
	uploads      map[string]*fakeUpload
	itemScripts  map[string]Fault
	endScripts   map[string]string
	createFaults []Fault
	statusFaults []Fault
	counts       BatchCounts
}

type fakeBatch struct {
	id, model, displayName  string
	created, updated, ended time.Time
	state                   string
	polls                   int
	items                   []fakeBatchItem
	inputFile               string
	requests                []json.RawMessage // inline requests as received
	outputFile              string
	inline                  []json.RawMessage // inline responses, once ended
	succeeded, failed       int
	opError                 *fakeRPCStatus
}

type fakeBatchItem struct {
	key      string
	metadata map[string]any
	req      Request
}

type fakeFile struct {
	name, displayName, mime string
	data                    []byte
	created                 time.Time
	results                 bool
}

type fakeUpload struct {
	displayName, mime string
	data              []byte
}

func (st *fakeBatchState) init() {
	if st.batches == nil {
		st.batches = map[string]*fakeBatch{}
		st.files = map[string]*fakeFile{}
		st.uploads = map[string]*fakeUpload{}
		st.itemScripts = map[string]Fault{}
		st.endScripts = map[string]string{}
	}
}

// ScriptBatchItem scripts the outcome of the item keyed key (its job ID)
// in every batch: a BatchItem* kind, an answer kind of the sync route
// (TruncatedJSON, SchemaInvalid, MaxTokens, Finish, PromptBlocked) or an
// error kind (RateLimit, Quota, ServerError, HTTPError, …), which becomes
// the item's google.rpc.Status.
func (f *Server) ScriptBatchItem(key string, ft Fault) {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	st.init()
	st.itemScripts[key] = ft
}

// ScriptBatchEnd makes the batch labelled displayName end in state
// (BatchStateFailed: no output and an error; BatchStateExpired or
// BatchStateCancelled: unscripted items get an expired or cancelled
// status). The default is BatchStateSucceeded.
func (f *Server) ScriptBatchEnd(displayName, state string) {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	st.init()
	st.endScripts[displayName] = state
}

// EnqueueBatchCreate scripts the next batchGenerateContent answers. Error
// kinds answer the error and create nothing. Disconnect, Delay and
// TimeoutAfterAnswer create the batch first, then drop the connection,
// answer late, or send half the answer and hold: the provider has the batch
// but the client never sees its name.
func (f *Server) EnqueueBatchCreate(faults ...Fault) {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	st.createFaults = append(st.createFaults, faults...)
}

// EnqueueBatchStatus scripts the next status lookups (GET batches/{id}):
// error kinds, Disconnect, Delay (then the normal answer), Redirect and
// HugeBody. A faulted lookup other than Delay and HugeBody does not advance
// the batch.
func (f *Server) EnqueueBatchStatus(faults ...Fault) {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	st.statusFaults = append(st.statusFaults, faults...)
}

// BatchCounts returns what the batch routes have received so far.
func (f *Server) BatchCounts() BatchCounts {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.counts
}

// Batches lists the batches the Server holds, oldest first.
func (f *Server) Batches() []Batch {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]Batch, 0, len(st.order))
	for _, id := range st.order {
		b := st.batches[id]
		fb := Batch{ID: b.id, DisplayName: b.displayName, Model: b.model, Items: len(b.items), InputFile: b.inputFile, OutputFile: b.outputFile, State: b.state}
		for _, it := range b.items {
			fb.Keys = append(fb.Keys, it.key)
		}
		out = append(out, fb)
	}
	return out
}

// File returns the content of an uploaded or results file ("files/…").
func (f *Server) File(name string) ([]byte, bool) {
	st := &f.batch
	st.mu.Lock()
	defer st.mu.Unlock()
	file, ok := st.files[name]
	if !ok {
		return nil, false
	}
	return slices.Clone(file.data), true
}

// serveBatch answers the batch and Files routes; false for any other path.
func (f *Server) serveBatch(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	switch {
	case path == "/upload/v1beta/files" || path == "/upload/v1/files":
		f.serveUpload(w, r)
		return true
	case path == "/ServiceLogin":
		signInPage(w)
		return true
	}
	if rest, ok := strings.CutPrefix(path, "/download"); ok {
		path = rest // the Python SDK's media path
	}
	rest, ok := strings.CutPrefix(path, "/v1beta/")
	if !ok {
		rest, ok = strings.CutPrefix(path, "/v1/")
	}
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(rest, "models/") && strings.HasSuffix(rest, ":batchGenerateContent"):
		model := strings.TrimSuffix(strings.TrimPrefix(rest, "models/"), ":batchGenerateContent")
		if r.Method != http.MethodPost || model == "" || strings.Contains(model, "/") {
			notFoundPage(w, r.URL.Path)
			return true
		}
		f.serveBatchCreate(w, r, model)
	case rest == "batches":
		if r.Method != http.MethodGet {
			notFoundPage(w, r.URL.Path)
			return true
		}
		f.serveBatchList(w, r)
	case strings.HasPrefix(rest, "batches/"):
		name, cancel := strings.CutSuffix(rest, ":cancel")
		switch {
		case strings.Count(name, "/") != 1:
			notFoundPage(w, r.URL.Path)
		case cancel && r.Method == http.MethodPost:
			f.serveBatchCancel(w, r, name)
		case !cancel && r.Method == http.MethodGet:
			f.serveBatchGet(w, r, name)
		case !cancel && r.Method == http.MethodDelete:
			f.serveBatchDelete(w, r, name)
		default:
			notFoundPage(w, r.URL.Path)
		}
	case strings.HasPrefix(rest, "files/"):
		name, download := strings.CutSuffix(rest, ":download")
		switch {
		case strings.Count(name, "/") != 1:
			notFoundPage(w, r.URL.Path)
		case r.Method == http.MethodGet:
			f.serveFileGet(w, r, name, download)
		case !download && r.Method == http.MethodDelete:
			f.serveFileDelete(w, r, name)
		default:
			notFoundPage(w, r.URL.Path)
		}
	default:
		return false
	}
	return true
}

// authorized checks the API key as the sync route does.
func (f *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.opts.APIKey == "" {
		return true
	}
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	switch {
	case key == "":
		writeAPIError(w, http.StatusForbidden, nil, apiErrorBody{
			Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
			Status:  "PERMISSION_DENIED",
		})
		return false
	case key != f.opts.APIKey:
		writeAPIError(w, http.StatusBadRequest, nil, invalidKey())
		return false
	}
	return true
}

// The create request on the wire.
type fakeCreateRequest struct {
	Batch *struct {
		DisplayName string `json:"displayName"`
		InputConfig *struct {
			FileName string `json:"fileName"`
			Requests *struct {
				Requests []json.RawMessage `json:"requests"`
			} `json:"requests"`
		} `json:"inputConfig"`
	} `json:"batch"`
}

type fakeInlineRequest struct {
	Request  json.RawMessage `json:"request"`
	Metadata map[string]any  `json:"metadata"`
}

type fakeFileLine struct {
	Key     string          `json:"key"`
	Request json.RawMessage `json:"request"`
}

func (f *Server) serveBatchCreate(w http.ResponseWriter, r *http.Request, model string) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.counts.CreateCalls++
	st.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxFakeRequest+1))
	if !f.authorized(w, r) {
		return
	}
	if err != nil || len(body) > maxInlineBatchBytes {
		writeAPIError(w, http.StatusBadRequest, nil, invalidArgument(fmt.Sprintf("Request payload size exceeds the limit: %d bytes.", maxInlineBatchBytes)))
		return
	}
	b, msg, status := f.decodeBatch(body, model)
	if b == nil {
		writeAPIError(w, status, nil, apiErrorBody{Message: msg, Status: rpcStatus(status)})
		return
	}

	st.mu.Lock()
	ft, faulted := popFault(&st.createFaults)
	st.mu.Unlock()
	if faulted && !slices.Contains([]FaultKind{Disconnect, Delay, TimeoutAfterAnswer}, ft.Kind) {
		f.fault(w, r, Request{Model: model}, ft)
		return
	}

	now := time.Now().UTC()
	b.id = "batches/" + fakeID(20)
	b.created, b.updated, b.state = now, now, BatchStatePending
	st.mu.Lock()
	st.batches[b.id] = b
	st.order = append(st.order, b.id)
	st.counts.Created++
	answer, _ := st.opJSON(b)
	st.mu.Unlock()

	// The items' user text, for CallsContaining.
	f.mu.Lock()
	for _, it := range b.items {
		var sb strings.Builder
		for _, c := range it.req.Contents {
			if c.Role == "user" || c.Role == "" {
				sb.WriteString(c.Text)
				sb.WriteByte('\n')
			}
		}
		f.inputs = append(f.inputs, sb.String())
	}
	f.mu.Unlock()

	if faulted {
		switch ft.Kind {
		case Disconnect:
			panic(http.ErrAbortHandler)
		case Delay:
			if !f.sleep(r, ft.Delay) {
				return
			}
		case TimeoutAfterAnswer:
			h := w.Header()
			setDefaultHeaders(h)
			h.Set("Content-Length", strconv.Itoa(len(answer)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(answer[:len(answer)/2])
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-f.done:
			}
			return
		}
	}
	f.write(w, answer, ft.Header)
}

// decodeBatch reads and checks a create request as the API would; on
// failure it returns the status and message to answer.
func (f *Server) decodeBatch(body []byte, model string) (*fakeBatch, string, int) {
	var cr fakeCreateRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, "Invalid JSON payload received. Unexpected token.", http.StatusBadRequest
	}
	if cr.Batch == nil || cr.Batch.DisplayName == "" {
		return nil, "* BatchGenerateContentRequest.batch.display_name: display_name is required\n", http.StatusBadRequest
	}
	in := cr.Batch.InputConfig
	if in == nil || (in.FileName == "") == (in.Requests == nil) {
		return nil, "* BatchGenerateContentRequest.batch.input_config: exactly one of file_name and requests must be set\n", http.StatusBadRequest
	}
	b := &fakeBatch{model: "models/" + model, displayName: cr.Batch.DisplayName}
	add := func(key string, meta map[string]any, raw json.RawMessage, i int) (string, bool) {
		req, err := decodeFakeRequest(raw)
		if err != nil {
			return fmt.Sprintf("* BatchGenerateContentRequest.batch.input_config.requests[%d].request: invalid request\n", i), false
		}
		if msg, ok := validateFakeRequest(&req); !ok {
			return fmt.Sprintf("requests[%d]: %s", i, msg), false
		}
		req.Model = model
		b.items = append(b.items, fakeBatchItem{key: key, metadata: meta, req: req})
		return "", true
	}
	if in.Requests != nil {
		if len(in.Requests.Requests) == 0 {
			return nil, "* BatchGenerateContentRequest.batch.input_config.requests.requests: requests must not be empty\n", http.StatusBadRequest
		}
		for i, raw := range in.Requests.Requests {
			var ir fakeInlineRequest
			if json.Unmarshal(raw, &ir) != nil || len(ir.Request) == 0 {
				return nil, fmt.Sprintf("* BatchGenerateContentRequest.batch.input_config.requests.requests[%d].request: request is required\n", i), http.StatusBadRequest
			}
			key, _ := ir.Metadata[batchKeyField].(string)
			if msg, ok := add(key, ir.Metadata, ir.Request, i); !ok {
				return nil, msg, http.StatusBadRequest
			}
		}
		b.requests = in.Requests.Requests
		return b, "", 0
	}
	st := &f.batch
	st.mu.Lock()
	file, ok := st.files[in.FileName]
	var data []byte
	if ok {
		data = file.data
	}
	st.mu.Unlock()
	if !ok {
		return nil, "Requested entity was not found.", http.StatusNotFound
	}
	b.inputFile = in.FileName
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		var fl fakeFileLine
		if json.Unmarshal([]byte(line), &fl) != nil || len(fl.Request) == 0 {
			return nil, fmt.Sprintf("Input file line %d is not a valid request.", i+1), http.StatusBadRequest
		}
		if msg, ok := add(fl.Key, nil, fl.Request, i); !ok {
			return nil, msg, http.StatusBadRequest
		}
	}
	return b, "", 0
}

func (f *Server) serveBatchGet(w http.ResponseWriter, r *http.Request, name string) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.counts.StatusCalls++
	ft, faulted := popFault(&st.statusFaults)
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	pad := false
	if faulted {
		switch ft.Kind {
		case Redirect:
			h := w.Header()
			h.Set("Location", "http://"+r.Host+"/ServiceLogin?continue="+r.URL.Path)
			mergeHeader(h, ft.Header)
			h.Set("Content-Type", "text/html; charset=UTF-8")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, "<HTML><HEAD><TITLE>Moved Temporarily</TITLE></HEAD><BODY>Moved Temporarily</BODY></HTML>\n")
			return
		case HugeBody:
			pad = true
		case Delay:
			if !f.sleep(r, ft.Delay) {
				return
			}
		default:
			f.fault(w, r, Request{}, ft)
			return
		}
	}
	st.mu.Lock()
	b, ok := st.batches[name]
	if !ok {
		st.mu.Unlock()
		writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
		return
	}
	if !fakeTerminal(b.state) {
		b.polls++
		if b.polls >= max(f.opts.Batch.PollsToEnd, 1) {
			f.endBatch(b, "")
		} else {
			b.state, b.updated = BatchStateRunning, time.Now().UTC()
		}
	}
	answer, results := st.opJSON(b)
	if results {
		st.counts.ResultsFetches++
	}
	st.mu.Unlock()
	if pad {
		answer = append(append(answer[:len(answer)-1:len(answer)-1], strings.Repeat(" ", hugeBodyPadding)...), '}')
	}
	f.write(w, answer, ft.Header)
}

func (f *Server) serveBatchList(w http.ResponseWriter, r *http.Request) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.counts.ListCalls++
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	q := r.URL.Query()
	size := cmp.Or(f.opts.Batch.ListPageSize, fakeListPageSize)
	if n, err := strconv.Atoi(q.Get("pageSize")); err == nil && n > 0 && n < size {
		size = n
	}
	start := 0
	if tok := q.Get("pageToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		n, err2 := strconv.Atoi(strings.TrimPrefix(string(raw), "page:"))
		if err != nil || err2 != nil || n < 0 {
			writeAPIError(w, http.StatusBadRequest, nil, invalidArgument("Invalid page token."))
			return
		}
		start = n
	}
	var page struct {
		Operations    []json.RawMessage `json:"operations,omitempty"`
		NextPageToken string            `json:"nextPageToken,omitempty"`
	}
	st.mu.Lock()
	for i := start; i < len(st.order) && i < start+size; i++ {
		op, _ := st.opJSON(st.batches[st.order[i]])
		page.Operations = append(page.Operations, op)
	}
	if start+size < len(st.order) {
		page.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte("page:" + strconv.Itoa(start+size)))
	}
	st.mu.Unlock()
	f.write(w, marshal(page), nil)
}

func (f *Server) serveBatchCancel(w http.ResponseWriter, r *http.Request, name string) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.counts.Cancels++
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	st.mu.Lock()
	b, ok := st.batches[name]
	if ok && !fakeTerminal(b.state) {
		f.endBatch(b, BatchStateCancelled)
	}
	st.mu.Unlock()
	if !ok {
		writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
		return
	}
	f.write(w, []byte("{}"), nil)
}

func (f *Server) serveBatchDelete(w http.ResponseWriter, r *http.Request, name string) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.counts.Deletes++
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	st.mu.Lock()
	_, ok := st.batches[name]
	if ok {
		delete(st.batches, name)
		st.order = slices.DeleteFunc(st.order, func(id string) bool { return id == name })
	}
	st.mu.Unlock()
	if !ok {
		writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
		return
	}
	f.write(w, []byte("{}"), nil)
}

// endBatch ends b in state (or its scripted end state) and computes the
// answers, once: later lookups and downloads serve the same output. The
// caller holds the batch lock.
func (f *Server) endBatch(b *fakeBatch, state string) {
	st := &f.batch
	if state == "" {
		state = cmp.Or(st.endScripts[b.displayName], BatchStateSucceeded)
	}
	now := time.Now().UTC()
	b.state, b.ended, b.updated = state, now, now
	if state == BatchStateFailed {
		b.opError = &fakeRPCStatus{Code: 13, Message: "Batch processing failed: an internal error occurred."}
		return
	}
	var lines []byte
	for _, it := range b.items {
		ft, scripted := st.itemScripts[it.key]
		if !scripted {
			switch state {
			case BatchStateExpired:
				ft, scripted = Fault{Kind: BatchItemExpired}, true
			case BatchStateCancelled:
				ft, scripted = Fault{Kind: BatchItemCancelled}, true
			}
		}
		resp, status, omit := f.batchItemAnswer(it.req, ft, scripted)
		if omit {
			continue
		}
		if status != nil {
			b.failed++
		} else {
			b.succeeded++
		}
		if b.inputFile == "" {
			b.inline = append(b.inline, marshal(struct {
				Response json.RawMessage `json:"response,omitempty"`
				Error    *fakeRPCStatus  `json:"error,omitempty"`
				Metadata map[string]any  `json:"metadata,omitempty"`
			}{resp, status, it.metadata}))
			continue
		}
		lines = append(lines, compactJSON(struct {
			Key      string          `json:"key"`
			Response json.RawMessage `json:"response,omitempty"`
			Error    *fakeRPCStatus  `json:"error,omitempty"`
		}{it.key, resp, status})...)
		lines = append(lines, '\n')
	}
	if b.inputFile != "" {
		name := "files/batch-" + strings.TrimPrefix(b.id, "batches/")
		st.files[name] = &fakeFile{name: name, displayName: name, mime: batchFileMIMEType, data: lines, created: now, results: true}
		b.outputFile = name
	}
}

// batchItemAnswer answers one item: a GenerateContentResponse, an error
// status, or nothing at all.
func (f *Server) batchItemAnswer(req Request, ft Fault, scripted bool) (json.RawMessage, *fakeRPCStatus, bool) {
	if !scripted {
		ft = Fault{Kind: BatchItemOK}
	}
	answer := func(cand *wireCandidate, feedback *wirePromptFeedback) (json.RawMessage, *fakeRPCStatus, bool) {
		return f.response(req, cand, feedback), nil, false
	}
	fail := func(e apiErrorBody) (json.RawMessage, *fakeRPCStatus, bool) {
		e = ft.override(e)
		return nil, &fakeRPCStatus{Code: rpcCodeNumber(e.Status), Message: e.Message, Details: e.Details}, false
	}
	switch ft.Kind {
	case BatchItemOK, Delay:
		return answer(candidate(f.text(req), "STOP"), nil)
	case BatchItemMissing:
		return nil, nil, true
	case BatchItemExpired:
		return fail(apiErrorBody{Message: "The batch expired before this request was processed.", Status: "DEADLINE_EXCEEDED"})
	case BatchItemCancelled:
		return fail(apiErrorBody{Message: "The batch was cancelled before this request was processed.", Status: "CANCELLED"})
	case TruncatedJSON:
		return answer(candidate(cut(f.text(req)), "STOP"), nil)
	case SchemaInvalid:
		return answer(candidate(`{"unexpected":true}`, "STOP"), nil)
	case MaxTokens:
		return answer(candidate(cut(f.text(req)), "MAX_TOKENS"), nil)
	case Finish:
		reason := cmp.Or(ft.FinishReason, "SAFETY")
		cand := &wireCandidate{FinishReason: reason}
		switch reason {
		case "CONTINUATION":
			cand = candidate(cut(f.text(req)), "CONTINUATION")
		case "SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII":
			cand.SafetyRatings = blockedRatings()
		}
		return answer(cand, nil)
	case PromptBlocked:
		return answer(nil, &wirePromptFeedback{BlockReason: cmp.Or(ft.BlockReason, "SAFETY"), SafetyRatings: blockedRatings()})
	case RateLimit:
		return fail(quotaError(req.Model, ft, "GenerateRequestsPerMinutePerProjectPerModel", "generate_content_requests", "1000"))
	case Quota:
		return fail(quotaError(req.Model, ft, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "generate_content_free_tier_requests", "250"))
	case Unauthorized:
		return fail(invalidKey())
	case PermissionDenied:
		return fail(apiErrorBody{Message: "Permission denied.", Status: "PERMISSION_DENIED"})
	case RegionUnsupported:
		return fail(apiErrorBody{Message: "User location is not supported for the API use.", Status: "FAILED_PRECONDITION"})
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		return fail(apiErrorBody{Message: "An internal error has occurred.", Status: rpcStatus(status)})
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		return fail(apiErrorBody{Message: http.StatusText(status), Status: cmp.Or(rpcStatus(status), "UNKNOWN")})
	default:
		// Disconnect, TimeoutAfterAnswer and other call faults have no
		// batch item form: the item failed on the server.
		return fail(apiErrorBody{Message: "An internal error has occurred.", Status: "INTERNAL"})
	}
}

// rpcCodeNumber is the google.rpc.Code number of a status name; 2
// (UNKNOWN) for a name it does not know.
func rpcCodeNumber(name string) int {
	for i, n := range rpcCodeNames {
		if n == name {
			return i
		}
	}
	return 2
}

func fakeTerminal(state string) bool {
	switch state {
	case BatchStateSucceeded, BatchStateFailed, BatchStateCancelled, BatchStateExpired:
		return true
	}
	return false
}

// The batch Operation on the wire, fields in the API's order.
type (
	fakeOp struct {
		Name     string         `json:"name"`
		Metadata fakeBatchMeta  `json:"metadata"`
		Done     bool           `json:"done,omitempty"`
		Error    *fakeRPCStatus `json:"error,omitempty"`
		Response *fakeBatchOut  `json:"response,omitempty"`
	}
	fakeBatchMeta struct {
		Type        string          `json:"@type"`
		Model       string          `json:"model"`
		DisplayName string          `json:"displayName"`
		InputConfig fakeInputConfig `json:"inputConfig"`
		Output      *fakeBatchOut   `json:"output,omitempty"`
		CreateTime  string          `json:"createTime"`
		EndTime     string          `json:"endTime,omitempty"`
		UpdateTime  string          `json:"updateTime"`
		BatchStats  fakeBatchStats  `json:"batchStats"`
		State       string          `json:"state"`
		Name        string          `json:"name"`
	}
	fakeInputConfig struct {
		FileName string `json:"fileName,omitempty"`
		Requests *struct {
			Requests []json.RawMessage `json:"requests"`
		} `json:"requests,omitempty"`
	}
	fakeBatchOut struct {
		Type             string `json:"@type,omitempty"`
		ResponsesFile    string `json:"responsesFile,omitempty"`
		InlinedResponses *struct {
			InlinedResponses []json.RawMessage `json:"inlinedResponses"`
		} `json:"inlinedResponses,omitempty"`
	}
	fakeBatchStats struct {
		RequestCount           string `json:"requestCount"`
		SuccessfulRequestCount string `json:"successfulRequestCount,omitempty"`
		FailedRequestCount     string `json:"failedRequestCount,omitempty"`
		PendingRequestCount    string `json:"pendingRequestCount,omitempty"`
	}
	// fakeRPCStatus is a google.rpc.Status.
	fakeRPCStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []any  `json:"details,omitempty"`
	}
)

// opJSON encodes b as the API answers it, and reports whether the answer
// carries inline results. The caller holds the batch lock.
func (st *fakeBatchState) opJSON(b *fakeBatch) ([]byte, bool) {
	op := fakeOp{
		Name: b.id,
		Metadata: fakeBatchMeta{
			Type:        fakeBatchType,
			Model:       b.model,
			DisplayName: b.displayName,
			CreateTime:  b.created.Format(time.RFC3339Nano),
			UpdateTime:  b.updated.Format(time.RFC3339Nano),
			State:       b.state,
			Name:        b.id,
			BatchStats:  fakeBatchStats{RequestCount: strconv.Itoa(len(b.items))},
		},
	}
	if b.inputFile != "" {
		op.Metadata.InputConfig.FileName = b.inputFile
	} else {
		op.Metadata.InputConfig.Requests = &struct {
			Requests []json.RawMessage `json:"requests"`
		}{b.requests}
	}
	results := false
	if fakeTerminal(b.state) {
		op.Done = true
		op.Metadata.EndTime = b.ended.Format(time.RFC3339Nano)
		op.Metadata.BatchStats.SuccessfulRequestCount = strconv.Itoa(b.succeeded)
		op.Metadata.BatchStats.FailedRequestCount = strconv.Itoa(b.failed)
		op.Metadata.BatchStats.PendingRequestCount = "0"
		op.Error = b.opError
		if b.opError == nil {
			out := fakeBatchOut{ResponsesFile: b.outputFile}
			if b.outputFile == "" {
				out.InlinedResponses = &struct {
					InlinedResponses []json.RawMessage `json:"inlinedResponses"`
				}{b.inline}
				results = true
			}
			op.Metadata.Output = &out
			mirrored := out
			mirrored.Type = fakeBatchOutputType
			op.Response = &mirrored
		}
	} else {
		op.Metadata.BatchStats.PendingRequestCount = strconv.Itoa(len(b.items))
	}
	return marshal(op), results
}

// The Files API resumable upload: a start request answered with
// X-Goog-Upload-URL, then the bytes in chunks, the last one finalizing.
// Every answer carries X-Goog-Upload-Status, without which the SDK waits and
// asks again.
func (f *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxFakeRequest+1))
	st := &f.batch
	st.mu.Lock()
	st.init()
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	uploadError := func(status int, msg string) {
		writeAPIError(w, status, []http.Header{{"X-Goog-Upload-Status": {"final"}}}, apiErrorBody{Message: msg, Status: rpcStatus(status)})
	}
	command := strings.ToLower(r.Header.Get("X-Goog-Upload-Command"))
	id := r.URL.Query().Get("upload_id")
	if id == "" {
		if r.Method != http.MethodPost || !strings.EqualFold(r.Header.Get("X-Goog-Upload-Protocol"), "resumable") || command != "start" {
			uploadError(http.StatusBadRequest, "Only the resumable upload protocol is supported.")
			return
		}
		var start struct {
			File struct {
				DisplayName string `json:"displayName"`
				MIMEType    string `json:"mimeType"`
			} `json:"file"`
		}
		if len(body) > 0 && json.Unmarshal(body, &start) != nil {
			uploadError(http.StatusBadRequest, "Invalid JSON payload received.")
			return
		}
		id = fakeID(24)
		st.mu.Lock()
		st.uploads[id] = &fakeUpload{
			displayName: start.File.DisplayName,
			mime:        cmp.Or(r.Header.Get("X-Goog-Upload-Header-Content-Type"), start.File.MIMEType, "application/octet-stream"),
		}
		st.mu.Unlock()
		h := w.Header()
		setDefaultHeaders(h)
		h.Set("X-Goog-Upload-URL", "http://"+r.Host+"/upload/v1beta/files?upload_id="+id+"&upload_protocol=resumable")
		h.Set("X-Goog-Upload-Status", "active")
		h.Set("X-Goog-Upload-Chunk-Granularity", "262144")
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	offset, err := strconv.Atoi(r.Header.Get("X-Goog-Upload-Offset"))
	st.mu.Lock()
	up, ok := st.uploads[id]
	switch {
	case !ok:
		st.mu.Unlock()
		uploadError(http.StatusNotFound, "Upload not found.")
		return
	case err != nil || offset != len(up.data) || !strings.HasPrefix(command, "upload"):
		st.mu.Unlock()
		uploadError(http.StatusBadRequest, "Invalid upload offset or command.")
		return
	}
	up.data = append(up.data, body...)
	if !strings.Contains(command, "finalize") {
		st.mu.Unlock()
		h := w.Header()
		setDefaultHeaders(h)
		h.Set("X-Goog-Upload-Status", "active")
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	delete(st.uploads, id)
	name := "files/" + fakeID(12)
	file := &fakeFile{name: name, displayName: up.displayName, mime: up.mime, data: up.data, created: time.Now().UTC()}
	st.files[name] = file
	st.counts.Uploads++
	st.mu.Unlock()
	f.write(w, marshal(map[string]any{"file": fileJSON(r, file)}), http.Header{"X-Goog-Upload-Status": {"final"}})
}

func (f *Server) serveFileGet(w http.ResponseWriter, r *http.Request, name string, download bool) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	file, ok := st.files[name]
	media := download || r.URL.Query().Get("alt") == "media"
	if ok && media {
		st.counts.Downloads++
		if file.results {
			st.counts.ResultsFetches++
		}
	}
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	if !ok {
		writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
		return
	}
	if !media {
		f.write(w, marshal(fileJSON(r, file)), nil)
		return
	}
	h := w.Header()
	setDefaultHeaders(h)
	h.Set("Content-Type", file.mime)
	h.Set("Content-Length", strconv.Itoa(len(file.data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(file.data)
}

func (f *Server) serveFileDelete(w http.ResponseWriter, r *http.Request, name string) {
	st := &f.batch
	st.mu.Lock()
	st.init()
	_, ok := st.files[name]
	delete(st.files, name)
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	if !ok {
		writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
		return
	}
	f.write(w, []byte("{}"), nil)
}

// fileJSON is the File resource; files are kept 48 hours.
func fileJSON(r *http.Request, file *fakeFile) map[string]any {
	sum := sha256.Sum256(file.data)
	source := "UPLOADED"
	if file.results {
		source = "GENERATED"
	}
	m := map[string]any{
		"name":           file.name,
		"displayName":    file.displayName,
		"mimeType":       file.mime,
		"sizeBytes":      strconv.Itoa(len(file.data)),
		"createTime":     file.created.Format(time.RFC3339Nano),
		"updateTime":     file.created.Format(time.RFC3339Nano),
		"expirationTime": file.created.Add(48 * time.Hour).Format(time.RFC3339Nano),
		"sha256Hash":     base64.StdEncoding.EncodeToString(sum[:]),
		"uri":            "http://" + r.Host + "/v1beta/" + file.name,
		"state":          "ACTIVE",
		"source":         source,
	}
	if file.results {
		m["downloadUri"] = "http://" + r.Host + "/download/v1beta/" + file.name + ":download?alt=media"
	}
	return m
}

func signInPage(w http.ResponseWriter) {
	const page = "<!DOCTYPE html>\n<html><head><title>Sign in - Google Accounts</title></head><body>Sign in</body></html>\n"
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=UTF-8")
	h.Set("Content-Length", strconv.Itoa(len(page)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, page)
}

func popFault(q *[]Fault) (Fault, bool) {
	if len(*q) == 0 {
		return Fault{}, false
	}
	ft := (*q)[0]
	*q = (*q)[1:]
	return ft, true
}

// compactJSON encodes v on one line, without HTML escaping.
func compactJSON(v any) []byte {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("gemini fake: marshal: " + err.Error())
	}
	return []byte(strings.TrimRight(buf.String(), "\n"))
}

// fakeID returns n random lowercase letters and digits, like the API's
// batch and file IDs.
func fakeID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		b[i] = alphabet[k.Int64()]
	}
	return string(b)
}
