package gemini

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// fakeFault maps the suite's fault kinds onto the Gemini fake's.
func fakeFault(s processortest.Script) geminifake.Fault {
	ft := geminifake.Fault{Message: s.Message}
	switch s.Fault {
	case processortest.RateLimit:
		// No RetryDelay: the body's RetryInfo would be a second source of
		// wait. The headers are what a gateway in front of the API sends.
		ft = geminifake.Fault{Kind: geminifake.RateLimit, RetryAfter: s.RetryAfter, Message: s.Message}
		if s.RetryAfterMS != 0 {
			ft.Header = http.Header{"Retry-After-Ms": {strconv.Itoa(s.RetryAfterMS)}}
		}
	case processortest.Quota:
		ft.Kind = geminifake.Quota
	case processortest.Auth:
		// The suite expects 401. A wrong API key gets 400 API_KEY_INVALID
		// (TestClassification keeps that case); 401 UNAUTHENTICATED is what
		// the API answers credentials it cannot authenticate.
		ft.Kind, ft.Status = geminifake.HTTPError, http.StatusUnauthorized
	case processortest.ServerError:
		ft.Kind = geminifake.ServerError
	case processortest.Disconnect:
		ft.Kind = geminifake.Disconnect
	case processortest.Hang:
		ft = geminifake.Fault{Kind: geminifake.Delay, Delay: time.Hour}
	case processortest.HangAfterHeaders:
		ft.Kind = geminifake.TimeoutAfterAnswer
	case processortest.Truncated:
		ft.Kind = geminifake.TruncatedJSON
	case processortest.SchemaInvalid:
		ft.Kind = geminifake.SchemaInvalid
	case processortest.Refusal:
		// Gemini's safety stop carries no text: Message has nowhere to go.
		ft = geminifake.Fault{Kind: geminifake.Finish, FinishReason: "SAFETY"}
	default:
		panic("gemini conformance: unmapped fault " + string(s.Fault))
	}
	return ft
}

func startFake(t *testing.T) (*geminifake.Server, processortest.Fake) {
	f := geminifake.New(geminifake.Options{APIKey: testKey})
	t.Cleanup(f.Close)
	return f, processortest.Fake{
		URL:             f.URL(),
		Enqueue:         func(s processortest.Script) { f.Enqueue(fakeFault(s)) },
		Calls:           f.Calls,
		CallsContaining: f.CallsContaining,
	}
}

// conformanceConfig points a client at baseURL. The suite's dead URL ends
// in /v1, which New refuses (the SDK appends the version itself).
func conformanceConfig(baseURL string, timeout time.Duration) Config {
	return Config{Common: processor.Common{
		ID: "gemini-test", BaseURL: strings.TrimSuffix(baseURL, "/v1"), APIKey: testKey, Model: testModel, Timeout: timeout,
	}}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, processortest.Harness{
		Start: func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		New: func(t *testing.T, baseURL string, timeout time.Duration) stet.Processor {
			c, err := New(conformanceConfig(baseURL, timeout))
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			return c
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
				Batches:         func() int { return f.BatchCounts().Created },
				ScriptItem:      func(jobID string, s processortest.Script) { f.ScriptBatchItem(jobID, fakeFault(s)) },
				ItemsContaining: f.BatchItemsContaining,
			}
		},
		New: func(t *testing.T, baseURL string) stet.BatchProcessor {
			c, err := NewBatch(conformanceConfig(baseURL, 0))
			if err != nil {
				t.Fatalf("NewBatch() = %v", err)
			}
			return c
		},
	})
}
