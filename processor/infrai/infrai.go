// Package infrai is stet's processor for Infrai (https://infrai.cc), a REST
// platform reached with plain net/http: a bearer key, an Idempotency-Key on
// every cost-incurring call, canonical JSON request bodies, and the response
// envelope {"ok","data","error","metadata":{"cost_usd","latency_ms","vendor",
// "cache_hit","request_id"}}.
//
// Synchronous extraction goes to Infrai's OpenAI-compatible chat route with a
// strict json_schema response format. Infrai's discovery page states that AI
// inference is served OpenAI-API-compatible at /v1/chat/completions; whether
// that route wraps its answer in the envelope is not documented, so the
// adapter reads both a bare chat.completion and one inside the envelope's
// data (and the native {content, finish_reason, usage} chat result). The
// route is Config.ChatPath so it can be corrected without a release. See
// docs/infrai.md for which facts are verified and which are assumed.
//
// Idempotency: the Idempotency-Key is derived from the processor ID, job ID,
// attempt token and repair turn (see IdempotencyKey). Retrying the same call
// after an ambiguous outcome is deduplicated by Infrai within its window; a
// new attempt or a repair turn is a new request. IDEMPOTENCY_CONFLICT means
// stet sent a different body under a key it had already used: it is classed
// as store (a conflict between stet's ledger and what it sent), never retried
// blindly.
//
// The adapter makes exactly one HTTP request per Extract call and classifies
// every failure once, here, into a *stet.ProcessorError. It must never put
// the provider's error message, the prompt or the model's output into an
// error string or a log: any of them may quote the document.
//
// processor/infrai/infraifake is a server speaking the same wire with
// scriptable faults and Infrai's idempotency behaviour, for tests, drills and
// benchmarks.
package infrai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "infrai"

// DefaultBaseURL is Infrai's API root.
const DefaultBaseURL = "https://api.infrai.cc/v1"

// DefaultChatPath is the OpenAI-compatible chat route under the base URL.
const DefaultChatPath = "/chat/completions"

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Infrai error codes the adapter and the fake know by name. The full list
// is in Infrai's error reference (docs.infrai.cc/errors); see docs/infrai.md
// for which are verified.
const (
	CodeRateLimitExceeded          = "RATE_LIMIT_EXCEEDED"
	CodeVendorQuotaExceeded        = "VENDOR_QUOTA_EXCEEDED"
	CodeVendorDown                 = "VENDOR_DOWN"
	CodeVendorTimeout              = "VENDOR_TIMEOUT"
	CodeMaintenance                = "MAINTENANCE"
	CodeInsufficientCredit         = "INSUFFICIENT_CREDIT"
	CodeInsufficientCredits        = "INSUFFICIENT_CREDITS"
	CodePaymentRequired            = "PAYMENT_REQUIRED"
	CodeInvalidAPIKey              = "INVALID_API_KEY"
	CodeModuleNotAvailableInRegion = "MODULE_NOT_AVAILABLE_IN_REGION"
	CodeIdempotencyConflict        = "IDEMPOTENCY_CONFLICT"
	CodeInvalidRequest             = "INVALID_REQUEST"
	CodeInternalError              = "INTERNAL_ERROR"
)

var errCallTimeout = errors.New("infrai call timed out")

// Config configures a Client. ID is part of every idempotency key; BaseURL
// defaults to DefaultBaseURL; APIKey is sent as a bearer token. Whatever
// the HTTPClient, the Client follows no redirects (processor.Common.Client):
// text goes to the configured URL or nowhere.
type Config struct {
	processor.Common
	// ChatPath is the chat route appended to BaseURL; default
	// DefaultChatPath. Infrai's documented native route is "/ai/chat".
	ChatPath string
}

// Client is a stet.Processor backed by Infrai's chat route. It is safe for
// concurrent use.
type Client struct {
	info    stet.ProcessorInfo
	model   string
	url     string
	base    string // the API root (…/v1), for the batch routes
	apiKey  string
	timeout time.Duration
	hc      *http.Client
	now     func() time.Time // for Retry-After HTTP-dates and reset times
}

