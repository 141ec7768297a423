package infrai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// faults is the Infrai fake's fault for each of the suite's kinds.
var faults = processortest.Faults[infraifake.Fault]{
	processortest.RateLimit:        {Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded},
	processortest.Quota:            {Kind: infraifake.ErrorCode, Code: CodeInsufficientCredit},
	processortest.Auth:             {Kind: infraifake.ErrorCode, Code: CodeInvalidAPIKey},
	processortest.ServerError:      {Kind: infraifake.ErrorCode, Code: CodeInternalError},
	processortest.Disconnect:       {Kind: infraifake.Disconnect},
	processortest.Hang:             {Kind: infraifake.Delay, Delay: time.Hour},
	processortest.HangAfterHeaders: {Kind: infraifake.TimeoutAfterAnswer},
	processortest.Truncated:        {Kind: infraifake.TruncatedJSON},
	processortest.SchemaInvalid:    {Kind: infraifake.SchemaInvalid},
	processortest.Refusal:          {Kind: infraifake.Refusal},
}

// reads says where an Infrai answer says what of itself: in the envelope,
// the request ID is metadata.request_id and the completion is data; bare,
// the ID is the X-Request-Id header and the completion the body.
func reads(bare bool) processortest.Reads {
	r := processortest.Reads{
		RequestIDHeader: "X-Request-Id", Model: "model",
		InputTokens: "usage.prompt_tokens", OutputTokens: []string{"usage.completion_tokens"},
		Output: infraifake.MinimalInstance(json.RawMessage(processortest.Schema)),
	}
	if !bare {
		r.RequestIDHeader, r.RequestID, r.Model = "", "metadata.request_id", "data.model"
		r.InputTokens, r.OutputTokens = "data.usage.prompt_tokens", []string{"data.usage.completion_tokens"}
	}
	return r
}

func startConformanceFake(t *testing.T, bare bool) (*infraifake.Server, processortest.Fake) {
	f := newFake(t, infraifake.Options{Bare: bare})
	return f, processortest.NewFake(f, faults.Script)
}

var common = processor.Common{ID: testID, APIKey: testKey, Model: testModel, Subprocessors: []string{"openai"}}

func open(c processor.Common) (*Client, error) { return New(Config{Common: c}) }

// conformanceParams gives each prompt its own job: the Idempotency-Key is
// derived from the job and attempt, so the suite's concurrent Extracts of
// different prompts under one job ID would be, for Infrai, one key reused
// with different bodies (IDEMPOTENCY_CONFLICT), which no real job does.
func conformanceParams(prompt string) stet.ExtractParams {
	sum := sha256.Sum256([]byte(prompt))
	return stet.ExtractParams{
		JobID: "job_" + hex.EncodeToString(sum[:8]), Attempt: 1,
		Prompt: stet.NewText(prompt), Input: stet.NewText(prompt),
		SchemaName: "conformance_v1", Schema: json.RawMessage(processortest.Schema),
	}
}

// harness is the suite's view of the adapter in one answer form, the
// envelope or the bare completion (TestConformance, FuzzExtract). The
// batch and injection cases run in the envelope form only.
func harness(bare bool) processortest.Harness {
	h := processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startConformanceFake(t, bare); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return open(c) },
		Common:       common,
		Kind:         "infrai",
		Capabilities: []string{"sync", "batch", "json_schema", "idempotency_key"},
		Answer:       reads(bare).Answer,
		AuthStatus:   http.StatusUnauthorized,
		Params:       conformanceParams,
	}
	if bare {
		return h
	}
	h.Batch = processortest.BatchHarness{
		Start: func(t *testing.T) processortest.BatchFake {
			f, fake := startConformanceFake(t, false)
			return processortest.BatchFake{
				Fake:            fake,
				Batches:         func() int { return f.BatchCounts().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, faults.Script(s)) },
				ItemsContaining: f.CallsContaining, // only batch items are sent
				StatusFault:     func(s processortest.Script) { f.EnqueueBatch(infraifake.BatchStatusRoute, faults.Script(s)) },
			}
		},
		Open: func(c processor.Common) (stet.BatchProcessor, error) { return open(c) },
		Info: stet.BatchInfo{IdempotentSubmit: true, ResultsRetention: 24 * time.Hour},
	}
	h.Injection = processortest.InjectionHarness{
		Start: func(t *testing.T, respond func([]byte) string) string {
			return newFake(t, infraifake.Options{Respond: func(req infraifake.Request) string { return respond(req.Body) }}).URL()
		},
		Wire:     processortest.ChatWire,
		Validate: processortest.InjectionValidator(schema.Compile),
	}
	return h
}

// TestConformance runs the suite against both answer forms: the envelope
// and the bare completion.
func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseForms(t, map[string]processortest.Harness{"envelope": harness(false), "bare": harness(true)})
}

// FuzzExtract feeds Infrai's response decoding (the envelope and the bare
// completion) and error classification arbitrary answers
// (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness(false)) }

// FuzzExtractBare is FuzzExtract seeded with bare completions.
func FuzzExtractBare(f *testing.F) { processortest.FuzzExtract(f, harness(true)) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers in both forms.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, harness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, harness(true), "FuzzExtractBare")
}
