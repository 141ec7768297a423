package openaifake

import (
	"cmp"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

// FaultKind names a scripted fault of the Server.
type FaultKind string

// Fault kinds. Error kinds answer with the real error object
// {"error":{"message","type","param","code"}}; answer kinds return 200 with
// a real chat.completion body.
const (
	RateLimit          FaultKind = "rate_limit"           // 429 rate_limit_exceeded, Retry-After / retry-after-ms as given
	Quota              FaultKind = "quota"                // 429 insufficient_quota
	Unauthorized       FaultKind = "unauthorized"         // 401 invalid_api_key
	ServerError        FaultKind = "server_error"         // Status (default 500), type server_error
	HTTPError          FaultKind = "http_error"           // Status (default 400) with Code, for the other statuses
	Disconnect         FaultKind = "disconnect"           // close the connection without answering
	Delay              FaultKind = "delay"                // answer normally after Delay
	TimeoutAfterAnswer FaultKind = "timeout_after_answer" // 200, headers and half the body, then hold until the client leaves
	TruncatedJSON      FaultKind = "truncated_json"       // 200, content cut mid-JSON, finish_reason stop
	SchemaInvalid      FaultKind = "schema_invalid"       // 200, {"unexpected":true}
	Refusal            FaultKind = "refusal"              // 200, message.refusal set, content null
	ContentFilter      FaultKind = "content_filter"       // 200, finish_reason content_filter, content null
	Length             FaultKind = "length"               // 200, finish_reason length, content cut
)

// Fault is one scripted answer of the Server.
type Fault struct {
	Kind         FaultKind
	RetryAfter   string        // RateLimit: Retry-After value, seconds or an HTTP-date
	RetryAfterMS int           // RateLimit: retry-after-ms value
	Status       int           // ServerError (default 500), HTTPError (default 400)
	Delay        time.Duration // Delay: wait this long, then answer normally
	// Code overrides error.code of an error kind ("model_not_found").
	Code string
	// Message overrides error.message of an error kind, or the refusal text.
	Message string
	// Header is set on the response after the defaults; a key with no values
	// removes that default header.
	Header http.Header
}

// Options configures a Server.
type Options struct {
	// APIKey, if set, is the only bearer key accepted; others get 401
	// invalid_api_key.
	APIKey string
	// Respond returns the message content of a normal answer. The default
	// answers a minimal instance of the request's json_schema: every
	// required property of an object, the first enum value, "ok" for a
	// string, [] for an array, 0 for a number, false for a boolean. It is
	// called concurrently.
	Respond func(req Request) (content string)
	// FaultRate is the share of calls, beyond scripted faults, answered with
	// a random 429 (no Retry-After; x-ratelimit-reset-requests 120ms), 500
	// or 503. The draws are reproducible from Seed.
	FaultRate float64
	Seed      int64
	// Latency is added to every answer.
	Latency time.Duration
	// LatencyMin and LatencyMax add, to every request within the limits, a
	// latency drawn uniformly from [LatencyMin, LatencyMax] with an RNG
	// seeded from Seed (its own stream: FaultRate draws do not move). It
	// models the model's time, so answers from the limits do not wait it.
	// LatencyMax below LatencyMin means exactly LatencyMin. The answer's
	// openai-processing-ms header reports Latency plus the draw.
	LatencyMin, LatencyMax time.Duration

	// RPM and TPM, when positive, are enforced as OpenAI enforces its
	// limits: two buckets that refill continuously at RPM and TPM a minute
	// and start full. A request is charged one request and, as tokens, its
	// prompt tokens (the estimate its usage reports: four characters a
	// token plus 4 a message) plus max_completion_tokens (or max_tokens)
	// when it sets one; when it sets none, the answer's completion tokens
	// are charged once the answer is built, which may leave the bucket in
	// debt. A limited request is not charged. The limits are checked after
	// authentication and validation, before scripted faults; a request over
	// a limit is answered 429 rate_limit_exceeded with error.type
	// "requests" or "tokens", and a request larger than the token bucket is
	// answered 429 "Request too large". Every answer carries
	// x-ratelimit-{limit,remaining,reset}-{requests,tokens} with the
	// buckets' state (reset as a duration like "1.2s": the time until the
	// bucket is full again); a limit that is not set keeps fixed values.
	RPM, TPM int
	// LimitWindow is how much of a minute's budget a bucket holds: a
	// minute by default (OpenAI's headers count a full minute); shorter
	// windows model OpenAI's quantized enforcement ("60,000 requests/minute
	// may be enforced as 1,000 requests/second"). Never less than one
	// request or one token.
	LimitWindow time.Duration
	// LimitRetryAfter adds retry-after-ms and Retry-After (whole seconds,
	// rounded up) to 429s from the limits: the exact time until the request
	// would fit. OpenAI does not always send them; without them a client
	// has only the reset headers.
	LimitRetryAfter bool
	// Clock drives the limits and the Stats windows; the system clock by
	// default. Latency is always real time.
	Clock stet.Clock
	// Batch configures the Batch API routes (fake_batch.go).
	Batch BatchOptions
}

// Request is a decoded Chat Completions request as the Server received it.
type Request struct {
	fakekit.ChatRequest
	// MaxCompletionTokens is max_completion_tokens, else max_tokens; 0 if
	// the request sets neither.
	MaxCompletionTokens int
}

// Message is one chat message; array content is joined to its text.
type Message = fakekit.ChatMessage

// Server is an in-process server speaking the OpenAI Chat Completions wire
// format (POST /v1/chat/completions, also /chat/completions), with
// scriptable faults, and the Files and Batches routes of the Batch API
// (fake_batch.go). It is safe for concurrent use. It keeps the user text
// of every request for CallsContaining: it is a test tool, not a sink for
// real documents.
type Server struct {
	opts  Options
	clock stet.Clock

	// Core: Calls counts the chat route's requests, faulted ones included;
	// Files and Batches keep their own counters.
	fakekit.Core[Fault]
	latency *fakekit.Latency // LatencyMin/Max draws, apart from fault draws
	traffic *fakekit.Traffic

	mu   sync.Mutex      // guards the buckets, checked together
	reqs *fakekit.Bucket // RPM
	toks *fakekit.Bucket // TPM; in debt when completions overran

	batch *fakeBatches // the Batch API routes, under their own lock

	audio transcriptions // the transcription route (transcriptions.go)
}

// Stats counts what a Server received and answered. Calls is as Calls();
// Tokens is what the limits charged (prompt plus max or actual completion
// tokens, as for TPM), counted with or without a TPM limit.
type Stats = fakekit.Stats

// Window is one second of a Server's traffic.
type Window = fakekit.Window

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = stet.SystemClock{}
	}
	now := opts.Clock.Now()
	f := &Server{
		opts:  opts,
		clock: opts.Clock,
		// Random faults: a 429 without Retry-After, a 500 or a 503.
		Core: fakekit.Core[Fault]{Faults: fakekit.NewFaults(opts.Seed, 0x5e7, opts.FaultRate,
			Fault{Kind: RateLimit},
			Fault{Kind: ServerError, Status: http.StatusInternalServerError},
			Fault{Kind: ServerError, Status: http.StatusServiceUnavailable})},
		latency: fakekit.NewLatency(opts.Seed, 0x1a7, opts.LatencyMin, opts.LatencyMax),
		traffic: fakekit.NewTraffic(opts.Clock.Now),
		reqs:    fakekit.NewBucket(opts.RPM, opts.LimitWindow, now),
		toks:    fakekit.NewBucket(opts.TPM, opts.LimitWindow, now),
		batch:   newFakeBatches(opts.Batch),
	}
	f.Start(f.serve)
	return f
}

