package infraifake

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// The Server's batch routes: POST /v1/ai/batch/submit, GET
// /v1/ai/batch/status/{id} and GET /v1/ai/batch/results/{id}, in the shapes
// batch.go documents (the results route and the item shape are assumed).
// Batches live in memory. Items are answered when the batch is created, by
// the same answer logic as the chat route (Options.Respond or
// MinimalInstance), unless scripted.

const fakeBatchPrefix = "/v1/ai/batch/"

// BatchRoute names a batch route, for EnqueueBatch.
type BatchRoute string

// Batch routes.
const (
	BatchSubmitRoute  BatchRoute = "submit"
	BatchStatusRoute  BatchRoute = "status"
	BatchResultsRoute BatchRoute = "results"
)

// Fault kinds of the batch routes and items, besides the chat route's.
//
// On every batch route: ErrorCode (with RetryAfter as seconds or an
// HTTP-date), Disconnect and Redirect answer without doing anything. On the
// submit route: TimeoutAfterAnswer creates the batch, sends half the answer
// and holds the connection until the client leaves; CreateThenDisconnect
// creates the batch and resets the connection; Delay creates it and answers
// late. On the status route: HugeBody answers the real status padded past
// 2 MiB. As an item outcome (BatchScript.Items): ErrorCode,
// TruncatedJSON, SchemaInvalid, Refusal, ContentFilter, Length, ItemExpired
// and ItemCancelled; the zero Fault is a normal answer.
const (
	CreateThenDisconnect FaultKind = "create_then_disconnect" // submit: create, then reset the connection
	Redirect             FaultKind = "redirect"               // 302 to another path of the fake
	HugeBody             FaultKind = "huge_body"              // a real answer padded past 2 MiB
	ItemExpired          FaultKind = "item_expired"           // the item ran out of batch_timeout
	ItemCancelled        FaultKind = "item_cancelled"         // the item was cancelled with the batch
)

// Provider state words the Server reports.
const (
	fakeStateQueued    = "queued"
	fakeStateRunning   = "running"
	fakeStateCompleted = "completed"
	fakeStateFailed    = "failed"
	fakeStateExpired   = "expired"
	fakeStateCancelled = "cancelled"
)

// BatchScript says how the Server runs a batch.
type BatchScript struct {
	// PollsToEnd is the status poll at which the batch ends; 0 means the
	// first poll after submission.
	PollsToEnd int
	// Running is the state word reported before the end; default
	// "running" ("queued" in the submit answer).
	Running string
	// End is the state word the batch ends in: "completed" (default),
	// "failed" (a whole-batch failure: no results), "expired" or
	// "cancelled" (unscripted items end expired or cancelled), or any other
	// word, reported as is with items answered normally.
	End string
	// Items scripts item outcomes by custom_id (the job ID).
	Items map[string]Fault
}

// Batch is a batch the Server holds.
type Batch struct {
	ID             string
	Label          string // metadata.stet_batch_id, else the Idempotency-Key
	IdempotencyKey string
	Metadata       map[string]string
	Items          int
	State          string
	CreatedAt      time.Time
}

// BatchCounts counts what the batch routes received.
type BatchCounts struct {
	// CreateCalls counts requests to the submit route, whatever their
	// outcome; Created those that created a batch (a resubmission answered
	// from the idempotency store creates none).
	CreateCalls, Created int
	StatusCalls          int // requests to the status route
	ResultsFetches       int // requests to the results route
}

// fakeBatches is the batch routes' state.
type fakeBatches struct {
	queues map[BatchRoute]*fakekit.Faults[Fault] // fixed at creation

	mu      sync.Mutex
	script  BatchScript
	scripts map[string]BatchScript // by label
	byID    map[string]*fakeBatch
	order   []string
	keys    map[string]*fakeBatchKey
	counts  BatchCounts
}

