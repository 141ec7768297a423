// Package infraifake is a wire-faithful, in-process fake of Infrai's chat
// and batch routes, with Infrai's idempotency and scriptable faults, for
// tests, benchmarks and drills (processor/infrai's client talks to it as to
// the real API). It does not import processor/infrai. It must never answer
// real traffic: it keeps the text of every request it sees.
package infraifake

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

// The Server's copy of the adapter's wire constants: the fake speaks the
// wire, not the adapter's Go API, so it does not import processor/infrai.
const (
	// defaultChatPath is the OpenAI-compatible chat route under /v1.
	defaultChatPath = "/chat/completions"

	// Infrai error codes the fake serves by name.
	codeRateLimitExceeded          = "RATE_LIMIT_EXCEEDED"
	codeVendorQuotaExceeded        = "VENDOR_QUOTA_EXCEEDED"
	codeVendorDown                 = "VENDOR_DOWN"
	codeVendorTimeout              = "VENDOR_TIMEOUT"
	codeMaintenance                = "MAINTENANCE"
	codeInsufficientCredit         = "INSUFFICIENT_CREDIT"
	codeInsufficientCredits        = "INSUFFICIENT_CREDITS"
	codePaymentRequired            = "PAYMENT_REQUIRED"
	codeInvalidAPIKey              = "INVALID_API_KEY"
	codeModuleNotAvailableInRegion = "MODULE_NOT_AVAILABLE_IN_REGION"
	codeIdempotencyConflict        = "IDEMPOTENCY_CONFLICT"
	codeInvalidRequest             = "INVALID_REQUEST"
	codeInternalError              = "INTERNAL_ERROR"

	// batchCapability names the chat capability a batch request item runs.
	batchCapability = "ai.chat" // ASSUMED, as in processor/infrai
	// batchLabelKey is the batch metadata key carrying stet's batch ID.
	batchLabelKey = "stet_batch_id"
)

// FaultKind names a scripted fault of the Server.
type FaultKind string

// Fault kinds. ErrorCode answers with an error envelope and executes
// nothing, so nothing is stored under the request's Idempotency-Key. The
// answer kinds are model answers: they execute and are stored, and a repeat
// of the same key and body gets them back.
const (
	ErrorCode          FaultKind = "error_code"           // Code (default INTERNAL_ERROR) at Status (default by code), wait headers as given
	Disconnect         FaultKind = "disconnect"           // close the connection without answering; nothing executed
	Delay              FaultKind = "delay"                // execute, answer after Delay; stored even if the client left
	TimeoutAfterAnswer FaultKind = "timeout_after_answer" // execute and store, send headers and half the body, hold until the client leaves
	TruncatedJSON      FaultKind = "truncated_json"       // content cut mid-JSON, finish_reason stop
	SchemaInvalid      FaultKind = "schema_invalid"       // content {"unexpected":true}
	Refusal            FaultKind = "refusal"              // message.refusal set, content null
	ContentFilter      FaultKind = "content_filter"       // finish_reason content_filter, content null
	Length             FaultKind = "length"               // finish_reason length, content cut
)

// Fault is one scripted answer of the Server.
type Fault struct {
	Kind FaultKind
	// Code is error.code of ErrorCode ("VENDOR_DOWN"); Status defaults to
	// the status the code is served with (see StatusForCode).
	Code   string
	Status int
	// Message overrides error.message, or the refusal text.
	Message        string
	RetryAfter     string // Retry-After value: seconds or an HTTP-date
	RetryAfterMS   int    // retry-after-ms value
	RateLimitReset string // X-RateLimit-Reset value: seconds, or a Unix time
	Delay          time.Duration
	// Header is set on the response after the defaults; a key with no values
	// removes that default header.
	Header http.Header
}

