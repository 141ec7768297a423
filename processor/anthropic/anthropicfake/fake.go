package anthropicfake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// FaultKind names a scripted fault of the Server.
type FaultKind string

// Fault kinds. Error kinds answer with the API's error object
// {"type":"error","error":{"type","message"},"request_id"}; answer kinds
// return 200 with a real message body.
const (
	RateLimit          FaultKind = "rate_limit"           // 429 rate_limit_error; retry-after RetryAfter (default "1"), the requests limit exhausted
	SpendLimit         FaultKind = "spend_limit"          // 429 rate_limit_error, details.error_code enforced_spend_limit_reached
	Overloaded         FaultKind = "overloaded"           // 529 overloaded_error
	ServerError        FaultKind = "server_error"         // Status (default 500), api_error
	HTTPError          FaultKind = "http_error"           // Status (default 400) with the API's error type for it; Type, Code, Message override
	Disconnect         FaultKind = "disconnect"           // close the connection without answering
	Delay              FaultKind = "delay"                // answer normally after Delay
	TimeoutAfterAnswer FaultKind = "timeout_after_answer" // 200, headers and half the body, then hold until the client leaves
	TruncatedJSON      FaultKind = "truncated_json"       // 200 end_turn, a text block cut mid-JSON (also in the tool form: no tool call)
	SchemaInvalid      FaultKind = "schema_invalid"       // 200, {"unexpected":true} as the text or the tool input
	Refusal            FaultKind = "refusal"              // 200, stop_reason refusal with stop_details, no content
	MaxTokens          FaultKind = "max_tokens"           // 200, stop_reason max_tokens, the answer cut
)

// Fault is one scripted answer of the Server.
type Fault struct {
	Kind         FaultKind
	RetryAfter   string        // RateLimit: retry-after value, seconds or an HTTP-date; default "1"
	RetryAfterMS int           // RateLimit: retry-after-ms value
	Status       int           // ServerError (default 500), HTTPError (default 400)
	Delay        time.Duration // Delay: wait this long, then answer normally
	// Type overrides error.type of an error kind.
	Type string
	// Code sets error.details.error_code of an error kind.
	Code string
	// Message overrides error.message of an error kind, or the refusal's
	// stop_details.explanation.
	Message string
	// Header is set on the response after the defaults; a key with no values
	// removes that default header.
	Header http.Header
}

// Options configures a Server.
type Options struct {
	// APIKey, if set, is the only key accepted, as x-api-key or as a bearer
	// token; others get 401 authentication_error.
	APIKey string
	// Respond returns the answer of a normal call: the text in the
	// output_config form, the tool input in the tool-use form (an answer
	// that is not a JSON object comes back as text instead). The default
	// answers fakekit.MinimalInstance of the request's schema. It is called
	// concurrently.
	Respond func(req Request) (answer string)
	// FaultRate is the share of calls, beyond scripted faults, answered with
	// a random 429 (retry-after 1), 500 or 529. The draws are reproducible
	// from Seed.
	FaultRate float64
	Seed      int64
	// Latency is added to every answer of POST /v1/messages.
	Latency time.Duration
	// Batch scripts the Message Batches routes (fake_batch.go).
	Batch BatchOptions
}

// Request is a decoded Messages request as the Server received it.
type Request struct {
	Model     string
	MaxTokens int64
	Messages  []Message
	// Format is output_config.format.type ("json_schema"), empty without one.
	Format string
	// ToolName names the tool tool_choice forces, empty without one.
	ToolName string
	// Schema is output_config.format.schema, or the forced tool's
	// input_schema.
	Schema       json.RawMessage
	InferenceGeo string
	Body         []byte // the exact request body
	Header       http.Header
}

// Message is one message; its blocks are joined into Content (text as
// is, a tool call as its input JSON, a tool result as its text).
type Message struct {
	Role    string
	Content string
	// Blocks are the content block types in order ("text", "tool_use", …).
	Blocks []string
}

// Server is an in-process server speaking the Anthropic Messages wire format
// (POST /v1/messages) and the Message Batches routes (fake_batch.go), with
// scriptable faults. It is safe for concurrent use. It keeps the user text
// of every request for CallsContaining: it is a test tool, not a sink for
// real documents.
type Server struct {
	opts Options
	// Core: Calls counts POST /v1/messages and the other non-batch routes
	// (the batch routes: BatchCounts), faulted requests included.
	fakekit.Core[Fault]

	batch fakeBatches // the Message Batches routes' state (fake_batch.go)
}

