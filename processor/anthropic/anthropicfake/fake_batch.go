package anthropicfake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// The Server's Message Batches routes, with the shapes of the real API (see
// the wire facts at the top of processor/anthropic/batch.go):
//
//	POST   /v1/messages/batches               create
//	GET    /v1/messages/batches               list (limit, after_id, before_id; newest first)
//	GET    /v1/messages/batches/{id}          retrieve (a status poll)
//	GET    /v1/messages/batches/{id}/results  results (JSONL; results_url points here)
//	POST   /v1/messages/batches/{id}/cancel   cancel
//	DELETE /v1/messages/batches/{id}          delete (ended batches only)
//
// Batches live in memory. A batch ends on the status poll numbered
// PollsToEnd (default: the first), or on EndBatch; its items are answered
// then, with the synchronous route's answer logic (Respond, or
// fakekit.MinimalInstance of the item's schema) unless scripted otherwise. Item
// params are validated at the end, as the API does, so an invalid request
// becomes an errored item. The sync fault queue (Enqueue) and FaultRate do
// not touch batch routes; EnqueueBatchFaults scripts them.

// BatchRoute names a Message Batches route, for EnqueueBatchFaults.
type BatchRoute string

// Batch routes.
const (
	RouteBatchCreate   BatchRoute = "create"
	RouteBatchRetrieve BatchRoute = "retrieve"
	RouteBatchList     BatchRoute = "list"
	RouteBatchResults  BatchRoute = "results"
	RouteBatchCancel   BatchRoute = "cancel"
	RouteBatchDelete   BatchRoute = "delete"
)

// Fault kinds for batch routes only. The error kinds of the sync route
// (RateLimit with RetryAfter as seconds or an HTTP-date, SpendLimit,
// Overloaded, ServerError, HTTPError) and Disconnect and Delay apply to
// batch routes too.
const (
	// CreateThenDisconnect creates the batch, then drops the connection
	// without answering: the provider has the batch, the client never saw
	// its ID. Create route only.
	CreateThenDisconnect FaultKind = "create_then_disconnect"
	// CreateThenHang creates the batch, then holds the request until the
	// client gives up. Create route only.
	CreateThenHang FaultKind = "create_then_hang"
	// Redirect answers 302 to another place (Header "Location" overrides
	// it); the default target is /elsewhere/… on the fake, which answers
	// 404 and counts RedirectsFollowed.
	Redirect FaultKind = "redirect"
	// HugeBody answers normally with the body padded by whitespace to over
	// 1 MiB: still valid JSON, too large for a capped client.
	HugeBody FaultKind = "huge_body"
)

// hugeBodySize is the size a HugeBody answer is padded to.
const hugeBodySize = 1<<20 + 64<<10

// BatchItemOutcome is how the Server answers one batch item.
type BatchItemOutcome string

// Batch item outcomes.
const (
	ItemSucceeded   BatchItemOutcome = "succeeded"    // the sync answer, or Answer
	ItemInvalidJSON BatchItemOutcome = "invalid_json" // succeeded, end_turn, the text cut mid-JSON (no tool call)
	ItemRefusal     BatchItemOutcome = "refusal"      // succeeded, stop_reason refusal, no content
	ItemMaxTokens   BatchItemOutcome = "max_tokens"   // succeeded, stop_reason max_tokens, the answer cut
	ItemErrored     BatchItemOutcome = "errored"      // errored with ErrorType (default api_error) and Message
	ItemExpired     BatchItemOutcome = "expired"
	ItemCanceled    BatchItemOutcome = "canceled"
	ItemMissing     BatchItemOutcome = "missing" // no line in the results file
)

// BatchItemScript scripts one item's answer.
type BatchItemScript struct {
	Outcome BatchItemOutcome
	// Answer replaces the normal answer of ItemSucceeded: text, or the
	// tool input when it is a JSON object and the request forced a tool.
	Answer string
	// ErrorType is error.type of ItemErrored; default api_error.
	ErrorType string
	// Message is error.message of ItemErrored, or the refusal's
	// stop_details.explanation.
	Message string
}