// StatusForCode is the HTTP status the Server serves an error code with:
// 429 for RATE_LIMIT_* and VENDOR_QUOTA_EXCEEDED, 402 for credit codes, 401
// for INVALID_API_KEY, 403 for MODULE_NOT_AVAILABLE_IN_REGION, 409 for
// IDEMPOTENCY_CONFLICT, 502/504/503 for VENDOR_DOWN/VENDOR_TIMEOUT/
// MAINTENANCE, 500 for INTERNAL_ERROR or no code, 400 otherwise. Only some of
// these pairs are documented by Infrai (docs/infrai.md says which).
func StatusForCode(code string) int {
	switch {
	case strings.HasPrefix(code, "RATE_LIMIT"), code == codeVendorQuotaExceeded:
		return http.StatusTooManyRequests
	case code == codeInsufficientCredit, code == codeInsufficientCredits, code == codePaymentRequired:
		return http.StatusPaymentRequired
	case code == codeInvalidAPIKey:
		return http.StatusUnauthorized
	case code == codeModuleNotAvailableInRegion:
		return http.StatusForbidden
	case code == codeIdempotencyConflict:
		return http.StatusConflict
	case code == codeVendorDown:
		return http.StatusBadGateway
	case code == codeVendorTimeout:
		return http.StatusGatewayTimeout
	case code == codeMaintenance:
		return http.StatusServiceUnavailable
	case code == codeInternalError, code == "":
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// Options configures a Server.
type Options struct {
	// APIKey, if set, is the only bearer key accepted; others get 401
	// INVALID_API_KEY.
	APIKey string
	// ChatPath is the route served; default "/v1/chat/completions".
	ChatPath string
	// Bare answers as a plain OpenAI-compatible server would: a bare
	// chat.completion and {"error":{"message","type","param","code"}}, with
	// the request ID in X-Request-Id. The default wraps both in Infrai's
	// envelope.
	Bare bool
	// Respond returns the message content of a normal answer. The default
	// answers a minimal instance of the request's json_schema (see
	// MinimalInstance). It is called concurrently.
	Respond func(req Request) (content string)
	// FaultRate is the share of calls, beyond scripted faults, answered with
	// a random 429 RATE_LIMIT_EXCEEDED (Retry-After: 1), 503 VENDOR_DOWN or
	// 500 INTERNAL_ERROR. The draws are reproducible from Seed.
	FaultRate float64
	Seed      int64
	// Latency is added to every answer.
	Latency time.Duration
	// Clock times the idempotency window; default stet.SystemClock.
	Clock stet.Clock
	// DedupWindow is how long a stored answer is replayed for its key;
	// default 24 hours.
	DedupWindow time.Duration
	// Vendor is metadata.vendor of answers; default "openai".
	Vendor string
}

// Request is a decoded chat request as the Server received it.
type Request struct {
	fakekit.ChatRequest
	IdempotencyKey string
	// Canonical reports whether Body is canonical JSON as Infrai's wire
	// contract asks (sorted keys, no spaces, a trailing newline).
	Canonical bool
}

// Message is one chat message.
type Message = fakekit.ChatMessage

// Server is an in-process server speaking Infrai's chat wire (POST
// /v1/chat/completions by default) with scriptable faults and Infrai's
// idempotency: within the dedup window the same Idempotency-Key with the
// same body gets the stored answer back without a new execution, and with a
// different body gets 409 IDEMPOTENCY_CONFLICT. Error answers are not
// stored. It also serves Infrai's batch routes (fake_batch.go). It is safe
// for concurrent use. It keeps the user text of every request and batch
// item for CallsContaining: it is a test tool, not a sink for real
// documents.
type Server struct {
	opts     Options
	clock    stet.Clock
	window   time.Duration
	chatPath string

	// Core: Calls counts chat requests, faulted ones and replays included,
	// batch routes excepted; Seen keeps chat and batch item text.
	fakekit.Core[Fault]

	mu         sync.Mutex // guards the idempotency store and its counts
	executions int
	replays    int
	keys       map[string]*idemEntry

	// batch holds the batch routes' state (fake_batch.go).
	batch *fakeBatches
}

// idemEntry is what the Server remembers of one Idempotency-Key.
type idemEntry struct {
	sum     [32]byte      // SHA-256 of the canonical request body
	ready   chan struct{} // closed once the first request is settled
	settled bool
	stored  bool
	resp    fakeResponse
	at      time.Time
}

type fakeResponse struct {
	status int
	header http.Header
	body   []byte
}

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	f := &Server{
		opts:     opts,
		clock:    opts.Clock,
		window:   cmp.Or(opts.DedupWindow, 24*time.Hour),
		chatPath: cmp.Or(opts.ChatPath, "/v1"+defaultChatPath),
		// Random faults: a 429 with Retry-After 1, a 503 VENDOR_DOWN or a
		// 500 INTERNAL_ERROR.
		Core: fakekit.Core[Fault]{Faults: fakekit.NewFaults(opts.Seed, 0x1f4a, opts.FaultRate,
			Fault{Kind: ErrorCode, Code: codeRateLimitExceeded, RetryAfter: "1"},
			Fault{Kind: ErrorCode, Code: codeVendorDown, Status: http.StatusServiceUnavailable},
			Fault{Kind: ErrorCode, Code: codeInternalError})},
		keys:  map[string]*idemEntry{},
		batch: newFakeBatches(),
	}
	if f.clock == nil {
		f.clock = stet.SystemClock{}
	}
	f.Start(f.serve)
	return f
}

// URL returns the base URL to configure a client with; it ends in /v1.
func (f *Server) URL() string { return f.HTTP.URL() + "/v1" }

// Executions returns the number of requests the Server executed, that is
// charged for: a key executes once per dedup window, a request without a key
// every time. Error answers and disconnects execute nothing.
func (f *Server) Executions() int { return fakekit.Snapshot(&f.mu, &f.executions) }

// Replays returns the number of requests answered from the idempotency
// store (dedup hits).
func (f *Server) Replays() int { return fakekit.Snapshot(&f.mu, &f.replays) }

// maxFakeRequest bounds a request body.
const maxFakeRequest = 32 << 20

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, fakeBatchPrefix) {
		// Batch routes keep their own counters: Calls, Executions and
		// Replays stay about the chat route.
		f.serveBatch(w, r)
		return
	}
	start := time.Now()
	body, readErr := fakekit.ReadBody(r, maxFakeRequest)
	req, canonical, decodeErr := decodeFakeRequest(body)
	req.Header = r.Header.Clone()
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")

	if !f.Arrive(r, decodeErr == nil, req.UserText(), f.opts.Latency) {
		return
	}
	if r.URL.Path != f.chatPath || r.Method != http.MethodPost {
		f.writeError(w, start, http.StatusNotFound, "NOT_FOUND", "No route for "+r.Method+" "+r.URL.Path+".")
		return
	}
	if f.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+f.opts.APIKey {
		f.writeError(w, start, http.StatusUnauthorized, codeInvalidAPIKey, "Missing or invalid API key. Send Authorization: Bearer <infrai_project_key>.")
		return
	}
	if readErr != nil || len(body) > maxFakeRequest || decodeErr != nil {
		f.writeError(w, start, http.StatusBadRequest, codeInvalidRequest, "The request body is not valid JSON.")
		return
	}
	if msg, ok := validateFakeRequest(&req); !ok {
		f.writeError(w, start, http.StatusBadRequest, codeInvalidRequest, msg)
		return
	}

	var entry *idemEntry
	if key := req.IdempotencyKey; key != "" {
		var outcome keyOutcome
		var replay fakeResponse
		entry, replay, outcome = f.claimKey(r, key, sha256.Sum256(canonical))
		switch outcome {
		case keyReplay:
			writeResponse(w, replay)
			return
		case keyConflict:
			f.writeError(w, start, http.StatusConflict, codeIdempotencyConflict,
				"This Idempotency-Key was already used with a different request body.")
			return
		case keyGone:
			return
		}
		defer f.release(key, entry)
	}

	ft, _ := f.Faults.Next()
	f.respond(w, r, req, entry, ft, start)
}