// New starts a Server on a local httptest server. Close it when done.
func New(opts Options) *Server {
	f := &Server{
		opts: opts,
		// Random faults: a 429 (retry-after 1), a 500 or a 529.
		Core: fakekit.Core[Fault]{Faults: fakekit.NewFaults(opts.Seed, 0xa17, opts.FaultRate,
			Fault{Kind: RateLimit}, Fault{Kind: ServerError}, Fault{Kind: Overloaded})},
	}
	f.Start(f.serve)
	return f
}

// URL returns the base URL to configure a client with (no /v1: the SDK adds
// v1/messages).
func (f *Server) URL() string { return f.HTTP.URL() }

// maxFakeRequest is the Messages API's request size limit.
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
	if r.URL.Path != "/v1/messages" || r.Method != http.MethodPost {
		writeAPIError(w, http.StatusNotFound, nil, apiError{Type: "not_found_error", Message: "Not Found"})
		return
	}
	if !f.authorized(w, r) {
		return
	}
	if len(body) > maxFakeRequest {
		writeAPIError(w, http.StatusRequestEntityTooLarge, nil, apiError{Type: "request_too_large", Message: "Request exceeds the maximum allowed number of bytes."})
		return
	}
	if readErr != nil || decodeErr != nil {
		writeAPIError(w, http.StatusBadRequest, nil, apiError{Type: "invalid_request_error", Message: "There was an issue with the format of your request: the body is not valid JSON."})
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAPIError(w, http.StatusBadRequest, nil, apiError{Type: "invalid_request_error", Message: "anthropic-version: header is required"})
		return
	}
	if msg := validateFakeRequest(body, &req); msg != "" {
		writeAPIError(w, http.StatusBadRequest, nil, apiError{Type: "invalid_request_error", Message: msg})
		return
	}

	fault, ok := f.Faults.Next()
	if !ok {
		f.answer(w, req, f.content(req), nil)
		return
	}
	f.fault(w, r, req, fault)
}

// authorized checks the API key, if the fake wants one, and answers 401
// when it is missing or wrong.
func (f *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.opts.APIKey == "" {
		return true
	}
	key := r.Header.Get("x-api-key")
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && key == "" {
		key = bearer
	}
	switch {
	case key == "":
		writeAPIError(w, http.StatusUnauthorized, nil, apiError{Type: "authentication_error", Message: "x-api-key header is required"})
		return false
	case key != f.opts.APIKey:
		writeAPIError(w, http.StatusUnauthorized, nil, apiError{Type: "authentication_error", Message: "invalid x-api-key"})
		return false
	}
	return true
}