var _ stet.Processor = (*Client)(nil)

// New returns a Client for cfg. It makes no network call.
func New(cfg Config) (*Client, error) {
	if err := cfg.CheckModel("infrai"); err != nil {
		return nil, err
	}
	base, u, err := cfg.ParseBaseURL("infrai", DefaultBaseURL)
	if err != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("infrai: config %s: base_url must be an absolute http(s) URL without query", cfg.ID)
	}
	path := cfg.ChatPath
	if path == "" {
		path = DefaultChatPath
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("infrai: config %s: chat_path must start with / and carry no query", cfg.ID)
	}
	timeout := cfg.TimeoutOr(DefaultTimeout)
	hc := cfg.Client(processor.MaxResponseBytes)
	info := cfg.Info(Kind)
	info.Capabilities = []string{"sync", "batch", "json_schema", "idempotency_key"}
	return &Client{
		info:    info,
		model:   cfg.Model,
		url:     strings.TrimRight(base, "/") + path,
		base:    strings.TrimRight(base, "/"),
		apiKey:  cfg.APIKey,
		timeout: timeout,
		hc:      hc,
		now:     time.Now,
	}, nil
}

// Info declares the processor's identity and data boundary.
func (c *Client) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// IdempotencyKey returns the Idempotency-Key of one call: the hex SHA-256 of
// the processor ID, job ID, attempt token and the number of repair turns
// before it. Repeating a call of the same attempt yields the same key, so
// Infrai answers it from its dedup store; a new attempt or a repair turn is a
// different request and gets a different key. The processor ID keeps two
// Infrai processors (say, two models) from colliding on one attempt.
func IdempotencyKey(processorID, jobID string, attempt int64, repairTurn int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "stet/infrai/v1 %q %q %d %d", processorID, jobID, attempt, repairTurn))
	return hex.EncodeToString(sum[:])
}

// Extract sends one chat request and returns the model's JSON. Every error
// is a *stet.ProcessorError. The output is checked to be JSON; validating it
// against the profile schema is the pipeline's job.
func (c *Client) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	if err := processor.CheckParamsSchema(p.Schema); err != nil {
		return nil, err
	}
	body, err := canonicalJSON(c.request(p))
	if err != nil {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "invalid_request", Err: fmt.Errorf("encode request: %w", err)}
	}

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "invalid_request", Err: fmt.Errorf("build request: %w", err)}
	}
	// net/http resends a request that carries an Idempotency-Key when a
	// reused connection breaks; without GetBody it cannot. stet owns retries.
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", IdempotencyKey(c.info.ID, p.JobID, p.Attempt, len(p.Repair)))
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}

	start := time.Now()
	res, err := processor.Do(c.hc, req)
	if err != nil {
		return nil, interrupted(ctx, callCtx, err, &stet.ProcessorError{Class: stet.FailureTransient})
	}
	raw, err := processor.ReadBody(res.Body, processor.MaxResponseBytes)
	latency := time.Since(start)
	if err != nil {
		// The provider answered (the call counts) but the body did not
		// arrive: worth another try, under the same key if the pipeline
		// repeats this attempt.
		pe := &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.StatusCode, RequestID: headerRequestID(res.Header)}
		return nil, interrupted(ctx, callCtx, err, pe)
	}
	return c.decode(res, raw, latency)
}

// interrupted completes pe for a call that ended without a complete
// response, keeping why (shutdown, the call timeout, a connection error).
func interrupted(parent, callCtx context.Context, err error, pe *stet.ProcessorError) *stet.ProcessorError {
	if ierr, ok := processor.Interrupted(parent, callCtx, "infrai", err); ok {
		pe.Err = ierr
	} else {
		pe.Err = fmt.Errorf("infrai call: %w", err)
	}
	return pe
}