func newFakeBatches() *fakeBatches {
	b := &fakeBatches{
		queues:  map[BatchRoute]*fakekit.Faults[Fault]{},
		scripts: map[string]BatchScript{},
		byID:    map[string]*fakeBatch{},
		keys:    map[string]*fakeBatchKey{},
	}
	for _, r := range []BatchRoute{BatchSubmitRoute, BatchStatusRoute, BatchResultsRoute} {
		b.queues[r] = fakekit.NewFaults[Fault](0, 0, 0)
	}
	return b
}

type fakeBatch struct {
	Batch
	script BatchScript
	items  []fakeBatchItem
	polls  int
	ended  bool
}

type fakeBatchItem struct {
	raw []byte // the item as the results route sends it
	ok  bool
}

// fakeBatchKey is what the Server remembers of a submit Idempotency-Key.
type fakeBatchKey struct {
	sum  [32]byte
	id   string
	resp fakeResponse
	at   time.Time
}

// SetBatchScript sets how batches without a script of their own run.
func (f *Server) SetBatchScript(s BatchScript) {
	s.Items = maps.Clone(s.Items)
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.script = s
}

// ScriptBatchItem sets the outcome of the item customID (a job ID) in
// batches without a script of their own, keeping the other items' outcomes.
func (f *Server) ScriptBatchItem(customID string, ft Fault) {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	items := maps.Clone(f.batch.script.Items)
	if items == nil {
		items = map[string]Fault{}
	}
	items[customID] = ft
	f.batch.script.Items = items
}

// ScriptBatch sets how the batch labelled label (stet's batch ID) runs, if
// it is submitted after this call.
func (f *Server) ScriptBatch(label string, s BatchScript) {
	s.Items = maps.Clone(s.Items)
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	f.batch.scripts[label] = s
}

// EnqueueBatch scripts faults for the next requests to route, in order.
func (f *Server) EnqueueBatch(route BatchRoute, faults ...Fault) {
	f.batch.queues[route].Enqueue(faults...)
}

// BatchCounts returns what the batch routes have received so far.
func (f *Server) BatchCounts() BatchCounts { return fakekit.Snapshot(&f.batch.mu, &f.batch.counts) }

// Batches lists the batches the Server holds, oldest first.
func (f *Server) Batches() []Batch {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	out := make([]Batch, 0, len(f.batch.order))
	for _, id := range f.batch.order {
		b := f.batch.byID[id].Batch
		b.Metadata = maps.Clone(b.Metadata)
		out = append(out, b)
	}
	return out
}

func (f *Server) serveBatch(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	path := r.URL.Path
	c := &f.batch.counts
	var route BatchRoute
	var calls *int // route's counter in c
	switch {
	case path == fakeBatchPrefix+"submit" && r.Method == http.MethodPost:
		route, calls = BatchSubmitRoute, &c.CreateCalls
	case strings.HasPrefix(path, fakeBatchPrefix+"status/") && r.Method == http.MethodGet:
		route, calls = BatchStatusRoute, &c.StatusCalls
	case strings.HasPrefix(path, fakeBatchPrefix+"results/") && r.Method == http.MethodGet:
		route, calls = BatchResultsRoute, &c.ResultsFetches
	}
	if calls != nil {
		fakekit.Bump(&f.batch.mu, calls)
	}

	if !f.HTTP.Sleep(r, f.opts.Latency) {
		return
	}
	if route == "" {
		writeErrorShaped(w, start, false, http.StatusNotFound, "NOT_FOUND", "No route for "+r.Method+" "+path+".")
		return
	}
	if f.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+f.opts.APIKey {
		writeErrorShaped(w, start, false, http.StatusUnauthorized, codeInvalidAPIKey, "Missing or invalid API key. Send Authorization: Bearer <infrai_project_key>.")
		return
	}
	ft, _ := f.batch.queues[route].Next()
	switch ft.Kind {
	case ErrorCode:
		code := cmp.Or(ft.Code, codeInternalError)
		writeErrorShaped(w, start, false, cmp.Or(ft.Status, StatusForCode(code)), code, cmp.Or(ft.Message, errorMessage(code)), faultHeader(ft), ft.Header)
		return
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Redirect:
		// Somewhere the fake serves nothing, so a client that follows
		// gets a 404 and counts nothing on the chat route.
		w.Header().Set("Location", fakeBatchPrefix+"elsewhere/"+string(route))
		w.WriteHeader(http.StatusFound)
		return
	}
	switch route {
	case BatchSubmitRoute:
		f.batchSubmit(w, r, ft, start)
	case BatchStatusRoute:
		f.batchStatus(w, r, ft, start)
	default:
		f.batchResults(w, r, start)
	}
}

