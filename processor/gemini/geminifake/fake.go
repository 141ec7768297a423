// Package geminifake is a wire-faithful fake of the Gemini API for tests,
// drills and benchmarks: generateContent, the batch routes and the Files
// API, with scriptable answers and faults, on a local httptest server. It
// imports neither the genai SDK nor the gemini adapter, so what it speaks is
// written down here, not borrowed from the code it tests. It keeps the text
// of every request: it must never answer real traffic or hold real
// documents.
package geminifake

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/internal/fakekit"
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
	srv  *httptest.Server
	done chan struct{}
	stop sync.Once

	mu     sync.Mutex
	queue  []Fault
	rng    *mathrand.Rand
	calls  int
	inputs []string // user text of every decoded request and batch item

	batch fakeBatchState // the batch routes' state, under its own lock
}

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	f := &Server{
		opts: opts,
		done: make(chan struct{}),
		rng:  mathrand.New(mathrand.NewPCG(uint64(opts.Seed), 0x6e1)),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL returns the base URL to configure a client with (gemini.Config.BaseURL): the
// host root, as the SDK appends the API version.
func (f *Server) URL() string { return f.srv.URL }

// Handler returns the fake's handler, to serve from another listener. Calls,
// faults and Close apply to it as to the built-in server.
func (f *Server) Handler() http.Handler { return http.HandlerFunc(f.serve) }

// Close releases held connections and stops the server.
func (f *Server) Close() {
	f.stop.Do(func() {
		close(f.done)
		f.srv.Close()
	})
}

// Enqueue scripts faults for the next calls, in order; later calls are
// answered normally.
func (f *Server) Enqueue(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, faults...)
}

// Calls returns the number of requests that reached the handler, faulted
// ones included, batch and Files routes excepted (see BatchCounts).
func (f *Server) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// CallsContaining returns the number of requests and batch items whose
// user turns contain s.
func (f *Server) CallsContaining(s string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, in := range f.inputs {
		if strings.Contains(in, s) {
			n++
		}
	}
	return n
}

// maxFakeRequest bounds a request body.
const maxFakeRequest = 32 << 20

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	if f.serveBatch(w, r) {
		return
	}
	body, readErr := io.ReadAll(io.LimitReader(r.Body, maxFakeRequest+1))
	req, decodeErr := decodeFakeRequest(body)
	req.Header = r.Header.Clone()

	f.mu.Lock()
	f.calls++
	if decodeErr == nil {
		var sb strings.Builder
		for _, c := range req.Contents {
			if c.Role == "user" || c.Role == "" {
				sb.WriteString(c.Text)
				sb.WriteByte('\n')
			}
		}
		f.inputs = append(f.inputs, sb.String())
	}
	f.mu.Unlock()

	if !f.sleep(r, f.opts.Latency) {
		return
	}
	model, ok := modelFromPath(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		// Google's front end answers unknown URLs with an HTML page.
		notFoundPage(w, r.URL.Path)
		return
	}
	req.Model = model
	if f.opts.APIKey != "" {
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
			return
		case key != f.opts.APIKey:
			writeAPIError(w, http.StatusBadRequest, nil, invalidKey())
			return
		}
	}
	if readErr != nil || len(body) > maxFakeRequest || decodeErr != nil {
		writeAPIError(w, http.StatusBadRequest, nil, invalidArgument("Invalid JSON payload received. Unexpected token."))
		return
	}
	if msg, ok := validateFakeRequest(&req); !ok {
		writeAPIError(w, http.StatusBadRequest, nil, invalidArgument(msg))
		return
	}

	fault, ok := f.nextFault()
	if !ok {
		f.write(w, f.response(req, candidate(f.text(req), "STOP"), nil), nil)
		return
	}
	f.fault(w, r, req, fault)
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