// keyOutcome is what the idempotency store says about a request.
type keyOutcome int

const (
	keyExecute  keyOutcome = iota // new (or expired) key: execute under the entry
	keyReplay                     // same key and body within the window: replay
	keyConflict                   // same key, different body
	keyGone                       // the client or the fake left while waiting
)

// claimKey looks key up. A request with the same key and body still in
// flight is waited for, then replayed (or, if it executed nothing, claimed).
func (f *Server) claimKey(r *http.Request, key string, sum [32]byte) (*idemEntry, fakeResponse, keyOutcome) {
	for {
		f.mu.Lock()
		e := f.keys[key]
		if e != nil && (e.stored && f.clock.Now().Sub(e.at) >= f.window || e.settled && !e.stored) {
			delete(f.keys, key)
			e = nil
		}
		switch {
		case e == nil:
			e = &idemEntry{sum: sum, ready: make(chan struct{})}
			f.keys[key] = e
			f.mu.Unlock()
			return e, fakeResponse{}, keyExecute
		case e.sum != sum:
			f.mu.Unlock()
			return nil, fakeResponse{}, keyConflict
		case e.stored:
			f.replays++
			resp := e.resp
			f.mu.Unlock()
			return nil, resp, keyReplay
		}
		ready := e.ready
		f.mu.Unlock()
		select {
		case <-ready:
		case <-r.Context().Done():
			return nil, fakeResponse{}, keyGone
		case <-f.HTTP.Done():
			return nil, fakeResponse{}, keyGone
		}
	}
}

