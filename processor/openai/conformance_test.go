package openai

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// fakeFault maps the suite's fault kinds onto the OpenAI fake's.
func fakeFault(s processortest.Script) openaifake.Fault {
	ft := openaifake.Fault{Message: s.Message}
	switch s.Fault {
	case processortest.RateLimit:
		// The fake's default reset headers would be a second source of wait.
		ft = openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: s.RetryAfter, RetryAfterMS: s.RetryAfterMS,
			Header: map[string][]string{"X-Ratelimit-Reset-Requests": nil, "X-Ratelimit-Reset-Tokens": nil}}
	case processortest.Quota:
		ft.Kind = openaifake.Quota
	case processortest.Auth:
		ft.Kind = openaifake.Unauthorized
	case processortest.ServerError:
		ft.Kind = openaifake.ServerError
	case processortest.Disconnect:
		ft.Kind = openaifake.Disconnect
	case processortest.Hang:
		ft = openaifake.Fault{Kind: openaifake.Delay, Delay: time.Hour}
	case processortest.HangAfterHeaders:
		ft.Kind = openaifake.TimeoutAfterAnswer
	case processortest.Truncated:
		ft.Kind = openaifake.TruncatedJSON
	case processortest.SchemaInvalid:
		ft.Kind = openaifake.SchemaInvalid
	case processortest.Refusal:
		ft.Kind = openaifake.Refusal
	default:
		panic("openai conformance: unmapped fault " + string(s.Fault))
	}
	return ft
}

// answer reads what a Chat Completions answer says of itself.
func answer(h http.Header, body []byte) processortest.Answer {
	return processortest.Answer{
		RequestID: h.Get("x-request-id"), Model: processortest.JSONString(body, "model"),
		InputTokens:  processortest.JSONInt(body, "usage.prompt_tokens"),
		OutputTokens: processortest.JSONInt(body, "usage.completion_tokens"),
		Output:       openaifake.MinimalInstance(json.RawMessage(processortest.Schema)),
	}
}

func startFake(t *testing.T) (*openaifake.Server, processortest.Fake) {
	f := newFake(t, openaifake.Options{})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: "openai-test", APIKey: testKey, Model: testModel}

func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c}) },
		Common:       common,
		Kind:         "openai",
		Capabilities: []string{"sync", "batch", "json_schema"},
		Answer:       answer,
		AuthStatus:   http.StatusUnauthorized,
	})
}

func TestBatchConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseBatch(t, processortest.BatchHarness{
		Start: func(t *testing.T) processortest.BatchFake {
			f, fake := startFake(t)
			return processortest.BatchFake{
				Fake:            fake,
				Batches:         func() int { return f.BatchStats().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, fakeFault(s)) },
				ItemsContaining: f.BatchItemsContaining,
				StatusFault:     func(s processortest.Script) { f.EnqueueBatch(openaifake.BatchRouteStatus, fakeFault(s)) },
			}
		},
		Open:   func(c processor.Common) (stet.BatchProcessor, error) { return New(Config{Common: c}) },
		Common: common,
	})
}