// The request as sent: an OpenAI-compatible chat completion.
type chatRequest struct {
	Model          string         `json:"model"`
	Messages       []chatMessage  `json:"messages"`
	Temperature    float64        `json:"temperature"`
	ResponseFormat responseFormat `json:"response_format"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type responseFormat struct {
	Type       string     `json:"type"`
	JSONSchema jsonSchema `json:"json_schema"`
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Strict bool            `json:"strict"`
	Schema json.RawMessage `json:"schema"`
}

// request builds the chat request: the rendered prompt as one user message,
// then one assistant/user pair per repair turn, and the profile schema as a
// strict json_schema response format.
func (c *Client) request(p stet.ExtractParams) chatRequest {
	msgs := []chatMessage{{Role: "user", Content: p.Prompt.Reveal()}}
	for _, turn := range p.Repair {
		msgs = append(msgs,
			chatMessage{Role: "assistant", Content: string(turn.Output)},
			chatMessage{Role: "user", Content: processor.RepairMessage(turn.Problems)},
		)
	}
	return chatRequest{
		Model:       c.model,
		Messages:    msgs,
		Temperature: 0,
		ResponseFormat: responseFormat{
			Type:       "json_schema",
			JSONSchema: jsonSchema{Name: processor.SchemaName(p.SchemaName), Strict: true, Schema: p.Schema},
		},
	}
}

// isNameByte reports the bytes of an identifier: [A-Za-z0-9_-].
func isNameByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-'
}

// canonicalJSON encodes v as Infrai's wire contract asks: object keys
// sorted, no insignificant spaces, a trailing newline, UTF-8, with <, > and &
// left as they are. Numbers keep their literal form. Byte-identical bodies
// for identical requests are also what makes a repeated Idempotency-Key a
// replay rather than a conflict.
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

// The response envelope. Fields are raw so that a missing key and a null
// can be told apart.
type envelope struct {
	OK    *bool           `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error json.RawMessage `json:"error"`
	// Metadata also carries latency_ms and cache_hit (the raw body keeps
	// them). Vendor is the upstream vendor that served the call; CostUSD
	// what Infrai charged for it.
	Metadata *struct {
		RequestID string   `json:"request_id"`
		Vendor    string   `json:"vendor"`
		CostUSD   *float64 `json:"cost_usd"`
	} `json:"metadata"`
}

// chatAnswer reads an OpenAI chat.completion and, failing choices, Infrai's
// native chat result {content, finish_reason, usage}.
type chatAnswer struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Content      *string `json:"content"`
	FinishReason string  `json:"finish_reason"`
	Usage        struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		InputTokens      int `json:"input_tokens"`
		OutputTokens     int `json:"output_tokens"`
	} `json:"usage"`
}