// BatchOptions scripts the Server's batch routes.
type BatchOptions struct {
	// PollsToEnd is the number of the status poll at which a batch has
	// ended: 0 or 1, the first poll after creation; negative, never on its
	// own (EndBatch or a cancellation ends it). Faulted polls do not count.
	PollsToEnd int
	// Items scripts items by custom_id, in every batch.
	Items map[string]BatchItemScript
	// AllItems, if its Outcome is set, is the outcome of every item without
	// a script of its own: a whole-batch failure (all errored, all expired).
	AllItems BatchItemScript
	// Now is the fake's clock for created_at and the other times; default
	// time.Now.
	Now func() time.Time
}

// BatchCounts are the Server's batch counters.
type BatchCounts struct {
	CreateCalls       int // creating calls received, faulted ones included
	Created           int // batches created (a create-then-fail fault creates one)
	StatusCalls       int // GET /v1/messages/batches/{id} received
	ListCalls         int // GET /v1/messages/batches received
	ResultsFetches    int // GET …/results received
	Cancels           int // POST …/cancel received
	Deletes           int // DELETE received
	Uploads           int // always 0: requests go inline, no file is uploaded
	RedirectsFollowed int // requests that arrived at a Redirect fault's default target
}

// Batch is a batch as the Server holds it.
type Batch struct {
	ID               string
	ProcessingStatus string // in_progress, canceling, ended
	CreatedAt        time.Time
	ItemCount        int
	CustomIDs        []string  // in request order
	Requests         []Request // each item's params, decoded
	Body             []byte    // the exact create request body
}

// fakeBatches is the Server's batch state; the zero value is ready.
type fakeBatches struct {
	mu     sync.Mutex
	order  []*fakeBatch // creation order, deleted ones included (cursors)
	byID   map[string]*fakeBatch
	faults map[BatchRoute]*fakekit.Faults[Fault]
	items  map[string]BatchItemScript
	all    *BatchItemScript
	polls  *int
	counts BatchCounts
	// requests keeps the user content of every batch item, for
	// BatchRequestsContaining; it counts nothing.
	requests fakekit.Calls
}

type fakeBatch struct {
	id        string
	body      []byte
	items     []fakeBatchItem
	createdAt time.Time
	status    string
	polls     int
	endedAt   time.Time
	cancelAt  time.Time
	counts    wireCounts
	results   []byte
	deleted   bool
}

type fakeBatchItem struct {
	customID string
	req      Request
	invalid  string // the API's validation message; "" when valid
	answer   string // the normal answer, decided at creation
}

// EnqueueBatchFaults scripts faults for the next calls of one batch route,
// in order.
func (f *Server) EnqueueBatchFaults(route BatchRoute, faults ...Fault) {
	f.routeFaults(route).Enqueue(faults...)
}

// routeFaults returns the fault queue of one batch route, never random.
func (f *Server) routeFaults(route BatchRoute) *fakekit.Faults[Fault] {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	q := f.batch.faults[route]
	if q == nil {
		if f.batch.faults == nil {
			f.batch.faults = map[BatchRoute]*fakekit.Faults[Fault]{}
		}
		q = fakekit.NewFaults[Fault](0, 0, 0)
		f.batch.faults[route] = q
	}
	return q
}

// ScriptBatchItem scripts the item with custom_id id in every batch that
// ends from now on; it overrides BatchOptions.Items.
func (f *Server) ScriptBatchItem(id string, s BatchItemScript) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	if f.batch.items == nil {
		f.batch.items = map[string]BatchItemScript{}
	}
	f.batch.items[id] = s
}

// ScriptAllBatchItems sets the outcome of items without a script of their
// own, overriding BatchOptions.AllItems; the zero script restores
// normal answers.
func (f *Server) ScriptAllBatchItems(s BatchItemScript) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.all = &s
}

