package openai

import (
	"github.com/stetlabs/stet/processor"
	"testing"
	"time"

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

func startFake(t *testing.T) (*openaifake.Server, processortest.Fake) {
	f := openaifake.New(openaifake.Options{APIKey: testKey})
	t.Cleanup(f.Close)
	return f, processortest.Fake{
		URL:             f.URL(),
		Enqueue:         func(s processortest.Script) { f.Enqueue(fakeFault(s)) },
		Calls:           f.Calls,
		CallsContaining: f.CallsContaining,
	}
}

func conformanceClient(t *testing.T, baseURL string, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{Common: processor.Common{ID: "openai-test", BaseURL: baseURL, APIKey: testKey, Model: testModel, Timeout: timeout}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, processortest.Harness{
		Start: func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		New: func(t *testing.T, baseURL string, timeout time.Duration) stet.Processor {
			return conformanceClient(t, baseURL, timeout)
		},
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
			}
		},
		New: func(t *testing.T, baseURL string) stet.BatchProcessor {
			return conformanceClient(t, baseURL, 0)
		},
	})
}
