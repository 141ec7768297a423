// Package gemini is stet's processor for the Gemini API (generateContent with
// a JSON response schema), built on the official SDK google.golang.org/genai.
// It talks to the Gemini API backend only, never to Vertex AI.
//
// The adapter makes exactly one HTTP request per Extract call: the SDK's
// retries and its automatic continuation are off, because stet owns the retry
// policy. Where the text goes is decided by Config alone: the base URL, key
// and backend are always set explicitly, so the SDK's environment variables
// (GOOGLE_API_KEY, GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL,
// GOOGLE_GENAI_USE_VERTEXAI, …) have no effect. Every failure is classified
// once, here, into a *stet.ProcessorError. The adapter must never put the
// provider's error message, the prompt or the model's output into an error
// string or a log: any of them may quote the document.
//
// Its wire-faithful fake server, used by tests, drills and benchmarks, is
// package geminifake.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "gemini"

// DefaultBaseURL is the Gemini API host. The SDK appends the API version.
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// APIVersion is the Gemini API version every call uses.
const APIVersion = "v1beta"

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 60 * time.Second

var errCallTimeout = errors.New("gemini call timed out")

// Config configures a Client. BaseURL is the API host without the version
// path; default DefaultBaseURL. APIKey is sent as x-goog-api-key and is
// required: with an empty key the SDK would fall back to GOOGLE_API_KEY or
// GEMINI_API_KEY. Model is "gemini-2.5-flash", with or without "models/".
// HTTPClient's transport is wrapped (in a copy) to record what the wire
// said; the client itself is not modified.
type Config struct {
	processor.Common

	// Temperature, if set, is sent as generationConfig.temperature. Nil
	// leaves the model's default, which Google recommends for Gemini 3
	// models (lower values can make them loop).
	Temperature *float32
	// MaxOutputTokens, if positive, caps the answer (thinking included).
	MaxOutputTokens int32
}

// Client is a stet.Processor backed by generateContent. It is safe for
// concurrent use.
type Client struct {
	info            stet.ProcessorInfo
	model           string
	timeout         time.Duration
	temperature     *float32
	maxOutputTokens int32
	models          *genai.Models
	now             func() time.Time // for Retry-After HTTP-dates
}

var _ stet.Processor = (*Client)(nil)

// New returns a Client for cfg. It makes no network call.
func New(cfg Config) (*Client, error) {
	if err := cfg.Check("gemini"); err != nil {
		return nil, err
	}
	if !validModel(cfg.Model) {
		return nil, fmt.Errorf("gemini: config %s: model is required and must be a model name", cfg.ID)
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("gemini: config %s: api key is required", cfg.ID)
	}
	if cfg.MaxOutputTokens < 0 {
		return nil, fmt.Errorf("gemini: config %s: max output tokens must not be negative", cfg.ID)
	}
	base, u, err := cfg.ParseBaseURL("gemini", DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	if p := strings.TrimSuffix(u.Path, "/"); strings.HasSuffix(p, "/v1beta") || strings.HasSuffix(p, "/v1") {
		// The SDK appends the version itself; a second one makes every
		// call a 404.
		return nil, fmt.Errorf("gemini: config %s: base_url must not include the API version", cfg.ID)
	}
	timeout := cfg.TimeoutOr(DefaultTimeout)

	sdk, err := newSDK(cfg, base, func(next http.RoundTripper) http.RoundTripper { return captureTransport{next: next} })
	if err != nil {
		return nil, err
	}

	var temp *float32
	if cfg.Temperature != nil {
		temp = genai.Ptr(*cfg.Temperature)
	}
	info := cfg.Info(Kind)
	info.Capabilities = []string{"sync", "json_schema"}
	return &Client{
		info:            info,
		model:           cfg.Model,
		timeout:         timeout,
		temperature:     temp,
		maxOutputTokens: cfg.MaxOutputTokens,
		models:          sdk.Models,
		now:             time.Now,
	}, nil
}

// newSDK builds the SDK client of a processor: its HTTP client (a copy of
// cfg.HTTPClient) with its transport wrapped by wrap. Backend, key and base
// URL are all explicit, so none of the SDK's environment variables can
// change where text goes. Attempts 1 is no retry (nil retry options mean the
// same in v1.77.0, but say it).
func newSDK(cfg Config, base string, wrap func(http.RoundTripper) http.RoundTripper) (*genai.Client, error) {
	hc := cfg.Client(processor.MaxResponseBytes)
	hc.Transport = wrap(hc.Transport)
	sdk, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:     cfg.APIKey,
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: hc,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:      base,
			APIVersion:   APIVersion,
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
	})
	if err != nil {
		// The SDK's error prints the whole client config, API key included:
		// it must not travel.
		return nil, fmt.Errorf("gemini: config %s: the SDK rejected the client configuration", cfg.ID)
	}
	return sdk, nil
}

