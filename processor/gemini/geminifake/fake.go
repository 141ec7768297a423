package geminifake

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// apiVersion is the Gemini API version the fake serves, the adapter's
// gemini.APIVersion (copied: a fake does not import its adapter).
const apiVersion = "v1beta"

// FaultKind names a scripted fault of the Server.
type FaultKind string

// Fault kinds. Error kinds answer with Google's error object
// {"error":{"code","message","status","details"}}; answer kinds return 200
// with a real GenerateContentResponse.
const (
	RateLimit          FaultKind = "rate_limit"           // 429 RESOURCE_EXHAUSTED, a per-minute QuotaFailure, RetryInfo if RetryDelay is set
	Quota              FaultKind = "quota"                // 429 RESOURCE_EXHAUSTED, a per-day QuotaFailure
	Unauthorized       FaultKind = "unauthorized"         // 400 INVALID_ARGUMENT, ErrorInfo API_KEY_INVALID: what a wrong key gets
	PermissionDenied   FaultKind = "permission_denied"    // 403 PERMISSION_DENIED
	ServerError        FaultKind = "server_error"         // Status (default 500 INTERNAL; 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED)
	HTTPError          FaultKind = "http_error"           // Status (default 400) with the matching google.rpc status, or Code
	RegionUnsupported  FaultKind = "region_unsupported"   // 400 FAILED_PRECONDITION, user location not supported
	Disconnect         FaultKind = "disconnect"           // close the connection without answering
	Delay              FaultKind = "delay"                // answer normally after Delay
	TimeoutAfterAnswer FaultKind = "timeout_after_answer" // 200, headers and half the body, then hold until the client leaves
	TruncatedJSON      FaultKind = "truncated_json"       // 200, text cut mid-JSON, finishReason STOP
	SchemaInvalid      FaultKind = "schema_invalid"       // 200, {"unexpected":true}
	Finish             FaultKind = "finish"               // 200, the candidate stopped with FinishReason (default SAFETY)
	MaxTokens          FaultKind = "max_tokens"           // 200, text cut, finishReason MAX_TOKENS
	PromptBlocked      FaultKind = "prompt_blocked"       // 200, no candidates, promptFeedback.blockReason BlockReason (default SAFETY)
)

// Fault is one scripted answer of the Server.
type Fault struct {
	Kind FaultKind
	// RetryDelay is the google.rpc.RetryInfo retryDelay of RateLimit and
	// Quota ("7s", "0.120s"); empty sends no RetryInfo.
	RetryDelay string
	// RetryAfter, if set, is sent as the Retry-After header (seconds or an
	// HTTP-date). The Gemini API sends none; gateways do.
	RetryAfter string
	// QuotaID and QuotaValue override the violated quota of RateLimit and
	// Quota.
	QuotaID    string
	QuotaValue string
	Status     int           // ServerError (default 500), HTTPError (default 400)
	Delay      time.Duration // Delay: wait this long, then answer normally
	// Code overrides error.status of an error kind ("NOT_FOUND").
	Code string
	// Reason, if set, adds a google.rpc.ErrorInfo with this reason.
	Reason string
	// Message overrides error.message of an error kind.
	Message string
	// FinishReason is the candidate's finishReason for Finish. SAFETY,
	// RECITATION and the other stops carry no content, as the API sends
	// them; CONTINUATION carries half the text and a continuationToken.
	FinishReason string
	// BlockReason is promptFeedback.blockReason for PromptBlocked.
	BlockReason string
	// Header is set on the response after the defaults; a key with no values
	// removes that default header.
	Header http.Header
}

// Options configures a Server.
type Options struct {
	// APIKey, if set, is the only key accepted (x-goog-api-key header or
	// key query parameter). A missing key gets 403 PERMISSION_DENIED, a
	// wrong one 400 API_KEY_INVALID, as from the real API.
	APIKey string
	// Respond returns the text of a normal answer. The default answers a
	// minimal instance of the request's response schema (see
	// MinimalInstance). It is called concurrently.
	Respond func(req Request) (text string)
	// FaultRate is the share of calls, beyond scripted faults, answered with
	// a random 429 (retryDelay 0.120s), 500 or 503. The draws are
	// reproducible from Seed.
	FaultRate float64
	Seed      int64
	// Latency is added to every answer.
	Latency time.Duration
	// ModelVersion is the modelVersion answered; default the requested
	// model.
	ModelVersion string
	// ThoughtsTokens, if positive, is reported as usageMetadata
	// thoughtsTokenCount, as thinking models do.
	ThoughtsTokens int
	// Batch configures the batch routes (fake_batch.go).
	Batch BatchOptions
}