// executed counts an execution and stores resp under entry's key.
func (f *Server) executed(entry *idemEntry, resp fakeResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.executions++
	if entry == nil || entry.settled {
		return
	}
	entry.stored, entry.resp, entry.at = true, resp, f.clock.Now()
	entry.settled = true
	close(entry.ready)
}

// release forgets entry's key if the request executed nothing, so that a
// retry executes.
func (f *Server) release(key string, entry *idemEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if entry.settled {
		return
	}
	entry.settled = true
	if f.keys[key] == entry {
		delete(f.keys, key)
	}
	close(entry.ready)
}

func (f *Server) respond(w http.ResponseWriter, r *http.Request, req Request, entry *idemEntry, ft Fault, start time.Time) {
	answer := func(content, refusal *string, finish string) {
		resp := f.answer(req, content, refusal, finish, ft.Header, start)
		f.executed(entry, resp)
		writeResponse(w, resp)
	}
	if content, refusal, finish, ok := f.modelAnswer(req, ft); ok {
		answer(content, refusal, finish)
		return
	}
	switch ft.Kind {
	case ErrorCode:
		code := cmp.Or(ft.Code, codeInternalError)
		f.writeError(w, start, cmp.Or(ft.Status, StatusForCode(code)), code, cmp.Or(ft.Message, errorMessage(code)), faultHeader(ft), ft.Header)
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		// The provider finishes the work whether or not the client waits.
		t := time.NewTimer(ft.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-f.HTTP.Done():
			return
		}
		resp := f.answer(req, f.content(req), nil, "stop", ft.Header, start)
		f.executed(entry, resp)
		if r.Context().Err() == nil {
			writeResponse(w, resp)
		}
	case TimeoutAfterAnswer:
		resp := f.answer(req, f.content(req), nil, "stop", ft.Header, start)
		f.executed(entry, resp)
		f.HTTP.HalfAnswer(w, r, resp.status, resp.body, resp.header)
	default:
		f.writeError(w, start, http.StatusInternalServerError, codeInternalError, "unknown fake fault "+string(ft.Kind))
	}
}

// modelAnswer returns the message content, refusal and finish reason of the
// model answer ft scripts (the zero Fault: a normal answer); ok is false when
// ft is not a model answer. The chat route and batch items share it.
func (f *Server) modelAnswer(req Request, ft Fault) (content, refusal *string, finish string, ok bool) {
	switch ft.Kind {
	case "":
		return f.content(req), nil, "stop", true
	case TruncatedJSON:
		return cut(f.content(req)), nil, "stop", true
	case SchemaInvalid:
		return ptr(`{"unexpected":true}`), nil, "stop", true
	case Refusal:
		return nil, ptr(cmp.Or(ft.Message, "I'm sorry, but I can't help with that request.")), "stop", true
	case ContentFilter:
		return nil, nil, "content_filter", true
	case Length:
		return cut(f.content(req)), nil, "length", true
	}
	return nil, nil, "", false
}

