// Package openai is stet's processor for OpenAI Chat Completions with strict
// JSON-schema structured output, built on the official SDK
// (github.com/openai/openai-go/v3). Through Config.BaseURL it also talks to
// any OpenAI-compatible server: vLLM, Ollama, llama.cpp, Azure OpenAI.
//
// The adapter makes exactly one HTTP request per Extract call (SDK retries
// are off: stet owns the retry policy) and classifies every failure once,
// here, into a *stet.ProcessorError. It must never put the provider's error
// message, the prompt or the model's output into an error string or a log:
// any of them may quote the document.
//
// Its wire-faithful fake server, for tests, drills and benchmarks, is
// processor/openai/openaifake; the guarantees above are checked by
// processor/processortest (conformance_test.go).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "openai"

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 60 * time.Second

var errCallTimeout = errors.New("openai call timed out")

// Config configures a Client. BaseURL defaults to DefaultBaseURL; APIKey
// is sent as a bearer token (or, on Azure, in api-key) and may be empty for
// servers that need none; the SDK's own retries are off whatever HTTPClient
// does.
type Config struct {
	processor.Common
	// AzureAPIVersion, when set, speaks Azure OpenAI: BaseURL is the
	// resource endpoint (https://NAME.openai.azure.com), Model names the
	// deployment, requests go to /openai/deployments/MODEL/chat/completions
	// with ?api-version=AzureAPIVersion and the key in the api-key header.
	AzureAPIVersion string
}

// Client is a stet.Processor backed by Chat Completions. It is safe for
// concurrent use.
type Client struct {
	info    stet.ProcessorInfo
	model   string
	timeout time.Duration
	chat    sdk.ChatCompletionService
	now     func() time.Time // for Retry-After HTTP-dates
	onAzure bool             // Azure OpenAI: no Batch API through this adapter
}

var _ stet.Processor = (*Client)(nil)

// New returns a Client for cfg. It makes no network call.
func New(cfg Config) (*Client, error) {
	if err := cfg.CheckModel("openai"); err != nil {
		return nil, err
	}
	base, _, err := cfg.ParseBaseURL("openai", DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	timeout := cfg.TimeoutOr(DefaultTimeout)
	opts := requestOptions(cfg, base)

	info := cfg.Info(Kind)
	info.Capabilities = []string{"sync", "batch", "json_schema"}
	if cfg.AzureAPIVersion != "" {
		info.Capabilities = []string{"sync", "json_schema"}
	}
	return &Client{
		info:    info,
		onAzure: cfg.AzureAPIVersion != "",
		model:   cfg.Model,
		timeout: timeout,
		chat:    sdk.NewChatCompletionService(opts...),
		now:     time.Now,
	}, nil
}

// requestOptions are the SDK options every service of this package is built
// from, and the only ones: sdk.NewClient would also read OPENAI_* variables
// from the environment (base URL, admin key, organization, extra headers).
// Where text and audio go is decided by stet's config and nothing else.
func requestOptions(cfg Config, base string) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithHTTPClient(cfg.Client(processor.MaxResponseBytes)),
		option.WithMaxRetries(0),
	}
	switch {
	case cfg.AzureAPIVersion != "":
		opts = append(opts,
			option.WithBaseURL(strings.TrimRight(base, "/")+"/openai/deployments/"+url.PathEscape(cfg.Model)+"/"),
			option.WithQuery("api-version", cfg.AzureAPIVersion))
		if cfg.APIKey != "" {
			opts = append(opts, option.WithHeader("api-key", cfg.APIKey))
		}
	default:
		opts = append(opts, option.WithBaseURL(base))
		if cfg.APIKey != "" {
			opts = append(opts, option.WithAPIKey(cfg.APIKey))
		}
	}
	return opts
}

// Info declares the processor's identity and data boundary.
func (c *Client) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// Extract sends one Chat Completions request and returns the model's JSON.
// Every error is a *stet.ProcessorError. The output is checked to be JSON;
// validating it against the profile schema is the pipeline's job.
func (c *Client) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	if err := processor.CheckParamsSchema(p.Schema); err != nil {
		return nil, err
	}
	params := c.params(p)

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	var capt capture
	start := time.Now()
	resp, err := c.chat.New(callCtx, params, option.WithMiddleware(recordInto(&capt)))
	latency := time.Since(start)
	if err != nil {
		return nil, c.classifyError(ctx, callCtx, err, &capt)
	}
	return c.result(resp, &capt, latency)
}

// params builds the request: the rendered prompt as one user message, then
// one assistant/user pair per repair turn, and the profile schema as a strict
// json_schema response format.
func (c *Client) params(p stet.ExtractParams) sdk.ChatCompletionNewParams {
	msgs := []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(p.Prompt.Reveal())}
	for _, turn := range p.Repair {
		msgs = append(msgs,
			sdk.AssistantMessage(string(turn.Output)),
			sdk.UserMessage(processor.RepairMessage(turn.Problems)),
		)
	}
	return sdk.ChatCompletionNewParams{
		Model:       shared.ChatModel(c.model),
		Messages:    msgs,
		Temperature: sdk.Float(0),
		ResponseFormat: sdk.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name:   processor.SchemaName(p.SchemaName),
					Schema: p.Schema,
					Strict: sdk.Bool(true),
				},
			},
		},
	}
}

// result turns a 200 response into an Extraction, or into an invalid_output
// or refusal error when the model did not produce a usable answer.
func (c *Client) result(resp *sdk.ChatCompletion, capt *capture, latency time.Duration) (*stet.Extraction, error) {
	fail := capt.Fail
	if resp == nil || len(resp.Choices) == 0 {
		// Not a model answer at all: a server fault, not something a repair
		// prompt could fix.
		return nil, fail(stet.FailureTransient, "", errors.New("response has no choices"))
	}
	choice := resp.Choices[0]
	content := choice.Message.Content
	switch {
	case choice.Message.Refusal != "":
		return nil, fail(stet.FailureRefusal, "refusal", errors.New("model refused"))
	case choice.FinishReason == "content_filter":
		return nil, fail(stet.FailureRefusal, "content_filter", errors.New("output withheld by the content filter"))
	case choice.FinishReason == "length":
		return nil, processor.InvalidOutput(fail(stet.FailureInvalidOutput, "length", errors.New("output cut at the token limit")), []byte(content), "output truncated at the token limit")
	case !json.Valid([]byte(content)):
		return nil, processor.InvalidOutput(fail(stet.FailureInvalidOutput, "", errors.New("output is not valid JSON")), []byte(content), "not valid JSON")
	}
	return &stet.Extraction{
		Output:       json.RawMessage(content),
		Raw:          capt.Raw,
		Model:        resp.Model,
		RequestID:    capt.RequestID,
		StatusCode:   capt.Status,
		InputTokens:  int(resp.Usage.PromptTokens),
		OutputTokens: int(resp.Usage.CompletionTokens),
		Latency:      latency,
	}, nil
}

// capture records what the wire said for one call.
type capture = processor.Capture

// recordInto returns a middleware that records the call's answer in capt.
// The SDK gets the body back from memory, so what it parses is byte for
// byte what stet stores as the raw artifact.
func recordInto(capt *capture) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return capt.Record(req, next, processor.MaxResponseBytes, "x-request-id")
	}
}