func (f *Server) fault(w http.ResponseWriter, r *http.Request, req Request, ft Fault) {
	switch ft.Kind {
	case RateLimit:
		h := http.Header{}
		h.Set("retry-after", cmp.Or(ft.RetryAfter, "1"))
		if ft.RetryAfterMS > 0 {
			h.Set("retry-after-ms", strconv.Itoa(ft.RetryAfterMS))
		}
		h.Set("anthropic-ratelimit-requests-remaining", "0")
		h.Set("anthropic-ratelimit-requests-reset", resetTime(time.Second))
		writeAPIError(w, http.StatusTooManyRequests, []http.Header{h, ft.Header}, ft.override(apiError{
			Type:    "rate_limit_error",
			Message: "This request would exceed the rate limit for your organization of 50 requests per minute. For details, refer to the rate limits documentation. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.",
		}))
	case SpendLimit:
		writeAPIError(w, http.StatusTooManyRequests, []http.Header{{"X-Should-Retry": {"false"}}, ft.Header}, ft.override(apiError{
			Type:    "rate_limit_error",
			Message: "Your organization has reached its monthly spend limit for this usage tier. Raise the limit in the Console to continue.",
			Code:    "enforced_spend_limit_reached",
		}))
	case Overloaded:
		writeAPIError(w, 529, []http.Header{ft.Header}, ft.override(apiError{Type: "overloaded_error", Message: "Overloaded"}))
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		writeAPIError(w, status, []http.Header{ft.Header}, ft.override(apiError{Type: statusErrorType(status), Message: "Internal server error"}))
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		writeAPIError(w, status, []http.Header{ft.Header}, ft.override(apiError{Type: statusErrorType(status), Message: statusMessage(status, req.Model)}))
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		if f.HTTP.Sleep(r, ft.Delay) {
			f.answer(w, req, f.content(req), ft.Header)
		}
	case TimeoutAfterAnswer:
		body := f.message(req, f.blocks(req, f.content(req)), "", nil)
		setDefaultHeaders(w.Header(), newRequestID())
		f.HTTP.HalfAnswer(w, r, http.StatusOK, body, ft.Header)
	case TruncatedJSON:
		f.write(w, f.message(req, []wireBlock{textBlock(fakekit.Cut(f.content(req)))}, "end_turn", nil), ft.Header)
	case SchemaInvalid:
		f.answer(w, req, `{"unexpected":true}`, ft.Header)
	case Refusal:
		details := &wireStopDetails{Type: "refusal", Explanation: nullable(ft.Message)}
		f.write(w, f.message(req, []wireBlock{}, "refusal", details), ft.Header)
	case MaxTokens:
		var blocks []wireBlock
		if req.ToolName != "" {
			// The tool input so far; the API closes what it parsed.
			blocks = []wireBlock{toolUseBlock(req.ToolName, json.RawMessage(`{}`))}
		} else {
			blocks = []wireBlock{textBlock(fakekit.Cut(f.content(req)))}
		}
		f.write(w, f.message(req, blocks, "max_tokens", nil), ft.Header)
	default:
		writeAPIError(w, http.StatusInternalServerError, nil, apiError{Type: "api_error", Message: "unknown fake fault " + string(ft.Kind)})
	}
}

func (ft Fault) override(e apiError) apiError {
	if ft.Type != "" {
		e.Type = ft.Type
	}
	if ft.Code != "" {
		e.Code = ft.Code
	}
	if ft.Message != "" {
		e.Message = ft.Message
	}
	return e
}

// statusErrorType is the error.type the API uses for status.
func statusErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func statusMessage(status int, model string) string {
	switch status {
	case http.StatusUnauthorized:
		return "invalid x-api-key"
	case http.StatusPaymentRequired:
		return "Your credit balance is too low to access the Anthropic API."
	case http.StatusForbidden:
		return "Your API key does not have permission to use the specified resource."
	case http.StatusNotFound:
		return "model: " + model
	case http.StatusRequestEntityTooLarge:
		return "Request exceeds the maximum allowed number of bytes."
	case http.StatusGatewayTimeout:
		return "Request timed out."
	}
	return http.StatusText(status)
}

// content is the answer of a normal call.
func (f *Server) content(req Request) string { return fakekit.Answer(f.opts.Respond, req, req.Schema) }

// answer writes answer as the request's form asks: a call of the forced
// tool when answer is a JSON object, text otherwise.
func (f *Server) answer(w http.ResponseWriter, req Request, answer string, extra http.Header) {
	f.write(w, f.message(req, f.blocks(req, answer), "", nil), extra)
}

func (f *Server) blocks(req Request, answer string) []wireBlock {
	if req.ToolName != "" && isObject([]byte(answer)) {
		return []wireBlock{toolUseBlock(req.ToolName, json.RawMessage(answer))}
	}
	return []wireBlock{textBlock(answer)}
}

func (f *Server) write(w http.ResponseWriter, body []byte, extra http.Header) {
	setDefaultHeaders(w.Header(), newRequestID())
	fakekit.Reply(w, http.StatusOK, body, extra)
}

