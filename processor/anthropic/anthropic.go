// Package anthropic is stet's processor for the Anthropic Messages API
// (POST /v1/messages), built on the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2). It asks for JSON matching the
// profile schema through structured output (output_config.format of type
// json_schema) or, when Config.ToolUse is set, through forced tool use: one
// tool whose input_schema is the profile schema, named in tool_choice.
//
// The adapter makes exactly one HTTP request per Extract call (SDK retries
// are off: stet owns the retry policy) and classifies every failure once,
// here, into a *stet.ProcessorError. It must never put the provider's error
// message, the prompt or the model's output into an error string or a log:
// any of them may quote the document. Nothing but Config decides where text
// goes: the SDK's environment variables (ANTHROPIC_BASE_URL, credentials,
// profiles, custom headers) and its OpenTelemetry spans are kept out.
//
// Its wire-faithful fake, for tests, drills and benchmarks, is
// processor/anthropic/anthropicfake.
package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "anthropic"

// DefaultBaseURL is the Anthropic API. The SDK appends "v1/messages", so a
// base URL never ends in /v1.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// DefaultMaxTokens is max_tokens when Config.MaxTokens is zero.
const DefaultMaxTokens = 1024

var errCallTimeout = errors.New("anthropic call timed out")

// Config configures a Client. BaseURL defaults to DefaultBaseURL and is
// given without /v1; APIKey may be empty for servers that need none; the
// SDK's own retries are off whatever HTTPClient does.
type Config struct {
	processor.Common

	// MaxTokens is max_tokens; 0 means DefaultMaxTokens.
	MaxTokens int64
	// ToolUse asks through forced tool use instead of output_config.format,
	// for models without structured output.
	ToolUse bool
	// InferenceGeo, if set, is sent as inference_geo: where the provider
	// runs inference. Empty leaves the workspace default.
	InferenceGeo string
}

// Client is a stet.Processor backed by the Messages API. It is safe for
// concurrent use.
type Client struct {
	info      stet.ProcessorInfo
	model     string
	maxTokens int64
	toolUse   bool
	geo       string
	timeout   time.Duration
	messages  sdk.MessageService
	now       func() time.Time // for Retry-After dates and rate-limit resets
}

var _ stet.Processor = (*Client)(nil)

// New returns a Client for cfg. It makes no network call.
func New(cfg Config) (*Client, error) {
	if err := cfg.CheckModel("anthropic"); err != nil {
		return nil, err
	}
	if cfg.MaxTokens < 0 {
		return nil, fmt.Errorf("anthropic: config %s: max_tokens must not be negative", cfg.ID)
	}
	base, u, err := cfg.ParseBaseURL("anthropic", DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
		// The SDK appends v1/messages; an OpenAI-style base URL would send
		// every call to /v1/v1/messages.
		return nil, fmt.Errorf("anthropic: config %s: base_url must not end in /v1", cfg.ID)
	}
	timeout := cfg.TimeoutOr(DefaultTimeout)
	maxTokens := cfg.MaxTokens
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	hc := cfg.Client(processor.MaxResponseBytes)

	// The message service is built from these options alone rather than
	// through sdk.NewClient, which would read ANTHROPIC_* variables and
	// profile files (base URL, credentials, custom headers). The SDK's
	// OpenTelemetry spans are off: an environment variable could otherwise
	// switch them to carrying request and response content.
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}

	info := cfg.Info(Kind)
	info.Capabilities = []string{"sync", "batch", "json_schema"}
	if cfg.ToolUse {
		info.Capabilities = append(info.Capabilities, "tool_use")
	}
	return &Client{
		info:      info,
		model:     cfg.Model,
		maxTokens: maxTokens,
		toolUse:   cfg.ToolUse,
		geo:       cfg.InferenceGeo,
		timeout:   timeout,
		messages:  sdk.NewMessageService(opts...),
		now:       time.Now,
	}, nil
}

// Info declares the processor's identity and data boundary.
func (c *Client) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// Extract sends one Messages request and returns the model's JSON. Every
// error is a *stet.ProcessorError. The output is checked to be JSON;
// validating it against the profile schema is the pipeline's job.
func (c *Client) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	if !isObject(p.Schema) {
		return nil, &stet.ProcessorError{
			Class: stet.FailureUnsupported,
			Code:  "invalid_schema",
			Err:   errors.New("extract params carry no JSON schema object"),
		}
	}
	params := c.params(p)

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	var capt capture
	start := time.Now()
	// The explicit request timeout also stops the SDK from refusing a large
	// max_tokens as "streaming is required" before sending anything.
	resp, err := c.messages.New(callCtx, params,
		option.WithMiddleware(recordInto(&capt)),
		option.WithRequestTimeout(c.timeout),
	)
	latency := time.Since(start)
	if err != nil {
		return nil, c.classifyError(ctx, callCtx, err, &capt)
	}
	return c.result(resp, processor.SchemaName(p.SchemaName), &capt, latency)
}