// validModel accepts what the SDK will put in the URL path unchanged.
func validModel(m string) bool {
	if m == "" || len(m) > 200 || strings.Contains(m, "..") {
		return false
	}
	for i := 0; i < len(m); i++ {
		if ch := m[i]; !isNameByte(ch) && ch != '.' && ch != '/' {
			return false
		}
	}
	return true
}

// Info declares the processor's identity and data boundary.
func (c *Client) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// Extract sends one generateContent request and returns the model's JSON.
// Every error is a *stet.ProcessorError. The output is checked to be JSON;
// validating it against the profile schema is the pipeline's job.
func (c *Client) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	if err := processor.CheckParamsSchema(p.Schema); err != nil {
		return nil, err
	}
	contents, config := c.request(p)

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	capt := &capture{}
	start := time.Now()
	resp, err := c.models.GenerateContent(context.WithValue(callCtx, captureKey{}, capt), c.model, contents, config)
	latency := time.Since(start)
	if err != nil {
		return nil, c.classifyError(ctx, callCtx, err, capt)
	}
	return c.result(resp, capt, latency)
}

// request builds the call: the rendered prompt as one user turn, then one
// model/user pair per repair turn, and the profile schema as
// generationConfig.responseJsonSchema.
//
// responseJsonSchema (not responseSchema) because it takes JSON Schema as
// written: responseSchema is an OpenAPI subset that rejects
// additionalProperties and type arrays with a 400, which profile schemas use.
func (c *Client) request(p stet.ExtractParams) ([]*genai.Content, *genai.GenerateContentConfig) {
	contents := []*genai.Content{genai.NewContentFromText(p.Prompt.Reveal(), genai.RoleUser)}
	for _, turn := range p.Repair {
		out := string(turn.Output)
		if out == "" {
			// The SDK drops empty text (omitempty), and the API refuses
			// a part with no data.
			out = "(no answer)"
		}
		contents = append(contents,
			genai.NewContentFromText(out, genai.RoleModel),
			genai.NewContentFromText(processor.RepairMessage(turn.Problems), genai.RoleUser),
		)
	}
	config := &genai.GenerateContentConfig{
		ResponseMIMEType:   "application/json",
		ResponseJsonSchema: json.RawMessage(p.Schema),
		MaxOutputTokens:    c.maxOutputTokens,
		// On by default in v1.77.0: a CONTINUATION answer would be
		// re-sent, a second billed call stet never asked for.
		AutomaticContinuation: genai.Ptr(false),
	}
	if c.temperature != nil {
		config.Temperature = genai.Ptr(*c.temperature)
	}
	return contents, config
}