// URL returns the base URL to configure a client with; it ends in /v1.
func (f *Server) URL() string { return f.HTTP.URL() + "/v1" }

// maxFakeRequest bounds a request body, as the real API does.
const maxFakeRequest = 32 << 20

func (f *Server) serve(rw http.ResponseWriter, r *http.Request) {
	if isBatchPath(r.URL.Path) {
		// Files and Batches keep their own counters: Calls and Stats stay
		// the sync path's.
		f.serveBatch(rw, r)
		return
	}
	if isTranscriptionPath(r.URL.Path) {
		f.serveTranscription(rw, r)
		return
	}
	w := &fakekit.StatusWriter{ResponseWriter: rw}
	defer func() { f.traffic.Status(w.Status) }()
	body, readErr := fakekit.ReadBody(r, maxFakeRequest)
	req, decodeErr := decodeFakeRequest(body)
	req.Header = r.Header.Clone()

	f.Seen.Add()
	f.traffic.Call()
	if f.limited() {
		// Even answers that never reach the limits report them.
		f.mu.Lock()
		f.refill(f.clock.Now())
		f.rateHeaders(w.Header())
		f.mu.Unlock()
	}
	if decodeErr == nil {
		f.Seen.Record(req.UserText())
	}

	if !f.HTTP.Sleep(r, f.opts.Latency) {
		return
	}
	if p := r.URL.Path; (p != "/v1/chat/completions" && p != "/chat/completions" && !isAzureChatPath(p)) || r.Method != http.MethodPost {
		writeAPIError(w, http.StatusNotFound, nil, apiError{
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")",
			Type:    "invalid_request_error",
		})
		return
	}
	if f.opts.APIKey != "" && isAzureChatPath(r.URL.Path) {
		// Azure OpenAI: the key in api-key, the api-version in the query.
		if r.Header.Get("api-key") != f.opts.APIKey {
			writeAPIError(w, http.StatusUnauthorized, nil, apiError{
				Message: "Access denied due to invalid subscription key or wrong API endpoint.",
				Type:    "invalid_request_error", Code: "401"})
			return
		}
		if r.URL.Query().Get("api-version") == "" {
			writeAPIError(w, http.StatusNotFound, nil, apiError{Message: "Resource not found", Type: "invalid_request_error", Code: "404"})
			return
		}
	} else if f.opts.APIKey != "" {
		switch got := r.Header.Get("Authorization"); {
		case got == "":
			writeAPIError(w, http.StatusUnauthorized, nil, apiError{
				Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
				Type:    "invalid_request_error",
			})
			return
		case got != "Bearer "+f.opts.APIKey:
			writeAPIError(w, http.StatusUnauthorized, nil, invalidKey())
			return
		}
	}
	if readErr != nil || len(body) > maxFakeRequest || decodeErr != nil {
		writeAPIError(w, http.StatusBadRequest, nil, apiError{
			Message: "We could not parse the JSON body of your request. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.",
			Type:    "invalid_request_error",
		})
		return
	}
	if e, ok := validateFakeRequest(&req); !ok {
		writeAPIError(w, http.StatusBadRequest, nil, e)
		return
	}
	over, ok := f.admit(req, w.Header())
	if !ok {
		f.overLimit(w, req, over)
		return
	}
	if extra := f.latency.Draw(); extra > 0 || f.opts.Latency > 0 {
		w.Header().Set("openai-processing-ms", strconv.FormatInt((f.opts.Latency+extra).Milliseconds(), 10))
		if !f.HTTP.Sleep(r, extra) {
			return
		}
	}

	fault, ok := f.Faults.Next()
	if !ok {
		f.answer(w, req, "stop", nil)
		return
	}
	f.fault(w, r, req, fault)
}

