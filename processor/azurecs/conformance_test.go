package azurecs

import (
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/azurecs/azurecsfake"
	"github.com/stetlabs/stet/processor/processortest"
)

// quotaMessage is the gateway's 403 for a free tier's exhausted call
// volume. The adapter tells quota from auth by the word "quota" in it, so
// the suite's canary is appended rather than put in its place.
const quotaMessage = "Out of call volume quota for ContentSafety F0 pricing tier."

// fakeFault maps the suite's fault kinds onto the Content Safety fake's.
func fakeFault(s processortest.Script) azurecsfake.Fault {
	ft := azurecsfake.Fault{Message: s.Message}
	switch s.Fault {
	case processortest.RateLimit:
		ft = azurecsfake.Fault{Kind: azurecsfake.RateLimit, RetryAfter: s.RetryAfter, RetryAfterMS: s.RetryAfterMS}
	case processortest.Quota:
		ft = azurecsfake.Fault{Kind: azurecsfake.Quota, Message: quotaMessage + " " + s.Message}
	case processortest.Auth:
		ft.Kind = azurecsfake.Unauthorized
	case processortest.ServerError:
		ft.Kind = azurecsfake.ServerError
	case processortest.Disconnect:
		ft.Kind = azurecsfake.Disconnect
	case processortest.Hang:
		ft = azurecsfake.Fault{Kind: azurecsfake.Delay, Delay: time.Hour}
	case processortest.HangAfterHeaders:
		ft.Kind = azurecsfake.TimeoutAfterAnswer
	default:
		panic("azurecs conformance: unmapped fault " + string(s.Fault))
	}
	return ft
}

func TestConformance(t *testing.T) {
	t.Parallel()
	schema := readFile(t, quickstartSchema)
	model := "text-analyze-2024-09-01+mapping-" + quickstart(t).Hash()[:12]
	processortest.Exercise(t, processortest.Harness{
		Start: func(t *testing.T) processortest.Fake {
			return processortest.NewFake(newFake(t, azurecsfake.Options{}), fakeFault)
		},
		Open: func(c processor.Common) (stet.Processor, error) {
			return New(Config{Common: c, MappingPath: quickstartMapping})
		},
		// No model: the label is the API version and the mapping's hash.
		Common:       processor.Common{ID: "azure-cs-conformance", APIKey: testKey, BaseURL: "https://x.cognitiveservices.azure.com"},
		Kind:         "azure-content-safety",
		Capabilities: []string{"sync", "moderation"},
		InfoModel:    model,
		// The service reports no tokens; what the record says is the
		// mapping's (TestExtractSuccess).
		Answer: func(h http.Header, _ []byte) processortest.Answer {
			return processortest.Answer{RequestID: h.Get("apim-request-id"), Model: model}
		},
		AuthStatus: http.StatusUnauthorized,
		// No schema: the record is what the mapping writes.
		SchemaOptional: true,
		// The suite's schema has no place for what the mapping writes
		// (category, severity, action, labels, rationale), and the adapter
		// refuses, without a call, a schema its mapping does not fit: the
		// cases carry the quickstart profile's schema instead.
		Params: func(prompt string) stet.ExtractParams {
			return stet.ExtractParams{
				JobID: "job_conformance", Attempt: 1,
				Prompt: stet.NewText(prompt), Input: stet.NewText(prompt),
				SchemaName: "moderation_v1", Schema: schema,
			}
		},
		Lacks: map[processortest.Fault]string{
			processortest.Truncated: "no model JSON: the record comes from the mapping; a cut analysis body is the " +
				"service's glitch, transient malformed_response (TestClassification's Malformed case)",
			processortest.SchemaInvalid: "no model JSON: the mapping is checked against the schema before any call " +
				"(schema_mismatch, TestNoCallCases)",
			processortest.Refusal: "a moderation service scores every text and never refuses",
		},
	})
}