// SetBatchPollsToEnd overrides BatchOptions.PollsToEnd for batches
// that have not ended yet.
func (f *Server) SetBatchPollsToEnd(n int) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.polls = &n
}

// EndBatch ends a batch now, as if processing had finished. It reports
// whether the batch exists and had not ended.
func (f *Server) EndBatch(id string) bool {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	b := f.batch.byID[id]
	if b == nil || b.deleted || b.status == "ended" {
		return false
	}
	f.endBatch(b)
	return true
}

// BatchCounts returns the batch counters.
func (f *Server) BatchCounts() BatchCounts { return fakekit.Snapshot(&f.batch.mu, &f.batch.counts) }

// Batches returns the batches the fake holds (deleted ones left out), in
// creation order.
func (f *Server) Batches() []Batch {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	var out []Batch
	for _, b := range f.batch.order {
		if b.deleted {
			continue
		}
		fb := Batch{
			ID:               b.id,
			ProcessingStatus: b.status,
			CreatedAt:        b.createdAt,
			ItemCount:        len(b.items),
			Body:             bytes.Clone(b.body),
		}
		for _, it := range b.items {
			fb.CustomIDs = append(fb.CustomIDs, it.customID)
			fb.Requests = append(fb.Requests, it.req)
		}
		out = append(out, fb)
	}
	return out
}

// BatchRequestsContaining returns the number of batch items, over all
// batches created, whose user messages contain s.
func (f *Server) BatchRequestsContaining(s string) int {
	return f.batch.requests.Containing(s)
}

func (f *Server) now() time.Time {
	if f.opts.Batch.Now != nil {
		return f.opts.Batch.Now()
	}
	return time.Now()
}

const batchesPath = "/v1/messages/batches"