func (f *Server) fault(w http.ResponseWriter, r *http.Request, req Request, ft Fault) {
	switch ft.Kind {
	case RateLimit:
		h := ft.retryHeaders()
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "120ms")
		writeAPIError(w, http.StatusTooManyRequests, []http.Header{h, ft.Header}, ft.override(apiError{
			Message: "Rate limit reached for " + req.Model + " in organization org-fake on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.",
			Type:    "requests",
			Code:    "rate_limit_exceeded",
		}))
	case Quota, Unauthorized, HTTPError:
		status, e := errorAnswer(ft)
		writeAPIError(w, status, []http.Header{ft.Header}, e)
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		msg := "The server had an error while processing your request. Sorry about that!"
		if status == http.StatusServiceUnavailable {
			msg = "The engine is currently overloaded, please try again later."
		}
		writeAPIError(w, status, []http.Header{ft.Header}, ft.override(apiError{Message: msg, Type: "server_error"}))
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		if f.HTTP.Sleep(r, ft.Delay) {
			f.answer(w, req, "stop", ft.Header)
		}
	case TimeoutAfterAnswer:
		body := f.completion(req, f.content(req), nil, "stop")
		setDefaultHeaders(w.Header())
		f.HTTP.HalfAnswer(w, r, http.StatusOK, body, ft.Header)
	case TruncatedJSON:
		f.write(w, f.completion(req, cut(f.content(req)), nil, "stop"), ft.Header)
	case SchemaInvalid:
		f.write(w, f.completion(req, ptr(`{"unexpected":true}`), nil, "stop"), ft.Header)
	case Refusal:
		refusal := cmp.Or(ft.Message, "I'm sorry, but I can't assist with that request.")
		f.write(w, f.completion(req, nil, &refusal, "stop"), ft.Header)
	case ContentFilter:
		f.write(w, f.completion(req, nil, nil, "content_filter"), ft.Header)
	case Length:
		f.write(w, f.completion(req, cut(f.content(req)), nil, "length"), ft.Header)
	default:
		writeAPIError(w, http.StatusInternalServerError, nil, apiError{Message: "unknown fake fault " + string(ft.Kind), Type: "server_error"})
	}
}