// The submit body as the Server reads it.
type wireBatchSubmit struct {
	Requests *[]struct {
		CustomID   string          `json:"custom_id"`
		Capability string          `json:"capability"`
		Body       json.RawMessage `json:"body"`
	} `json:"requests"`
	BatchTimeout   string         `json:"batch_timeout"`
	Metadata       map[string]any `json:"metadata"`
	IdempotencyKey string         `json:"idempotency_key"`
}

// The submit answer's data: BatchSubmitResult.
type wireBatchSubmitResult struct {
	BatchID          string  `json:"batch_id"`
	State            string  `json:"state"`
	TotalCount       int     `json:"total_count"`
	EstimatedCostUSD float64 `json:"estimated_cost_usd"`
}

// The status answer's data.
type wireBatchStatus struct {
	BatchID        string            `json:"batch_id"`
	State          string            `json:"state"`
	TotalCount     int               `json:"total_count"`
	CompletedCount int               `json:"completed_count"`
	FailedCount    int               `json:"failed_count"`
	CreatedAt      string            `json:"created_at"`
	Metadata       map[string]string `json:"metadata"`
}

// One item of the results answer: the sync envelope plus custom_id, status
// and status_code.
type wireBatchItem struct {
	CustomID   string       `json:"custom_id"`
	Status     string       `json:"status"`
	StatusCode int          `json:"status_code,omitempty"`
	OK         bool         `json:"ok"`
	Data       any          `json:"data"`
	Error      *wireError   `json:"error"`
	Metadata   wireMetadata `json:"metadata"`
}