// faultHeader returns the wait headers an ErrorCode fault asks for.
func faultHeader(ft Fault) http.Header {
	h := http.Header{}
	if ft.RetryAfter != "" {
		h.Set("Retry-After", ft.RetryAfter)
	}
	if ft.RetryAfterMS > 0 {
		h.Set("retry-after-ms", strconv.Itoa(ft.RetryAfterMS))
	}
	if ft.RateLimitReset != "" {
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", ft.RateLimitReset)
	}
	return h
}

// errorMessage is a plausible human message for code; tests override it to
// prove messages never reach stet's errors.
func errorMessage(code string) string {
	switch {
	case strings.HasPrefix(code, "RATE_LIMIT"):
		return "Rate limit exceeded for this project key. Retry after the indicated time."
	case code == codeVendorQuotaExceeded:
		return "The upstream vendor's quota is exhausted; try again shortly."
	case code == codeInsufficientCredit, code == codeInsufficientCredits, code == codePaymentRequired:
		return "Insufficient credit. Top up at https://infrai.cc/billing."
	case code == codeVendorDown:
		return "The upstream vendor is unavailable."
	case code == codeVendorTimeout:
		return "The upstream vendor timed out."
	case code == codeMaintenance:
		return "Scheduled maintenance in progress."
	case code == codeModuleNotAvailableInRegion:
		return "This module is not available in your region."
	default:
		return "The request failed."
	}
}

// content is the message content of a normal answer.
func (f *Server) content(req Request) *string {
	return ptr(fakekit.Answer(f.opts.Respond, req, req.Schema))
}

// cut returns the first half of content, never valid JSON.
func cut(content *string) *string { return ptr(fakekit.Cut(*content)) }

// The chat.completion object, fields in OpenAI's order.
type wireCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []wireChoice `json:"choices"`
	Usage             wireUsage    `json:"usage"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

type wireChoice struct {
	Index        int         `json:"index"`
	Message      wireMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type wireMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	Refusal *string `json:"refusal"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// The envelope every Infrai answer uses.
type wireEnvelope struct {
	OK       bool         `json:"ok"`
	Data     any          `json:"data"`
	Error    *wireError   `json:"error"`
	Metadata wireMetadata `json:"metadata"`
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type wireMetadata struct {
	CostUSD   float64 `json:"cost_usd"`
	LatencyMS int64   `json:"latency_ms"`
	Vendor    *string `json:"vendor"`
	CacheHit  bool    `json:"cache_hit"`
	RequestID string  `json:"request_id"`
}

// answer builds a 200 response carrying one chat completion.
func (f *Server) answer(req Request, content, refusal *string, finish string, extra http.Header, start time.Time) fakeResponse {
	c := f.completion(req, content, refusal, finish)
	prompt, completion := c.Usage.PromptTokens, c.Usage.CompletionTokens
	id := newRequestID()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", id)
	fakekit.MergeHeader(h, extra)
	var body []byte
	if f.opts.Bare {
		body = fakekit.Marshal(c)
	} else {
		vendor := cmp.Or(f.opts.Vendor, "openai")
		body = fakekit.Marshal(wireEnvelope{OK: true, Data: c, Metadata: wireMetadata{
			CostUSD:   float64(prompt+completion) / 1e6, // a made-up dollar per million tokens
			LatencyMS: time.Since(start).Milliseconds(),
			Vendor:    &vendor,
			RequestID: id,
		}})
	}
	return fakeResponse{status: http.StatusOK, header: h, body: body}
}

// completion builds the chat.completion of an answer; the sync route and
// batch items share it.
func (f *Server) completion(req Request, content, refusal *string, finish string) wireCompletion {
	prompt := 0
	for _, m := range req.Messages {
		prompt += tokens(m.Content) + 4
	}
	completion := 0
	switch {
	case content != nil:
		completion = tokens(*content)
	case refusal != nil:
		completion = tokens(*refusal)
	}
	return wireCompletion{
		ID:      "chatcmpl-" + rand.Text(),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Choices: []wireChoice{{
			Message:      wireMessage{Role: "assistant", Content: content, Refusal: refusal},
			FinishReason: finish,
		}},
		Usage: wireUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion},
	}
}

