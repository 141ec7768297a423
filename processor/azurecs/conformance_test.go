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

// faults is the Content Safety fake's fault for each of the suite's
// kinds. Quota's message is the gateway's 403 for a free tier's exhausted
// call volume: the adapter tells quota from auth by the word "quota" in
// it, so the suite's canary is appended rather than put in its place.
var faults = processortest.Faults[azurecsfake.Fault]{
	processortest.RateLimit:        {Kind: azurecsfake.RateLimit},
	processortest.Quota:            {Kind: azurecsfake.Quota, Message: "Out of call volume quota for ContentSafety F0 pricing tier."},
	processortest.Auth:             {Kind: azurecsfake.Unauthorized},
	processortest.ServerError:      {Kind: azurecsfake.ServerError},
	processortest.Disconnect:       {Kind: azurecsfake.Disconnect},
	processortest.Hang:             {Kind: azurecsfake.Delay, Delay: time.Hour},
	processortest.HangAfterHeaders: {Kind: azurecsfake.TimeoutAfterAnswer},
}

// harness is the suite's view of the adapter (TestConformance, and
// FuzzExtract's Start, Open, Common and Params).
func harness(tb testing.TB) processortest.Harness {
	schema := processortest.ReadFile(tb, processortest.QuickstartSchema)
	model := "text-analyze-2024-09-01+mapping-" + quickstart(tb).Hash()[:12]
	return processortest.Harness{
		Start: func(t *testing.T) processortest.Fake {
			return processortest.NewFake(newFake(t, azurecsfake.Options{}), faults.Script)
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
	}
}

// TestConformance runs the suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	processortest.Exercise(t, harness(t))
}

// FuzzExtract feeds text:analyze's response decoding, the mapping and
// error classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness(f)) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, harness(t), "FuzzExtract") }