func (f *Server) batchSubmit(w http.ResponseWriter, r *http.Request, ft Fault, start time.Time) {
	body, err := fakekit.ReadBody(r, maxFakeRequest)
	var sub wireBatchSubmit
	if err != nil || len(body) > maxFakeRequest || json.Unmarshal(body, &sub) != nil {
		writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "The request body is not valid JSON.")
		return
	}
	canonical, err := canonicalJSON(json.RawMessage(body))
	if err != nil {
		writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "The request body is not valid JSON.")
		return
	}
	if sub.Requests == nil || len(*sub.Requests) == 0 {
		writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "requests must be a non-empty array")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && sub.IdempotencyKey != "" && key != sub.IdempotencyKey {
		writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "Idempotency-Key and idempotency_key differ.")
		return
	}
	key = cmp.Or(key, sub.IdempotencyKey)
	meta := map[string]string{}
	for k, v := range sub.Metadata {
		if s, ok := v.(string); ok {
			meta[k] = s
		}
	}
	label := cmp.Or(meta[batchLabelKey], key)
	script := f.batchScript(label)

	// Answer the items before taking the lock: Respond may be slow.
	reqs := make([]Request, 0, len(*sub.Requests))
	seen := map[string]bool{}
	for i, it := range *sub.Requests {
		if it.CustomID == "" || seen[it.CustomID] {
			writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "requests["+strconv.Itoa(i)+"].custom_id must be present and unique")
			return
		}
		seen[it.CustomID] = true
		if it.Capability != batchCapability {
			writeErrorShaped(w, start, false, http.StatusBadRequest, "CAPABILITY_NOT_FOUND", "requests["+strconv.Itoa(i)+"].capability is not a batchable capability")
			return
		}
		req, _, err := decodeFakeRequest(it.Body)
		if err == nil {
			if msg, ok := validateFakeRequest(&req); !ok {
				writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "requests["+strconv.Itoa(i)+"].body: "+msg)
				return
			}
		} else {
			writeErrorShaped(w, start, false, http.StatusBadRequest, codeInvalidRequest, "requests["+strconv.Itoa(i)+"].body is not a chat request")
			return
		}
		reqs = append(reqs, req)
	}
	items := make([]fakeBatchItem, len(reqs))
	cost := 0.0
	for i, req := range reqs {
		id := (*sub.Requests)[i].CustomID
		items[i] = f.batchItem(id, req, itemFault(script, id))
		for _, m := range req.Messages {
			cost += float64(tokens(m.Content)) / 1e6
		}
	}

	f.batch.mu.Lock()
	now := f.clock.Now()
	if e := f.batch.keys[key]; key != "" && e != nil {
		if now.Sub(e.at) < f.window {
			resp := e.resp
			conflict := e.sum != sha256.Sum256(canonical)
			f.batch.mu.Unlock()
			if conflict {
				writeErrorShaped(w, start, false, http.StatusConflict, codeIdempotencyConflict,
					"This Idempotency-Key was already used with a different request body.")
				return
			}
			resp.header = resp.header.Clone()
			resp.header.Set("Idempotent-Replayed", "true")
			writeResponse(w, resp)
			return
		}
		delete(f.batch.keys, key)
	}
	b := &fakeBatch{
		Batch: Batch{
			ID:             "batch_" + strings.ToLower(rand.Text()),
			Label:          label,
			IdempotencyKey: key,
			Metadata:       meta,
			Items:          len(items),
			State:          fakeStateQueued,
			CreatedAt:      now,
		},
		script: script,
		items:  items,
	}
	resp := f.envelope(start, wireBatchSubmitResult{BatchID: b.ID, State: b.State, TotalCount: len(items), EstimatedCostUSD: cost})
	f.batch.byID[b.ID] = b
	f.batch.order = append(f.batch.order, b.ID)
	f.batch.counts.Created++
	if key != "" {
		f.batch.keys[key] = &fakeBatchKey{sum: sha256.Sum256(canonical), id: b.ID, resp: resp, at: now}
	}
	f.batch.mu.Unlock()

	for _, req := range reqs {
		f.Seen.Record(req.UserText())
	}

	switch ft.Kind {
	case CreateThenDisconnect:
		panic(http.ErrAbortHandler)
	case TimeoutAfterAnswer:
		f.HTTP.HalfAnswer(w, r, resp.status, resp.body, resp.header)
		return
	case Delay:
		if !f.HTTP.Sleep(r, ft.Delay) {
			return
		}
	}
	writeResponse(w, resp)
}

func (f *Server) batchStatus(w http.ResponseWriter, r *http.Request, ft Fault, start time.Time) {
	id := strings.TrimPrefix(r.URL.Path, fakeBatchPrefix+"status/")
	f.batch.mu.Lock()
	b := f.batch.byID[id]
	if b == nil {
		f.batch.mu.Unlock()
		writeErrorShaped(w, start, false, http.StatusNotFound, "NOT_FOUND", "No batch with this id.")
		return
	}
	b.polls++
	if !b.ended && b.polls >= max(b.script.PollsToEnd, 1) {
		b.ended = true
		b.State = cmp.Or(b.script.End, fakeStateCompleted)
	} else if !b.ended {
		b.State = cmp.Or(b.script.Running, fakeStateRunning)
	}
	st := wireBatchStatus{
		BatchID:    b.ID,
		State:      b.State,
		TotalCount: len(b.items),
		CreatedAt:  b.CreatedAt.UTC().Format(time.RFC3339),
		Metadata:   maps.Clone(b.Metadata),
	}
	if b.ended {
		for _, it := range b.items {
			if it.ok && b.State != fakeStateFailed {
				st.CompletedCount++
			} else {
				st.FailedCount++
			}
		}
	}
	f.batch.mu.Unlock()

	resp := f.envelope(start, st)
	if ft.Kind == HugeBody {
		// Valid JSON, padded with whitespace past any sane status size.
		pad := bytes.Repeat([]byte(" "), 2<<20)
		resp.body = append(resp.body[:len(resp.body)-1:len(resp.body)-1], append(pad, '}')...)
	}
	writeResponse(w, resp)
}