// retryHeaders are the wait headers a RateLimit fault asks for.
func (ft Fault) retryHeaders() http.Header {
	h := http.Header{}
	if ft.RetryAfter != "" {
		h.Set("Retry-After", ft.RetryAfter)
	}
	if ft.RetryAfterMS > 0 {
		h.Set("retry-after-ms", strconv.Itoa(ft.RetryAfterMS))
	}
	return h
}

func (ft Fault) override(e apiError) apiError {
	if ft.Code != "" {
		e.Code = ft.Code
	}
	if ft.Message != "" {
		e.Message = ft.Message
	}
	return e
}

func (f *Server) answer(w http.ResponseWriter, req Request, finish string, extra http.Header) {
	f.write(w, f.completion(req, f.content(req), nil, finish), extra)
}

func (f *Server) write(w http.ResponseWriter, body []byte, extra http.Header) {
	setDefaultHeaders(w.Header())
	fakekit.Reply(w, http.StatusOK, body, extra)
}

// content is the message content of a normal answer.
func (f *Server) content(req Request) *string {
	return ptr(fakekit.Answer(f.opts.Respond, req, req.Schema))
}

// cut returns the first half of content, never valid JSON.
func cut(content *string) *string { return ptr(fakekit.Cut(*content)) }

// The chat.completion object, fields in the API's order.
type wireCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []wireChoice `json:"choices"`
	Usage             wireUsage    `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type wireChoice struct {
	Index        int         `json:"index"`
	Message      wireMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type wireMessage struct {
	Role        string   `json:"role"`
	Content     *string  `json:"content"`
	Refusal     *string  `json:"refusal"`
	Annotations []string `json:"annotations"`
}

type wireUsage struct {
	PromptTokens            int            `json:"prompt_tokens"`
	CompletionTokens        int            `json:"completion_tokens"`
	TotalTokens             int            `json:"total_tokens"`
	PromptTokensDetails     map[string]int `json:"prompt_tokens_details"`
	CompletionTokensDetails map[string]int `json:"completion_tokens_details"`
}

func (f *Server) completion(req Request, content, refusal *string, finish string) []byte {
	if req.MaxCompletionTokens == 0 {
		f.chargeCompletion(completionTokens(content, refusal))
	}
	return completionBody(req, content, refusal, finish)
}

func completionTokens(content, refusal *string) int {
	switch {
	case refusal != nil:
		return tokens(*refusal)
	case content != nil:
		return tokens(*content)
	}
	return 0
}

// completionBody builds a chat.completion answering req; it charges no
// limit, so batch items can share it.
func completionBody(req Request, content, refusal *string, finish string) []byte {
	prompt := promptTokens(req)
	completion := completionTokens(content, refusal)
	c := wireCompletion{
		ID:      "chatcmpl-" + rand.Text(),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Choices: []wireChoice{{
			Message: wireMessage{
				Role:        "assistant",
				Content:     content,
				Refusal:     refusal,
				Annotations: []string{},
			},
			FinishReason: finish,
		}},
		Usage: wireUsage{
			PromptTokens:            prompt,
			CompletionTokens:        completion,
			TotalTokens:             prompt + completion,
			PromptTokensDetails:     map[string]int{"cached_tokens": 0, "audio_tokens": 0},
			CompletionTokensDetails: map[string]int{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
		},
		ServiceTier:       "default",
		SystemFingerprint: "fp_fake0000",
	}
	return fakekit.Marshal(c)
}

// promptTokens is the prompt_tokens the Server reports and charges: the
// messages' tokens plus 4 a message for the chat framing.
func promptTokens(req Request) int {
	n := 0
	for _, m := range req.Messages {
		n += tokens(m.Content) + 4
	}
	return n
}

// tokens estimates a token count the way OpenAI's rule of thumb does: four
// characters a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

// apiError is the error object of the real API.
type apiError struct {
	Message string
	Type    string
	Param   string
	Code    string
}

func quotaError() apiError {
	return apiError{
		Message: "You exceeded your current quota, please check your plan and billing details.",
		Type:    "insufficient_quota",
		Code:    "insufficient_quota",
	}
}

func invalidKey() apiError {
	return apiError{
		Message: "Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.",
		Type:    "invalid_request_error",
		Code:    "invalid_api_key",
	}
}

// writeAPIError answers status with the API's error object; extra headers
// are merged over the defaults in order.
func writeAPIError(w http.ResponseWriter, status int, extra []http.Header, e apiError) {
	body := apiErrorBody(e)
	setDefaultHeaders(w.Header())
	fakekit.Reply(w, status, body, extra...)
}

// apiErrorBody is the API's error object {"error":{…}}.
func apiErrorBody(e apiError) []byte {
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	body := fakekit.Marshal(struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}{Error: struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, e.Type, nullable(e.Param), nullable(e.Code)}})
	return body
}

// setDefaultHeaders sets the headers every answer carries. The processing
// time and rate-limit headers keep values the handler already set (from
// the latency draw and the limits).
func setDefaultHeaders(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("x-request-id", "req_"+fakekit.RandomHex(16))
	h.Set("openai-version", "2020-10-01")
	for _, kv := range [][2]string{
		{"openai-processing-ms", "1"},
		{"x-ratelimit-limit-requests", "500"},
		{"x-ratelimit-limit-tokens", "200000"},
		{"x-ratelimit-remaining-requests", "499"},
		{"x-ratelimit-remaining-tokens", "199000"},
		{"x-ratelimit-reset-requests", "120ms"},
		{"x-ratelimit-reset-tokens", "300ms"},
	} {
		if h.Get(kv[0]) == "" {
			h.Set(kv[0], kv[1])
		}
	}
}

func decodeFakeRequest(body []byte) (Request, error) {
	var limits struct {
		MaxCompletionTokens *int `json:"max_completion_tokens"`
		MaxTokens           *int `json:"max_tokens"`
	}
	chat, err := fakekit.DecodeChat(body, fakekit.PartsContent, &limits)
	req := Request{ChatRequest: chat}
	switch {
	case err != nil:
	case limits.MaxCompletionTokens != nil:
		req.MaxCompletionTokens = max(*limits.MaxCompletionTokens, 0)
	case limits.MaxTokens != nil:
		req.MaxCompletionTokens = max(*limits.MaxTokens, 0)
	}
	return req, err
}

// validateFakeRequest checks what the real API checks cheaply.
func validateFakeRequest(req *Request) (apiError, bool) {
	missing := func(param string) apiError {
		return apiError{
			Message: "Missing required parameter: '" + param + "'.",
			Type:    "invalid_request_error",
			Param:   param,
			Code:    "missing_required_parameter",
		}
	}
	switch {
	case req.Model == "":
		return apiError{Message: "you must provide a model parameter", Type: "invalid_request_error"}, false
	case req.Messages == nil:
		return missing("messages"), false
	case len(req.Messages) == 0:
		return apiError{
			Message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
			Type:    "invalid_request_error",
			Param:   "messages",
			Code:    "empty_array",
		}, false
	}
	if req.ResponseFormat != "json_schema" {
		return apiError{}, true
	}
	var raw struct {
		ResponseFormat struct {
			JSONSchema json.RawMessage `json:"json_schema"`
		} `json:"response_format"`
	}
	_ = json.Unmarshal(req.Body, &raw)
	switch {
	case len(raw.ResponseFormat.JSONSchema) == 0 || string(raw.ResponseFormat.JSONSchema) == "null":
		return missing("response_format.json_schema"), false
	case req.SchemaName == "":
		return missing("response_format.json_schema.name"), false
	case !req.Strict:
		return apiError{
			Message: "Invalid 'response_format.json_schema.strict': this server requires strict structured outputs.",
			Type:    "invalid_request_error",
			Param:   "response_format.json_schema.strict",
			Code:    "invalid_value",
		}, false
	case len(req.Schema) == 0 || string(req.Schema) == "null":
		return missing("response_format.json_schema.schema"), false
	}
	return apiError{}, true
}

// MinimalInstance returns the smallest JSON document the Server considers
// valid against schema (see fakekit.MinimalInstance).
func MinimalInstance(schema json.RawMessage) string { return fakekit.MinimalInstance(schema) }

func ptr[T any](v T) *T { return &v }

// Stats returns what the Server has counted so far.
func (f *Server) Stats() Stats { return f.traffic.Stats() }

// limitVerdict says why a request is over a limit.
type limitVerdict struct {
	kind      string // "requests" or "tokens"
	limit     int    // per minute
	used      int    // of the bucket, as OpenAI's message reports it
	requested int
	tooLarge  bool          // the request can never fit the token bucket
	wait      time.Duration // until it would fit; 0 if tooLarge
}

// limited reports whether any limit is set.
func (f *Server) limited() bool { return f.opts.RPM > 0 || f.opts.TPM > 0 }

// refill adds what the buckets gained since the last refill. f.mu is held.
func (f *Server) refill(now time.Time) {
	f.reqs.Refill(now)
	f.toks.Refill(now)
}

// rateHeaders writes the buckets' state as OpenAI's x-ratelimit-* headers,
// for the limits that are set. f.mu is held and the buckets refilled.
func (f *Server) rateHeaders(h http.Header) {
	set := func(name string, b *fakekit.Bucket) {
		if b.PerMinute() <= 0 {
			return
		}
		h.Set("x-ratelimit-limit-"+name, strconv.Itoa(b.PerMinute()))
		h.Set("x-ratelimit-remaining-"+name, strconv.Itoa(b.Remaining()))
		h.Set("x-ratelimit-reset-"+name, resetString(b.UntilFull()))
	}
	set("requests", f.reqs)
	set("tokens", f.toks)
}

// admit checks req against the limits and charges it if it fits. Either
// way it writes the rate-limit headers into h.
func (f *Server) admit(req Request, h http.Header) (limitVerdict, bool) {
	need := promptTokens(req) + req.MaxCompletionTokens
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.rateHeaders(h)
	f.refill(now)
	var v limitVerdict
	switch {
	case f.opts.RPM > 0 && f.reqs.Level() < 1:
		v = limitVerdict{kind: "requests", limit: f.opts.RPM, requested: 1, wait: f.reqs.Until(1 - f.reqs.Level())}
		v.used = f.opts.RPM - f.reqs.Remaining()
	case f.opts.TPM > 0 && float64(need) > f.toks.Capacity():
		v = limitVerdict{kind: "tokens", limit: f.opts.TPM, requested: need, tooLarge: true}
	case f.opts.TPM > 0 && f.toks.Level() < float64(need):
		v = limitVerdict{kind: "tokens", limit: f.opts.TPM, requested: need, wait: f.toks.Until(float64(need) - f.toks.Level())}
		v.used = f.opts.TPM - f.toks.Remaining()
	default:
		if f.opts.RPM > 0 {
			f.reqs.Take(1)
		}
		if f.opts.TPM > 0 {
			f.toks.Take(float64(need))
		}
		f.traffic.Admit(need)
		return limitVerdict{}, true
	}
	f.traffic.Limit()
	return v, false
}

// overLimit answers a request the limits refused, with OpenAI's messages.
func (f *Server) overLimit(w http.ResponseWriter, req Request, v limitVerdict) {
	unit := map[string]string{"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}[v.kind]
	e := apiError{Type: v.kind, Code: "rate_limit_exceeded"}
	if v.tooLarge {
		e.Message = fmt.Sprintf("Request too large for %s in organization org-fake on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
			req.Model, unit, v.limit, v.requested)
		writeAPIError(w, http.StatusTooManyRequests, nil, e)
		return
	}
	e.Message = fmt.Sprintf("Rate limit reached for %s in organization org-fake on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		req.Model, unit, v.limit, v.used, v.requested, resetString(v.wait))
	h := http.Header{}
	if f.opts.LimitRetryAfter {
		ms := (v.wait + time.Millisecond - 1) / time.Millisecond
		h.Set("retry-after-ms", strconv.FormatInt(int64(ms), 10))
		h.Set("Retry-After", strconv.FormatInt(int64((v.wait+time.Second-1)/time.Second), 10))
	}
	writeAPIError(w, http.StatusTooManyRequests, []http.Header{h}, e)
}

// chargeCompletion charges completion tokens of a request that set no
// completion budget, after its answer is built.
func (f *Server) chargeCompletion(n int) {
	if f.opts.TPM > 0 {
		now := f.clock.Now()
		f.mu.Lock()
		f.toks.Refill(now)
		f.toks.Take(float64(n))
		f.mu.Unlock()
	}
	f.traffic.Charge(n)
}

// resetString formats a wait as OpenAI's reset headers do: "120ms", "1.2s",
// "6m0s".
func resetString(d time.Duration) string {
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// isAzureChatPath reports whether p is Azure OpenAI's chat route,
// /openai/deployments/{deployment}/chat/completions.
func isAzureChatPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/openai/deployments/")
	if !ok {
		return false
	}
	dep, tail, ok := strings.Cut(rest, "/")
	return ok && dep != "" && tail == "chat/completions"
}