// nextFault pops a scripted fault or draws a random one.
func (f *Server) nextFault() (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) > 0 {
		ft := f.queue[0]
		f.queue = f.queue[1:]
		return ft, true
	}
	if f.opts.FaultRate > 0 && f.rng.Float64() < f.opts.FaultRate {
		switch f.rng.IntN(3) {
		case 0:
			return Fault{Kind: RateLimit, RetryDelay: "0.120s"}, true
		case 1:
			return Fault{Kind: ServerError, Status: http.StatusInternalServerError}, true
		default:
			return Fault{Kind: ServerError, Status: http.StatusServiceUnavailable}, true
		}
	}
	return Fault{}, false
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
		if f.sleep(r, ft.Delay) {
			f.write(w, f.response(req, candidate(f.text(req), "STOP"), nil), ft.Header)
		}
	case TimeoutAfterAnswer:
		body := f.response(req, candidate(f.text(req), "STOP"), nil)
		h := w.Header()
		setDefaultHeaders(h)
		mergeHeader(h, ft.Header)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-f.done:
		}
	case TruncatedJSON:
		f.write(w, f.response(req, candidate(cut(f.text(req)), "STOP"), nil), ft.Header)
	case SchemaInvalid:
		f.write(w, f.response(req, candidate(`{"unexpected":true}`, "STOP"), nil), ft.Header)
	case MaxTokens:
		f.write(w, f.response(req, candidate(cut(f.text(req)), "MAX_TOKENS"), nil), ft.Header)
	case Finish:
		reason := cmp.Or(ft.FinishReason, "SAFETY")
		cand := &wireCandidate{FinishReason: reason}
		switch reason {
		case "CONTINUATION":
			cand = candidate(cut(f.text(req)), "CONTINUATION")
			cand.ContinuationToken = base64.StdEncoding.EncodeToString([]byte("fake-continuation-" + rand.Text()))
		case "SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII":
			cand.SafetyRatings = blockedRatings()
		}
		f.write(w, f.response(req, cand, nil), ft.Header)
	case PromptBlocked:
		f.write(w, f.response(req, nil, &wirePromptFeedback{
			BlockReason:   cmp.Or(ft.BlockReason, "SAFETY"),
			SafetyRatings: blockedRatings(),
		}), ft.Header)
	default:
		writeAPIError(w, http.StatusInternalServerError, nil, apiErrorBody{Message: "unknown fake fault " + string(ft.Kind), Status: "INTERNAL"})
	}
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

// sleep waits d unless the client leaves or the fake closes first.
func (f *Server) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-f.done:
		return false
	}
}

