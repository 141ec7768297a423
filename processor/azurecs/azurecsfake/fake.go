// Package azurecsfake is a wire-faithful fake of Azure AI Content Safety's
// text:analyze for tests, drills and benchmarks, with scriptable severities
// and faults, on a local httptest server. It is to processor/azurecs what
// net/http/httptest is to net/http.
//
// It does not import the azurecs adapter, so what it speaks is written down
// here, not borrowed from the code it tests. The shared scaffolding (server
// lifecycle, fault queue, call counting, wire helpers) comes from
// lab/fakekit. It keeps the text of every request: it must never
// answer real traffic or hold real documents.
package azurecsfake

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stetlabs/stet/lab/fakekit"
)

// Wire facts the fake shares with the adapter, copied: a fake does not
// import its adapter.
const (
	// The harm categories of text:analyze, in the order the service
	// reports them (azurecs.Categories).
	hate     = "Hate"
	selfHarm = "SelfHarm"
	sexual   = "Sexual"
	violence = "Violence"

	// The output types of text:analyze: how many severity levels it reports.
	fourSeverityLevels  = "FourSeverityLevels"  // severities 0, 2, 4, 6
	eightSeverityLevels = "EightSeverityLevels" // severities 0 to 7

	// maxTextLength is the most Unicode code points text:analyze takes in
	// one request (azurecs.MaxTextLength).
	maxTextLength = 10000
)

// categories lists every category, in request order.
var categories = []string{hate, selfHarm, sexual, violence}

// Severities holds one severity per category name ("Hate", "SelfHarm",
// "Sexual", "Violence").
type Severities map[string]int

// FaultKind names a scripted fault of the Server.
type FaultKind string

// Fault kinds. Error kinds answer with the service's error object
// {"error":{"code","message"[,"innererror"]}}; the gateway's own errors
// (401, 403, 429) put the HTTP status in code, as Cognitive Services does.
const (
	RateLimit          FaultKind = "rate_limit"           // 429, code "429" (or Code), Retry-After / retry-after-ms as given
	Unauthorized       FaultKind = "unauthorized"         // 401, code "401", invalid subscription key
	Forbidden          FaultKind = "forbidden"            // 403, code "403", denied by network rules
	Quota              FaultKind = "quota"                // 403, code "403", out of call volume quota
	BadRequest         FaultKind = "bad_request"          // 400, code InvalidRequestBody (or Code)
	ServerError        FaultKind = "server_error"         // Status (default 500): InternalError, or ServerBusy for 503
	HTTPError          FaultKind = "http_error"           // Status (default 400) with Code, for the other statuses
	Disconnect         FaultKind = "disconnect"           // close the connection without answering
	Delay              FaultKind = "delay"                // answer normally after Delay
	TimeoutAfterAnswer FaultKind = "timeout_after_answer" // 200, headers and half the body, then hold until the client leaves
	Malformed          FaultKind = "malformed"            // 200 with a body that is not JSON
	MissingCategory    FaultKind = "missing_category"     // 200 with the last requested category left out
)

// Fault is one scripted answer of the Server.
type Fault struct {
	Kind         FaultKind
	RetryAfter   string        // Retry-After value, seconds or an HTTP-date
	RetryAfterMS int           // retry-after-ms value
	Status       int           // ServerError (default 500), HTTPError (default 400)
	Delay        time.Duration // Delay: wait this long, then answer normally
	// Code overrides error.code of an error kind ("TooManyRequests").
	Code string
	// InnerCode sets error.innererror.code.
	InnerCode string
	// Message overrides error.message of an error kind.
	Message string
	// Header is set on the response after the defaults; a key with no values
	// removes that default header.
	Header http.Header
}

// Rule gives severities to the texts that contain Contains.
type Rule struct {
	Contains   string
	Severities Severities
}

// Options configures a Server.
type Options struct {
	// APIKey, if set, is the only Ocp-Apim-Subscription-Key accepted;
	// requests without it get 401.
	APIKey string
	// Table scripts severities: the first rule whose Contains occurs in the
	// text gives them. Categories a rule leaves out are 0.
	Table []Rule
	// Respond, if set, decides the severities instead of Table. It is
	// called concurrently.
	Respond func(req Request) Severities
	// FaultRate is the share of calls, beyond scripted faults, answered with
	// a random 429 (Retry-After 1), 500 or 503. The draws are reproducible
	// from Seed.
	FaultRate float64
	Seed      int64
	// Latency is added to every answer.
	Latency time.Duration
}