// The message object, fields in the API's order.
type wireMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []wireBlock      `json:"content"`
	StopReason   string           `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	StopDetails  *wireStopDetails `json:"stop_details"`
	Usage        wireUsage        `json:"usage"`
}

type wireBlock struct {
	Type string `json:"type"`
	// text
	Text *string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

func textBlock(s string) wireBlock { return wireBlock{Type: "text", Text: &s} }

func toolUseBlock(name string, input json.RawMessage) wireBlock {
	return wireBlock{Type: "tool_use", ID: "toolu_01" + randomID(22), Name: name, Input: input}
}

type wireStopDetails struct {
	Type        string  `json:"type"`
	Category    *string `json:"category"`
	Explanation *string `json:"explanation"`
}

type wireUsage struct {
	InputTokens              int            `json:"input_tokens"`
	CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
	CacheCreation            map[string]int `json:"cache_creation"`
	OutputTokens             int            `json:"output_tokens"`
	ServiceTier              string         `json:"service_tier"`
	InferenceGeo             string         `json:"inference_geo"`
}

// message builds a message body. An empty stop picks tool_use or end_turn
// from the blocks.
func (f *Server) message(req Request, blocks []wireBlock, stop string, details *wireStopDetails) []byte {
	input := tokens(string(req.Schema))
	for _, m := range req.Messages {
		input += tokens(m.Content) + 4
	}
	output := 0
	for _, b := range blocks {
		if b.Text != nil {
			output += tokens(*b.Text)
		}
		output += tokens(string(b.Input))
		if b.Type == "tool_use" && stop == "" {
			stop = "tool_use"
		}
	}
	switch stop {
	case "":
		stop = "end_turn"
	case "max_tokens":
		output = int(req.MaxTokens)
	}
	return fakekit.Marshal(wireMessage{
		ID:          "msg_01" + randomID(22),
		Type:        "message",
		Role:        "assistant",
		Model:       req.Model,
		Content:     blocks,
		StopReason:  stop,
		StopDetails: details,
		Usage: wireUsage{
			InputTokens:   input,
			CacheCreation: map[string]int{"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
			OutputTokens:  max(output, 1),
			ServiceTier:   "standard",
			InferenceGeo:  cmp.Or(req.InferenceGeo, "global"),
		},
	})
}

// tokens estimates a token count: about four characters a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

// apiError is the error object of the real API.
type apiError struct {
	Type    string
	Message string
	Code    string // error.details.error_code, omitted when empty
}

// writeAPIError answers status with the API's error body; extra headers are
// merged over the defaults in order. The body's request_id is the
// request-id header's.
func writeAPIError(w http.ResponseWriter, status int, extra []http.Header, e apiError) {
	type details struct {
		ErrorCode string `json:"error_code"`
	}
	type object struct {
		Type    string   `json:"type"`
		Message string   `json:"message"`
		Details *details `json:"details,omitempty"`
	}
	obj := object{Type: e.Type, Message: e.Message}
	if e.Code != "" {
		obj.Details = &details{ErrorCode: e.Code}
	}
	id := newRequestID()
	body := fakekit.Marshal(struct {
		Type      string `json:"type"`
		Error     object `json:"error"`
		RequestID string `json:"request_id"`
	}{"error", obj, id})
	h := w.Header()
	setDefaultHeaders(h, id)
	retry := status == http.StatusRequestTimeout || status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
	h.Set("x-should-retry", strconv.FormatBool(retry))
	fakekit.Reply(w, status, body, extra...)
}

func setDefaultHeaders(h http.Header, requestID string) {
	h.Set("Content-Type", "application/json")
	h.Set("request-id", requestID)
	h.Set("anthropic-organization-id", "00000000-0000-4000-8000-00000000fa4e")
	reset := resetTime(time.Second)
	for _, limit := range []struct {
		name  string
		limit int
	}{{"requests", 50}, {"tokens", 50000}, {"input-tokens", 40000}, {"output-tokens", 10000}} {
		h.Set("anthropic-ratelimit-"+limit.name+"-limit", strconv.Itoa(limit.limit))
		h.Set("anthropic-ratelimit-"+limit.name+"-remaining", strconv.Itoa(limit.limit-1))
		h.Set("anthropic-ratelimit-"+limit.name+"-reset", reset)
	}
}

// resetTime is now plus d as the rate-limit headers write it (RFC 3339).
func resetTime(d time.Duration) string {
	return time.Now().Add(d).UTC().Format(time.RFC3339)
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz123456789"

// randomID returns n characters of the API's ID alphabet.
func randomID(n int) string { return fakekit.RandomString(idAlphabet, n) }

func newRequestID() string { return "req_011" + randomID(21) }

// isObject reports whether raw is one JSON object.
func isObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// The request as sent on the wire.
type wireRequest struct {
	Model     string `json:"model"`
	MaxTokens *int64 `json:"max_tokens"`
	Messages  *[]struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	OutputConfig *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"output_config"`
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	InferenceGeo string `json:"inference_geo"`
}