func (f *Server) write(w http.ResponseWriter, body []byte, extra http.Header) {
	h := w.Header()
	setDefaultHeaders(h)
	mergeHeader(h, extra)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// text is the answer text of a normal call.
func (f *Server) text(req Request) string {
	if f.opts.Respond != nil {
		return f.opts.Respond(req)
	}
	if req.ResponseMIMEType != "application/json" {
		return "ok"
	}
	return MinimalInstance(req.Schema)
}

// cut returns the first half of text, never valid JSON.
func cut(text string) string {
	s := text[:len(text)/2]
	if json.Valid([]byte(s)) {
		s = "{" + s
	}
	return s
}

// The GenerateContentResponse object, fields in the API's order. Zero
// counts are left out, as proto3 JSON does.
type wireResponse struct {
	Candidates     []*wireCandidate    `json:"candidates,omitempty"`
	PromptFeedback *wirePromptFeedback `json:"promptFeedback,omitempty"`
	UsageMetadata  wireUsage           `json:"usageMetadata"`
	ModelVersion   string              `json:"modelVersion"`
	ResponseID     string              `json:"responseId"`
}

type wireCandidate struct {
	Content           *wireContent       `json:"content,omitempty"`
	FinishReason      string             `json:"finishReason"`
	Index             int                `json:"index"`
	SafetyRatings     []wireSafetyRating `json:"safetyRatings,omitempty"`
	ContinuationToken string             `json:"continuationToken,omitempty"`
}

type wireContent struct {
	Parts []wirePart `json:"parts"`
	Role  string     `json:"role"`
}

type wirePart struct {
	Text string `json:"text"`
}

type wireSafetyRating struct {
	Category    string `json:"category"`
	Probability string `json:"probability"`
	Blocked     bool   `json:"blocked,omitempty"`
}

type wirePromptFeedback struct {
	BlockReason   string             `json:"blockReason"`
	SafetyRatings []wireSafetyRating `json:"safetyRatings,omitempty"`
}

type wireUsage struct {
	PromptTokenCount     int                 `json:"promptTokenCount,omitempty"`
	CandidatesTokenCount int                 `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int                 `json:"totalTokenCount,omitempty"`
	PromptTokensDetails  []wireModalityCount `json:"promptTokensDetails,omitempty"`
	ThoughtsTokenCount   int                 `json:"thoughtsTokenCount,omitempty"`
}

type wireModalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

func candidate(text, finish string) *wireCandidate {
	return &wireCandidate{
		Content:      &wireContent{Parts: []wirePart{{Text: text}}, Role: "model"},
		FinishReason: finish,
	}
}

func blockedRatings() []wireSafetyRating {
	return []wireSafetyRating{
		{Category: "HARM_CATEGORY_SEXUALLY_EXPLICIT", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_HATE_SPEECH", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_HARASSMENT", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_DANGEROUS_CONTENT", Probability: "HIGH", Blocked: true},
	}
}

func (f *Server) response(req Request, cand *wireCandidate, feedback *wirePromptFeedback) []byte {
	prompt := 0
	for _, c := range req.Contents {
		prompt += tokens(c.Text)
	}
	resp := wireResponse{
		PromptFeedback: feedback,
		ModelVersion:   cmp.Or(f.opts.ModelVersion, req.Model),
		ResponseID:     newResponseID(),
	}
	completion := 0
	if cand != nil {
		resp.Candidates = []*wireCandidate{cand}
		if cand.Content != nil {
			for _, p := range cand.Content.Parts {
				completion += tokens(p.Text)
			}
		}
	}
	thoughts := max(f.opts.ThoughtsTokens, 0)
	resp.UsageMetadata = wireUsage{
		PromptTokenCount:     prompt,
		CandidatesTokenCount: completion,
		TotalTokenCount:      prompt + completion + thoughts,
		PromptTokensDetails:  []wireModalityCount{{Modality: "TEXT", TokenCount: prompt}},
		ThoughtsTokenCount:   thoughts,
	}
	return marshal(resp)
}

// tokens estimates a token count: four characters a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

// newResponseID makes an ID shaped like the API's responseId (base64url).
func newResponseID() string {
	var b [17]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// apiErrorBody is Google's error object. Code is filled from the HTTP status.
type apiErrorBody struct {
	Message string
	Status  string
	Details []any
}

// The error object on the wire, fields in the API's order.
type wireAPIError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []any  `json:"details,omitempty"`
	} `json:"error"`
}

type detailErrorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata"`
}

type detailLocalizedMessage struct {
	Type    string `json:"@type"`
	Locale  string `json:"locale"`
	Message string `json:"message"`
}

type detailQuotaFailure struct {
	Type       string          `json:"@type"`
	Violations []wireViolation `json:"violations"`
}

type detailHelp struct {
	Type  string `json:"@type"`
	Links []struct {
		Description string `json:"description"`
		URL         string `json:"url"`
	} `json:"links"`
}

type detailRetryInfo struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
}

// wireViolation is one google.rpc.QuotaFailure violation.
type wireViolation struct {
	QuotaMetric     string            `json:"quotaMetric"`
	QuotaID         string            `json:"quotaId"`
	QuotaDimensions map[string]string `json:"quotaDimensions,omitempty"`
	QuotaValue      string            `json:"quotaValue,omitempty"`
}

func errorInfo(reason string) detailErrorInfo {
	return detailErrorInfo{
		Type:     "type.googleapis.com/google.rpc.ErrorInfo",
		Reason:   reason,
		Domain:   "googleapis.com",
		Metadata: map[string]string{"service": "generativelanguage.googleapis.com"},
	}
}

func invalidKey() apiErrorBody {
	const msg = "API key not valid. Please pass a valid API key."
	return apiErrorBody{
		Message: msg,
		Status:  "INVALID_ARGUMENT",
		Details: []any{
			errorInfo("API_KEY_INVALID"),
			detailLocalizedMessage{Type: "type.googleapis.com/google.rpc.LocalizedMessage", Locale: "en-US", Message: msg},
		},
	}
}

func invalidArgument(msg string) apiErrorBody {
	return apiErrorBody{Message: msg, Status: "INVALID_ARGUMENT"}
}