// Request is a decoded text:analyze request as the Server received it.
type Request struct {
	APIVersion         string
	Text               string
	Categories         []string // nil when the request named none
	OutputType         string   // "" when the request named none
	BlocklistNames     []string
	HaltOnBlocklistHit *bool
	Body               []byte // the exact request body
	Header             http.Header
}

// Server is an in-process server speaking the text:analyze wire format
// (POST /contentsafety/text:analyze?api-version=…) with scriptable
// severities and faults. Severities are given on the scale of the request's
// outputType: with FourSeverityLevels a scripted 3 is answered as 2 and 7
// as 6, as the service reports only 0, 2, 4 and 6. It is safe for
// concurrent use. It keeps the text of every request for CallsContaining:
// it is a test tool, not a sink for real documents.
type Server struct {
	opts Options
	// Core: Calls counts every request, rejected and faulted ones included.
	fakekit.Core[Fault]
}

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	f := &Server{
		opts: opts,
		// Random faults: a 429 with Retry-After 1, a 500 or a 503.
		Core: fakekit.Core[Fault]{Faults: fakekit.NewFaults(opts.Seed, 0xac5, opts.FaultRate,
			Fault{Kind: RateLimit, RetryAfter: "1"},
			Fault{Kind: ServerError, Status: http.StatusInternalServerError},
			Fault{Kind: ServerError, Status: http.StatusServiceUnavailable})},
	}
	f.Start(f.serve)
	return f
}

// URL returns the endpoint to configure a client with, as a resource's
// endpoint looks (no /contentsafety suffix).
func (f *Server) URL() string { return f.HTTP.URL() }

// maxFakeRequest bounds a request body.
const maxFakeRequest = 1 << 20

// fakeAPIVersions are the api-versions the fake serves text:analyze under.
var fakeAPIVersions = []string{"2023-10-01", "2024-09-01", "2024-09-15-preview", "2024-12-15-preview"}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, readErr := fakekit.ReadBody(r, maxFakeRequest)
	req, hasText, decodeErr := decodeFakeRequest(body)
	req.Header = r.Header.Clone()
	req.APIVersion = r.URL.Query().Get("api-version")

	if !f.Arrive(r, decodeErr == nil, req.Text, f.opts.Latency) {
		return
	}
	if f.opts.APIKey != "" && r.Header.Get("Ocp-Apim-Subscription-Key") != f.opts.APIKey {
		writeError(w, http.StatusUnauthorized, nil, wireError{Code: "401", Message: invalidKeyMessage})
		return
	}
	if r.URL.Path != "/contentsafety/text:analyze" || r.Method != http.MethodPost || !slices.Contains(fakeAPIVersions, req.APIVersion) {
		writeError(w, http.StatusNotFound, nil, wireError{Code: "404", Message: "Resource not found"})
		return
	}
	if readErr != nil || len(body) > maxFakeRequest || decodeErr != nil {
		writeError(w, http.StatusBadRequest, nil, wireError{Code: "InvalidRequestBody", Message: "The request body is not valid JSON."})
		return
	}
	if e, ok := validateFakeRequest(req, hasText); !ok {
		writeError(w, http.StatusBadRequest, nil, e)
		return
	}

	fault, ok := f.Faults.Next()
	if !ok {
		f.write(w, f.analysis(req, false), nil)
		return
	}
	f.fault(w, r, req, fault)
}

// invalidKeyMessage is the gateway's 401 message.
const invalidKeyMessage = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."

