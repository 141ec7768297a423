package infrai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

func startConformanceFake(t *testing.T) (*infraifake.Server, processortest.Fake) {
	f := newFake(t, infraifake.Options{})
	return f, processortest.Fake{
		URL:             f.URL(),
		Enqueue:         func(s processortest.Script) { f.Enqueue(fakeFault(s)) },
		Calls:           f.Calls,
		CallsContaining: f.CallsContaining,
	}
}

func conformanceClient(t *testing.T, baseURL string, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{Common: processor.Common{ID: "infrai-test", BaseURL: baseURL, APIKey: testKey, Model: testModel, Timeout: timeout}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return c
}

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

func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, processortest.Harness{
		Start: func(t *testing.T) processortest.Fake { _, f := startConformanceFake(t); return f },
		New: func(t *testing.T, baseURL string, timeout time.Duration) stet.Processor {
			return conformanceClient(t, baseURL, timeout)
		},
		Params: conformanceParams,
	})
}

func TestBatchConformance(t *testing.T) {
	t.Parallel()
	processortest.ExerciseBatch(t, processortest.BatchHarness{
		Start: func(t *testing.T) processortest.BatchFake {
			f, fake := startConformanceFake(t)
			return processortest.BatchFake{
				Fake:            fake,
				Batches:         func() int { return f.BatchCounts().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, fakeFault(s)) },
				ItemsContaining: f.CallsContaining, // only batch items are sent
			}
		},
		New: func(t *testing.T, baseURL string) stet.BatchProcessor {
			return conformanceClient(t, baseURL, 0)
		},
		Params: conformanceParams,
	})
}