// quotaError is the 429 the API sends when a quota is exceeded: a
// QuotaFailure naming it, a Help link and, if given, a RetryInfo.
func quotaError(model string, ft Fault, quotaID, metric, value string) apiErrorBody {
	help := detailHelp{Type: "type.googleapis.com/google.rpc.Help"}
	help.Links = append(help.Links, struct {
		Description string `json:"description"`
		URL         string `json:"url"`
	}{"Learn more about Gemini API quotas", "https://ai.google.dev/gemini-api/docs/rate-limits"})
	v := wireViolation{
		QuotaMetric:     "generativelanguage.googleapis.com/" + metric,
		QuotaID:         cmp.Or(ft.QuotaID, quotaID),
		QuotaDimensions: map[string]string{"location": "global", "model": model},
		QuotaValue:      cmp.Or(ft.QuotaValue, value),
	}
	details := []any{
		detailQuotaFailure{Type: "type.googleapis.com/google.rpc.QuotaFailure", Violations: []wireViolation{v}},
		help,
	}
	if ft.RetryDelay != "" {
		details = append(details, detailRetryInfo{Type: "type.googleapis.com/google.rpc.RetryInfo", RetryDelay: ft.RetryDelay})
	}
	msg := "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n" +
		"* Quota exceeded for metric: " + v.QuotaMetric + ", limit: " + v.QuotaValue + ", model: " + model
	if ft.RetryDelay != "" {
		msg += "\nPlease retry in " + ft.RetryDelay + "."
	}
	return apiErrorBody{Message: msg, Status: "RESOURCE_EXHAUSTED", Details: details}
}

// rpcStatus is the google.rpc.Code name Google's front end pairs with an
// HTTP status.
func rpcStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return ""
}