func (f *Server) batchResults(w http.ResponseWriter, r *http.Request, start time.Time) {
	id := strings.TrimPrefix(r.URL.Path, fakeBatchPrefix+"results/")
	f.batch.mu.Lock()
	b := f.batch.byID[id]
	switch {
	case b == nil:
		f.batch.mu.Unlock()
		writeErrorShaped(w, start, false, http.StatusNotFound, "NOT_FOUND", "No batch with this id.")
		return
	case !b.ended:
		f.batch.mu.Unlock()
		writeErrorShaped(w, start, false, http.StatusConflict, "BATCH_NOT_COMPLETED", "The batch has not ended yet.")
		return
	}
	results := []json.RawMessage{}
	if b.State != fakeStateFailed {
		for _, it := range b.items {
			results = append(results, it.raw)
		}
	}
	data := struct {
		BatchID string            `json:"batch_id"`
		State   string            `json:"state"`
		Results []json.RawMessage `json:"results"`
	}{b.ID, b.State, results}
	f.batch.mu.Unlock()
	writeResponse(w, f.envelope(start, data))
}

// batchScript returns the script of the batch labelled label.
func (f *Server) batchScript(label string) BatchScript {
	f.batch.mu.Lock()
	defer f.batch.mu.Unlock()
	if s, ok := f.batch.scripts[label]; ok {
		return s
	}
	return f.batch.script
}

// itemFault returns the scripted outcome of item id: its own, or the one
// the batch's end implies.
func itemFault(s BatchScript, id string) Fault {
	if ft, ok := s.Items[id]; ok {
		return ft
	}
	switch s.End {
	case fakeStateExpired:
		return Fault{Kind: ItemExpired}
	case fakeStateCancelled:
		return Fault{Kind: ItemCancelled}
	}
	return Fault{}
}

// batchItem answers one item as the chat route would answer the same
// request with the same fault.
func (f *Server) batchItem(customID string, req Request, ft Fault) fakeBatchItem {
	vendor := cmp.Or(f.opts.Vendor, "openai")
	it := wireBatchItem{CustomID: customID, Metadata: wireMetadata{RequestID: newRequestID()}}
	answer := func(content, refusal *string, finish string) {
		c := f.completion(req, content, refusal, finish)
		it.Status, it.StatusCode, it.OK, it.Data = "succeeded", http.StatusOK, true, c
		it.Metadata.Vendor = &vendor
		it.Metadata.CostUSD = float64(c.Usage.TotalTokens) / 2e6 // batch: half the made-up price
	}
	fail := func(status int, code, msg string) {
		it.Status, it.StatusCode, it.Error = "failed", status, &wireError{Code: code, Message: msg}
	}
	if content, refusal, finish, ok := f.modelAnswer(req, ft); ok {
		answer(content, refusal, finish)
		return fakeBatchItem{raw: fakekit.Marshal(it), ok: it.OK}
	}
	switch ft.Kind {
	case ErrorCode:
		code := cmp.Or(ft.Code, codeInternalError)
		fail(cmp.Or(ft.Status, StatusForCode(code)), code, cmp.Or(ft.Message, errorMessage(code)))
	case ItemExpired:
		it.Status, it.Error = fakeStateExpired, &wireError{Code: "BATCH_TIMEOUT", Message: "The item did not finish within batch_timeout."}
	case ItemCancelled:
		it.Status, it.Error = fakeStateCancelled, &wireError{Code: "BATCH_CANCELLED", Message: "The batch was cancelled before this item ran."}
	default:
		fail(http.StatusInternalServerError, codeInternalError, "unknown fake item fault "+string(ft.Kind))
	}
	return fakeBatchItem{raw: fakekit.Marshal(it), ok: it.OK}
}

// envelope wraps data in a 200 envelope answer.
func (f *Server) envelope(start time.Time, data any) fakeResponse {
	id := newRequestID()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", id)
	return fakeResponse{status: http.StatusOK, header: h, body: fakekit.Marshal(wireEnvelope{OK: true, Data: data, Metadata: wireMetadata{
		LatencyMS: time.Since(start).Milliseconds(),
		RequestID: id,
	}})}
}