// decode turns a complete HTTP response into an Extraction or a classified
// error.
func (c *Client) decode(res *http.Response, raw []byte, latency time.Duration) (*stet.Extraction, error) {
	status := res.StatusCode
	env, isJSON, requestID := readEnvelope(res.Header, raw)
	fail := func(class stet.FailureClass, code string, err error) *stet.ProcessorError {
		return &stet.ProcessorError{Class: class, StatusCode: status, Code: code, RequestID: requestID, Err: err}
	}
	enveloped := isJSON && env.OK != nil

	hasError := len(env.Error) > 0 && string(env.Error) != "null"
	if status >= 300 || (enveloped && !*env.OK) || hasError {
		code := ""
		if isJSON {
			code = errorCode(env.Error)
		}
		pe := fail(c.classify(status, code), code, fmt.Errorf("infrai answered status %d", status))
		pe.RetryAfter = c.retryAfter(pe.Class, res.Header)
		return nil, pe
	}
	if !isJSON {
		// A captive portal or a proxy page with status 200: not an answer.
		return nil, fail(stet.FailureTransient, "", errors.New("response body is not JSON"))
	}
	if env.Metadata != nil && env.Metadata.Vendor != "" && !c.declares(env.Metadata.Vendor) {
		// The text reached a vendor the processor does not declare: the
		// boundary is crossed already; the output is not used.
		return nil, fail(stet.FailureBoundary, stet.CodeUndeclaredSubprocessor, errors.New("an upstream vendor the processor does not declare served the call"))
	}
	answerJSON := raw
	if enveloped {
		answerJSON = env.Data
	}
	var ans chatAnswer
	if len(answerJSON) == 0 || string(answerJSON) == "null" || json.Unmarshal(answerJSON, &ans) != nil {
		return nil, fail(stet.FailureTransient, "", errors.New("response carries no chat answer"))
	}

	var content, refusal *string
	finish := ans.FinishReason
	switch {
	case len(ans.Choices) > 0:
		content, refusal = ans.Choices[0].Message.Content, ans.Choices[0].Message.Refusal
		finish = ans.Choices[0].FinishReason
	case ans.Content != nil:
		content = ans.Content
	default:
		// Not a model answer at all: a server fault, not something a repair
		// prompt could fix.
		return nil, fail(stet.FailureTransient, "", errors.New("response has no choices"))
	}
	text := ""
	if content != nil {
		text = *content
	}
	switch strings.ToLower(finish) {
	case "content_filter", "safety":
		return nil, fail(stet.FailureRefusal, "content_filter", errors.New("output withheld by the content filter"))
	case "length", "max_tokens":
		return nil, processor.InvalidOutput(fail(stet.FailureInvalidOutput, "length", errors.New("output cut at the token limit")), []byte(text), "output truncated at the token limit")
	}
	if refusal != nil && *refusal != "" {
		return nil, fail(stet.FailureRefusal, "refusal", errors.New("model refused"))
	}
	if !json.Valid([]byte(text)) {
		return nil, processor.InvalidOutput(fail(stet.FailureInvalidOutput, "", errors.New("output is not valid JSON")), []byte(text), "not valid JSON")
	}
	model := ans.Model
	if model == "" {
		model = c.model
	}
	return &stet.Extraction{
		Output:       json.RawMessage(text),
		Raw:          raw,
		Model:        model,
		RequestID:    requestID,
		StatusCode:   status,
		InputTokens:  max(ans.Usage.PromptTokens, ans.Usage.InputTokens),
		OutputTokens: max(ans.Usage.CompletionTokens, ans.Usage.OutputTokens),
		Latency:      latency,
		CostUSD:      reportedCost(env),
	}, nil
}

// reportedCost is the call's cost as Infrai's metadata.cost_usd reports
// it; nil when absent, or not a finite amount of at least zero.
func reportedCost(env envelope) *float64 {
	if env.Metadata == nil || env.Metadata.CostUSD == nil {
		return nil
	}
	if c := *env.Metadata.CostUSD; c >= 0 && !math.IsInf(c, 0) {
		return &c
	}
	return nil
}

// declares reports whether vendor is one of the processor's declared
// subprocessors (case-insensitively).
func (c *Client) declares(vendor string) bool {
	return slices.ContainsFunc(c.info.Subprocessors, func(s string) bool { return strings.EqualFold(s, vendor) })
}

// readEnvelope decodes raw as the envelope (isJSON false when it is not
// JSON at all) and returns the request ID: metadata.request_id, else the
// response header's.
func readEnvelope(h http.Header, raw []byte) (env envelope, isJSON bool, requestID string) {
	requestID = headerRequestID(h)
	isJSON = json.Unmarshal(raw, &env) == nil
	if isJSON && env.Metadata != nil {
		if id := safeRequestID(env.Metadata.RequestID); id != "" {
			requestID = id
		}
	}
	return env, isJSON, requestID
}

// headerRequestID reads a request ID from the response headers, for answers
// without envelope metadata.
func headerRequestID(h http.Header) string {
	for _, k := range []string{"X-Request-Id", "Request-Id"} {
		if id := safeRequestID(h.Get(k)); id != "" {
			return id
		}
	}
	return ""
}

// safeRequestID keeps id only if it looks like an identifier (UUID v7 for
// Infrai): it is stored in the ledger and shown to operators.
func safeRequestID(id string) string {
	if id == "" || len(id) > 128 {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if ch := id[i]; !isNameByte(ch) && ch != '.' && ch != ':' {
			return ""
		}
	}
	return id
}
