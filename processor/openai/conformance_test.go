package openai

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// faults is the OpenAI fake's fault for each of the suite's kinds. The
// rate limit drops the fake's default reset headers: they would be a
// second source of wait.
var faults = processortest.Faults[openaifake.Fault]{
	processortest.RateLimit: {Kind: openaifake.RateLimit,
		Header: http.Header{"X-Ratelimit-Reset-Requests": nil, "X-Ratelimit-Reset-Tokens": nil}},
	processortest.Quota:            {Kind: openaifake.Quota},
	processortest.Auth:             {Kind: openaifake.Unauthorized},
	processortest.ServerError:      {Kind: openaifake.ServerError},
	processortest.Disconnect:       {Kind: openaifake.Disconnect},
	processortest.Hang:             {Kind: openaifake.Delay, Delay: time.Hour},
	processortest.HangAfterHeaders: {Kind: openaifake.TimeoutAfterAnswer},
	processortest.Truncated:        {Kind: openaifake.TruncatedJSON},
	processortest.SchemaInvalid:    {Kind: openaifake.SchemaInvalid},
	processortest.Refusal:          {Kind: openaifake.Refusal},
}

func startFake(t *testing.T) (*openaifake.Server, processortest.Fake) {
	f := newFake(t, openaifake.Options{})
	return f, processortest.NewFake(f, faults.Script)
}

var common = processor.Common{ID: "openai-test", APIKey: testKey, Model: testModel}

// harness is the suite's view of the adapter (TestConformance, with its
// batch and injection cases, and FuzzExtract's Start, Open and Common).
func harness() processortest.Harness {
	return processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return open(c) },
		Common:       common,
		Kind:         "openai",
		Capabilities: []string{"sync", "batch", "json_schema"},
		// What a Chat Completions answer says of itself.
		Answer: processortest.Reads{
			RequestIDHeader: "x-request-id", Model: "model",
			InputTokens: "usage.prompt_tokens", OutputTokens: []string{"usage.completion_tokens"},
			Output: openaifake.MinimalInstance(json.RawMessage(processortest.Schema)),
		}.Answer,
		AuthStatus: http.StatusUnauthorized,
		Batch: processortest.BatchHarness{
			Start: func(t *testing.T) processortest.BatchFake {
				f, fake := startFake(t)
				return processortest.BatchFake{
					Fake:            fake,
					Batches:         func() int { return f.BatchStats().Created },
					ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, faults.Script(s)) },
					ItemsContaining: f.BatchItemsContaining,
					StatusFault:     func(s processortest.Script) { f.EnqueueBatch(openaifake.BatchRouteStatus, faults.Script(s)) },
				}
			},
			Open: func(c processor.Common) (stet.BatchProcessor, error) { return open(c) },
			Info: stet.BatchInfo{IdempotentSubmit: false, ResultsRetention: 30 * 24 * time.Hour, MaxItems: 50000},
		},
		Injection: processortest.InjectionHarness{
			Start: func(t *testing.T, respond func([]byte) string) string {
				return newFake(t, openaifake.Options{Respond: func(req openaifake.Request) string { return respond(req.Body) }}).URL()
			},
			Wire:     processortest.ChatWire,
			Validate: processortest.InjectionValidator(schema.Compile),
		},
	}
}

// TestConformance runs the suite: sync, batch and injection cases.
func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, harness())
}

// FuzzExtract feeds Chat Completions' response decoding and error
// classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness()) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, harness(), "FuzzExtract") }
