package anthropic

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// noResetHeaders removes the anthropic-ratelimit-*-reset headers the fake
// sends by default: with them a 429 would have a second source of wait.
func noResetHeaders() http.Header {
	h := http.Header{}
	for _, limit := range rateLimits {
		h[http.CanonicalHeaderKey("anthropic-ratelimit-"+limit+"-reset")] = nil
	}
	return h
}

// faults is the Anthropic fake's fault for each of the suite's kinds.
var faults = processortest.Faults[anthropicfake.Fault]{
	processortest.RateLimit: {Kind: anthropicfake.RateLimit},
	// 429 rate_limit_error with details.error_code
	// enforced_spend_limit_reached: a 429 that is not rate_limited.
	processortest.Quota:            {Kind: anthropicfake.SpendLimit},
	processortest.Auth:             {Kind: anthropicfake.HTTPError, Status: http.StatusUnauthorized},
	processortest.ServerError:      {Kind: anthropicfake.ServerError},
	processortest.Disconnect:       {Kind: anthropicfake.Disconnect},
	processortest.Hang:             {Kind: anthropicfake.Delay, Delay: time.Hour},
	processortest.HangAfterHeaders: {Kind: anthropicfake.TimeoutAfterAnswer},
	processortest.Truncated:        {Kind: anthropicfake.TruncatedJSON},
	processortest.SchemaInvalid:    {Kind: anthropicfake.SchemaInvalid},
	processortest.Refusal:          {Kind: anthropicfake.Refusal},
}

// fakeFault is faults' fault for s, a rate limit without the fake's
// default wait headers: they would be a second source of wait.
func fakeFault(s processortest.Script) anthropicfake.Fault {
	ft := faults.Script(s)
	if s.Fault == processortest.RateLimit {
		ft.Header = noResetHeaders()
		if s.RetryAfter == "" {
			// The fake's default retry-after is "1".
			ft.Header["Retry-After"] = nil
		}
	}
	return ft
}

// itemScript maps the suite's batch item faults onto the fake's outcomes.
func itemScript(s processortest.Script) anthropicfake.BatchItemScript {
	switch s.Fault {
	case processortest.Truncated:
		return anthropicfake.BatchItemScript{Outcome: anthropicfake.ItemInvalidJSON}
	case processortest.Refusal:
		return anthropicfake.BatchItemScript{Outcome: anthropicfake.ItemRefusal, Message: s.Message}
	case processortest.ServerError:
		return anthropicfake.BatchItemScript{Outcome: anthropicfake.ItemErrored, ErrorType: "api_error", Message: s.Message}
	default:
		panic("anthropic conformance: unmapped batch item fault " + string(s.Fault))
	}
}

func startFake(t *testing.T) (*anthropicfake.Server, processortest.Fake) {
	f := newFake(t, anthropicfake.Options{})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: "anthropic-test", APIKey: testKey, Model: testModel}

// harness is the suite's view of the adapter in one request form,
// structured output or tool use (TestConformance, FuzzExtract). The
// injection cases run in both forms (with tool use the one tool offered is
// the forced output-schema tool), the batch cases once.
func harness(toolUse bool) processortest.Harness {
	caps := []string{"sync", "batch", "json_schema"}
	if toolUse {
		caps = append(caps, "tool_use")
	}
	h := processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c, ToolUse: toolUse}) },
		Common:       common,
		Kind:         "anthropic",
		Capabilities: caps,
		// What a Messages answer says of itself.
		Answer: processortest.Reads{
			RequestIDHeader: "request-id", Model: "model",
			InputTokens: "usage.input_tokens", OutputTokens: []string{"usage.output_tokens"},
			Output: fakekit.MinimalInstance(json.RawMessage(processortest.Schema)),
		}.Answer,
		AuthStatus: http.StatusUnauthorized,
		Injection: processortest.InjectionHarness{
			Start: func(t *testing.T, respond func([]byte) string) string {
				return newFake(t, anthropicfake.Options{Respond: func(req anthropicfake.Request) string { return respond(req.Body) }}).URL()
			},
			Wire:     messagesWire,
			Validate: processortest.InjectionValidator(schema.Compile),
		},
	}
	if toolUse {
		h.Injection.Tool = processor.SchemaName("injection_v1")
		return h
	}
	h.Batch = processortest.BatchHarness{
		Start: func(t *testing.T) processortest.BatchFake {
			f, fake := startFake(t)
			return processortest.BatchFake{
				Fake:            fake,
				Batches:         func() int { return f.BatchCounts().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, itemScript(s)) },
				ItemsContaining: f.BatchRequestsContaining,
				StatusFault: func(s processortest.Script) {
					f.EnqueueBatchFaults(anthropicfake.RouteBatchRetrieve, fakeFault(s))
				},
			}
		},
		Open: func(c processor.Common) (stet.BatchProcessor, error) { return New(Config{Common: c}) },
		Info: stet.BatchInfo{IdempotentSubmit: false, ResultsRetention: 29 * 24 * time.Hour, MaxItems: 100000},
	}
	return h
}

// TestConformance runs the suite in both request forms: structured
// output and tool use.
func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseForms(t, map[string]processortest.Harness{"structured output": harness(false), "tool use": harness(true)})
}

// FuzzExtract feeds the Messages API's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract), in the
// structured-output form.
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness(false)) }

// FuzzExtractToolUse is FuzzExtract in the forced tool use form.
func FuzzExtractToolUse(f *testing.F) { processortest.FuzzExtract(f, harness(true)) }

// TestFuzzSeeds checks the seed corpora exist; -update rewrites them from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, harness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, harness(true), "FuzzExtractToolUse")
}