// serveBatch answers the batch routes and reports whether r was one.
func (f *Server) serveBatch(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	if strings.HasPrefix(path, "/elsewhere/") {
		fakekit.Bump(&f.batch.mu, &f.batch.counts.RedirectsFollowed)
		writeAPIError(w, http.StatusNotFound, nil, apiError{Type: "not_found_error", Message: "Not Found"})
		return true
	}
	if path != batchesPath && !strings.HasPrefix(path, batchesPath+"/") {
		return false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(path, batchesPath), "/")
	id, action, _ := strings.Cut(rest, "/")
	c := &f.batch.counts
	var route BatchRoute
	var calls *int // route's counter in c
	switch {
	case rest == "" && r.Method == http.MethodPost:
		route, calls = RouteBatchCreate, &c.CreateCalls
	case rest == "" && r.Method == http.MethodGet:
		route, calls = RouteBatchList, &c.ListCalls
	case id != "" && action == "" && r.Method == http.MethodGet:
		route, calls = RouteBatchRetrieve, &c.StatusCalls
	case id != "" && action == "" && r.Method == http.MethodDelete:
		route, calls = RouteBatchDelete, &c.Deletes
	case id != "" && action == "results" && r.Method == http.MethodGet:
		route, calls = RouteBatchResults, &c.ResultsFetches
	case id != "" && action == "cancel" && r.Method == http.MethodPost:
		route, calls = RouteBatchCancel, &c.Cancels
	default:
		writeAPIError(w, http.StatusNotFound, nil, apiError{Type: "not_found_error", Message: "Not Found"})
		return true
	}
	fakekit.Bump(&f.batch.mu, calls)
	var ft *Fault
	if next, ok := f.routeFaults(route).Next(); ok {
		ft = &next
	}

	if !f.authorized(w, r) {
		return true
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAPIError(w, http.StatusBadRequest, nil, apiError{Type: "invalid_request_error", Message: "anthropic-version: header is required"})
		return true
	}
	var extra http.Header
	huge := false
	if ft != nil {
		switch ft.Kind {
		case Delay:
			if !f.HTTP.Sleep(r, ft.Delay) {
				return true
			}
			extra = ft.Header
		case CreateThenDisconnect, CreateThenHang:
			if route != RouteBatchCreate {
				writeAPIError(w, http.StatusInternalServerError, nil, apiError{Type: "api_error", Message: "fake fault " + string(ft.Kind) + " applies to the create route only"})
				return true
			}
		case Redirect:
			loc := "/elsewhere" + path
			if v := ft.Header.Get("Location"); v != "" {
				loc = v
			}
			w.Header().Set("request-id", newRequestID())
			http.Redirect(w, r, loc, http.StatusFound)
			return true
		case HugeBody:
			huge = true
			extra = ft.Header
		case HTTPError:
			status := cmp.Or(ft.Status, http.StatusBadRequest)
			msg := statusMessage(status, "")
			if status == http.StatusNotFound {
				msg = "Not Found"
			}
			writeAPIError(w, status, []http.Header{ft.Header}, ft.override(apiError{Type: statusErrorType(status), Message: msg}))
			return true
		case RateLimit, SpendLimit, Overloaded, ServerError, Disconnect:
			f.fault(w, r, Request{}, *ft)
			return true
		default:
			writeAPIError(w, http.StatusInternalServerError, nil, apiError{Type: "api_error", Message: "fake fault " + string(ft.Kind) + " does not apply to batch routes"})
			return true
		}
	}

	var status int
	var body []byte
	var contentType string
	switch route {
	case RouteBatchCreate:
		b, errStatus, e := f.createBatch(r)
		if b == nil {
			writeAPIError(w, errStatus, nil, e)
			return true
		}
		if ft != nil {
			switch ft.Kind {
			case CreateThenDisconnect:
				panic(http.ErrAbortHandler)
			case CreateThenHang:
				f.HTTP.Hold(r)
				return true
			}
		}
		status, body = http.StatusOK, b
	case RouteBatchList:
		var e apiError
		status, body, e = f.listBatches(r)
		if status != http.StatusOK {
			writeAPIError(w, status, nil, e)
			return true
		}
	default:
		var e apiError
		status, body, contentType, e = f.batchByID(r, route, id)
		if status != http.StatusOK {
			writeAPIError(w, status, nil, e)
			return true
		}
	}
	if huge && len(body) < hugeBodySize {
		body = append(body, bytes.Repeat([]byte{' '}, hugeBodySize-len(body))...)
	}
	h := w.Header()
	setDefaultHeaders(h, newRequestID())
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	fakekit.Reply(w, status, body, extra)
	return true
}

// maxFakeBatchBody is the API's limit on a create body.
const maxFakeBatchBody = 256_000_000

// maxBatchItems is the API's limit on requests per batch.
const maxBatchItems = 100_000