// Request is a decoded generateContent request as the Server received it.
type Request struct {
	Model    string // from the path, without "models/"
	Contents []Content
	// ResponseMIMEType is generationConfig.responseMimeType.
	ResponseMIMEType string
	// Schema is generationConfig.responseJsonSchema, or responseSchema when
	// that was sent instead; SchemaField says which.
	Schema          json.RawMessage
	SchemaField     string
	Temperature     *float64
	MaxOutputTokens int
	Body            []byte // the exact request body
	Header          http.Header
}

// Content is one turn; its text parts are joined.
type Content struct {
	Role string
	Text string
}

// Server is an in-process server speaking the Gemini API generateContent wire
// format (POST /v1beta/models/{model}:generateContent), with scriptable
// faults, and the batch and Files routes of the Batch API (fake_batch.go).
// It is safe for concurrent use. It keeps the user text of every request,
// and of every batch item, for CallsContaining: it is a test tool, not a
// sink for real documents.
type Server struct {
	opts Options

	// Core: Calls counts generateContent requests, faulted ones included
	// (batch and Files routes: BatchCounts); Seen keeps their user text.
	fakekit.Core[Fault]
	items fakekit.Calls // the user text of every batch item received

	batch fakeBatchState // the batch routes' state, under its own lock
}

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	f := &Server{
		opts: opts,
		// FaultRate's random faults, drawn on the stream this fake has
		// always used, so that a seed replays the same faults.
		Core: fakekit.Core[Fault]{Faults: fakekit.NewFaults(opts.Seed, 0x6e1, opts.FaultRate,
			Fault{Kind: RateLimit, RetryDelay: "0.120s"},
			Fault{Kind: ServerError, Status: http.StatusInternalServerError},
			Fault{Kind: ServerError, Status: http.StatusServiceUnavailable})},
		batch: newFakeBatchState(),
	}
	f.Start(f.serve)
	return f
}

// URL returns the base URL to configure a client with (gemini.Config.BaseURL): the
// host root, as the SDK appends the API version.
func (f *Server) URL() string { return f.HTTP.URL() }

// CallsContaining returns the number of requests and batch items whose
// user turns contain s.
func (f *Server) CallsContaining(s string) int {
	return f.Seen.Containing(s) + f.items.Containing(s)
}

// BatchItemsContaining returns the number of batch items received whose
// user turns contain s.
func (f *Server) BatchItemsContaining(s string) int { return f.items.Containing(s) }

// userText joins the user turns of req, as CallsContaining searches them.
func userText(req Request) string {
	return fakekit.UserText(req.Contents, func(c Content) (string, bool) { return c.Text, c.Role == "user" || c.Role == "" })
}

// maxFakeRequest bounds a request body.
const maxFakeRequest = 32 << 20

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	if f.serveBatch(w, r) {
		return
	}
	body, readErr := fakekit.ReadBody(r, maxFakeRequest)
	req, decodeErr := decodeFakeRequest(body)
	req.Header = r.Header.Clone()

	if !f.Arrive(r, decodeErr == nil, userText(req), f.opts.Latency) {
		return
	}
	model, ok := modelFromPath(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		// Google's front end answers unknown URLs with an HTML page.
		notFoundPage(w, r.URL.Path)
		return
	}
	req.Model = model
	if !f.authorized(w, r) {
		return
	}
	if readErr != nil || len(body) > maxFakeRequest || decodeErr != nil {
		writeAPIError(w, http.StatusBadRequest, nil, invalidArgument("Invalid JSON payload received. Unexpected token."))
		return
	}
	if msg, ok := validateFakeRequest(&req); !ok {
		writeAPIError(w, http.StatusBadRequest, nil, invalidArgument(msg))
		return
	}

	fault, ok := f.Faults.Next()
	if !ok {
		f.write(w, f.response(req, candidate(f.text(req), "STOP"), nil), nil)
		return
	}
	f.fault(w, r, req, fault)
}

// authorized checks the API key (x-goog-api-key, or the key query
// parameter) and answers as the API does when it is missing or wrong.
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

// modelFromPath reads {model} from /v1beta/models/{model}:generateContent
// (v1 is accepted too).
func modelFromPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1beta/models/")
	if !ok {
		rest, ok = strings.CutPrefix(path, "/v1/models/")
	}
	if !ok {
		return "", false
	}
	model, ok := strings.CutSuffix(rest, ":generateContent")
	if !ok || model == "" || strings.Contains(model, "/") {
		return "", false
	}
	return model, true
}