// writeAPIError answers status with Google's error object; extra headers
// are merged over the defaults in order.
func writeAPIError(w http.ResponseWriter, status int, extra []http.Header, e apiErrorBody) {
	var body wireAPIError
	body.Error.Code = status
	body.Error.Message = e.Message
	body.Error.Status = e.Status
	body.Error.Details = e.Details
	raw := marshal(body)
	h := w.Header()
	setDefaultHeaders(h)
	for _, x := range extra {
		mergeHeader(h, x)
	}
	h.Set("Content-Length", strconv.Itoa(len(raw)))
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

func notFoundPage(w http.ResponseWriter, path string) {
	page := "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <title>Error 404 (Not Found)!!1</title>\n" +
		"  <p><b>404.</b> <ins>That’s an error.</ins>\n  <p>The requested URL <code>" + htmlEscape(path) +
		"</code> was not found on this server.  <ins>That’s all we know.</ins>\n"
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=UTF-8")
	h.Set("Content-Length", strconv.Itoa(len(page)))
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, page)
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// setDefaultHeaders sets what Google's front end sends on every answer. It
// sends no request ID header: responseId in the body is the only ID.
func setDefaultHeaders(h http.Header) {
	h.Set("Content-Type", "application/json; charset=UTF-8")
	h["Vary"] = []string{"Origin", "X-Origin", "Referer"}
	h.Set("Server", "scaffolding on HTTPServer2")
	h.Set("Server-Timing", "gfet4t7; dur=1")
	h.Set("X-XSS-Protection", "0")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("X-Content-Type-Options", "nosniff")
}

// mergeHeader sets extra over h; a key with no values deletes it.
func mergeHeader(h, extra http.Header) {
	for k, vs := range extra {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// marshal encodes v as Google's REST front end does: indented by two
// spaces, no HTML escaping.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic("gemini fake: marshal: " + err.Error())
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// Known fields of GenerateContentRequest and GenerationConfig. The API
// rejects any other name with 400 "Unknown name".
var (
	requestFields = []string{
		"contents", "tools", "toolConfig", "safetySettings", "systemInstruction",
		"generationConfig", "cachedContent", "serviceTier", "store", "labels", "continuationToken",
	}
	generationConfigFields = []string{
		"stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
		"responseModalities", "candidateCount", "maxOutputTokens", "temperature", "topP",
		"topK", "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs",
		"enableEnhancedCivicAnswers", "speechConfig", "thinkingConfig", "imageConfig",
		"mediaResolution", "audioTranscriptionConfig",
	}
)

// The request as sent on the wire.
type wireRequest struct {
	Contents *[]struct {
		Role  string                       `json:"role"`
		Parts []map[string]json.RawMessage `json:"parts"`
	} `json:"contents"`
	GenerationConfig *struct {
		ResponseMIMEType   string          `json:"responseMimeType"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
		Temperature        *float64        `json:"temperature"`
		MaxOutputTokens    int             `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

// fakeParts keeps what validation needs from a decoded request.
type fakeParts struct {
	unknown   string // the first unknown field name, "" if none
	contents  bool   // contents given at all
	roles     []string
	partCount []int
	emptyPart [][2]int // contents index, part index of parts without data
	both      bool     // responseSchema and responseJsonSchema
}

func decodeFakeRequest(body []byte) (Request, error) {
	req := Request{Body: body}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return req, err
	}
	if wr.Contents != nil {
		req.Contents = make([]Content, 0, len(*wr.Contents))
		for _, c := range *wr.Contents {
			var sb strings.Builder
			for _, p := range c.Parts {
				var s string
				if json.Unmarshal(p["text"], &s) == nil {
					sb.WriteString(s)
				}
			}
			req.Contents = append(req.Contents, Content{Role: c.Role, Text: sb.String()})
		}
	}
	if gc := wr.GenerationConfig; gc != nil {
		req.ResponseMIMEType = gc.ResponseMIMEType
		req.Temperature = gc.Temperature
		req.MaxOutputTokens = gc.MaxOutputTokens
		switch {
		case len(gc.ResponseJSONSchema) > 0 && string(gc.ResponseJSONSchema) != "null":
			req.Schema, req.SchemaField = gc.ResponseJSONSchema, "responseJsonSchema"
		case len(gc.ResponseSchema) > 0 && string(gc.ResponseSchema) != "null":
			req.Schema, req.SchemaField = gc.ResponseSchema, "responseSchema"
		}
	}
	return req, nil
}

// inspect reads the parts of the body the API checks cheaply.
func inspect(body []byte) fakeParts {
	var fp fakeParts
	var top map[string]json.RawMessage
	_ = json.Unmarshal(body, &top)
	for k := range top {
		if !slices.Contains(requestFields, k) && fp.unknown == "" {
			fp.unknown = k
		}
	}
	var gc map[string]json.RawMessage
	_ = json.Unmarshal(top["generationConfig"], &gc)
	for k := range gc {
		if !slices.Contains(generationConfigFields, k) && fp.unknown == "" {
			fp.unknown = k
		}
	}
	fp.both = gc["responseSchema"] != nil && gc["responseJsonSchema"] != nil
	var contents []struct {
		Role  string                       `json:"role"`
		Parts []map[string]json.RawMessage `json:"parts"`
	}
	if raw, ok := top["contents"]; ok && json.Unmarshal(raw, &contents) == nil {
		fp.contents = true
	}
	for i, c := range contents {
		fp.roles = append(fp.roles, c.Role)
		fp.partCount = append(fp.partCount, len(c.Parts))
		for j, p := range c.Parts {
			if len(p) == 0 || string(p["text"]) == `""` && len(p) == 1 {
				fp.emptyPart = append(fp.emptyPart, [2]int{i, j})
			}
		}
	}
	return fp
}

// validateFakeRequest checks what the real API checks cheaply, with its
// messages.
func validateFakeRequest(req *Request) (string, bool) {
	fp := inspect(req.Body)
	if fp.unknown != "" {
		return fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", fp.unknown), false
	}
	if !fp.contents || len(fp.roles) == 0 {
		return "* GenerateContentRequest.contents: contents is not specified\n", false
	}
	for i, role := range fp.roles {
		if role != "" && role != "user" && role != "model" {
			return "Please use a valid role: user, model.", false
		}
		if fp.partCount[i] == 0 {
			return fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n", i), false
		}
	}
	if len(fp.emptyPart) > 0 {
		i, j := fp.emptyPart[0][0], fp.emptyPart[0][1]
		return fmt.Sprintf("* GenerateContentRequest.contents[%d].parts[%d].data: required oneof field 'data' must have one initialized field\n", i, j), false
	}
	if fp.both {
		return "response_schema and response_json_schema cannot both be set.", false
	}
	if req.SchemaField != "" && req.ResponseMIMEType != "application/json" {
		return "* GenerateContentRequest.generation_config.response_mime_type: must be application/json when a response schema is set.\n", false
	}
	return "", true
}

// MinimalInstance returns the smallest JSON document the Server considers
// valid against schema (see fakekit.MinimalInstance).
func MinimalInstance(schema json.RawMessage) string { return fakekit.MinimalInstance(schema) }