func (f *Server) fault(w http.ResponseWriter, r *http.Request, req Request, ft Fault) {
	switch ft.Kind {
	case RateLimit:
		h := http.Header{}
		wait := 1
		if ft.RetryAfter != "" {
			h.Set("Retry-After", ft.RetryAfter)
			if s, err := strconv.Atoi(ft.RetryAfter); err == nil {
				wait = s
			}
		}
		if ft.RetryAfterMS > 0 {
			h.Set("retry-after-ms", strconv.Itoa(ft.RetryAfterMS))
		}
		writeError(w, http.StatusTooManyRequests, []http.Header{h, ft.Header}, ft.override(wireError{
			Code:    "429",
			Message: fmt.Sprintf("Rate limit is exceeded. Try again in %d seconds.", wait),
		}))
	case Unauthorized:
		writeError(w, http.StatusUnauthorized, []http.Header{ft.Header}, ft.override(wireError{Code: "401", Message: invalidKeyMessage}))
	case Forbidden:
		writeError(w, http.StatusForbidden, []http.Header{ft.Header}, ft.override(wireError{
			Code:    "403",
			Message: "Access denied due to Virtual Network/Firewall rules.",
		}))
	case Quota:
		writeError(w, http.StatusForbidden, []http.Header{ft.Header}, ft.override(wireError{
			Code:    "403",
			Message: "Out of call volume quota for ContentSafety F0 pricing tier. Please retry after 7 days. To increase your call volume switch to a paid tier.",
		}))
	case BadRequest:
		writeError(w, http.StatusBadRequest, []http.Header{ft.Header}, ft.override(wireError{
			Code:    "InvalidRequestBody",
			Message: "One or more fields in the request body do not match the API definition.",
		}))
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		e := wireError{Code: "InternalError", Message: "An unexpected error occurred on the server side."}
		if status == http.StatusServiceUnavailable {
			e = wireError{Code: "ServerBusy", Message: "The server is busy. Please retry later."}
		}
		writeError(w, status, []http.Header{ft.Header}, ft.override(e))
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		writeError(w, status, []http.Header{ft.Header}, ft.override(wireError{Code: strconv.Itoa(status), Message: http.StatusText(status)}))
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		if f.HTTP.Sleep(r, ft.Delay) {
			f.write(w, f.analysis(req, false), ft.Header)
		}
	case TimeoutAfterAnswer:
		body := f.analysis(req, false)
		setDefaultHeaders(w.Header())
		f.HTTP.HalfAnswer(w, r, http.StatusOK, body, ft.Header)
	case Malformed:
		f.write(w, []byte(fakekit.Cut(string(f.analysis(req, false)))), ft.Header)
	case MissingCategory:
		f.write(w, f.analysis(req, true), ft.Header)
	default:
		writeError(w, http.StatusInternalServerError, nil, wireError{Code: "InternalError", Message: "unknown fake fault " + string(ft.Kind)})
	}
}

func (ft Fault) override(e wireError) wireError {
	if ft.Code != "" {
		e.Code = ft.Code
	}
	if ft.Message != "" {
		e.Message = ft.Message
	}
	if ft.InnerCode != "" {
		e.InnerCode = ft.InnerCode
	}
	return e
}

func (f *Server) write(w http.ResponseWriter, body []byte, extra http.Header) {
	setDefaultHeaders(w.Header())
	fakekit.Reply(w, http.StatusOK, body, extra)
}

// severities decides the scripted severities for req.
func (f *Server) severities(req Request) Severities {
	if f.opts.Respond != nil {
		return f.opts.Respond(req)
	}
	for _, rule := range f.opts.Table {
		if strings.Contains(req.Text, rule.Contains) {
			return rule.Severities
		}
	}
	return nil
}

// The analysis object, fields in the service's order.
type wireAnalysis struct {
	BlocklistsMatch    []struct{}     `json:"blocklistsMatch"`
	CategoriesAnalysis []wireCategory `json:"categoriesAnalysis"`
}

type wireCategory struct {
	Category string `json:"category"`
	Severity int    `json:"severity"`
}

// analysis answers the requested categories (all four when none were
// named), in request order; dropLast leaves the last one out.
func (f *Server) analysis(req Request, dropLast bool) []byte {
	sev := f.severities(req)
	cats := req.Categories
	if len(cats) == 0 {
		cats = categories
	}
	out := wireAnalysis{BlocklistsMatch: []struct{}{}, CategoriesAnalysis: []wireCategory{}}
	seen := map[string]bool{}
	for _, c := range cats {
		if seen[c] {
			continue
		}
		seen[c] = true
		out.CategoriesAnalysis = append(out.CategoriesAnalysis, wireCategory{Category: c, Severity: level(sev[c], req.OutputType)})
	}
	if dropLast && len(out.CategoriesAnalysis) > 0 {
		out.CategoriesAnalysis = out.CategoriesAnalysis[:len(out.CategoriesAnalysis)-1]
	}
	return fakekit.Marshal(out)
}