// params builds the request: the rendered prompt as one user message, one
// assistant/user pair per repair turn, and the profile schema either as
// output_config.format or as the input_schema of one forced tool.
func (c *Client) params(p stet.ExtractParams) sdk.MessageNewParams {
	name := processor.SchemaName(p.SchemaName)
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(p.Prompt.Reveal()))}
	for i, turn := range p.Repair {
		msgs = append(msgs, c.repairTurn(i+1, name, turn)...)
	}
	params := sdk.MessageNewParams{
		Model:     c.model,
		MaxTokens: c.maxTokens,
		Messages:  msgs,
	}
	if c.geo != "" {
		params.InferenceGeo = sdk.String(c.geo)
	}
	if c.toolUse {
		tool := sdk.ToolParam{
			Name:        name,
			Description: sdk.String(toolDescription),
			// The profile schema goes out as written, property order
			// included; the typed fields would re-encode it.
			InputSchema: param.Override[sdk.ToolInputSchemaParam](json.RawMessage(p.Schema)),
		}
		params.Tools = []sdk.ToolUnionParam{{OfTool: &tool}}
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfTool: &sdk.ToolChoiceToolParam{
			Name:                   name,
			DisableParallelToolUse: sdk.Bool(true),
		}}
		return params
	}
	// JSONOutputFormatParam.Schema is a map, which would sort the schema's
	// keys; the SDK's extra-fields mechanism sends the schema as written.
	var format sdk.JSONOutputFormatParam
	format.SetExtraFields(map[string]any{"schema": json.RawMessage(p.Schema)})
	params.OutputConfig = sdk.OutputConfigParam{Format: format}
	return params
}

const toolDescription = "Record the extraction. The input must match the schema exactly."

// repairTurn replays an invalid answer and what was wrong with it. In the
// tool-use form a JSON object answer goes back as the tool call it was, and
// the problems as that call's error result.
func (c *Client) repairTurn(n int, tool string, turn stet.RepairTurn) []sdk.MessageParam {
	msg := processor.RepairMessage(turn.Problems)
	if c.toolUse && isObject(turn.Output) {
		id := "toolu_repair_" + strconv.Itoa(n)
		return []sdk.MessageParam{
			sdk.NewAssistantMessage(sdk.NewToolUseBlock(id, json.RawMessage(turn.Output), tool)),
			sdk.NewUserMessage(sdk.NewToolResultBlock(id, msg, true)),
		}
	}
	out := string(turn.Output)
	if strings.TrimSpace(out) == "" {
		// The API refuses empty text blocks.
		out = "(empty answer)"
	}
	return []sdk.MessageParam{
		sdk.NewAssistantMessage(sdk.NewTextBlock(out)),
		sdk.NewUserMessage(sdk.NewTextBlock(msg)),
	}
}

// isObject reports whether raw is one JSON object.
func isObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// result turns a 200 response into an Extraction, or into a refusal,
// invalid_output or unsupported error when the model gave no usable answer.
func (c *Client) result(resp *sdk.Message, tool string, capt *capture, latency time.Duration) (*stet.Extraction, error) {
	fail := capt.Fail
	if resp == nil || resp.Type != "message" {
		// Not a message at all: a server fault, not something a repair
		// prompt could fix.
		return nil, fail(stet.FailureTransient, "", errors.New("response is not a message"))
	}
	output, called := c.answer(resp, tool)
	invalid := func(code, problem string, err error) *stet.ProcessorError {
		return processor.InvalidOutput(fail(stet.FailureInvalidOutput, code, err), output, problem)
	}
	switch resp.StopReason {
	case sdk.StopReasonRefusal:
		return nil, fail(stet.FailureRefusal, "refusal", errors.New("model refused"))
	case sdk.StopReasonMaxTokens:
		return nil, invalid("max_tokens", "output truncated at the token limit", errors.New("output cut at max_tokens"))
	case sdk.StopReasonModelContextWindowExceeded:
		// The input leaves no room for an answer; a repair turn would only
		// make it longer.
		return nil, fail(stet.FailureUnsupported, "model_context_window_exceeded", errors.New("input fills the model's context window"))
	}
	switch {
	case c.toolUse && !called:
		return nil, invalid("", "answer did not call the "+tool+" tool", errors.New("no tool_use block in the answer"))
	case len(bytes.TrimSpace(output)) == 0:
		return nil, invalid("", "answer was empty", errors.New("answer has no text"))
	case !json.Valid(output):
		return nil, invalid("", "not valid JSON", errors.New("output is not valid JSON"))
	}
	// input_tokens excludes what prompt caching wrote or read; all three
	// are input the call consumed.
	in := resp.Usage.InputTokens + resp.Usage.CacheCreationInputTokens + resp.Usage.CacheReadInputTokens
	return &stet.Extraction{
		Output:       json.RawMessage(output),
		Raw:          capt.Raw,
		Model:        resp.Model,
		RequestID:    capt.RequestID,
		StatusCode:   capt.Status,
		InputTokens:  int(in),
		OutputTokens: int(resp.Usage.OutputTokens),
		Latency:      latency,
	}, nil
}

// answer returns the model's output: the input of the first call to tool in
// the tool-use form (called reports there was one), else the text blocks
// joined. Without a tool call, the text is what the model said instead.
func (c *Client) answer(resp *sdk.Message, tool string) (output []byte, called bool) {
	var text bytes.Buffer
	for _, block := range resp.Content {
		switch block.Type {
		case "text":
			text.WriteString(block.Text)
		case "tool_use":
			if c.toolUse && block.Name == tool {
				return bytes.Clone(block.Input), true
			}
		}
	}
	return text.Bytes(), false
}

// capture records what the wire said for one call.
type capture = processor.Capture

// recordInto returns a middleware that records the call's answer in capt.
// The SDK gets the body back from memory, so what it parses is byte for
// byte what stet stores as the raw artifact.
func recordInto(capt *capture) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return capt.Record(req, next, processor.MaxResponseBytes, "request-id")
	}
}