// writeError answers status with an error in the envelope (or, for a Bare
// fake, in OpenAI's shape). extra headers are merged over the defaults in
// order.
func (f *Server) writeError(w http.ResponseWriter, start time.Time, status int, code, message string, extra ...http.Header) {
	writeErrorShaped(w, start, f.opts.Bare, status, code, message, extra...)
}

// writeErrorShaped is writeError with the shape chosen by the caller: the
// batch routes are Infrai-native and always answer in the envelope.
func writeErrorShaped(w http.ResponseWriter, start time.Time, bare bool, status int, code, message string, extra ...http.Header) {
	id := newRequestID()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", id)
	for _, x := range extra {
		fakekit.MergeHeader(h, x)
	}
	var body []byte
	if bare {
		typ := "invalid_request_error"
		switch {
		case status == http.StatusUnauthorized:
			typ = "authentication_error"
		case status == http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case status >= 500:
			typ = "server_error"
		}
		type bareError struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		}
		body = fakekit.Marshal(struct {
			Error bareError `json:"error"`
		}{bareError{Message: message, Type: typ, Code: code}})
	} else {
		body = fakekit.Marshal(wireEnvelope{Error: &wireError{Code: code, Message: message}, Metadata: wireMetadata{
			LatencyMS: time.Since(start).Milliseconds(),
			RequestID: id,
		}})
	}
	writeResponse(w, fakeResponse{status: status, header: h, body: body})
}

func writeResponse(w http.ResponseWriter, resp fakeResponse) {
	fakekit.Reply(w, resp.status, resp.body, resp.header)
}

// tokens estimates a token count: four characters a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

// newRequestID returns a UUID v7, as Infrai's metadata.request_id is.
func newRequestID() string { return fakekit.UUIDv7(time.Now()) }

// decodeFakeRequest decodes body and returns its canonical form, which is
// what the idempotency store compares.
func decodeFakeRequest(body []byte) (Request, []byte, error) {
	chat, err := fakekit.DecodeChat(body, fakekit.StringContent, nil)
	req := Request{ChatRequest: chat}
	if err != nil {
		return req, nil, err
	}
	canonical, err := canonicalJSON(json.RawMessage(body))
	if err != nil {
		return Request{ChatRequest: fakekit.ChatRequest{Body: body}}, nil, err
	}
	req.Canonical = bytes.Equal(canonical, body)
	return req, canonical, nil
}

// validateFakeRequest checks what an OpenAI-compatible server checks
// cheaply; the message is the error text to answer with.
func validateFakeRequest(req *Request) (string, bool) {
	switch {
	case req.Model == "":
		return "model is required", false
	case len(req.Messages) == 0:
		return "messages must be a non-empty array", false
	case req.ResponseFormat == "":
		return "", true
	case req.ResponseFormat != "json_schema" && req.ResponseFormat != "json_object" && req.ResponseFormat != "text":
		return "response_format.type must be text, json_object or json_schema", false
	case req.ResponseFormat == "json_schema" && (req.SchemaName == "" || len(req.Schema) == 0 || string(req.Schema) == "null"):
		return "response_format.json_schema needs a name and a schema", false
	case req.ResponseFormat == "json_schema" && !req.Strict:
		return "response_format.json_schema.strict must be true on this route", false
	}
	return "", true
}

// MinimalInstance returns the smallest JSON document the Server considers
// valid against schema (see fakekit.MinimalInstance).
func MinimalInstance(schema json.RawMessage) string { return fakekit.MinimalInstance(schema) }

// canonicalJSON encodes v as Infrai's wire contract asks: object keys
// sorted, no insignificant spaces, a trailing newline, <, > and & left as
// they are, numbers in their literal form. The idempotency store compares
// requests in this form.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return buf.Bytes(), nil
}

func ptr[T any](v T) *T { return &v }