// level puts a scripted severity on the output type's scale.
func level(v int, outputType string) int {
	v = min(max(v, 0), 7)
	if outputType != eightSeverityLevels {
		v -= v % 2
	}
	return v
}

// wireError is what a fake error answer says.
type wireError struct {
	Code      string
	Message   string
	InnerCode string
}

// wireErrorObject is the service's error object, Azure.Core's ErrorResponse.
type wireErrorObject struct {
	Code       string          `json:"code"`
	Message    string          `json:"message"`
	InnerError *wireInnerError `json:"innererror,omitempty"`
}

type wireInnerError struct {
	Code string `json:"code"`
}

// writeError answers status with the error object; extra headers are merged
// over the defaults in order. The x-ms-error-code header carries the code,
// as the service's API definition declares.
func writeError(w http.ResponseWriter, status int, extra []http.Header, e wireError) {
	obj := wireErrorObject{Code: e.Code, Message: e.Message}
	if e.InnerCode != "" {
		obj.InnerError = &wireInnerError{Code: e.InnerCode}
	}
	body := fakekit.Marshal(struct {
		Error wireErrorObject `json:"error"`
	}{obj})
	h := w.Header()
	setDefaultHeaders(h)
	if status != http.StatusUnauthorized && status != http.StatusForbidden && status != http.StatusTooManyRequests && status != http.StatusNotFound {
		// The service's errors carry x-ms-error-code, as its API
		// definition declares; the fake leaves it off the answers that come
		// from the API Management gateway in front of it (401, 403, 404,
		// 429), whose code is the HTTP status.
		h.Set("x-ms-error-code", e.Code)
	}
	fakekit.Reply(w, status, body, extra...)
}

func setDefaultHeaders(h http.Header) {
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("apim-request-id", fakekit.UUIDv4())
	h.Set("x-envoy-upstream-service-time", "11")
	h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains; preload")
	h.Set("x-content-type-options", "nosniff")
}

// The request as sent on the wire.
type wireRequest struct {
	Text               *string  `json:"text"`
	Categories         []string `json:"categories"`
	BlocklistNames     []string `json:"blocklistNames"`
	HaltOnBlocklistHit *bool    `json:"haltOnBlocklistHit"`
	OutputType         *string  `json:"outputType"`
}

// decodeFakeRequest decodes body; hasText says whether text was given.
func decodeFakeRequest(body []byte) (req Request, hasText bool, err error) {
	req = Request{Body: body}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return req, false, err
	}
	if wr.Text != nil {
		req.Text = *wr.Text
	}
	req.Categories = wr.Categories
	req.BlocklistNames = wr.BlocklistNames
	req.HaltOnBlocklistHit = wr.HaltOnBlocklistHit
	if wr.OutputType != nil {
		req.OutputType = *wr.OutputType
	}
	return req, wr.Text != nil, nil
}

// validateFakeRequest checks what the API definition declares: text is
// required and at most 10,000 code points; categories and outputType take
// only their enum values.
func validateFakeRequest(req Request, hasText bool) (wireError, bool) {
	invalid := func(msg string) (wireError, bool) {
		return wireError{Code: "InvalidRequestBody", Message: msg}, false
	}
	if !hasText {
		return invalid("The text field is required.")
	}
	if utf8.RuneCountInString(req.Text) > maxTextLength {
		return invalid("The text is too long: at most 10000 characters are supported.")
	}
	for _, c := range req.Categories {
		if !slices.Contains(categories, c) {
			return invalid("Invalid category " + strconv.Quote(c) + ".")
		}
	}
	if req.OutputType != "" && req.OutputType != fourSeverityLevels && req.OutputType != eightSeverityLevels {
		return invalid("Invalid outputType.")
	}
	return wireError{}, true
}