// wireContentBlock is one request content block.
type wireContentBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func decodeFakeRequest(body []byte) (Request, error) {
	req := Request{Body: body}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return req, err
	}
	req.Model = wr.Model
	req.InferenceGeo = wr.InferenceGeo
	if wr.MaxTokens != nil {
		req.MaxTokens = *wr.MaxTokens
	}
	if wr.Messages != nil {
		req.Messages = make([]Message, 0, len(*wr.Messages))
		for _, m := range *wr.Messages {
			text, types := contentText(m.Content)
			req.Messages = append(req.Messages, Message{Role: m.Role, Content: text, Blocks: types})
		}
	}
	if oc := wr.OutputConfig; oc != nil && oc.Format != nil {
		req.Format = oc.Format.Type
		req.Schema = oc.Format.Schema
	}
	if tc := wr.ToolChoice; tc != nil && tc.Type == "tool" {
		req.ToolName = tc.Name
		for _, t := range wr.Tools {
			if t.Name == tc.Name {
				req.Schema = t.InputSchema
			}
		}
	}
	return req, nil
}

// userText joins the user messages of req, one a line, for CallsContaining.
func userText(req Request) string {
	return fakekit.UserText(req.Messages, func(m Message) (string, bool) { return m.Content, m.Role == "user" })
}

// contentText reads message content given as a string or as blocks.
func contentText(raw json.RawMessage) (string, []string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, []string{"text"}
	}
	var blocks []wireContentBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return "", nil
	}
	var sb strings.Builder
	types := make([]string, 0, len(blocks))
	for _, b := range blocks {
		types = append(types, b.Type)
		switch b.Type {
		case "text":
			if b.Text != nil {
				sb.WriteString(*b.Text)
			}
		case "tool_use":
			sb.Write(b.Input)
		case "tool_result":
			text, _ := contentText(b.Content)
			sb.WriteString(text)
		}
	}
	return sb.String(), types
}

// validateFakeRequest checks what the real API checks cheaply and returns
// the API's message for the first problem, or "".
func validateFakeRequest(body []byte, req *Request) string {
	var wr wireRequest
	_ = json.Unmarshal(body, &wr)
	switch {
	case wr.Model == "":
		return "model: Field required"
	case wr.MaxTokens == nil:
		return "max_tokens: Field required"
	case *wr.MaxTokens < 0:
		return "max_tokens: Input should be greater than or equal to 0"
	case wr.Messages == nil:
		return "messages: Field required"
	case len(*wr.Messages) == 0:
		return "messages: at least one message is required"
	}
	var pending []string // tool_use ids that need a tool_result next
	for i, m := range *wr.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		var blocks []wireContentBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				return fmt.Sprintf("messages.%d.content: Input should be a valid list", i)
			}
			blocks = []wireContentBlock{{Type: "text", Text: &s}}
		}
		results := map[string]bool{}
		var uses []string
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || strings.TrimSpace(*b.Text) == "" {
					return fmt.Sprintf("messages.%d.content.%d.text: text content blocks must be non-empty", i, j)
				}
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				}
				uses = append(uses, b.ID)
			case "tool_result":
				results[b.ToolUseID] = true
			}
		}
		for _, id := range pending {
			if !results[id] {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i-1, id)
			}
		}
		pending = uses
	}
	if oc := wr.OutputConfig; oc != nil && oc.Format != nil {
		switch {
		case oc.Format.Type != "json_schema":
			return "output_config.format.type: Input should be 'json_schema'"
		case len(oc.Format.Schema) == 0 || string(oc.Format.Schema) == "null":
			return "output_config.format.schema: Field required"
		case !isObject(oc.Format.Schema):
			return "output_config.format.schema: Input should be a valid dictionary"
		}
	}
	names := map[string]bool{}
	for i, t := range wr.Tools {
		var schema struct {
			Type string `json:"type"`
		}
		switch {
		case t.Name == "":
			return fmt.Sprintf("tools.%d.custom.name: Field required", i)
		case len(t.InputSchema) == 0:
			return fmt.Sprintf("tools.%d.custom.input_schema: Field required", i)
		case json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object":
			return fmt.Sprintf("tools.%d.custom.input_schema.type: Input should be 'object'", i)
		}
		names[t.Name] = true
	}
	if tc := wr.ToolChoice; tc != nil && tc.Type == "tool" && !names[tc.Name] {
		return "tool_choice.name: tool '" + tc.Name + "' is not among the provided tools"
	}
	return ""
}
