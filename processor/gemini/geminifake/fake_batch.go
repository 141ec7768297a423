package geminifake

// The Server's batch routes: the Gemini API batch and Files endpoints the SDK
// calls for the Gemini API backend (see the adapter's batch.go for the wire facts), kept in
// memory, with scriptable outcomes and faults. Items are answered with the
// sync route's answer logic (Respond, MinimalInstance) and the same Fault
// kinds, scripted per job ID; the sync fault queue (Enqueue) is left alone.

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
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
	Deletes        int // DELETE batches/{id} received
	FileDeletes    int // DELETE files/{id} received
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
	createFaults *fakekit.Faults[Fault] // scripted create answers
	statusFaults *fakekit.Faults[Fault] // scripted status lookups
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

func newFakeBatchState() fakeBatchState {
	return fakeBatchState{
		batches:      map[string]*fakeBatch{},
		files:        map[string]*fakeFile{},
		uploads:      map[string]*fakeUpload{},
		itemScripts:  map[string]Fault{},
		endScripts:   map[string]string{},
		createFaults: fakekit.NewFaults[Fault](0, 0, 0),
		statusFaults: fakekit.NewFaults[Fault](0, 0, 0),
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
	st.endScripts[displayName] = state
}

// EnqueueBatchCreate scripts the next batchGenerateContent answers. Error
// kinds answer the error and create nothing. Disconnect, Delay and
// TimeoutAfterAnswer create the batch first, then drop the connection,
// answer late, or send half the answer and hold: the provider has the batch
// but the client never sees its name.
func (f *Server) EnqueueBatchCreate(faults ...Fault) {
	f.batch.createFaults.Enqueue(faults...)
}

// EnqueueBatchStatus scripts the next status lookups (GET batches/{id}):
// error kinds, Disconnect, Delay (then the normal answer), Redirect and
// HugeBody. A faulted lookup other than Delay and HugeBody does not advance
// the batch.
func (f *Server) EnqueueBatchStatus(faults ...Fault) {
	f.batch.statusFaults.Enqueue(faults...)
}

// BatchCounts returns what the batch routes have received so far.
func (f *Server) BatchCounts() BatchCounts { return fakekit.Snapshot(&f.batch.mu, &f.batch.counts) }

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
	fakekit.Bump(&st.mu, &st.counts.CreateCalls)
	body, err := fakekit.ReadBody(r, maxFakeRequest)
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

	ft, faulted := st.createFaults.Next()
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
	for _, it := range b.items {
		f.items.Record(userText(it.req))
	}

	if faulted {
		switch ft.Kind {
		case Disconnect:
			panic(http.ErrAbortHandler)
		case Delay:
			if !f.HTTP.Sleep(r, ft.Delay) {
				return
			}
		case TimeoutAfterAnswer:
			setDefaultHeaders(w.Header())
			f.HTTP.HalfAnswer(w, r, http.StatusOK, answer)
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
	fakekit.Bump(&st.mu, &st.counts.StatusCalls)
	ft, faulted := st.statusFaults.Next()
	if !f.authorized(w, r) {
		return
	}
	pad := false
	if faulted {
		switch ft.Kind {
		case Redirect:
			h := w.Header()
			h.Set("Location", "http://"+r.Host+"/ServiceLogin?continue="+r.URL.Path)
			fakekit.MergeHeader(h, ft.Header)
			h.Set("Content-Type", "text/html; charset=UTF-8")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, "<HTML><HEAD><TITLE>Moved Temporarily</TITLE></HEAD><BODY>Moved Temporarily</BODY></HTML>\n")
			return
		case HugeBody:
			pad = true
		case Delay:
			if !f.HTTP.Sleep(r, ft.Delay) {
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
		notFound(w)
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
	fakekit.Bump(&st.mu, &st.counts.ListCalls)
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
	f.changeBatch(w, r, name, func(c *BatchCounts) { c.Cancels++ }, func(b *fakeBatch) {
		if !fakeTerminal(b.state) {
			f.endBatch(b, BatchStateCancelled)
		}
	})
}

func (f *Server) serveBatchDelete(w http.ResponseWriter, r *http.Request, name string) {
	f.changeBatch(w, r, name, func(c *BatchCounts) { c.Deletes++ }, func(*fakeBatch) {
		delete(f.batch.batches, name)
		f.batch.order = slices.DeleteFunc(f.batch.order, func(id string) bool { return id == name })
	})
}

// changeBatch answers a cancel or a delete: it counts the call, checks the
// key, then applies change, under the batch lock, to the batch named name.
// A batch the Server does not hold is a 404.
func (f *Server) changeBatch(w http.ResponseWriter, r *http.Request, name string, count func(*BatchCounts), change func(*fakeBatch)) {
	st := &f.batch
	st.mu.Lock()
	count(&st.counts)
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	st.mu.Lock()
	b, ok := st.batches[name]
	if ok {
		change(b)
	}
	st.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	f.write(w, []byte("{}"), nil)
}

// notFound answers the API's 404 for a batch or file it does not hold.
func notFound(w http.ResponseWriter) {
	writeAPIError(w, http.StatusNotFound, nil, apiErrorBody{Message: "Requested entity was not found.", Status: "NOT_FOUND"})
}

// fakeID returns n random lowercase letters and digits, like the API's
// batch and file IDs.
func fakeID(n int) string { return fakekit.RandomString("abcdefghijklmnopqrstuvwxyz0123456789", n) }