// result turns a 200 response into an Extraction, or into a refusal,
// invalid_output or unsupported error when the model gave no usable answer.
func (c *Client) result(resp *genai.GenerateContentResponse, capt *capture, latency time.Duration) (*stet.Extraction, error) {
	requestID := capt.RequestID
	if resp != nil {
		if id := safeID(resp.ResponseID); id != "" {
			requestID = id
		}
	}
	fail := func(class stet.FailureClass, code string, err error) *stet.ProcessorError {
		return &stet.ProcessorError{
			Class:      class,
			StatusCode: capt.Status,
			Code:       processor.SafeCode(code),
			RequestID:  requestID,
			Err:        err,
		}
	}
	if resp == nil {
		return nil, fail(stet.FailureTransient, "", errors.New("empty response"))
	}
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" && pf.BlockReason != genai.BlockedReasonUnspecified {
		// The input itself was refused; asking again changes nothing.
		return nil, fail(stet.FailureRefusal, "prompt."+string(pf.BlockReason), errors.New("prompt blocked by the provider"))
	}
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		// Neither an answer nor a block: a server fault, not something a
		// repair prompt could fix.
		return nil, fail(stet.FailureTransient, "", errors.New("response has no candidates"))
	}
	cand := resp.Candidates[0]
	text := candidateText(cand)
	reason := string(cand.FinishReason)
	switch class := finishClass(cand.FinishReason); {
	case class == stet.FailureRefusal:
		return nil, fail(class, reason, errors.New("answer withheld by the provider's safety filters"))
	case class == stet.FailureUnsupported:
		return nil, fail(class, reason, errors.New("the model cannot answer in this language"))
	case class == stet.FailureInvalidOutput:
		return nil, processor.InvalidOutput(fail(class, reason, errors.New("answer stopped before completion")), []byte(text), finishProblem(cand.FinishReason))
	case !json.Valid([]byte(text)):
		return nil, processor.InvalidOutput(fail(stet.FailureInvalidOutput, "", errors.New("output is not valid JSON")), []byte(text), "not valid JSON")
	}
	model := resp.ModelVersion
	if model == "" {
		model = c.model
	}
	out := &stet.Extraction{
		Output:     json.RawMessage(text),
		Raw:        capt.Raw,
		Model:      model,
		RequestID:  requestID,
		StatusCode: capt.Status,
		Latency:    latency,
	}
	if u := resp.UsageMetadata; u != nil {
		out.InputTokens = int(u.PromptTokenCount)
		// Thinking is billed as output.
		out.OutputTokens = int(u.CandidatesTokenCount) + int(u.ThoughtsTokenCount)
	}
	return out, nil
}

// candidateText joins the candidate's text parts, leaving out thoughts.
func candidateText(cand *genai.Candidate) string {
	if cand.Content == nil {
		return ""
	}
	var sb strings.Builder
	for _, part := range cand.Content.Parts {
		if part != nil && !part.Thought {
			sb.WriteString(part.Text)
		}
	}
	return sb.String()
}

// finishClass maps a candidate's finish reason to a failure class;
// FailureNone means the model finished normally.
func finishClass(r genai.FinishReason) stet.FailureClass {
	switch r {
	case "", genai.FinishReasonUnspecified, genai.FinishReasonStop:
		return stet.FailureNone
	case genai.FinishReasonSafety, genai.FinishReasonProhibitedContent, genai.FinishReasonBlocklist,
		genai.FinishReasonSPII, genai.FinishReasonImageSafety, genai.FinishReasonImageProhibitedContent:
		return stet.FailureRefusal
	case genai.FinishReasonLanguage:
		return stet.FailureUnsupported
	default:
		// MAX_TOKENS and CONTINUATION cut the answer; RECITATION, OTHER,
		// tool-call mishaps and reasons this SDK does not know yet stopped
		// it for a reason a second, corrected answer may avoid.
		return stet.FailureInvalidOutput
	}
}

// finishProblem is the validator-style message a repair turn sends back.
func finishProblem(r genai.FinishReason) string {
	switch r {
	case genai.FinishReasonMaxTokens, genai.FinishReasonContinuation:
		return "output truncated at the token limit"
	case genai.FinishReasonRecitation:
		return "output stopped for reciting source material; answer in your own words"
	default:
		if code := processor.SafeCode(string(r)); code != "" {
			return "output stopped before completion (" + code + ")"
		}
		return "output stopped before completion"
	}
}

// capture records what the wire said for one call.
type capture = processor.Capture

type captureKey struct{}

// captureTransport fills the capture carried by the request's context. The
// SDK calls it synchronously from Extract's goroutine.
type captureTransport struct{ next http.RoundTripper }

func (t captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	capt, _ := req.Context().Value(captureKey{}).(*capture)
	if capt == nil {
		return t.next.RoundTrip(req)
	}
	return record(capt, t.next, req, processor.MaxResponseBytes)
}

// record sends req through next and records the answer in capt, its body
// read in full up to limit bytes. A call of several requests (an upload)
// keeps the last.
func record(capt *capture, next http.RoundTripper, req *http.Request, limit int64) (*http.Response, error) {
	res, err := capt.Record(req, next.RoundTrip, limit, "x-request-id")
	// Google's front end sends no request ID header; a gateway in front of
	// it may.
	capt.RequestID = safeID(capt.RequestID)
	return res, err
}

func isNameByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-'
}

// safeID keeps an ID only if it looks like one (responseId is base64url);
// it reaches the ledger and logs.
func safeID(id string) string {
	if id == "" || len(id) > 128 {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if ch := id[i]; !isNameByte(ch) && ch != '.' && ch != ':' && ch != '=' {
			return ""
		}
	}
	return id
}