func (f *Server) fault(w http.ResponseWriter, r *http.Request, req Request, ft Fault) {
	extra := []http.Header{ft.Header}
	if ft.RetryAfter != "" {
		extra = []http.Header{{"Retry-After": {ft.RetryAfter}}, ft.Header}
	}
	switch ft.Kind {
	case RateLimit:
		writeAPIError(w, http.StatusTooManyRequests, extra, ft.override(quotaError(req.Model, ft,
			"GenerateRequestsPerMinutePerProjectPerModel", "generate_content_requests", "1000")))
	case Quota:
		writeAPIError(w, http.StatusTooManyRequests, extra, ft.override(quotaError(req.Model, ft,
			"GenerateRequestsPerDayPerProjectPerModel-FreeTier", "generate_content_free_tier_requests", "250")))
	case Unauthorized:
		writeAPIError(w, http.StatusBadRequest, extra, ft.override(invalidKey()))
	case PermissionDenied:
		writeAPIError(w, http.StatusForbidden, extra, ft.override(apiErrorBody{
			Message: "Your API key was reported as leaked. Please use another API key.",
			Status:  "PERMISSION_DENIED",
		}))
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		msg := "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
		switch status {
		case http.StatusServiceUnavailable:
			msg = "The model is overloaded. Please try again later."
		case http.StatusGatewayTimeout:
			msg = "Deadline expired before operation could complete."
		}
		writeAPIError(w, status, extra, ft.override(apiErrorBody{Message: msg, Status: rpcStatus(status)}))
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		msg := http.StatusText(status)
		if status == http.StatusNotFound {
			msg = "models/" + req.Model + " is not found for API version " + apiVersion + ", or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."
		}
		writeAPIError(w, status, extra, ft.override(apiErrorBody{Message: msg, Status: rpcStatus(status)}))
	case RegionUnsupported:
		writeAPIError(w, http.StatusBadRequest, extra, ft.override(apiErrorBody{
			Message: "User location is not supported for the API use.",
			Status:  "FAILED_PRECONDITION",
		}))
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		if f.HTTP.Sleep(r, ft.Delay) {
			f.write(w, f.response(req, candidate(f.text(req), "STOP"), nil), ft.Header)
		}
	case TimeoutAfterAnswer:
		body := f.response(req, candidate(f.text(req), "STOP"), nil)
		setDefaultHeaders(w.Header())
		f.HTTP.HalfAnswer(w, r, http.StatusOK, body, ft.Header)
	default:
		cand, feedback, ok := f.answer(req, ft)
		if !ok {
			writeAPIError(w, http.StatusInternalServerError, nil, apiErrorBody{Message: "unknown fake fault " + string(ft.Kind), Status: "INTERNAL"})
			return
		}
		if cand != nil && cand.FinishReason == "CONTINUATION" {
			cand.ContinuationToken = base64.StdEncoding.EncodeToString([]byte("fake-continuation-" + rand.Text()))
		}
		f.write(w, f.response(req, cand, feedback), ft.Header)
	}
}

// answer builds the 200 answer of an answer kind, for a call or a batch
// item; ok is false for any other kind.
func (f *Server) answer(req Request, ft Fault) (*wireCandidate, *wirePromptFeedback, bool) {
	switch ft.Kind {
	case TruncatedJSON:
		return candidate(cut(f.text(req)), "STOP"), nil, true
	case SchemaInvalid:
		return candidate(`{"unexpected":true}`, "STOP"), nil, true
	case MaxTokens:
		return candidate(cut(f.text(req)), "MAX_TOKENS"), nil, true
	case Finish:
		reason := cmp.Or(ft.FinishReason, "SAFETY")
		cand := &wireCandidate{FinishReason: reason}
		switch reason {
		case "CONTINUATION":
			cand = candidate(cut(f.text(req)), "CONTINUATION")
		case "SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII":
			cand.SafetyRatings = blockedRatings()
		}
		return cand, nil, true
	case PromptBlocked:
		return nil, &wirePromptFeedback{BlockReason: cmp.Or(ft.BlockReason, "SAFETY"), SafetyRatings: blockedRatings()}, true
	}
	return nil, nil, false
}

func (ft Fault) override(e apiErrorBody) apiErrorBody {
	if ft.Code != "" {
		e.Status = ft.Code
	}
	if ft.Message != "" {
		e.Message = ft.Message
	}
	if ft.Reason != "" {
		e.Details = append([]any{errorInfo(ft.Reason)}, e.Details...)
	}
	return e
}

func (f *Server) write(w http.ResponseWriter, body []byte, extra http.Header) {
	setDefaultHeaders(w.Header())
	fakekit.Reply(w, http.StatusOK, body, extra)
}

// text is the answer text of a normal call.
func (f *Server) text(req Request) string {
	if f.opts.Respond == nil && req.ResponseMIMEType != "application/json" {
		return "ok"
	}
	return fakekit.Answer(f.opts.Respond, req, req.Schema)
}

// cut returns the first half of text, never valid JSON.
func cut(text string) string { return fakekit.Cut(text) }

// MinimalInstance returns the smallest JSON document the Server considers
// valid against schema (see fakekit.MinimalInstance).
func MinimalInstance(schema json.RawMessage) string { return fakekit.MinimalInstance(schema) }
