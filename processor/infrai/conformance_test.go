package infrai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// fakeFault maps the suite's fault kinds onto the Infrai fake's.
func fakeFault(s processortest.Script) infraifake.Fault {
	ft := infraifake.Fault{Message: s.Message}
	switch s.Fault {
	case processortest.RateLimit:
		ft = infraifake.Fault{Kind: infraifake.ErrorCode, Code: CodeRateLimitExceeded, RetryAfter: s.RetryAfter, RetryAfterMS: s.RetryAfterMS, Message: s.Message}
	case processortest.Quota:
		ft.Kind, ft.Code = infraifake.ErrorCode, CodeInsufficientCredit
	case processortest.Auth:
		ft.Kind, ft.Code = infraifake.ErrorCode, CodeInvalidAPIKey
	case processortest.ServerError:
		ft.Kind, ft.Code = infraifake.ErrorCode, CodeInternalError
	case processortest.Disconnect:
		ft.Kind = infraifake.Disconnect
	case processortest.Hang:
		ft = infraifake.Fault{Kind: infraifake.Delay, Delay: time.Hour}
	case processortest.HangAfterHeaders:
		ft.Kind = infraifake.TimeoutAfterAnswer
	case processortest.Truncated:
		ft.Kind = infraifake.TruncatedJSON
	case processortest.SchemaInvalid:
		ft.Kind = infraifake.SchemaInvalid
	case processortest.Refusal:
		ft.Kind = infraifake.Refusal
	default:
		panic("infrai conformance: unmapped fault " + string(s.Fault))
	}
	return ft
}

// answer reads what an Infrai answer says of itself: in the envelope, the
// request ID is metadata.request_id and the completion is data; bare, the
// ID is the X-Request-Id header.
func answer(h http.Header, body []byte) processortest.Answer {
	id, completion := h.Get("X-Request-Id"), "" // bare: the header, the body as is
	if processortest.JSONField(body, "data") != nil {
		id, completion = processortest.JSONString(body, "metadata.request_id"), "data."
	}
	return processortest.Answer{
		RequestID: id, Model: processortest.JSONString(body, completion+"model"),
		InputTokens:  processortest.JSONInt(body, completion+"usage.prompt_tokens"),
		OutputTokens: processortest.JSONInt(body, completion+"usage.completion_tokens"),
		Output:       infraifake.MinimalInstance(json.RawMessage(processortest.Schema)),
	}
}

func startConformanceFake(t *testing.T, bare bool) (*infraifake.Server, processortest.Fake) {
	f := newFake(t, infraifake.Options{Bare: bare})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: testID, APIKey: testKey, Model: testModel}

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

// TestConformance runs the suite against both answer forms: the envelope
// and the bare completion.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, bare := range []bool{false, true} {
		t.Run(fmt.Sprintf("bare=%v", bare), func(t *testing.T) {
			t.Parallel()
			processortest.Exercise(t, processortest.Harness{
				Start:        func(t *testing.T) processortest.Fake { _, f := startConformanceFake(t, bare); return f },
				Open:         func(c processor.Common) (stet.Processor, error) { return open(c) },
				Common:       common,
				Kind:         "infrai",
				Capabilities: []string{"sync", "batch", "json_schema", "idempotency_key"},
				Answer:       answer,
				AuthStatus:   http.StatusUnauthorized,
				Params:       conformanceParams,
			})
		})
	}
}

func TestBatchConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseBatch(t, processortest.BatchHarness{
		Start: func(t *testing.T) processortest.BatchFake {
			f, fake := startConformanceFake(t, false)
			return processortest.BatchFake{
				Fake:            fake,
				Batches:         func() int { return f.BatchCounts().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, fakeFault(s)) },
				ItemsContaining: f.CallsContaining, // only batch items are sent
				StatusFault:     func(s processortest.Script) { f.EnqueueBatch(infraifake.BatchStatusRoute, fakeFault(s)) },
			}
		},
		Open:   func(c processor.Common) (stet.BatchProcessor, error) { return open(c) },
		Common: common,
		Params: conformanceParams,
	})
}
