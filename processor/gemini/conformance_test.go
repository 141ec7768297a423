package gemini

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// faults is the Gemini fake's fault for each of the suite's kinds.
var faults = processortest.Faults[geminifake.Fault]{
	// No RetryDelay: the body's RetryInfo would be a second source of
	// wait.
	processortest.RateLimit: {Kind: geminifake.RateLimit},
	processortest.Quota:     {Kind: geminifake.Quota},
	// A wrong API key gets 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
	processortest.Auth:             {Kind: geminifake.Unauthorized},
	processortest.ServerError:      {Kind: geminifake.ServerError},
	processortest.Disconnect:       {Kind: geminifake.Disconnect},
	processortest.Hang:             {Kind: geminifake.Delay, Delay: time.Hour},
	processortest.HangAfterHeaders: {Kind: geminifake.TimeoutAfterAnswer},
	processortest.Truncated:        {Kind: geminifake.TruncatedJSON},
	processortest.SchemaInvalid:    {Kind: geminifake.SchemaInvalid},
	// Gemini's safety stop carries no text: Message has nowhere to go.
	processortest.Refusal: {Kind: geminifake.Finish, FinishReason: "SAFETY"},
}

// fakeFault is faults' fault for s. The fake has no retry-after-ms field:
// the header is what a gateway in front of the API sends.
func fakeFault(s processortest.Script) geminifake.Fault {
	ft := faults.Script(s)
	if s.RetryAfterMS != 0 {
		ft.Header = http.Header{"Retry-After-Ms": {strconv.Itoa(s.RetryAfterMS)}}
	}
	return ft
}

func startFake(t *testing.T) (*geminifake.Server, processortest.Fake) {
	// A model version other than the configured model, and thinking
	// tokens: what the Extraction reports must come from the answer.
	f := newFake(t, geminifake.Options{ModelVersion: "gemini-2.5-flash-preview-09-2025", ThoughtsTokens: 37})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: "gemini-test", APIKey: testKey, Model: testModel}

// harness is the suite's view of the adapter (TestConformance, with its
// batch and injection cases, and FuzzExtract's Start, Open and Common).
func harness() processortest.Harness {
	return processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return open(c) },
		Common:       common,
		Kind:         "gemini",
		Capabilities: []string{"sync", "json_schema"},
		// What a generateContent answer says of itself: the ID is the
		// body's responseId, the model its modelVersion, and thinking
		// tokens count as output.
		Answer: processortest.Reads{
			RequestID: "responseId", Model: "modelVersion", InputTokens: "usageMetadata.promptTokenCount",
			OutputTokens: []string{"usageMetadata.candidatesTokenCount", "usageMetadata.thoughtsTokenCount"},
			Output:       geminifake.MinimalInstance(json.RawMessage(processortest.Schema)),
		}.Answer,
		AuthStatus: http.StatusBadRequest,
		Batch: processortest.BatchHarness{
			Start: func(t *testing.T) processortest.BatchFake {
				f, fake := startFake(t)
				return processortest.BatchFake{
					Fake:            fake,
					Batches:         func() int { return f.BatchCounts().Created },
					ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, fakeFault(s)) },
					ItemsContaining: f.BatchItemsContaining,
					StatusFault:     func(s processortest.Script) { f.EnqueueBatchStatus(fakeFault(s)) },
				}
			},
			Open: func(c processor.Common) (stet.BatchProcessor, error) { return NewBatch(Config{Common: c}) },
			Info: stet.BatchInfo{ResultsRetention: 48 * time.Hour},
		},
		Injection: processortest.InjectionHarness{
			Start: func(t *testing.T, respond func([]byte) string) string {
				return newFake(t, geminifake.Options{Respond: func(req geminifake.Request) string { return respond(req.Body) }}).URL()
			},
			Wire:     generateWire,
			Validate: processortest.InjectionValidator(schema.Compile),
		},
	}
}

// TestConformance runs the suite: sync, batch and injection cases.
func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, harness())
}

// FuzzExtract feeds generateContent's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness()) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, harness(), "FuzzExtract") }
