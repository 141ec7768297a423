package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/processortest"
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

// fakeFault maps the suite's fault kinds onto the Anthropic fake's.
func fakeFault(s processortest.Script) anthropicfake.Fault {
	ft := anthropicfake.Fault{Message: s.Message}
	switch s.Fault {
	case processortest.RateLimit:
		h := noResetHeaders()
		if s.RetryAfter == "" {
			// The fake's default retry-after is "1".
			h["Retry-After"] = nil
		}
		ft = anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: s.RetryAfter, RetryAfterMS: s.RetryAfterMS, Header: h}
	case processortest.Quota:
		// 429 rate_limit_error with details.error_code
		// enforced_spend_limit_reached: a 429 that is not rate_limited.
		ft.Kind = anthropicfake.SpendLimit
	case processortest.Auth:
		ft.Kind, ft.Status = anthropicfake.HTTPError, http.StatusUnauthorized
	case processortest.ServerError:
		ft.Kind = anthropicfake.ServerError
	case processortest.Disconnect:
		ft.Kind = anthropicfake.Disconnect
	case processortest.Hang:
		ft = anthropicfake.Fault{Kind: anthropicfake.Delay, Delay: time.Hour}
	case processortest.HangAfterHeaders:
		ft.Kind = anthropicfake.TimeoutAfterAnswer
	case processortest.Truncated:
		ft.Kind = anthropicfake.TruncatedJSON
	case processortest.SchemaInvalid:
		ft.Kind = anthropicfake.SchemaInvalid
	case processortest.Refusal:
		ft.Kind = anthropicfake.Refusal
	default:
		panic("anthropic conformance: unmapped fault " + string(s.Fault))
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

// answer reads what a Messages answer says of itself.
func answer(h http.Header, body []byte) processortest.Answer {
	return processortest.Answer{
		RequestID: h.Get("request-id"), Model: processortest.JSONString(body, "model"),
		InputTokens:  processortest.JSONInt(body, "usage.input_tokens"),
		OutputTokens: processortest.JSONInt(body, "usage.output_tokens"),
		Output:       fakekit.MinimalInstance(json.RawMessage(processortest.Schema)),
	}
}

func startFake(t *testing.T) (*anthropicfake.Server, processortest.Fake) {
	f := newFake(t, anthropicfake.Options{})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: "anthropic-test", APIKey: testKey, Model: testModel}

// TestConformance runs the suite in both request forms: structured
// output and tool use.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, toolUse := range []bool{false, true} {
		caps := []string{"sync", "batch", "json_schema"}
		if toolUse {
			caps = append(caps, "tool_use")
		}
		t.Run(fmt.Sprint("tool use ", toolUse), func(t *testing.T) {
			t.Parallel()
			processortest.Exercise(t, processortest.Harness{
				Start: func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
				Open: func(c processor.Common) (stet.Processor, error) {
					return New(Config{Common: c, ToolUse: toolUse})
				},
				Common:       common,
				Kind:         "anthropic",
				Capabilities: caps,
				Answer:       answer,
				AuthStatus:   http.StatusUnauthorized,
			})
		})
	}
}

func TestBatchConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseBatch(t, processortest.BatchHarness{
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
		Open:   func(c processor.Common) (stet.BatchProcessor, error) { return New(Config{Common: c}) },
		Common: common,
	})
}