// validCustomID reports whether id matches the API's custom_id pattern,
// ^[a-zA-Z0-9_-]{1,64}$.
func validCustomID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// createBatch validates a create body and stores the batch, answering the
// message_batch object, or the status and error of a refused body.
func (f *Server) createBatch(r *http.Request) ([]byte, int, apiError) {
	raw, err := readAll(r, maxFakeBatchBody)
	if err != nil {
		return nil, http.StatusRequestEntityTooLarge, apiError{Type: "request_too_large", Message: "Request exceeds the maximum allowed number of bytes."}
	}
	invalid := func(msg string) ([]byte, int, apiError) {
		return nil, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: msg}
	}
	var req struct {
		Requests *[]struct {
			CustomID *string         `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if json.Unmarshal(raw, &req) != nil {
		return invalid("There was an issue with the format of your request: the body is not valid JSON.")
	}
	switch {
	case req.Requests == nil:
		return invalid("requests: Field required")
	case len(*req.Requests) == 0:
		return invalid("requests: List should have at least 1 item after validation, not 0")
	case len(*req.Requests) > maxBatchItems:
		return invalid("requests: List should have at most 100000 items after validation")
	}
	items := make([]fakeBatchItem, 0, len(*req.Requests))
	seen := map[string]bool{}
	for i, rq := range *req.Requests {
		switch {
		case rq.CustomID == nil:
			return invalid("requests." + strconv.Itoa(i) + ".custom_id: Field required")
		case !validCustomID(*rq.CustomID):
			return invalid("requests." + strconv.Itoa(i) + ".custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
		case seen[*rq.CustomID]:
			return invalid("requests." + strconv.Itoa(i) + ".custom_id: custom_id must be unique within the batch")
		case len(rq.Params) == 0 || string(rq.Params) == "null":
			return invalid("requests." + strconv.Itoa(i) + ".params: Field required")
		}
		seen[*rq.CustomID] = true
		item := fakeBatchItem{customID: *rq.CustomID}
		fr, err := decodeFakeRequest(rq.Params)
		fr.Header = r.Header.Clone()
		switch {
		case err != nil:
			item.invalid = "params: Input should be a valid dictionary"
		default:
			item.invalid = validateFakeRequest(rq.Params, &fr)
		}
		if item.invalid == "" {
			// Decided now, outside any lock: Respond is the caller's code.
			item.answer = f.content(fr)
		}
		item.req = fr
		items = append(items, item)
	}

	now := f.now().UTC()
	b := &fakeBatch{
		id:        "msgbatch_01" + randomID(22),
		body:      raw,
		items:     items,
		createdAt: now,
		status:    "in_progress",
		counts:    wireCounts{Processing: len(items)},
	}
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	if f.batch.byID == nil {
		f.batch.byID = map[string]*fakeBatch{}
	}
	f.batch.byID[b.id] = b
	f.batch.order = append(f.batch.order, b)
	f.batch.counts.Created++
	for _, it := range items {
		f.batch.requests.Record(userText(it.req))
	}
	return f.wireBatch(r, b), http.StatusOK, apiError{}
}

// readAll reads a request body of at most limit bytes.
func readAll(r *http.Request, limit int64) ([]byte, error) {
	raw, err := fakekit.ReadBody(r, limit)
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, errors.New("request body over the limit")
	}
	return raw, nil
}

// batchByID answers retrieve, results, cancel and delete.
func (f *Server) batchByID(r *http.Request, route BatchRoute, id string) (int, []byte, string, apiError) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	b := f.batch.byID[id]
	if b == nil || b.deleted {
		return http.StatusNotFound, nil, "", apiError{Type: "not_found_error", Message: "Message Batch not found."}
	}
	switch route {
	case RouteBatchRetrieve:
		if b.status != "ended" {
			b.polls++
			end := 1
			switch {
			case f.batch.polls != nil:
				end = *f.batch.polls
			case f.opts.Batch.PollsToEnd != 0:
				end = f.opts.Batch.PollsToEnd
			}
			if b.status == "canceling" || (end >= 0 && b.polls >= max(end, 1)) {
				f.endBatch(b)
			}
		}
		return http.StatusOK, f.wireBatch(r, b), "", apiError{}
	case RouteBatchResults:
		if b.status != "ended" {
			return http.StatusBadRequest, nil, "", apiError{Type: "invalid_request_error", Message: "Message Batch is still processing; results are available once it has ended."}
		}
		return http.StatusOK, bytes.Clone(b.results), "application/x-jsonl", apiError{}
	case RouteBatchCancel:
		if b.status == "ended" {
			return http.StatusBadRequest, nil, "", apiError{Type: "invalid_request_error", Message: "Message Batch has already ended and cannot be canceled."}
		}
		if b.status == "in_progress" {
			b.status = "canceling"
			b.cancelAt = f.now().UTC()
		}
		return http.StatusOK, f.wireBatch(r, b), "", apiError{}
	case RouteBatchDelete:
		if b.status != "ended" {
			return http.StatusBadRequest, nil, "", apiError{Type: "invalid_request_error", Message: "Message Batch is still processing; cancel it before deleting it."}
		}
		b.deleted = true
		return http.StatusOK, fakekit.Marshal(struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}{b.id, "message_batch_deleted"}), "", apiError{}
	}
	return http.StatusNotFound, nil, "", apiError{Type: "not_found_error", Message: "Not Found"}
}

// endBatch answers every item and ends b. The caller holds f.batch.mu.
func (f *Server) endBatch(b *fakeBatch) {
	var lines bytes.Buffer
	counts := wireCounts{}
	for _, it := range b.items {
		s, ok := f.batch.items[it.customID]
		if !ok {
			s, ok = f.opts.Batch.Items[it.customID]
		}
		if !ok {
			switch {
			case f.batch.all != nil:
				s = *f.batch.all
			default:
				s = f.opts.Batch.AllItems
			}
			if s.Outcome == "" && !b.cancelAt.IsZero() {
				// Cancelled before it ran.
				s = BatchItemScript{Outcome: ItemCanceled}
			}
		}
		if it.invalid != "" && (s.Outcome == "" || s.Outcome == ItemSucceeded) {
			s = BatchItemScript{Outcome: ItemErrored, ErrorType: "invalid_request_error", Message: it.invalid}
		}
		result, kind := f.itemResult(it, s)
		switch kind {
		case "succeeded":
			counts.Succeeded++
		case "errored":
			counts.Errored++
		case "canceled":
			counts.Canceled++
		case "expired":
			counts.Expired++
		}
		if s.Outcome == ItemMissing {
			continue
		}
		lines.Write(fakekit.Marshal(struct {
			CustomID string `json:"custom_id"`
			Result   any    `json:"result"`
		}{it.customID, result}))
		lines.WriteByte('\n')
	}
	b.status = "ended"
	b.endedAt = f.now().UTC()
	b.counts = counts
	b.results = lines.Bytes()
}

// itemResult builds one item's result object and says its kind.
func (f *Server) itemResult(it fakeBatchItem, s BatchItemScript) (any, string) {
	type succeeded struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
	}
	type bare struct {
		Type string `json:"type"`
	}
	req := it.req
	answer := it.answer
	if s.Answer != "" {
		answer = s.Answer
	}
	switch s.Outcome {
	case "", ItemSucceeded:
		return succeeded{"succeeded", f.message(req, f.blocks(req, answer), "", nil)}, "succeeded"
	case ItemInvalidJSON:
		return succeeded{"succeeded", f.message(req, []wireBlock{textBlock(fakekit.Cut(answer))}, "end_turn", nil)}, "succeeded"
	case ItemRefusal:
		details := &wireStopDetails{Type: "refusal", Explanation: nullable(s.Message)}
		return succeeded{"succeeded", f.message(req, []wireBlock{}, "refusal", details)}, "succeeded"
	case ItemMaxTokens:
		blocks := []wireBlock{textBlock(fakekit.Cut(answer))}
		if req.ToolName != "" {
			blocks = []wireBlock{toolUseBlock(req.ToolName, json.RawMessage(`{}`))}
		}
		return succeeded{"succeeded", f.message(req, blocks, "max_tokens", nil)}, "succeeded"
	case ItemErrored:
		return erroredResult(cmp.Or(s.ErrorType, "api_error"), cmp.Or(s.Message, "Internal server error")), "errored"
	case ItemExpired:
		return bare{"expired"}, "expired"
	case ItemCanceled:
		return bare{"canceled"}, "canceled"
	case ItemMissing:
		// Counted as expired: the API would report on it somehow.
		return nil, "expired"
	default:
		return erroredResult("api_error", "unknown fake item outcome "+string(s.Outcome)), "errored"
	}
}

// wireItemError is an errored item's result: the API's error object.
type wireItemError struct {
	Type  string `json:"type"`
	Error struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

func erroredResult(typ, msg string) wireItemError {
	var e wireItemError
	e.Type = "errored"
	e.Error.Type = "error"
	e.Error.Error.Type = typ
	e.Error.Error.Message = msg
	e.Error.RequestID = newRequestID()
	return e
}

// wireCounts is request_counts, fields in the API's order.
type wireCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

// wireBatch is the message_batch object, fields in the API's order.
type wireBatch struct {
	ID                string     `json:"id"`
	Type              string     `json:"type"`
	ProcessingStatus  string     `json:"processing_status"`
	RequestCounts     wireCounts `json:"request_counts"`
	EndedAt           *string    `json:"ended_at"`
	CreatedAt         string     `json:"created_at"`
	ExpiresAt         string     `json:"expires_at"`
	ArchivedAt        *string    `json:"archived_at"`
	CancelInitiatedAt *string    `json:"cancel_initiated_at"`
	ResultsURL        *string    `json:"results_url"`
}

// fakeTime is how the API writes times: RFC 3339, microseconds, UTC.
const fakeTime = "2006-01-02T15:04:05.000000Z07:00"

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(fakeTime)
	return &s
}

func (f *Server) wireObject(r *http.Request, b *fakeBatch) wireBatch {
	wb := wireBatch{
		ID:                b.id,
		Type:              "message_batch",
		ProcessingStatus:  b.status,
		RequestCounts:     b.counts,
		EndedAt:           optTime(b.endedAt),
		CreatedAt:         b.createdAt.Format(fakeTime),
		ExpiresAt:         b.createdAt.Add(24 * time.Hour).Format(fakeTime),
		CancelInitiatedAt: optTime(b.cancelAt),
	}
	if b.status == "ended" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u := scheme + "://" + r.Host + batchesPath + "/" + b.id + "/results"
		wb.ResultsURL = &u
	}
	return wb
}

func (f *Server) wireBatch(r *http.Request, b *fakeBatch) []byte {
	return fakekit.Marshal(f.wireObject(r, b))
}

// listBatches answers the list route: newest first, limit 1 to 1000
// (default 20), after_id for older pages, before_id for newer ones.
func (f *Server) listBatches(r *http.Request) (int, []byte, apiError) {
	q := r.URL.Query()
	invalid := func(msg string) (int, []byte, apiError) {
		return http.StatusBadRequest, nil, apiError{Type: "invalid_request_error", Message: msg}
	}
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalid("limit: Input should be greater than or equal to 1 and less than or equal to 1000")
		}
		limit = n
	}
	after, before := q.Get("after_id"), q.Get("before_id")
	if after != "" && before != "" {
		return invalid("after_id and before_id cannot both be given")
	}

	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	all := slices.Clone(f.batch.order)
	slices.Reverse(all) // newest first
	start, end := 0, min(limit, len(all))
	hasMore := len(all) > limit
	index := func(id string) int {
		return slices.IndexFunc(all, func(b *fakeBatch) bool { return b.id == id })
	}
	switch {
	case after != "":
		i := index(after)
		if i < 0 {
			start, end, hasMore = 0, 0, false
			break
		}
		start = i + 1
		end = min(start+limit, len(all))
		hasMore = end < len(all)
	case before != "":
		i := index(before)
		if i < 0 {
			start, end, hasMore = 0, 0, false
			break
		}
		end = i
		start = max(0, end-limit)
		hasMore = start > 0
	}
	page := struct {
		Data    []wireBatch `json:"data"`
		HasMore bool        `json:"has_more"`
		FirstID *string     `json:"first_id"`
		LastID  *string     `json:"last_id"`
	}{Data: []wireBatch{}, HasMore: hasMore}
	for _, b := range all[start:end] {
		if b.deleted {
			continue
		}
		page.Data = append(page.Data, f.wireObject(r, b))
	}
	if n := len(page.Data); n > 0 {
		first, last := page.Data[0].ID, page.Data[n-1].ID
		page.FirstID, page.LastID = &first, &last
	}
	return http.StatusOK, fakekit.Marshal(page), apiError{}
}
