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
		// A wrong API key gets 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
		ft.Kind = geminifake.Unauthorized
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

// answer reads what a generateContent answer says of itself: the ID is
// the body's responseId, the model its modelVersion, and thinking tokens
// count as output.
func answer(_ http.Header, body []byte) processortest.Answer {
	return processortest.Answer{
		RequestID: processortest.JSONString(body, "responseId"), Model: processortest.JSONString(body, "modelVersion"),
		InputTokens:  processortest.JSONInt(body, "usageMetadata.promptTokenCount"),
		OutputTokens: processortest.JSONInt(body, "usageMetadata.candidatesTokenCount") + processortest.JSONInt(body, "usageMetadata.thoughtsTokenCount"),
		Output:       geminifake.MinimalInstance(json.RawMessage(processortest.Schema)),
	}
}

func startFake(t *testing.T) (*geminifake.Server, processortest.Fake) {
	// A model version other than the configured model, and thinking
	// tokens: what the Extraction reports must come from the answer.
	f := newFake(t, geminifake.Options{ModelVersion: "gemini-2.5-flash-preview-09-2025", ThoughtsTokens: 37})
	return f, processortest.NewFake(f, fakeFault)
}

var common = processor.Common{ID: "gemini-test", APIKey: testKey, Model: testModel}

func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, processortest.Harness{
		Start:        func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:         func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c}) },
		Common:       common,
		Kind:         "gemini",
		Capabilities: []string{"sync", "json_schema"},
		Answer:       answer,
		AuthStatus:   http.StatusBadRequest,
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
				StatusFault:     func(s processortest.Script) { f.EnqueueBatchStatus(fakeFault(s)) },
			}
		},
		Open:   func(c processor.Common) (stet.BatchProcessor, error) { return NewBatch(Config{Common: c}) },
		Common: common,
	})
}
